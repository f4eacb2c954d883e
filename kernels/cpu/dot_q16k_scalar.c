/* dot_q16k_scalar.c: the 16-bit codes with one scale per 256 values
 * (act_q16k, kernels/cpu/act_q8.h) and the plain C twins of their Q4_K and
 * Q6_K kernels (AVX2 twins in dot_q16k_avx2.c).
 *
 * Why: with act_q16 (a scale per 32) every 32 products cost an int32 ->
 * float convert, a broadcast factor and a float FMA per output element, on
 * top of the two madd and the add of the dot itself.  A Q4_K or Q6_K
 * super-block has one float scale (and Q4_K one minimum scale) for its
 * 256 weights and small integer scales below it (6-bit per 32, 8-bit per
 * 16).  With one activation scale per 256 the weights times their integer
 * scales fit int16 (Q4_K at most 15 x 63 = 945, Q6_K 32 x 128 = 4096) and
 * a super-block sums exactly in int32: the convert and the FMA come once
 * per 256 weights (Q6_K: once per 128).  act_q8k does the same with int8
 * codes; these keep the 16-bit codes' accuracy (below).
 *
 * Per output element (weight row, activation row), the operations the
 * AVX2 twin performs, in this order:
 *     for each super-block j, for each part p (Q4_K: one, sub-blocks 0..7;
 *     Q6_K: two, sub-blocks 4p .. 4p + 3):
 *         lane[k] (int32, k = 0..7) = sum over the part's sub-blocks ib and
 *                 e in {2k, 2k+1, 16+2k, 17+2k} of w_ib[e] * v[32 ib + e]
 *             (Q4_K: w = the 4-bit code times the sub-block's 6-bit scale;
 *              Q6_K: w = (the 6-bit code - 32) times the scale of its 16;
 *              the madd pairs of the AVX2 twin; exact, see below)
 *         acc[k] = fmaf((float)lane[k], d_w * d_x, acc[k])
 *     Q4_K, per super-block: m = sum_ib min_ib * bsums[ib] (exact)
 *         corr = fmaf((float)m, dmin_w * d_x, corr)
 *     y = act_hsum8(acc) - corr      (act_hsum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)))
 * Nothing depends on the number of activation rows, the tile or the
 * thread: a decode step and a prompt row give the same bits.
 *
 * Exact in int32 (|v| <= 32639): a Q4_K lane is at most 8 sub-blocks x 4
 * products x 945 x 32639 < 2^30; a Q6_K lane over 4 sub-blocks at most
 * 16 x 4096 x 32639 = 2139029504 < 2^31 - 1 (over 8 it could overflow:
 * hence its two parts); m at most 8 x 63 x 32 x 32639 < 2^30.  The
 * converts round lanes past 2^24, the same way in both twins.
 *
 * Accuracy: the codes are act_q16's, 2^-8 of an int8 step, but the step
 * is the 256 values' largest over 127 instead of the 32's: a super-block
 * whose largest value is 10x the rest codes the rest with about three
 * bits fewer, 12 to 13 bits left where act_q8k is left with 4 to 5.  The
 * cost against float64 is in test/test_matvec_q16k.c and doc/cpu.md. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

void act_q16k_quantize(const float *x, int64_t cols, act_q16k *xq)
{
    for (int64_t b = 0; b < cols / 256; b++) {
        const float *xb = x + 256 * b;
        float amax = 0.0f;
        for (int j = 0; j < 256; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d8 = amax / 127.0f, id = d8 != 0.0f ? 127.0f / amax : 0.0f;
        for (int s = 0; s < 8; s++) {
            int sum = 0;
            for (int j = 32 * s; j < 32 * s + 32; j++) {
                xq[b].v[j] = (int16_t)act_q16_code(xb[j] * id);
                sum += xq[b].v[j];
            }
            xq[b].bsums[s] = sum;
        }
        xq[b].d = d8 * (1.0f / 256.0f);
        memset(xq[b].pad_, 0, sizeof xq[b].pad_);
    }
}

/* Element e of a sub-block adds into lane e % 16 / 2: madd pairs 2k, 2k+1,
 * and the second 16 fall on the first's lanes. */
static int lane_of(int e) { return (e % 16) / 2; }

