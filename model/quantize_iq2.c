/* quantize_iq2.c: quantizers of IQ2_XXS, IQ2_XS and IQ2_S, ggml's searches
 * restated so the bytes equal ggml's (test/data/quant_vectors.txt).
 *
 * All three code an 8-element group of magnitudes as one point of a fixed
 * grid (256, 512 or 1024 points) whose elements are 8, 25 or 43, signs
 * apart, under a 4-bit scale per 32 (XXS) or 16 (XS, S) elements and one
 * fp16 per 256.  The search works in "odd units": grid level L = 0, 1, 2
 * stands for 2L+1 = 1, 3, 5.  For a trial scale each group's levels are
 * rounded; when that level pattern is not a grid point, the group takes the
 * best (under the element weights) of the pattern's nearest grid points,
 * listed once at start-up (the grid search in quantize_grid.c, which
 * IQ3_S shares).  Each trial scale is then scored by its weighted
 * least-squares fit.  doc/quant.md ("Quantizers") has the steps. */
#include "model/quantize_types.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_grid.h"
#include "model/quantize_search.h"

/* The three grids (model/iq_grids.c) as search tables: levels 0..2 from
 * the magnitudes 8, 25, 43; neighbour lists at the 2 (XXS, XS) or 1 (S)
 * smallest distances, as ggml keeps them. */
static qgrid t_xxs = {.ngrid = 256, .gsize = 8, .bits = 2, .maxlev = 2, .nwant = 2};
static qgrid t_xs = {.ngrid = 512, .gsize = 8, .bits = 2, .maxlev = 2, .nwant = 2};
static qgrid t_s = {.ngrid = 1024, .gsize = 8, .bits = 2, .maxlev = 2, .nwant = 1};

static void iq2_init(qgrid *t, const uint64_t *grid)
{
    int *lev = malloc((size_t)t->ngrid * 8 * sizeof *lev);
    if (!lev)
        return; /* t->ok stays 0 */
    for (int j = 0; j < t->ngrid; j++)
        for (int k = 0; k < 8; k++) {
            const unsigned mag = (unsigned)(grid[j] >> 8 * k) & 0xff;
            lev[8 * j + k] = mag == 8 ? 0 : mag == 25 ? 1 : mag == 43 ? 2 : -1;
        }
    qgrid_init(t, lev);
    free(lev);
}

static pthread_once_t once_xxs = PTHREAD_ONCE_INIT, once_xs = PTHREAD_ONCE_INIT,
                      once_s = PTHREAD_ONCE_INIT;
static void init_xxs(void) { iq2_init(&t_xxs, iq2xxs_grid); }
static void init_xs(void) { iq2_init(&t_xs, iq2xs_grid); }
static void init_s(void) { iq2_init(&t_s, iq2s_grid); }

static float block_sumx2(const float *x)
{
    float s = 0;
    for (int i = 0; i < QK_K; i++)
        s += x[i] * x[i];
    return s;
}

/* ---- IQ2_XXS: d | 8 x (4 grid bytes, u32 signs | scale << 28) ------------ */

static void iq2_xxs_block(const float *x, const float *qw, uint8_t *b)
{
    const qgrid *t = &t_xxs;
    uint32_t q2[16] = {0};
    float scales[8], w[32], u[32], tv[32];
    int8_t L[32];
    uint8_t signs[4];
    const float sigma2 = block_sumx2(x) / QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        for (int i = 0; i < 32; i++)
            w[i] = (qw ? qw[32 * ib + i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
        for (int i = 0; i < 32; i++)
            u[i] = sqrtf(w[i]);
        qgrid_signs(32, xb, w, 1, tv, signs);
        float max = tv[0];
        for (int i = 1; i < 32; i++)
            max = tv[i] > max ? tv[i] : max;
        scales[ib] = 0;
        if (max < 1e-15f)
            continue;
        /* start from the least-squares scale of plain levels 0..4 */
        uint8_t Lp[32];
        float scale = qs_positive(32, 4, tv, Lp, w);
        const float em = scale * 3;
        if (em <= 0)
            continue;
        /* 13 trials, then all four groups again at the chosen scale (marked
         * off the grid, so that qgrid_refit redoes every one) */
        int on[4] = {0}, gi[4];
        memset(L, 0, sizeof L);
        scale = qgrid_trials(t, 4, tv, u, w, 5, 0.1f, -6, 6, em, scale, L, on);
        for (int k = 0; k < 4; k++)
            on[k] = 0;
        scale = qgrid_refit(t, 4, tv, u, w, on, 1, scale, L);
        for (int k = 0; k < 4; k++)
            gi[k] = qgrid_index(t, L + 8 * k); /* grid points, redone or kept */
        if (scale < 0) { /* scales are unsigned: flip the signs instead */
            scale = -scale;
            for (int k = 0; k < 4; k++)
                signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 4; k++) {
            q2[2 * ib] |= (uint32_t)gi[k] << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = scale > max_scale ? scale : max_scale;
    }
    memset(b, 0, 66);
    if (!max_scale)
        return;
    const float d = max_scale / 31;
    const uint16_t dh = f32_to_fp16(d);
    memcpy(b, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = quant_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        q2[2 * ib + 1] |= (uint32_t)l << 28;
    }
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 4; k++)
            b[2 + 4 * i + k] = (uint8_t)(q2[i] >> 8 * k);
}

void quant_row_iq2_xxs(const float *src, void *dst, int64_t n, const float *imatrix)
{
    pthread_once(&once_xxs, init_xxs);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += 66) {
        if (!t_xxs.ok) { /* unreachable with the fixed grid; never crash */
            memset(b, 0, 66);
            continue;
        }
        iq2_xxs_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b);
    }
}

