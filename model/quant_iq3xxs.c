/* quant_iq3xxs.c: IQ3_XXS decode and ggml's quantizer (FORMATS.md §2.7, §3.4).
 *
 * A 256-element super-block is eight 32-element sub-blocks; a sub-block is
 * eight groups of four magnitudes, each group one of 256 grid points, plus
 * per 8 elements a 7-bit sign field whose 8th sign is implied (even parity),
 * plus a 4-bit scale.  The quantizer is ggml's quantize_row_iq3_xxs_impl,
 * restated step by step from §3.4 so the bytes match ggml's (test vectors).
 *
 * The quantizer works in "odd units": grid level L (0..7) stands for 2L+1.
 * Most 4-tuples of levels are not on the grid; for those we keep a list of
 * the nearest grid points (the two smallest distances) and pick the best
 * one under the element weights. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "quant_codecs.h"

/* ---- decode -------------------------------------------------------------- */

void dequant_row_iq3_xxs(const void *src, float *dst, int64_t n)
{
    const block_iq3_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        const uint8_t *gidx = b[i].qs;
        const uint8_t *ss = b[i].qs + QK_K / 4; /* 8 x u32 LE at offset 66 */
        float *y = dst + i * QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t *p = ss + 4 * ib;
            const uint32_t w = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                               (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            /* evaluated as ggml does: (d * (0.5 + ls)) * 0.5 */
            const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t sg = iq3xxs_signs[(w >> (7 * l)) & 127];
                const uint32_t a = iq3xxs_grid[gidx[8 * ib + 2 * l]];
                const uint32_t c = iq3xxs_grid[gidx[8 * ib + 2 * l + 1]];
                for (int k = 0; k < 8; k++) {
                    const uint32_t g = k < 4 ? a : c;
                    const float mag = (float)((g >> (8 * (k & 3))) & 0xff);
                    y[32 * ib + 8 * l + k] = db * mag * ((sg >> k) & 1 ? -1.f : 1.f);
                }
            }
        }
    }
}

/* ---- quantizer setup (once) --------------------------------------------- */

/* Upper bound on the flattened neighbour lists: 3840 off-grid codes, each a
 * count plus its neighbours; measured total for this grid is far below. */
#define IQ3_NBR_CAP 65536

static struct {
    uint8_t odd[256][4];      /* grid point j in odd units (1,3,..,15) */
    int32_t map[4096];        /* 12-bit level code -> grid index, or
                                 -(offset into nbr) - 1 when off-grid */
    uint16_t nbr[IQ3_NBR_CAP]; /* per off-grid code: count, then indices */
    int ok;
} iq3;

static pthread_once_t iq3_once = PTHREAD_ONCE_INIT;

/* magnitude byte -> level: 4,12,..,52 are 4(2L+1); 62 stands for L = 7 */
static int iq3_level_of(uint32_t mag)
{
    return mag == 62 ? 7 : (int)(mag / 4 - 1) / 2;
}

static int iq3_cmp_dist(const void *a, const void *b)
{
    const int *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1]; /* ties by grid index */
}

static void iq3_init(void)
{
    static int dist[256][2];
    for (int u = 0; u < 4096; u++)
        iq3.map[u] = -1;
    for (int j = 0; j < 256; j++) {
        int u = 0;
        for (int k = 0; k < 4; k++) {
            const int L = iq3_level_of((iq3xxs_grid[j] >> (8 * k)) & 0xff);
            iq3.odd[j][k] = (uint8_t)(2 * L + 1);
            u |= L << (3 * k);
        }
        iq3.map[u] = j;
    }
    int used = 0;
    for (int u = 0; u < 4096; u++) {
        if (iq3.map[u] >= 0)
            continue;
        for (int j = 0; j < 256; j++) {
            int d2 = 0;
            for (int k = 0; k < 4; k++) {
                const int diff = iq3.odd[j][k] - (2 * ((u >> (3 * k)) & 7) + 1);
                d2 += diff * diff;
            }
            dist[j][0] = d2;
            dist[j][1] = j;
        }
        qsort(dist, 256, sizeof dist[0], iq3_cmp_dist);
        /* keep every point at one of the two smallest distinct distances */
        int count = 0, distinct = 1, d2 = dist[0][0];
        for (int j = 0; j < 256; j++) {
            if (dist[j][0] > d2) {
                if (distinct == 2)
                    break;
                d2 = dist[j][0];
                distinct++;
            }
            count++;
        }
        if (used + 1 + count > IQ3_NBR_CAP)
            return; /* iq3.ok stays 0; cannot happen with the fixed grid */
        iq3.map[u] = -used - 1;
        iq3.nbr[used++] = (uint16_t)count;
        for (int j = 0; j < count; j++)
            iq3.nbr[used++] = (uint16_t)dist[j][1];
    }
    iq3.ok = 1;
}

