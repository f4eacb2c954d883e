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
 * listed once at start-up.  Each trial scale is then scored by its
 * weighted least-squares fit.  doc/quant.md ("Quantizers") has the steps. */
#include "model/quantize_types.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_search.h"

static const uint64_t grid_xxs[256] = {
#include "model/iq2xxs_grid.inc"
};
static const uint64_t grid_xs[512] = {
#include "model/iq2xs_grid.inc"
};
static const uint64_t grid_s[1024] = {
#include "model/iq2s_grid.inc"
};

/* Level patterns are 16-bit codes, level of element k in bits 2k..2k+1;
 * the search only produces levels 0..2, so codes stay below 43691. */
#define IQ2_CODES 43691

typedef struct {
    const uint64_t *grid;
    int ngrid;
    int nwant;           /* neighbour lists keep this many distinct distances */
    uint8_t lev[1024][8]; /* levels of each grid point */
    int32_t map[IQ2_CODES]; /* grid index, or -(offset into nb) - 1 */
    uint16_t *nb;        /* per off-grid code: count, then grid indices */
    int ok;
} iq2_table;

static iq2_table t_xxs = {grid_xxs, 256, 2, {{0}}, {0}, NULL, 0};
static iq2_table t_xs = {grid_xs, 512, 2, {{0}}, {0}, NULL, 0};
static iq2_table t_s = {grid_s, 1024, 1, {{0}}, {0}, NULL, 0};

static int level_of(unsigned mag)
{
    return mag == 8 ? 0 : mag == 25 ? 1 : mag == 43 ? 2 : -1;
}

/* Grid points at the nwant smallest distinct squared distances (odd units)
 * from level pattern `code`, by (distance, index); returns the count. */
static int iq2_neighbours(const iq2_table *t, int code, uint16_t *out)
{
    int dist[1024], dmin[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
    for (int j = 0; j < t->ngrid; j++) {
        int s = 0;
        for (int k = 0; k < 8; k++) {
            const int diff = 2 * (t->lev[j][k] - ((code >> 2 * k) & 3));
            s += diff * diff;
        }
        dist[j] = s;
        /* keep the nwant smallest distinct values, ascending */
        for (int m = 0; m < t->nwant; m++) {
            if (s == dmin[m])
                break;
            if (s < dmin[m]) {
                for (int r = t->nwant - 1; r > m; r--)
                    dmin[r] = dmin[r - 1];
                dmin[m] = s;
                break;
            }
        }
    }
    int n = 0;
    for (int m = 0; m < t->nwant && dmin[m] != INT32_MAX; m++)
        for (int j = 0; j < t->ngrid; j++)
            if (dist[j] == dmin[m])
                out[n++] = (uint16_t)j;
    return n;
}

static void iq2_init(iq2_table *t)
{
    for (int c = 0; c < IQ2_CODES; c++)
        t->map[c] = INT32_MIN; /* unreachable code (a level 3) */
    for (int j = 0; j < t->ngrid; j++) {
        int code = 0;
        for (int k = 0; k < 8; k++) {
            const int L = level_of((unsigned)(t->grid[j] >> 8 * k) & 0xff);
            if (L < 0)
                return; /* t->ok stays 0: not a valid IQ2 grid */
            t->lev[j][k] = (uint8_t)L;
            code |= L << 2 * k;
        }
        t->map[code] = j;
    }
    /* lists for the 3^8 reachable patterns that are not grid points */
    size_t cap = 65536, used = 0;
    uint16_t *nb = malloc(cap * sizeof *nb), list[1024];
    if (!nb)
        return;
    for (int c = 0; c < IQ2_CODES; c++) {
        int reachable = 1;
        for (int k = 0; k < 8; k++)
            reachable &= ((c >> 2 * k) & 3) < 3;
        if (!reachable || t->map[c] >= 0)
            continue;
        const int n = iq2_neighbours(t, c, list);
        if (used + 1 + (size_t)n > cap) {
            uint16_t *p = realloc(nb, 2 * cap * sizeof *nb);
            if (!p) {
                free(nb);
                return;
            }
            nb = p;
            cap *= 2;
        }
        t->map[c] = -(int32_t)used - 1;
        nb[used++] = (uint16_t)n;
        memcpy(nb + used, list, (size_t)n * sizeof *nb);
        used += (size_t)n;
    }
    t->nb = nb;
    t->ok = 1;
}

static pthread_once_t once_xxs = PTHREAD_ONCE_INIT, once_xs = PTHREAD_ONCE_INIT,
                      once_s = PTHREAD_ONCE_INIT;
static void init_xxs(void) { iq2_init(&t_xxs); }
static void init_xs(void) { iq2_init(&t_xs); }
static void init_s(void) { iq2_init(&t_s); }

/* Levels of one 8-group at inverse scale id: rounded, and when the pattern
 * is off the grid, the neighbour minimising sum u*(s*q - t)^2 (first wins).
 * Writes the final levels to L, returns the grid index; *on_grid says
 * whether the rounded pattern was a grid point. */
static int iq2_group(const iq2_table *t, const float *tv, const float *u, float id,
                     float s, int8_t *L, int *on_grid)
{
    int code = 0;
    for (int k = 0; k < 8; k++) {
        int l = quant_nearest_int(0.5f * (id * tv[k] - 1));
        l = l < 0 ? 0 : l > 2 ? 2 : l;
        L[k] = (int8_t)l;
        code |= l << 2 * k;
    }
    const int32_t m = t->map[code];
    *on_grid = m >= 0;
    if (m >= 0)
        return m;
    const uint16_t *nb = t->nb + (-m - 1);
    float best = FLT_MAX;
    int gi = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const uint8_t *lv = t->lev[nb[j]];
        float d2 = 0;
        for (int k = 0; k < 8; k++) {
            const float q = (float)(2 * lv[k] + 1);
            const float diff = s * q - tv[k];
            d2 += u[k] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            gi = nb[j];
        }
    }
    for (int k = 0; k < 8; k++)
        L[k] = (int8_t)t->lev[gi][k];
    return gi;
}

