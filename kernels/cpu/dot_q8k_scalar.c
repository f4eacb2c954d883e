/* dot_q8k_scalar.c: the Q8_K-style activations (act_q8k, kernels/cpu/act_q8.h)
 * and the plain C twins of their Q4_K and Q6_K kernels (AVX2 twins in
 * dot_q8k_avx2.c).
 *
 * Why a second activation format: with act_q8 / act_q16 (a scale per 32)
 * every 32 products cost an int32 -> float convert and a float FMA per
 * output element.  A 256-weight super-block has one float scale (Q6_K) or
 * one scale and one minimum scale (Q4_K) for its 256 weights, the rest are
 * small integers (6-bit sub-block scales, 8-bit per-16 scales), so with
 * one activation scale per 256 the whole super-block sums exactly in
 * int32 and converts once.  This is what ggml's Q8_K does; the codes here
 * are its codes but symmetric (+-127, never -128).
 *
 * Per output element (weight row, activation row), the operations the
 * AVX2 twin performs, in this order:
 *     for each super-block j:
 *         lane[k] (int32, k = 0..7) = sum over sub-blocks ib of
 *                 mul(ib, k) * sum_{e = 4k .. 4k+3} w_ib[e] * q[32 ib + e]
 *             (Q4_K: w the 4-bit code, mul the sub-block's 6-bit scale;
 *              Q6_K: w the 6-bit code - 32, mul the scale of its 16:
 *              the maddubs / madd pairs of the AVX2 twin; exact)
 *         acc[k] = fmaf((float)lane[k], d_w * d_x, acc[k])
 *         Q4_K: m = sum_ib min(ib) * (bsums[2 ib] + bsums[2 ib + 1]) (exact)
 *               corr = fmaf((float)m, dmin_w * d_x, corr)
 *     y = act_hsum8(acc) - corr      (act_hsum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)))
 * Nothing depends on the number of activation rows, the tile or the
 * thread: a decode step and a prompt row give the same bits.
 *
 * The lanes are exact: a Q4_K lane is at most 8 x 4 x 15 x 127 x 63 <
 * 2^22, a Q6_K lane 8 x 4 x 32 x 127 x 128 < 2^25 (the convert may round
 * the latter, the same way in both twins).
 *
 * Accuracy: one scale per 256 is coarser than one per 32 (a super-block
 * whose largest value is 10x the rest quantizes the rest with about three
 * bits fewer); the cost against float64 is in test/test_matvec_q8k.c and
 * doc/cpu.md. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

void act_q8k_quantize(const float *x, int64_t cols, act_q8k *xq)
{
    for (int64_t b = 0; b < cols / 256; b++) {
        const float *xb = x + 256 * b;
        float amax = 0.0f;
        for (int j = 0; j < 256; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
        memset(xq[b].pad_, 0, sizeof xq[b].pad_);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                float r = nearbyintf(xb[j] * id);
                r = r == r ? (r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r) : 0.0f;
                xq[b].q[j] = (int8_t)r;
                sum += xq[b].q[j];
            }
            xq[b].bsums[g] = (int16_t)sum;
        }
        xq[b].d = d;
    }
}

/* One super-block of Q4_K against one of activations: the int32 lanes and
 * the minima's integer sum. */
static void sb_q4_k(const block_q4_k *b, const act_q8k *x, int lane[8], int *m)
{
    *m = 0;
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int ib = 0; ib < 8; ib++) {
        int sc, mn;
        q4_k_scale_min(ib, b->scales, &sc, &mn);
        const uint8_t *q = b->qs + 32 * (ib / 2);
        for (int k = 0; k < 8; k++) {
            int p = 0;
            for (int e = 4 * k; e < 4 * k + 4; e++)
                p += (ib & 1 ? q[e] >> 4 : q[e] & 15) * x->q[32 * ib + e];
            lane[k] += p * sc;
        }
        *m += mn * (x->bsums[2 * ib] + x->bsums[2 * ib + 1]);
    }
}

static void sb_q6_k(const block_q6_k *b, const act_q8k *x, int lane[8])
{
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int h = ib / 4, qd = ib % 4;
        const uint8_t *L = b->ql + 64 * h + 32 * (qd & 1), *H = b->qh + 32 * h;
        for (int k = 0; k < 8; k++) {
            int p = 0;
            for (int e = 4 * k; e < 4 * k + 4; e++) {
                const int lo = qd < 2 ? L[e] & 15 : L[e] >> 4;
                p += ((lo | ((H[e] >> (2 * qd)) & 3) << 4) - 32) * x->q[32 * ib + e];
            }
            lane[k] += p * (int8_t)b->scales[2 * ib + k / 4];
        }
    }
}

/* One super-block of either type: its int32 lanes, the minima's integer
 * sum m (0 for Q6_K) and the weight's d and dmin (0 for Q6_K). */
static void sb_dot(int type, const uint8_t *blk, const act_q8k *x, int lane[8], int *m, float *d,
                   float *dmin)
{
    if (type == GGML_TYPE_Q4_K) {
        const block_q4_k *b = (const block_q4_k *)blk;
        sb_q4_k(b, x, lane, m);
        *d = fp16_to_f32(act_ld16(&b->d));
        *dmin = fp16_to_f32(act_ld16(&b->dmin));
    } else {
        const block_q6_k *b = (const block_q6_k *)blk;
        sb_q6_k(b, x, lane);
        *m = 0;
        *d = fp16_to_f32(act_ld16(&b->d));
        *dmin = 0.0f;
    }
}

/* The order of dot_q8k_avx2.c's tiles, one output element at a time. */
static void q8krows_c(int type, const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                      const act_q8k *x, int64_t n, float *y, int64_t ystride)
{
    const int64_t nsb = cols / 256;
    const size_t bb = type_traits_get(type)->bytes;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = w + r * row_bytes;
        for (int64_t i = 0; i < n; i++) {
            const act_q8k *xi = x + i * nsb;
            float acc[8] = {0}, corr = 0.0f;
            for (int64_t j = 0; j < nsb; j++) {
                int lane[8], m;
                float d, dmin;
                sb_dot(type, row + j * bb, xi + j, lane, &m, &d, &dmin);
                const float f = d * xi[j].d;
                for (int k = 0; k < 8; k++)
                    acc[k] = fmaf((float)lane[k], f, acc[k]);
                if (type == GGML_TYPE_Q4_K)
                    corr = fmaf((float)m, dmin * xi[j].d, corr);
            }
            y[i * ystride + r] = act_hsum8(acc) - corr;
        }
    }
}

static void q8krows_q4_k_c(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                           const act_q8k *x, int64_t n, float *y, int64_t ystride)
{
    q8krows_c(GGML_TYPE_Q4_K, w, row_bytes, nrows, cols, x, n, y, ystride);
}

static void q8krows_q6_k_c(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                           const act_q8k *x, int64_t n, float *y, int64_t ystride)
{
    q8krows_c(GGML_TYPE_Q6_K, w, row_bytes, nrows, cols, x, n, y, ystride);
}

q8k_rows_fn q8k_rows_scalar(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_K: return q8krows_q4_k_c;
    case GGML_TYPE_Q6_K: return q8krows_q6_k_c;
    default: return NULL;
    }
}
