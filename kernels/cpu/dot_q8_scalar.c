/* dot_q8_scalar.c: the activation quantizer and the plain C twins of the
 * int8-activation kernels (kernels/cpu/act_q8.h; AVX2 twins in
 * dot_q8_avx2.c).
 *
 * Each weight type is described by one function, blk_NAME: the 32 integer
 * weights of sub-block s as the kernel multiplies them (w[]), a multiplier
 * for each half of 16 (mul[], Q6_K's per-16 scales, 1 elsewhere), the
 * float factor of the integer dot (dw) and the float factor of the
 * activation block's s (cw).  A block then adds (float)idot * (dw * x.d)
 * to the accumulator and cw * x.s to the correction sum. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

/* A 32-value block's step d = amax / 127 and its inverse (0 for an all-zero
 * block): the int8 and the 16-bit codes share it. */
static void block_scale(const float *xb, float *d, float *id)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(xb[j]));
    *d = amax / 127.0f;
    *id = *d != 0.0f ? 127.0f / amax : 0.0f;
}

void act_q8_quantize(const float *x, int64_t cols, act_q8 *xq)
{
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        float d, id;
        block_scale(xb, &d, &id);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            float r = nearbyintf(xb[j] * id);
            r = r == r ? (r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r) : 0.0f;
            xq[b].q[j] = (int8_t)r;
            sum += xq[b].q[j];
        }
        xq[b].d = d;
        xq[b].s = d * (float)sum;
    }
}

void act_q16_quantize(const float *x, int64_t cols, act_q16 *xq)
{
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        float d, id;
        block_scale(xb, &d, &id);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            xq[b].v[j] = (int16_t)act_q16_code(xb[j] * id);
            sum += xq[b].v[j];
        }
        xq[b].d = d * (1.0f / 256.0f);
        xq[b].s = xq[b].d * (float)sum;
    }
}

typedef struct wblk {
    int w[32];
    int mul[2];
    float dw, cw;
} wblk;

static void blk_q4_0(const uint8_t *row, int64_t s, wblk *o)
{
    const uint8_t *b = row + s * sizeof(block_q4_0);
    const float d = fp16_to_f32(act_ld16(b));
    for (int j = 0; j < 16; j++) {
        o->w[j] = b[2 + j] & 15;
        o->w[j + 16] = b[2 + j] >> 4;
    }
    o->mul[0] = o->mul[1] = 1;
    o->dw = d;
    o->cw = -8.0f * d;
}

static void blk_q4_1(const uint8_t *row, int64_t s, wblk *o)
{
    const uint8_t *b = row + s * sizeof(block_q4_1);
    for (int j = 0; j < 16; j++) {
        o->w[j] = b[4 + j] & 15;
        o->w[j + 16] = b[4 + j] >> 4;
    }
    o->mul[0] = o->mul[1] = 1;
    o->dw = fp16_to_f32(act_ld16(b));
    o->cw = fp16_to_f32(act_ld16(b + 2));
}

static void blk_q5_0(const uint8_t *row, int64_t s, wblk *o)
{
    const uint8_t *b = row + s * sizeof(block_q5_0);
    const float d = fp16_to_f32(act_ld16(b));
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; j++) {
        o->w[j] = (b[6 + j] & 15) | ((qh >> j) & 1) << 4;
        o->w[j + 16] = (b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
    }
    o->mul[0] = o->mul[1] = 1;
    o->dw = d;
    o->cw = -16.0f * d;
}

static void blk_q8_0(const uint8_t *row, int64_t s, wblk *o)
{
    const uint8_t *b = row + s * sizeof(block_q8_0);
    for (int j = 0; j < 32; j++)
        o->w[j] = (int8_t)b[2 + j];
    o->mul[0] = o->mul[1] = 1;
    o->dw = fp16_to_f32(act_ld16(b));
    o->cw = 0.0f;
}

static void blk_q4_k(const uint8_t *row, int64_t s, wblk *o)
{
    const block_q4_k *b = (const block_q4_k *)(row + (s >> 3) * sizeof(block_q4_k));
    const int ib = (int)(s & 7);
    int sc, mn;
    q4_k_scale_min(ib, b->scales, &sc, &mn);
    const uint8_t *q = b->qs + 32 * (ib / 2);
    for (int j = 0; j < 32; j++)
        o->w[j] = ib & 1 ? q[j] >> 4 : q[j] & 15;
    o->mul[0] = o->mul[1] = 1;
    o->dw = fp16_to_f32(act_ld16((const uint8_t *)&b->d)) * (float)sc;
    o->cw = -fp16_to_f32(act_ld16((const uint8_t *)&b->dmin)) * (float)mn;
}