/* Weighted least-squares pieces of levels L over n elements. */
static void iq2_sums(int n, const float *w, const float *tv, const int8_t *L,
                     float *sumqx, float *sumq2)
{
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const float q = 2 * L[i] + 1;
        a += w[i] * tv[i] * q;
        b += w[i] * q * q;
    }
    *sumqx = a;
    *sumq2 = b;
}

/* Targets |x| and sign masks of n/8 8-groups.  With `parity` (XXS, XS: the
 * 8th sign is implied by even parity) an odd count of negatives flips the
 * element with the smallest w*x^2, whose target becomes -|x|. */
static void iq2_signs(int n, const float *x, const float *w, int parity, float *tv,
                      uint8_t *signs)
{
    for (int k = 0; k < n / 8; k++) {
        int nneg = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            const float v = x[8 * k + i];
            tv[8 * k + i] = v >= 0 ? v : -v;
            if (v < 0) {
                nneg++;
                s |= (uint8_t)(1 << i);
            }
        }
        if (parity && nneg % 2) {
            int imin = 0;
            float min = w[8 * k] * x[8 * k] * x[8 * k];
            for (int i = 1; i < 8; i++) {
                const float a = w[8 * k + i] * x[8 * k + i] * x[8 * k + i];
                if (a < min) {
                    min = a;
                    imin = i;
                }
            }
            tv[8 * k + imin] = -tv[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = parity ? s & 127 : s;
    }
}

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
    const iq2_table *t = &t_xxs;
    uint32_t q2[16] = {0};
    float scales[8], w[32], u[32], tv[32];
    int8_t L[32], La[32];
    uint8_t signs[4];
    const float sigma2 = block_sumx2(x) / QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        for (int i = 0; i < 32; i++)
            w[i] = (qw ? qw[32 * ib + i] : 1.0f) * sqrtf(sigma2 + xb[i] * xb[i]);
        for (int i = 0; i < 32; i++)
            u[i] = sqrtf(w[i]);
        iq2_signs(32, xb, w, 1, tv, signs);
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
        float best = 0, a, c;
        int on;
        memset(L, 0, sizeof L);
        for (int is = -6; is <= 6; is++) {
            const float id = (5 + is * 0.1f) / em, s = 1 / id;
            for (int k = 0; k < 4; k++)
                iq2_group(t, tv + 8 * k, u + 8 * k, id, s, La + 8 * k, &on);
            iq2_sums(32, w, tv, La, &a, &c);
            if (c > 0 && a * a > best * c) {
                scale = a / c;
                best = scale * a;
                memcpy(L, La, sizeof L);
            }
        }
        int gi[4];
        if (scale > 0) { /* all four groups again at the chosen scale */
            const float id = 1 / scale;
            for (int k = 0; k < 4; k++)
                gi[k] = iq2_group(t, tv + 8 * k, u + 8 * k, id, scale, L + 8 * k, &on);
            iq2_sums(32, w, tv, L, &a, &c);
            if (c > 0)
                scale = a / c;
        } else { /* levels of the kept candidate: grid points already */
            for (int k = 0; k < 4; k++) {
                int code = 0;
                for (int i = 0; i < 8; i++)
                    code |= L[8 * k + i] << 2 * i;
                gi[k] = t->map[code] >= 0 ? t->map[code] : 0;
            }
        }
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
static float iq2_sub16(const iq2_table *t, const float *tv, const float *w,
                       const float *u, float eps, uint8_t *signs, int parity, int *gi)
{
    int8_t L[16] = {0}, La[16];
    int on[2] = {1, 1}, on_a[2];
    float max = tv[0];
    for (int i = 1; i < 16; i++)
        max = tv[i] > max ? tv[i] : max;
    gi[0] = gi[1] = -1;
    if (max < eps)
        return 0;
    float best = 0, scale = max / 5, a, c;
    for (int is = -9; is <= 9; is++) {
        const float id = (5 + is * 0.1f) / max, s = 1 / id;
        for (int k = 0; k < 2; k++)
            iq2_group(t, tv + 8 * k, u + 8 * k, id, s, La + 8 * k, &on_a[k]);
        iq2_sums(16, w, tv, La, &a, &c);
        if (c > 0 && a * a > best * c) {
            scale = a / c;
            best = scale * a;
            memcpy(L, La, sizeof L);
            on[0] = on_a[0];
            on[1] = on_a[1];
        }
    }
    if ((!on[0] || !on[1]) && scale > 0) {
        const float id = 1 / scale;
        int dummy;
        for (int k = 0; k < 2; k++)
            if (!on[k])
                iq2_group(t, tv + 8 * k, u + 8 * k, id, scale, L + 8 * k, &dummy);
        iq2_sums(16, w, tv, L, &a, &c);
        if (c > 0)
            scale = a / c;
    }
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; k++)
            signs[k] = (uint8_t)(parity ? ~signs[k] & 127 : ~signs[k]);
    }
    for (int k = 0; k < 2; k++) {
        int code = 0;
        for (int i = 0; i < 8; i++)
            code |= L[8 * k + i] << 2 * i;
        gi[k] = t->map[code] >= 0 ? t->map[code] : 0; /* always a grid point */
    }
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
        iq2_signs(16, xb, w, 1, tv, signs);
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
        iq2_signs(16, xb, w, 0, tv, signs);
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
