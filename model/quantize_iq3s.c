/* quantize_iq3s.c: IQ3_S quantizer, ggml's search (quantize_row_iq3_s_impl,
 * 32-element sub-blocks) restated so the bytes equal ggml's -- except where
 * ggml's are wrong.
 *
 * IQ3_S codes a 4-element group of magnitudes as one of 512 grid points
 * (odd magnitudes 1..15, i.e. levels L = 0..7 standing for 2L+1) with 8
 * explicit signs per 8 elements, a 4-bit scale per 32 elements and one fp16
 * per 256.  Per sub-block: 19 trial inverse scales around 15/max; each
 * group's levels are rounded, and a level pattern that is not a grid point
 * takes the best of its nearest grid points (the three smallest distances,
 * listed at start-up; the grid search in quantize_grid.c, which the IQ2
 * quantizers share) under weights sqrt(w); the trial with the best
 * weighted least-squares fit is kept and all eight groups are redone at its
 * scale.
 *
 * ggml's bug: it advances its write positions for the index bytes and sign
 * bytes only after a sub-block that is not all zero, while the high index
 * bits and the scales are placed by sub-block number.  After an all-zero
 * sub-block every later sub-block's index and sign bytes land one slot
 * early and decode under the wrong high bits and scale.  strata writes
 * every sub-block into its own slot (quant_row_iq3_s); the _ggml variant
 * keeps ggml's placement, only so the tests can compare with ggml's
 * bytes.  The two differ only in blocks with an all-zero sub-block. */
#include "model/quantize_types.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_grid.h"

/* The grid (model/iq_grids.c) as a search table: odd magnitudes 1..15 are
 * levels 0..7; neighbour lists at the three smallest distances. */
static qgrid t3 = {.ngrid = 512, .gsize = 4, .bits = 3, .maxlev = 7, .nwant = 3};

static pthread_once_t t3_once = PTHREAD_ONCE_INIT;

static void t3_init(void)
{
    int lev[512 * 4];
    for (int j = 0; j < 512; j++)
        for (int k = 0; k < 4; k++) {
            const unsigned mag = (iq3s_grid[j] >> 8 * k) & 0xff;
            lev[4 * j + k] = (mag & 1) && mag <= 15 ? (int)(mag - 1) / 2 : -1;
        }
    qgrid_init(&t3, lev);
}

/* One 32-element sub-block: 8 grid indices and 4 sign bytes; returns the
 * scale (>= 0), or -1 for an all-zero sub-block (nothing written). */
static float t3_sub(const float *xb, const float *w, int *gi, uint8_t *signs)
{
    float u[32], tv[32];
    int8_t L[32] = {0};
    int on[8];
    for (int i = 0; i < 32; i++)
        u[i] = sqrtf(w[i]);
    qgrid_signs(32, xb, w, 0, tv, signs);
    float max = tv[0];
    for (int i = 1; i < 32; i++)
        max = tv[i] > max ? tv[i] : max;
    if (!max)
        return -1;
    for (int k = 0; k < 8; k++)
        on[k] = 0; /* no trial accepted: every group counts as off */
    float scale = qgrid_trials(&t3, 8, tv, u, w, 15, 0.2f, -9, 9, max, max / 15, L, on);
    scale = qgrid_refit(&t3, 8, tv, u, w, on, 1, scale, L); /* ggml redoes all eight */
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; k++)
            signs[k] = (uint8_t)~signs[k];
    }
    for (int k = 0; k < 8; k++)
        gi[k] = qgrid_index(&t3, L + 4 * k); /* always a grid point */
    return scale;
}

/* Layout: d | qs[64] @2 | qh[8] @66 | signs[32] @74 | scales[4] @106. */
static void t3_block(const float *x, const float *qw, uint8_t *b, int ggml_layout)
{
    float scales[8], w[32];
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++)
        sumx2 += x[i] * x[i];
    const float sigma2 = 2 * sumx2 / QK_K;
    memset(b, 0, 110);
    uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74;
    float max_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        for (int i = 0; i < 32; i++)
            w[i] = qw ? qw[32 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
        int gi[8];
        uint8_t signs[4];
        const float scale = t3_sub(xb, w, gi, signs);
        scales[ib] = scale > 0 ? scale : 0;
        if (scale < 0) {
            if (!ggml_layout) { /* the empty sub-block keeps its slot */
                qs += 8;
                sg += 4;
            }
            continue;
        }
        for (int k = 0; k < 8; k++) {
            qs[k] = (uint8_t)gi[k];
            qh[ib] |= (uint8_t)((gi[k] >> 8) << k);
        }
        memcpy(sg, signs, 4);
        qs += 8;
        sg += 4;
        max_scale = scale > max_scale ? scale : max_scale;
    }
    if (!max_scale) {
        memset(b, 0, 110);
        return;
    }
    const float d = max_scale / 31;
    const uint16_t dh = f32_to_fp16(d * 1.033f);
    memcpy(b, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
        int l1 = quant_nearest_int(0.5f * (id * scales[ib] - 1));
        int l2 = quant_nearest_int(0.5f * (id * scales[ib + 1] - 1));
        l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
        l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
        b[106 + ib / 2] = (uint8_t)(l1 | l2 << 4);
    }
}

static void t3_row(const float *src, void *dst, int64_t n, const float *imatrix,
                   int ggml_layout)
{
    pthread_once(&t3_once, t3_init);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += 110) {
        if (!t3.ok) { /* unreachable with the fixed grid; never crash */
            memset(b, 0, 110);
            continue;
        }
        t3_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b, ggml_layout);
    }
}

void quant_row_iq3_s(const float *src, void *dst, int64_t n, const float *imatrix)
{
    t3_row(src, dst, n, imatrix, 0);
}

void quant_row_iq3_s_ggml(const float *src, void *dst, int64_t n, const float *imatrix)
{
    t3_row(src, dst, n, imatrix, 1);
}
