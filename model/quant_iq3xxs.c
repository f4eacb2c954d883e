/* quant_iq3xxs.c: IQ3_XXS decode and ggml's quantizer (doc/formats.md §2.7, §3.4).
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
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_grid.h"

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

/* The search below is the hot loop of `strata-cli quantize` (an 8B model is
 * ~8e9 weights through it), so it is laid out for speed while computing
 * every float exactly as ggml's scalar code does: the bytes must not change.
 *
 *  - Each off-grid code's neighbour list is stored in chunks of four grid
 *    points, structure-of-arrays: q[i] holds element i of the four points
 *    as floats.  One chunk is then scored with 4-wide vector arithmetic
 *    (GCC vector extensions: SSE on x86-64, NEON on arm64, plain scalar
 *    code elsewhere).  Each lane performs the same float operations, in the
 *    same order, as ggml's per-point loop, and -std=c11 keeps gcc from
 *    fusing them into FMAs, so the distances are bit-identical; the winner
 *    is then picked lane by lane, in list order, with the same strict `<`.
 *  - The 4-element rounding of a group is one vector expression too.
 *  - Setup finds each list in two linear passes over the grid instead of a
 *    qsort of 256 points per code (the qsort was ~0.1 s per process). */

typedef float iq3_v4f __attribute__((vector_size(16)));
typedef int32_t iq3_v4i __attribute__((vector_size(16)));

typedef struct {
    iq3_v4f q[4];   /* q[i][lane]: element i (odd units) of neighbour `lane` */
} iq3_chunk;

/* Chunks needed for this grid: sum over the 3840 off-grid codes of
 * ceil(count / 4); measured 6446, the cap leaves room and is checked. */
#define IQ3_CHUNK_CAP 8192

static struct {
    uint8_t odd[256][4];       /* grid point j in odd units (1,3,..,15) */
    iq3_v4f qg[256];           /* grid point j in odd units, as floats */
    int32_t map[4096];         /* 12-bit level code -> grid index, or
                                  -(first chunk) - 1 when off-grid */
    uint8_t count[4096];       /* off-grid code: number of neighbours */
    iq3_chunk chunk[IQ3_CHUNK_CAP];
    uint8_t chunk_idx[IQ3_CHUNK_CAP][4]; /* grid index of each lane */
    int ok;
} iq3;

static pthread_once_t iq3_once = PTHREAD_ONCE_INIT;

/* magnitude byte -> level: 4,12,..,52 are 4(2L+1); 62 stands for L = 7 */
static int iq3_level_of(uint32_t mag)
{
    return mag == 62 ? 7 : (int)(mag / 4 - 1) / 2;
}

static void iq3_init(void)
{
    for (int u = 0; u < 4096; u++)
        iq3.map[u] = -1;
    for (int j = 0; j < 256; j++) {
        int u = 0;
        for (int k = 0; k < 4; k++) {
            const int L = iq3_level_of((iq3xxs_grid[j] >> (8 * k)) & 0xff);
            iq3.odd[j][k] = (uint8_t)(2 * L + 1);
            iq3.qg[j][k] = (float)(2 * L + 1);
            u |= L << (3 * k);
        }
        iq3.map[u] = j;
    }
    int used = 0;
    for (int u = 0; u < 4096; u++) {
        if (iq3.map[u] >= 0)
            continue;
        /* ggml sorts the grid by (distance, index) and keeps every point at
         * one of the two smallest distinct distances: that is all points at
         * the smallest distance in index order, then all at the second */
        int dist[256], d1 = INT32_MAX, d2 = INT32_MAX;
        for (int j = 0; j < 256; j++) {
            int s = 0;
            for (int k = 0; k < 4; k++) {
                const int diff = iq3.odd[j][k] - (2 * ((u >> (3 * k)) & 7) + 1);
                s += diff * diff;
            }
            dist[j] = s;
            if (s < d1) {
                d2 = d1;
                d1 = s;
            } else if (s > d1 && s < d2) {
                d2 = s;
            }
        }
        int list[256], count = 0;
        for (int j = 0; j < 256; j++)
            if (dist[j] == d1)
                list[count++] = j;
        for (int j = 0; j < 256; j++)
            if (dist[j] == d2)
                list[count++] = j;
        const int nchunk = (count + 3) / 4;
        if (count > 255 || used + nchunk > IQ3_CHUNK_CAP)
            return; /* iq3.ok stays 0; cannot happen with the fixed grid */
        iq3.map[u] = -used - 1;
        iq3.count[u] = (uint8_t)count;
        for (int n = 0; n < 4 * nchunk; n++) {
            /* padding lanes repeat the last point: never read (the pick
             * stops at count), but keeps their arithmetic finite */
            const int j = list[n < count ? n : count - 1];
            iq3_chunk *c = &iq3.chunk[used + n / 4];
            for (int i = 0; i < 4; i++)
                c->q[i][n % 4] = (float)iq3.odd[j][i];
            iq3.chunk_idx[used + n / 4][n % 4] = (uint8_t)j;
        }
        used += nchunk;
    }
    iq3.ok = 1;
}