/* ---- IQ2_XS and IQ2_S: 16-element sub-blocks of two 8-groups ---------------- */

/* One 16-element sub-block: levels from 19 trial scales around mx/5, then
 * the groups that needed a neighbour are redone at the chosen scale.
 * Returns the scale (>= 0; signs flipped when it came out negative) and
 * the two grid indices. */
static float iq2_sub16(const qgrid *t, const float *tv, const float *w,
                       const float *u, float eps, uint8_t *signs, int parity, int *gi)
{
    int8_t L[16] = {0};
    int on[2] = {1, 1};
    float max = tv[0];
    for (int i = 1; i < 16; i++)
        max = tv[i] > max ? tv[i] : max;
    gi[0] = gi[1] = -1;
    if (max < eps)
        return 0;
    float scale = qgrid_trials(t, 2, tv, u, w, 5, 0.1f, -9, 9, max, max / 5, L, on);
    scale = qgrid_refit(t, 2, tv, u, w, on, 0, scale, L);
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; k++)
            signs[k] = (uint8_t)(parity ? ~signs[k] & 127 : ~signs[k]);
    }
    for (int k = 0; k < 2; k++)
        gi[k] = qgrid_index(t, L + 8 * k); /* always a grid point */
    return scale;
}

/* The 4-bit scales: d = max/31 (stored times `fudge`), per sub-block
 * ls = round((scale/d - 1)/2), two per byte, even sub-block low. */
static void iq2_scales16(const float *scales, float max_scale, float fudge,
                         uint8_t *dfield, uint8_t *out)
{
    const float d = max_scale / 31;
    const uint16_t dh = f32_to_fp16(fudge == 1 ? d : d * fudge);
    memcpy(dfield, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib++) {
        int l = quant_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        out[ib / 2] |= (uint8_t)(l << 4 * (ib % 2));
    }
}

/* IQ2_XS: d | qs[32] u16 (index | sign7 << 9) | scales[8] */
static void iq2_xs_block(const float *x, const float *qw, uint8_t *b)
{
    float scales[16], w[16], u[16], tv[16];
    uint8_t signs[2];
    uint16_t q2[32] = {0};
    const float sigma2 = block_sumx2(x) / QK_K;
    float max_scale = 0;
    memset(b, 0, 74);
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        for (int i = 0; i < 16; i++)
            w[i] = (qw ? qw[16 * ib + i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
        for (int i = 0; i < 16; i++)
            u[i] = sqrtf(w[i]);
        qgrid_signs(16, xb, w, 1, tv, signs);
        int gi[2];
        scales[ib] = iq2_sub16(&t_xs, tv, w, u, 1e-15f, signs, 1, gi);
        if (gi[0] < 0)
            continue;
        for (int k = 0; k < 2; k++)
            q2[2 * ib + k] = (uint16_t)(gi[k] | signs[k] << 9);
        max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
    }
    if (!max_scale)
        return;
    iq2_scales16(scales, max_scale, 1, b, b + 66);
    for (int g = 0; g < 32; g++) {
        b[2 + 2 * g] = (uint8_t)q2[g];
        b[3 + 2 * g] = (uint8_t)(q2[g] >> 8);
    }
}

void quant_row_iq2_xs(const float *src, void *dst, int64_t n, const float *imatrix)
{
    pthread_once(&once_xs, init_xs);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += 74) {
        if (!t_xs.ok) {
            memset(b, 0, 74);
            continue;
        }
        iq2_xs_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b);
    }
}

/* IQ2_S: d | qs[32] low index bytes | signs[32] | qh[8] | scales[8] */
static void iq2_s_block(const float *x, const float *qw, uint8_t *b)
{
    float scales[16], w[16], u[16], tv[16];
    uint8_t signs[2];
    const float sigma2 = 2 * block_sumx2(x) / QK_K;
    float max_scale = 0;
    memset(b, 0, 82);
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        for (int i = 0; i < 16; i++)
            w[i] = qw ? qw[16 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i])
                      : 0.25f * sigma2 + xb[i] * xb[i];
        for (int i = 0; i < 16; i++)
            u[i] = sqrtf(w[i]);
        qgrid_signs(16, xb, w, 0, tv, signs);
        int gi[2];
        scales[ib] = iq2_sub16(&t_s, tv, w, u, 1e-8f, signs, 0, gi);
        if (gi[0] < 0)
            continue;
        for (int k = 0; k < 2; k++) {
            const int g = 2 * ib + k;
            b[2 + g] = (uint8_t)gi[k];
            b[66 + g / 4] |= (uint8_t)((gi[k] >> 8) << 2 * (g % 4));
            b[34 + g] = signs[k];
        }
        max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
    }
    if (!max_scale)
        return;
    iq2_scales16(scales, max_scale, 0.9875f, b, b + 74);
}

void quant_row_iq2_s(const float *src, void *dst, int64_t n, const float *imatrix)
{
    pthread_once(&once_s, init_s);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += 82) {
        if (!t_s.ok) {
            memset(b, 0, 82);
            continue;
        }
        iq2_s_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b);
    }
}