static void blk_q6_k(const uint8_t *row, int64_t s, wblk *o)
{
    const block_q6_k *b = (const block_q6_k *)(row + (s >> 3) * sizeof(block_q6_k));
    const int ib = (int)(s & 7), h = ib / 4, qd = ib % 4;
    const uint8_t *L = b->ql + 64 * h + 32 * (qd & 1), *H = b->qh + 32 * h;
    for (int j = 0; j < 32; j++) {
        const int lo = qd < 2 ? L[j] & 15 : L[j] >> 4;
        o->w[j] = (lo | ((H[j] >> (2 * qd)) & 3) << 4) - 32;
    }
    o->mul[0] = b->scales[8 * h + 2 * qd];
    o->mul[1] = b->scales[8 * h + 2 * qd + 1];
    o->dw = fp16_to_f32(act_ld16((const uint8_t *)&b->d));
    o->cw = 0.0f;
}

/* Per output element the operations of the AVX2 tiles (dot_q8_tile_avx2.c),
 * one by one: lane k of an accumulator takes codes 4k..4k+3 of a
 * sub-block (times the multiplier of their half), fused-multiply-added
 * with dw * d_x; even and odd sub-blocks have accumulators of their own
 * (two FMA chains for a single row), and so have the s terms.  With the
 * 16-bit codes (q16rows_*) lane k takes elements 2k, 2k+1, 16 + 2k and
 * 17 + 2k, each weight times the multiplier of its half (the int16 pairs
 * of the tiles' madd / dpwssd). */
#define DEFINE_Q8_ROWS_SCALAR(NAME, PRE, LO)                                                \
    static void PRE##rows_##NAME##_c(const uint8_t *w, size_t row_bytes, int64_t nrows,            \
                              int64_t cols, const act_##PRE *x, int64_t n, float *y,        \
                              int64_t ystride)                                              \
    {                                                                                       \
        const int64_t nsub = cols / 32;                                                     \
        for (int64_t r = 0; r < nrows; r++) {                                               \
            const uint8_t *row = w + r * row_bytes;                                         \
            for (int64_t i = 0; i < n; i++) {                                               \
                const act_##PRE *xi = x + i * nsub;                                         \
                float acc[2][8] = {{0}}, corr[2] = {0}, sum[8];                             \
                for (int64_t s = 0; s < nsub; s++) {                                        \
                    wblk b;                                                                 \
                    blk_##NAME(row, s, &b);                                                 \
                    const float f = b.dw * xi[s].d;                                         \
                    for (int k = 0; k < 8; k++) {                                           \
                        const int p = Q8_LANE_##PRE(b, xi[s], k);                           \
                        acc[s & 1][k] = fmaf((float)p, f, acc[s & 1][k]);                   \
                    }                                                                       \
                    corr[s & 1] = fmaf(b.cw, xi[s].s, corr[s & 1]);                         \
                }                                                                           \
                for (int k = 0; k < 8; k++)                                                 \
                    sum[k] = acc[0][k] + acc[1][k];                                         \
                y[i * ystride + r] = act_hsum8(sum) + (corr[0] + corr[1]);                  \
            }                                                                               \
        }                                                                                   \
    }

/* Lane k's exact integer dot. */
static inline int lane_q8(const wblk *b, const act_q8 *x, int k)
{
    int p = 0;
    for (int j = 4 * k; j < 4 * k + 4; j++)
        p += b->w[j] * x->q[j];
    return p * b->mul[k / 4];
}

static inline int lane_q16(const wblk *b, const act_q16 *x, int k)
{
    static const int el[4] = {0, 1, 16, 17};
    int p = 0;
    for (int e = 0; e < 4; e++) {
        const int j = 2 * k + el[e];
        p += b->w[j] * b->mul[j / 16] * x->v[j];
    }
    return p;
}
#define Q8_LANE_q8(B, X, K) lane_q8(&(B), &(X), K)
#define Q8_LANE_q16(B, X, K) lane_q16(&(B), &(X), K)

#define DEFINE_BOTH(NAME) DEFINE_Q8_ROWS_SCALAR(NAME, q8, 0) DEFINE_Q8_ROWS_SCALAR(NAME, q16, 1)
DEFINE_BOTH(q4_0)
DEFINE_BOTH(q4_1)
DEFINE_BOTH(q5_0)
DEFINE_BOTH(q8_0)
DEFINE_BOTH(q4_k)
DEFINE_BOTH(q6_k)

q8_rows_fn q8_rows_scalar(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q8rows_q4_0_c;
    case GGML_TYPE_Q4_1: return q8rows_q4_1_c;
    case GGML_TYPE_Q5_0: return q8rows_q5_0_c;
    case GGML_TYPE_Q8_0: return q8rows_q8_0_c;
    case GGML_TYPE_Q4_K: return q8rows_q4_k_c;
    case GGML_TYPE_Q6_K: return q8rows_q6_k_c;
    default: return NULL;
    }
}

q16_rows_fn q16_rows_scalar(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q16rows_q4_0_c;
    case GGML_TYPE_Q4_1: return q16rows_q4_1_c;
    case GGML_TYPE_Q5_0: return q16rows_q5_0_c;
    case GGML_TYPE_Q8_0: return q16rows_q8_0_c;
    case GGML_TYPE_Q4_K: return q16rows_q4_k_c;
    case GGML_TYPE_Q6_K: return q16rows_q6_k_c;
    default: return NULL;
    }
}