/* ---- quantizer ------------------------------------------------------------ */

/* One 32-element sub-block's per-element data, prepared once for the 31
 * candidate scales: tv/wv/wtv four elements per group, tb/ub broadcast per
 * element for the neighbour search (tb[i] = {t_i,t_i,t_i,t_i}). */
typedef struct {
    iq3_v4f tv[8], wv[8], wtv[8];
    iq3_v4f tb[32], ub[32];
} iq3_sub_data;

/* Among the neighbours of an off-grid code, the grid point minimising
 * sum u_i (s*q_i - t_i)^2, first minimum in list order (ggml's strict `<`
 * scan starting from FLT_MAX); returns its grid index.
 *
 * Lane arithmetic equals ggml's scalar loop (d2 = 0; d2 += u_i*diff*diff
 * for i = 0..3, diff = s*q_i - t_i).  The scan is split by lane: each lane
 * keeps its own strict-< minimum over the chunks (so its earliest one), and
 * the lanes are merged by (value, list position).  That is the same winner
 * as one scan in list order: it is the earliest entry holding the smallest
 * value below FLT_MAX; NaN and values >= FLT_MAX never win in either, and
 * with none below FLT_MAX both return the first neighbour.  Padding lanes
 * repeat the last real point, so their value is never strictly better
 * than an earlier-positioned equal one. */
static int iq3_best_neighbour(int code, const iq3_v4f *tb, const iq3_v4f *ub,
                              float s)
{
    const int first = -iq3.map[code] - 1;
    const int nchunk = (iq3.count[code] + 3) / 4;
    const iq3_v4f sv = {s, s, s, s};
    iq3_v4f bestv = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
    iq3_v4i bestc = {0, 0, 0, 0};
    for (int c = 0; c < nchunk; c++) {
        const iq3_chunk *ch = &iq3.chunk[first + c];
        /* written out: gcc -O2 keeps a 4-trip loop, and its branch */
        iq3_v4f d2 = {0, 0, 0, 0}, diff;
        diff = sv * ch->q[0] - tb[0];
        d2 += ub[0] * diff * diff;
        diff = sv * ch->q[1] - tb[1];
        d2 += ub[1] * diff * diff;
        diff = sv * ch->q[2] - tb[2];
        d2 += ub[2] * diff * diff;
        diff = sv * ch->q[3] - tb[3];
        d2 += ub[3] * diff * diff;
        const iq3_v4i lt = d2 < bestv; /* all ones where strictly better */
        iq3_v4i bv, dv;
        memcpy(&bv, &bestv, sizeof bv);
        memcpy(&dv, &d2, sizeof dv);
        bv = (dv & lt) | (bv & ~lt);
        memcpy(&bestv, &bv, sizeof bestv);
        bestc = ((iq3_v4i){c, c, c, c} & lt) | (bestc & ~lt);
    }
    /* Merge the lanes without branches: a lane's best is in [+0, FLT_MAX]
     * (it only takes values that compared < FLT_MAX, so never NaN; and d2
     * starts at +0 and adds u*diff^2 with u = sqrt(w), never below -0, so
     * never negative or -0), hence its bits order like the value; key =
     * bits:position, the smallest wins.
     * Lanes never updated hold FLT_MAX at position = lane, so with no value
     * below FLT_MAX lane 0, the first neighbour, wins, as in ggml. */
    uint64_t key[4];
    for (int l = 0; l < 4; l++) {
        uint32_t bits;
        const float v = bestv[l];
        memcpy(&bits, &v, sizeof bits);
        key[l] = (uint64_t)bits << 32 | (uint32_t)(4 * bestc[l] + l);
    }
    const uint64_t k01 = key[1] < key[0] ? key[1] : key[0];
    const uint64_t k23 = key[3] < key[2] ? key[3] : key[2];
    const uint32_t pos = (uint32_t)(k23 < k01 ? k23 : k01);
    return iq3.chunk_idx[first + (int)(pos / 4)][pos % 4];
}

/* Grid index of one 4-group at inverse scale id (snapping to a neighbour
 * with scale s when off-grid); *on_grid says whether the rounded code was
 * on the grid.  The rounding is ggml's nearest_int(0.5*(id*t - 1)) per
 * lane, clamped to 0..7. */