/* ---- quantizer ------------------------------------------------------------ */

/* Among the neighbours of an off-grid code, the grid point minimising
 * sum u_i (s*q_i - t_i)^2 (first minimum wins); writes its levels to L. */
static int iq3_best_neighbour(const uint16_t *nb, const float *t,
                              const float *u, float s, int8_t *L)
{
    float best = FLT_MAX;
    int best_j = nb[1];
    for (int n = 1; n <= nb[0]; n++) {
        const uint8_t *q = iq3.odd[nb[n]];
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            const float diff = s * q[i] - t[i];
            d2 += u[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            best_j = nb[n];
        }
    }
    for (int i = 0; i < 4; i++)
        L[i] = (int8_t)((iq3.odd[best_j][i] - 1) / 2);
    return best_j;
}

/* Levels of one 4-group at inverse scale id (snapping to a neighbour with
 * scale s when off-grid); returns 1 if the rounded code was on the grid. */
static int iq3_quantize_group(const float *t, const float *u, float id,
                              float s, int8_t *L)
{
    int code = 0;
    for (int i = 0; i < 4; i++) {
        int l = quant_nearest_int(0.5f * (id * t[i] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        L[i] = (int8_t)l;
        code |= l << (3 * i);
    }
    if (iq3.map[code] >= 0)
        return 1;
    iq3_best_neighbour(iq3.nbr - iq3.map[code] - 1, t, u, s, L);
    return 0;
}

/* A = sum w t q, B = sum w q^2 with q = 2L+1, in ggml's order. */
static void iq3_sums(const float *w, const float *t, const int8_t *L,
                     float *A, float *B)
{
    float a = 0, b = 0;
    for (int i = 0; i < 32; i++) {
        const float q = 2 * L[i] + 1;
        a += w[i] * t[i] * q;
        b += w[i] * q * q;
    }
    *A = a;
    *B = b;
}

/* One 32-element sub-block: fills 8 grid indices and the 28 sign bits;
 * returns the sub-block scale (>= 0). */
static float iq3_quantize_sub(const float *x, const float *qw, float sigma2,
                              uint8_t *gidx, uint32_t *signs)
{
    float w[32], u[32], t[32];
    int8_t L[32] = {0}, Lc[32];
    uint8_t sg[4];

    for (int i = 0; i < 32; i++) {
        w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : x[i] * x[i];
        u[i] = sqrtf(w[i]);
    }
    /* signs per 8-group; an odd count of negatives flips the least
     * important element, which is then reconstructed with the wrong sign,
     * so its target becomes -|x| */
    for (int k = 0; k < 4; k++) {
        int nneg = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            const float v = x[8 * k + i];
            t[8 * k + i] = v >= 0 ? v : -v;
            if (v < 0) {
                nneg++;
                s |= (uint8_t)(1 << i);
            }
        }
        if (nneg % 2) {
            int imin = 0;
            float min = w[8 * k] * x[8 * k] * x[8 * k];
            for (int i = 1; i < 8; i++) {
                const float a = w[8 * k + i] * x[8 * k + i] * x[8 * k + i];
                if (a < min) {
                    min = a;
                    imin = i;
                }
            }
            t[8 * k + imin] = -t[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        sg[k] = s & 127;
    }
    float m = t[0];
    for (int i = 1; i < 32; i++)
        m = t[i] > m ? t[i] : m;
    if (m < 1e-8f) {
        memset(gidx, 0, 8);
        *signs = 0;
        return 0;
    }

    /* scale search: 31 inverse scales around 15/m */
    float best = 0, scale = m / 15;
    int on_grid[8], on_grid_c[8];
    for (int k = 0; k < 8; k++)
        on_grid[k] = 1;
    for (int is = -15; is <= 15; is++) {
        const float id = (15 + is * 0.2f) / m;
        const float s = 1 / id;
        for (int k = 0; k < 8; k++)
            on_grid_c[k] = iq3_quantize_group(t + 4 * k, u + 4 * k, id, s, Lc + 4 * k);
        float A, B;
        iq3_sums(w, t, Lc, &A, &B);
        if (B > 0 && A * A > best * B) {
            scale = A / B;
            best = scale * A;
            memcpy(L, Lc, sizeof L);
            memcpy(on_grid, on_grid_c, sizeof on_grid);
        }
    }
    /* refinement: re-snap the off-grid groups at the final scale */
    int n_off = 0;
    for (int k = 0; k < 8; k++)
        n_off += !on_grid[k];
    if (n_off > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 8; k++)
            if (!on_grid[k])
                iq3_quantize_group(t + 4 * k, u + 4 * k, id, scale, L + 4 * k);
        float A, B;
        iq3_sums(w, t, L, &A, &B);
        if (B > 0)
            scale = A / B;
    }
    if (scale < 0) { /* scales are stored unsigned: flip every sign instead */
        scale = -scale;
        for (int k = 0; k < 4; k++)
            sg[k] = (uint8_t)(~sg[k] & 127);
    }
    for (int k = 0; k < 8; k++) {
        const int code = L[4 * k] | L[4 * k + 1] << 3 | L[4 * k + 2] << 6 |
                         L[4 * k + 3] << 9;
        /* every L here came from the grid or a neighbour: always >= 0 */
        gidx[k] = (uint8_t)(iq3.map[code] >= 0 ? iq3.map[code] : 0);
    }
    *signs = (uint32_t)sg[0] | (uint32_t)sg[1] << 7 | (uint32_t)sg[2] << 14 |
             (uint32_t)sg[3] << 21;
    return scale;
}

static void iq3_quantize_block(const float *x, const float *qw, block_iq3_xxs *b)
{
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++)
        sumx2 += x[i] * x[i];
    const float sigma2 = 2 * sumx2 / QK_K;

    float scales[8], max_scale = 0;
    uint32_t signs[8];
    uint8_t *gidx = b->qs;
    for (int ib = 0; ib < 8; ib++) {
        scales[ib] = iq3_quantize_sub(x + 32 * ib, qw ? qw + 32 * ib : NULL,
                                      sigma2, gidx + 8 * ib, &signs[ib]);
        max_scale = scales[ib] > max_scale ? scales[ib] : max_scale;
    }
    if (max_scale == 0) {
        memset(b, 0, sizeof *b);
        return;
    }
    const float d = max_scale / 31;
    b->d = f32_to_fp16(d * 1.0125f); /* ggml's deliberate fudge factor */
    const float id = 1 / d;
    uint8_t *ss = b->qs + QK_K / 4;
    for (int ib = 0; ib < 8; ib++) {
        int ls = quant_nearest_int(0.5f * (id * scales[ib] - 1));
        ls = ls < 0 ? 0 : ls > 15 ? 15 : ls;
        const uint32_t v = signs[ib] | (uint32_t)ls << 28;
        for (int k = 0; k < 4; k++)
            ss[4 * ib + k] = (uint8_t)(v >> (8 * k));
    }
}

void quant_row_iq3_xxs(const float *src, void *dst, int64_t n, const float *imatrix)
{
    pthread_once(&iq3_once, iq3_init);
    block_iq3_xxs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        if (!iq3.ok) { /* unreachable with the fixed tables; never crash */
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        iq3_quantize_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, &b[i]);
    }
}
