/* quantize_grid.c: see quantize_grid.h. */
#include "model/quantize_grid.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant_codecs.h"

static int level_in(const qgrid *t, int code, int k)
{
    return (code >> t->bits * k) & ((1 << t->bits) - 1);
}

/* Grid points at the nwant smallest distinct squared distances (odd units)
 * from pattern `code`, by (distance, index); returns the count. */
static int qgrid_neighbours(const qgrid *t, int code, uint16_t *out)
{
    int dist[QGRID_MAX_POINTS], dmin[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
    for (int j = 0; j < t->ngrid; j++) {
        int s = 0;
        for (int k = 0; k < t->gsize; k++) {
            const int diff = 2 * (t->lev[j][k] - level_in(t, code, k));
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

void qgrid_init(qgrid *t, const int *lev)
{
    t->ok = 0;
    if (t->ngrid > QGRID_MAX_POINTS || t->gsize > QGRID_MAX_GROUP || t->nwant > 3)
        return;
    /* codes run to every level at maxlev */
    int ncodes = 0;
    for (int k = 0; k < t->gsize; k++)
        ncodes |= t->maxlev << t->bits * k;
    ncodes++;
    t->map = malloc((size_t)ncodes * sizeof *t->map);
    if (!t->map)
        return;
    for (int c = 0; c < ncodes; c++)
        t->map[c] = INT32_MIN;
    for (int j = 0; j < t->ngrid; j++) {
        int code = 0;
        for (int k = 0; k < t->gsize; k++) {
            const int L = lev[j * t->gsize + k];
            if (L < 0 || L > t->maxlev)
                return; /* t->ok stays 0: not a grid of this kind */
            t->lev[j][k] = (uint8_t)L;
            code |= L << t->bits * k;
        }
        t->map[code] = j;
    }
    /* lists for the reachable patterns that are not grid points */
    size_t cap = 65536, used = 0;
    uint16_t *nb = malloc(cap * sizeof *nb), list[QGRID_MAX_POINTS];
    if (!nb)
        return;
    for (int c = 0; c < ncodes; c++) {
        int reachable = 1;
        for (int k = 0; k < t->gsize; k++)
            reachable &= level_in(t, c, k) <= t->maxlev;
        if (!reachable || t->map[c] >= 0)
            continue;
        const int n = qgrid_neighbours(t, c, list);
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

int qgrid_group(const qgrid *t, const float *tv, const float *u, float id, float s, int8_t *L,
                int *on_grid)
{
    int code = 0;
    for (int k = 0; k < t->gsize; k++) {
        int l = quant_nearest_int(0.5f * (id * tv[k] - 1));
        l = l < 0 ? 0 : l > t->maxlev ? t->maxlev : l;
        L[k] = (int8_t)l;
        code |= l << t->bits * k;
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
        for (int k = 0; k < t->gsize; k++) {
            const float q = (float)(2 * lv[k] + 1);
            const float diff = s * q - tv[k];
            d2 += u[k] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            gi = nb[j];
        }
    }
    for (int k = 0; k < t->gsize; k++)
        L[k] = (int8_t)t->lev[gi][k];
    return gi;
}

float qgrid_trials(const qgrid *t, int ngroups, const float *tv, const float *u, const float *w,
                   float base, float step, int lo, int hi, float amax, float scale, int8_t *L,
                   int *on)
{
    const int g = t->gsize, n = ngroups * g;
    int8_t La[32];
    int on_a[32];
    float best = 0, a, c;
    for (int is = lo; is <= hi; is++) {
        const float id = (base + is * step) / amax, s = 1 / id;
        for (int k = 0; k < ngroups; k++)
            qgrid_group(t, tv + g * k, u + g * k, id, s, La + g * k, &on_a[k]);
        qgrid_sums(n, w, tv, La, &a, &c);
        if (c > 0 && a * a > best * c) {
            scale = a / c;
            best = scale * a;
            memcpy(L, La, (size_t)n);
            memcpy(on, on_a, (size_t)ngroups * sizeof *on);
        }
    }
    return scale;
}

float qgrid_refit(const qgrid *t, int ngroups, const float *tv, const float *u, const float *w,
                  const int *on, int all, float scale, int8_t *L)
{
    const int g = t->gsize;
    int off = 0, dummy;
    for (int k = 0; k < ngroups; k++)
        off += !on[k];
    if (!off || scale <= 0)
        return scale;
    const float id = 1 / scale;
    for (int k = 0; k < ngroups; k++)
        if (all || !on[k])
            qgrid_group(t, tv + g * k, u + g * k, id, scale, L + g * k, &dummy);
    float a, c;
    qgrid_sums(ngroups * g, w, tv, L, &a, &c);
    return c > 0 ? a / c : scale;
}

int qgrid_index(const qgrid *t, const int8_t *L)
{
    int code = 0;
    for (int k = 0; k < t->gsize; k++)
        code |= L[k] << t->bits * k;
    return t->map[code] >= 0 ? t->map[code] : 0;
}

void qgrid_sums(int n, const float *w, const float *tv, const int8_t *L, float *sumqx,
                float *sumq2)
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

void qgrid_signs(int n, const float *x, const float *w, int parity, float *tv, uint8_t *signs)
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
