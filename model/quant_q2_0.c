/* quant_q2_0.c: Q2_0, upstream group-64 layout (doc/formats.md §2.6, §3.3).
 *
 * 64 elements in 18 bytes: fp16 d, then 64 2-bit codes packed four to a
 * byte, lowest bits first (element j at bits 2*(j%4) of byte j/4); value
 * (code - 1) * d, so codes 0..3 mean -d, 0, +d, +2d. */
#include <math.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"

void quant_row_q2_0_ref(const float *src, void *dst, int64_t n, const float *imatrix);

void dequant_row_q2_0(const void *src, float *dst, int64_t n)
{
    const block_q2_0 *b = src;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK2_0; j++) {
            const int c = (b[i].qs[j / 4] >> (2 * (j % 4))) & 3;
            dst[i * QK2_0 + j] = (c - 1) * d;
        }
    }
}

/* ggml's reference (quantize_row_q2_0_ref): d = amax, c = round(x/d) + 1.
 * That is ternary (-d, 0, +d; code 3 is never produced) with the threshold
 * at amax/2: ~0.72 relative RMSE on Gaussian rows.  Kept, bit-exact with
 * ggml (the test vectors check it), as the baseline the search is measured
 * against; ggml ignores importance weights here too. */
void quant_row_q2_0_ref(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float *x = src + i * QK2_0;
        float amax = 0.0f;
        for (int j = 0; j < QK2_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK2_0 / 4; j++)
            b[i].qs[j] = 0;
        for (int j = 0; j < QK2_0; j++) {
            int c = (int)roundf(x[j] * id) + 1;
            c = c < 0 ? 0 : c > 3 ? 3 : c;
            b[i].qs[j / 4] |= (uint8_t)(c << (2 * (j % 4)));
        }
    }
}

/* ---- strata's search ------------------------------------------------------ */

/* Starting scales, as amax / r, tried with both signs of d.  A positive d
 * puts the lone +2d level on the positive side, a negative d on the
 * negative side, so the search gives the asymmetric level to whichever
 * tail needs it.  r = 2 puts the largest element on 2d, r = 1.5 and 3
 * either side, r = 4 clips it hard; each start is then polished by the
 * alternating refit below, so the starts only have to land in the right
 * basin.  Measured on the demo model's 211 matrices (doc/quant.md): these
 * 5 starts x 6 rounds give mean RMSE/||w|| 0.35867 against 0.35862 for 18
 * starts x 30 rounds, at 4x the speed. */
static const float q2_starts[] = {1.5f, 2.0f, 2.5f, 3.0f, 4.0f};
#define Q2_ROUNDS 6

/* Nearest level for each element at scale d (codes c' = c - 1 in -1..2;
 * levels are evenly spaced in units of d, so rounding x/d and clamping is
 * the nearest one, for either sign of d).  Returns sum w x c' and sum w c'^2
 * through sxc, scc. */
static void q2_assign(const float *x, const float *w, float d, int8_t *c,
                      float *sxc, float *scc)
{
    const float id = 1.0f / d;
    float a = 0, b = 0;
    for (int j = 0; j < QK2_0; j++) {
        int q = quant_nearest_int(x[j] * id);
        q = q < -1 ? -1 : q > 2 ? 2 : q;
        c[j] = (int8_t)q;
        a += w[j] * x[j] * q;
        b += w[j] * (float)(q * q);
    }
    *sxc = a;
    *scc = b;
}

/* One block: the d minimising sum w (x - d c')^2 over codes c' in -1..2.
 * For fixed codes the best d is the weighted least-squares fit
 * d = sum w x c' / sum w c'^2, at which the error is
 * sum w x^2 - (sum w x c')^2 / sum w c'^2, so candidates are ranked by
 * (sum w x c')^2 / sum w c'^2.  Each start alternates "nearest codes for d"
 * and "best d for the codes" (neither step can raise the error) for a few
 * rounds; the best fit over all starts wins.  Everything is deterministic
 * (fixed starts and order, strict > so the first best is kept). */
static void q2_quantize_block(const float *x, const float *w, block_q2_0 *b)
{
    float amax = 0;
    for (int j = 0; j < QK2_0; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float best_d = 0, best = 0;
    int8_t c[QK2_0];
    if (amax > 0 && isfinite(amax)) {
        for (int sgn = 1; sgn >= -1; sgn -= 2) {
            for (size_t s = 0; s < sizeof q2_starts / sizeof q2_starts[0]; s++) {
                float d = sgn * amax / q2_starts[s];
                for (int r = 0; r < Q2_ROUNDS; r++) {
                    float sxc, scc;
                    int8_t prev[QK2_0];
                    memcpy(prev, c, sizeof prev);
                    q2_assign(x, w, d, c, &sxc, &scc);
                    if (!(scc > 0))
                        break;
                    /* same codes as the last round: same fit, converged */
                    if (r > 0 && !memcmp(prev, c, sizeof prev))
                        break;
                    const float score = sxc * sxc / scc;
                    const float dn = sxc / scc;
                    if (score > best) {
                        best = score;
                        best_d = dn;
                    }
                    if (dn == d || dn == 0)
                        break;
                    d = dn;
                }
            }
        }
    }
    /* store the fp16 scale and the nearest codes for exactly that scale */
    b->d = f32_to_fp16(best_d);
    const float dh = fp16_to_f32(b->d);
    memset(b->qs, 0, sizeof b->qs);
    for (int j = 0; j < QK2_0; j++) {
        int q = 0;
        if (dh != 0) {
            q = quant_nearest_int(x[j] / dh);
            q = q < -1 ? -1 : q > 2 ? 2 : q;
        }
        b->qs[j / 4] |= (uint8_t)((q + 1) << (2 * (j % 4)));
    }
}

/* The traits table's Q2_0 quantizer.  Importance weights (imatrix, one per
 * element: llama.cpp's imatrix is E[a^2] of the activation that multiplies
 * the weight) make it a weighted least-squares fit, whose error is exactly
 * the expected output error of the block; without them every element
 * weighs 1 and the fit minimises plain RMSE. */
void quant_row_q2_0(const float *src, void *dst, int64_t n, const float *imatrix)
{
    static const float ones[QK2_0] = {
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / QK2_0; i++)
        q2_quantize_block(src + i * QK2_0, imatrix ? imatrix + i * QK2_0 : ones, &b[i]);
}