static int iq3_quantize_group(const iq3_sub_data *sd, int k, float id,
                              float s, int *on_grid)
{
    const iq3_v4f idv = {id, id, id, id}, one = {1, 1, 1, 1},
                  half = {0.5f, 0.5f, 0.5f, 0.5f},
                  magic = {12582912.f, 12582912.f, 12582912.f, 12582912.f};
    const iq3_v4f r = half * (idv * sd->tv[k] - one) + magic;
    iq3_v4i l;
    memcpy(&l, &r, sizeof l);
    l = (l & 0x007fffff) - 0x00400000;
    l &= l > 0;                                       /* max(l, 0) */
    const iq3_v4i hi = l > 7;
    l = (l & ~hi) | ((iq3_v4i){7, 7, 7, 7} & hi);     /* min(l, 7) */
    const int code = l[0] | l[1] << 3 | l[2] << 6 | l[3] << 9;
    const int j = iq3.map[code];
    *on_grid = j >= 0;
    return j >= 0 ? j : iq3_best_neighbour(code, sd->tb + 4 * k, sd->ub + 4 * k, s);
}

/* A = sum w t q, B = sum w q^2 over the sub-block, q = 2L+1 of grid points
 * j[0..7].  ggml accumulates element by element in one float each; the
 * products are independent (done four at a time, with ggml's grouping
 * (w*t)*q and (w*q)*q), the additions stay in ggml's order. */
static void iq3_sums(const iq3_sub_data *sd, const int *j, float *A, float *B)
{
    float pa[32], pb[32];
    for (int k = 0; k < 8; k++) {
        const iq3_v4f q = iq3.qg[j[k]];
        const iq3_v4f va = sd->wtv[k] * q, vb = sd->wv[k] * q * q;
        memcpy(pa + 4 * k, &va, sizeof va);
        memcpy(pb + 4 * k, &vb, sizeof vb);
    }
    float a = 0, b = 0;
    for (int i = 0; i < 32; i++) {
        a += pa[i];
        b += pb[i];
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
    uint8_t sg[4];

    for (int i = 0; i < 32; i++) {
        w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : x[i] * x[i];
        u[i] = sqrtf(w[i]);
    }
    /* signs per 8-group; an odd count of negatives flips the least
     * important element, which is then reconstructed with the wrong sign,
     * so its target becomes -|x| */
    qgrid_signs(32, x, w, 1, t, sg);
    float m = t[0];
    for (int i = 1; i < 32; i++)
        m = t[i] > m ? t[i] : m;
    if (m < 1e-8f) {
        memset(gidx, 0, 8);
        *signs = 0;
        return 0;
    }
    iq3_sub_data sd;
    for (int i = 0; i < 32; i++) {
        sd.tv[i / 4][i % 4] = t[i];
        sd.wv[i / 4][i % 4] = w[i];
        sd.wtv[i / 4][i % 4] = w[i] * t[i];
        sd.tb[i] = (iq3_v4f){t[i], t[i], t[i], t[i]};
        sd.ub[i] = (iq3_v4f){u[i], u[i], u[i], u[i]};
    }

    /* scale search: 31 inverse scales around 15/m.  Before any candidate
     * is accepted the levels are all 0 (grid point of code 0: index 0,
     * ggml's L = 0 start) and every group counts as on the grid. */
    float best = 0, scale = m / 15;
    int J[8] = {0}, Jc[8], on_grid[8], on_grid_c[8];
    for (int k = 0; k < 8; k++)
        on_grid[k] = 1;
    for (int is = -15; is <= 15; is++) {
        const float id = (15 + is * 0.2f) / m;
        const float s = 1 / id;
        for (int k = 0; k < 8; k++)
            Jc[k] = iq3_quantize_group(&sd, k, id, s, &on_grid_c[k]);
        float A, B;
        iq3_sums(&sd, Jc, &A, &B);
        if (B > 0 && A * A > best * B) {
            scale = A / B;
            best = scale * A;
            memcpy(J, Jc, sizeof J);
            memcpy(on_grid, on_grid_c, sizeof on_grid);
        }
    }
    /* refinement: re-snap the off-grid groups at the final scale */
    int n_off = 0;
    for (int k = 0; k < 8; k++)
        n_off += !on_grid[k];
    if (n_off > 0 && scale > 0) {
        const float id = 1 / scale;
        int dummy;
        for (int k = 0; k < 8; k++)
            if (!on_grid[k])
                J[k] = iq3_quantize_group(&sd, k, id, scale, &dummy);
        float A, B;
        iq3_sums(&sd, J, &A, &B);
        if (B > 0)
            scale = A / B;
    }
    if (scale < 0) { /* scales are stored unsigned: flip every sign instead */
        scale = -scale;
        for (int k = 0; k < 4; k++)
            sg[k] = (uint8_t)(~sg[k] & 127);
    }
    for (int k = 0; k < 8; k++)
        gidx[k] = (uint8_t)J[k];
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