/* Q4_K sub-block ib's weights times its scale, and its minimum. */
static void q4_k_weights(const block_q4_k *b, int ib, int w[32], int *mn)
{
    int sc;
    q4_k_scale_min(ib, b->scales, &sc, mn);
    const uint8_t *q = b->qs + 32 * (ib / 2);
    for (int e = 0; e < 32; e++)
        w[e] = (ib & 1 ? q[e] >> 4 : q[e] & 15) * sc;
}

/* Q6_K sub-block ib's weights (codes - 32) times the scales of their 16. */
static void q6_k_weights(const block_q6_k *b, int ib, int w[32])
{
    const int h = ib / 4, qd = ib % 4;
    const uint8_t *L = b->ql + 64 * h + 32 * (qd & 1), *H = b->qh + 32 * h;
    for (int e = 0; e < 32; e++) {
        const int lo = qd < 2 ? L[e] & 15 : L[e] >> 4;
        const int code = (lo | ((H[e] >> (2 * qd)) & 3) << 4) - 32;
        w[e] = code * b->scales[2 * ib + e / 16];
    }
}

/* Sub-blocks ib0 .. ib1 - 1 of one super-block into int32 lanes. */
static void part_lanes(int type, const uint8_t *blk, const act_q16k *x, int ib0, int ib1,
                       int32_t lane[8])
{
    memset(lane, 0, 8 * sizeof *lane);
    for (int ib = ib0; ib < ib1; ib++) {
        int w[32], mn;
        if (type == GGML_TYPE_Q4_K)
            q4_k_weights((const block_q4_k *)blk, ib, w, &mn);
        else
            q6_k_weights((const block_q6_k *)blk, ib, w);
        for (int e = 0; e < 32; e++)
            lane[lane_of(e)] += w[e] * x->v[32 * ib + e];
    }
}

/* Q4_K's minima against the 32-code sums: an exact integer. */
static int32_t q4_k_minima(const block_q4_k *b, const act_q16k *x)
{
    int32_t m = 0;
    for (int ib = 0; ib < 8; ib++) {
        int sc, mn;
        q4_k_scale_min(ib, b->scales, &sc, &mn);
        m += mn * x->bsums[ib];
    }
    return m;
}

/* The order of dot_q16k_avx2.c's tiles, one output element at a time. */
static void q16krows_c(int type, const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                       const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    const int64_t nsb = cols / 256;
    const size_t bb = type_traits_get(type)->bytes;
    const int parts = type == GGML_TYPE_Q4_K ? 1 : 2;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = w + r * row_bytes;
        for (int64_t i = 0; i < n; i++) {
            const act_q16k *xi = x + i * nsb;
            float acc[8] = {0}, corr = 0.0f;
            for (int64_t j = 0; j < nsb; j++) {
                const uint8_t *blk = row + j * bb;
                const float dw = fp16_to_f32(act_ld16(type == GGML_TYPE_Q4_K
                                                      ? (const void *)&((const block_q4_k *)blk)->d
                                                      : (const void *)&((const block_q6_k *)blk)->d));
                const float f = dw * xi[j].d;
                for (int p = 0; p < parts; p++) {
                    int32_t lane[8];
                    part_lanes(type, blk, xi + j, 8 / parts * p, 8 / parts * (p + 1), lane);
                    for (int k = 0; k < 8; k++)
                        acc[k] = fmaf((float)lane[k], f, acc[k]);
                }
                if (type == GGML_TYPE_Q4_K) {
                    const block_q4_k *b = (const block_q4_k *)blk;
                    corr = fmaf((float)q4_k_minima(b, xi + j), fp16_to_f32(act_ld16(&b->dmin)) * xi[j].d,
                                corr);
                }
            }
            y[i * ystride + r] = act_hsum8(acc) - corr;
        }
    }
}

static void q16krows_q4_k_c(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                            const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    q16krows_c(GGML_TYPE_Q4_K, w, row_bytes, nrows, cols, x, n, y, ystride);
}

static void q16krows_q6_k_c(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                            const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    q16krows_c(GGML_TYPE_Q6_K, w, row_bytes, nrows, cols, x, n, y, ystride);
}

q16k_rows_fn q16k_rows_scalar(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_K: return q16krows_q4_k_c;
    case GGML_TYPE_Q6_K: return q16krows_q6_k_c;
    default: return NULL;
    }
}
