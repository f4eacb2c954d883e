/* test_quantize_types.c: suite "quantize_types" -- the K- and IQ-type
 * quantizers (model/quantize_*.c): ggml's bytes for every quant vector of
 * test/data/quant_vectors.txt, with and without an importance matrix, and
 * the round trip quantize -> decode on random rows. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "model/quantize_types.h"
#include "model/make/quantize.h"


/* ---- the vectors ---------------------------------------------------------- */

typedef struct qv_case {
    char type[16];
    int n;
    float *in, *imatrix;
    uint8_t *bytes;
    size_t nbytes;
} qv_case;

static float *read_floats(const char *s, int n)
{
    float *v = malloc((size_t)n * sizeof *v);
    char *end;
    for (int i = 0; i < n; i++) {
        v[i] = strtof(s, &end);
        ck_assert_msg(end != s, "short float line");
        s = end;
    }
    return v;
}

static uint8_t *read_hex(const char *s, size_t *len)
{
    const size_t n = strcspn(s, "\r\n") / 2;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

static int qv_load(qv_case *c, int max)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test/data/quant_vectors.txt", test_root());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char line[1 << 16];
    int nc = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case quant ", 11)) {
            ck_assert(++nc < max);
            memset(&c[nc], 0, sizeof c[nc]);
            ck_assert(sscanf(line, "case quant %15s %d", c[nc].type, &c[nc].n) == 2);
        } else if (nc >= 0 && !strncmp(line, "in ", 3)) {
            c[nc].in = read_floats(line + 3, c[nc].n);
        } else if (nc >= 0 && !strncmp(line, "imatrix ", 8)) {
            c[nc].imatrix = read_floats(line + 8, c[nc].n);
        } else if (nc >= 0 && !strncmp(line, "bytes ", 6)) {
            c[nc].bytes = read_hex(line + 6, &c[nc].nbytes);
        }
    }
    fclose(f);
    return nc + 1;
}

static void qv_free(qv_case *c)
{
    free(c->in);
    free(c->imatrix);
    free(c->bytes);
}

static void expect_bytes(const uint8_t *got, const uint8_t *want, size_t n,
                         const char *what)
{
    for (size_t j = 0; j < n; j++)
        ck_assert_msg(got[j] == want[j], "%s: byte %zu is %02x, want %02x", what, j,
                      got[j], want[j]);
}

/* ggml's IQ3_S bytes with the misplacement undone: in a super-block whose
 * sub-block z is all zero, ggml writes sub-blocks z+1..7's 8 index bytes
 * and 4 sign bytes into slots z..6 and leaves slot 7 zero; the correct
 * block has slot z zero and each later sub-block in its own slot.  qh, the
 * scales and d are placed by sub-block in both. */
static void iq3_s_unshift(uint8_t *b, const float *x)
{
    for (int z = 7; z >= 0; z--) {
        int empty = 1;
        for (int i = 0; i < 32; i++)
            empty &= x[32 * z + i] == 0;
        if (!empty)
            continue;
        memmove(b + 2 + 8 * (z + 1), b + 2 + 8 * z, (size_t)8 * (7 - z));
        memset(b + 2 + 8 * z, 0, 8);
        memmove(b + 74 + 4 * (z + 1), b + 74 + 4 * z, (size_t)4 * (7 - z));
        memset(b + 74 + 4 * z, 0, 4);
    }
}

START_TEST(vectors_bit_exact)
{
    static qv_case cases[32];
    const int n = qv_load(cases, 32);
    ck_assert_int_eq(n, 16);
    int with_imatrix = 0, iq3_s_fixed = 0;
    for (int i = 0; i < n; i++) {
        qv_case *c = &cases[i];
        const type_traits *t = type_traits_by_name(c->type);
        ck_assert_msg(t && t->quant, "case %d: no quantizer for %s", i, c->type);
        ck_assert_uint_eq(type_row_bytes(t->id, c->n), c->nbytes);
        uint8_t *b = malloc(c->nbytes);
        char what[64];
        snprintf(what, sizeof what, "case %d quant %s %d%s", i, t->name, c->n,
                 c->imatrix ? " (imatrix)" : "");
        t->quant(c->in, b, c->n, c->imatrix);
        if (t->id == 21) {
            /* IQ3_S: ggml's layout reproduced by the _ggml variant, and the
             * traits' quantizer gives the same block with the misplaced
             * bytes back in their slots (equal where nothing is empty) */
            uint8_t *g = malloc(c->nbytes);
            quant_row_iq3_s_ggml(c->in, g, c->n, c->imatrix);
            expect_bytes(g, c->bytes, c->nbytes, what);
            uint8_t *want = malloc(c->nbytes);
            memcpy(want, c->bytes, c->nbytes);
            for (int k = 0; k < c->n / 256; k++)
                iq3_s_unshift(want + 110 * k, c->in + 256 * k);
            iq3_s_fixed += memcmp(want, c->bytes, c->nbytes) != 0;
            expect_bytes(b, want, c->nbytes, what);
            free(g);
            free(want);
        } else {
            expect_bytes(b, c->bytes, c->nbytes, what);
        }
        with_imatrix += c->imatrix != NULL;
        free(b);
        qv_free(c);
    }
    ck_assert_int_eq(with_imatrix, 10);
    ck_assert_int_eq(iq3_s_fixed, 1); /* the 512 case has the empty sub-block */
}
END_TEST

/* ---- decoders for the round trip -------------------------------------------
 *
 * DEPENDS ON THE DECODERS: the round trip decodes through the traits
 * table's dequant function when the table has one.  Q4_K and Q6_K have one
 * today; for the other eight types this file carries small reference
 * decoders written from the layouts in doc/quant.md, used only while the
 * table's entry is NULL.  Once the table decodes every type they are dead
 * code (test_decoder_is_the_tables reports which one ran) and can go. */

static const uint64_t tq_grid_iq2xxs[256] = {
#include "model/iq2xxs_grid.inc"
};
static const uint64_t tq_grid_iq2xs[512] = {
#include "model/iq2xs_grid.inc"
};
static const uint64_t tq_grid_iq2s[1024] = {
#include "model/iq2s_grid.inc"
};
static const uint32_t tq_grid_iq3s[512] = {
#include "model/iq3s_grid.inc"
};
static const int8_t tq_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

static float h2f(const uint8_t *p)
{
    return fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void ref_q2_k(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 84, y += 256) {
        const float d = h2f(b + 80), m = h2f(b + 82);
        for (int e = 0; e < 256; e++) {
            const int c = (b[16 + 32 * (e / 128) + e % 32] >> 2 * ((e % 128) / 32)) & 3;
            const int s = e / 16;
            y[e] = d * (b[s] & 15) * c - m * (b[s] >> 4);
        }
    }
}

static void ref_q3_k(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 110, y += 256) {
        const float d = h2f(b + 108);
        for (int e = 0; e < 256; e++) {
            const int s = e / 16;
            const int lo = s < 8 ? b[96 + s] & 15 : b[96 + s - 8] >> 4;
            const int hi = (b[96 + 8 + s % 4] >> 2 * (s / 4)) & 3;
            const int lo2 = (b[32 + 32 * (e / 128) + e % 32] >> 2 * ((e % 128) / 32)) & 3;
            const int hb = (b[e % 32] >> (e / 32)) & 1;
            y[e] = d * (lo + 16 * hi - 32) * (lo2 + 4 * hb - 4);
        }
    }
}

static void ref_q5_k(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 176, y += 256) {
        const float d = h2f(b), m = h2f(b + 2);
        const uint8_t *q = b + 4;
        for (int e = 0; e < 256; e++) {
            const int s = e / 32, p = e / 64, l = e % 32;
            int sc, mn;
            if (s < 4) {
                sc = q[s] & 63;
                mn = q[s + 4] & 63;
            } else {
                sc = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
                mn = (q[s + 4] >> 4) | (q[s] >> 6) << 4;
            }
            const int nib = s % 2 ? b[48 + 32 * p + l] >> 4 : b[48 + 32 * p + l] & 15;
            const int c = nib + 16 * ((b[16 + l] >> s) & 1);
            y[e] = d * sc * c - m * mn;
        }
    }
}

/* magnitude of element k of an IQ2 grid point */
static int g8(uint64_t g, int k)
{
    return (int)((g >> 8 * k) & 0xff);
}

static void ref_iq2_xxs(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 66, y += 256) {
        const float d = h2f(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *r = b + 2 + 8 * ib;
            const uint32_t w = (uint32_t)r[4] | (uint32_t)r[5] << 8 | (uint32_t)r[6] << 16 |
                               (uint32_t)r[7] << 24;
            const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint8_t sg = iq3xxs_signs[(w >> 7 * l) & 127];
                for (int k = 0; k < 8; k++)
                    y[32 * ib + 8 * l + k] =
                        db * g8(tq_grid_iq2xxs[r[l]], k) * ((sg >> k) & 1 ? -1.f : 1.f);
            }
        }
    }
}

static void ref_iq2_xs(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 74, y += 256) {
        const float d = h2f(b);
        for (int g = 0; g < 32; g++) {
            const int v = b[2 + 2 * g] | b[3 + 2 * g] << 8;
            const uint8_t sg = iq3xxs_signs[v >> 9];
            const int ls = (b[66 + g / 4] >> 4 * ((g % 4) / 2)) & 15;
            const float db = d * (0.5f + ls) * 0.25f;
            for (int k = 0; k < 8; k++)
                y[8 * g + k] = db * g8(tq_grid_iq2xs[v & 511], k) * ((sg >> k) & 1 ? -1.f : 1.f);
        }
    }
}

static void ref_iq2_s(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 82, y += 256) {
        const float d = h2f(b);
        for (int g = 0; g < 32; g++) {
            const int idx = b[2 + g] | ((b[66 + g / 4] >> 2 * (g % 4)) & 3) << 8;
            const int ls = (b[74 + g / 4] >> 4 * ((g % 4) / 2)) & 15;
            const float db = d * (0.5f + ls) * 0.25f;
            for (int k = 0; k < 8; k++)
                y[8 * g + k] = db * g8(tq_grid_iq2s[idx], k) * ((b[34 + g] >> k) & 1 ? -1.f : 1.f);
        }
    }
}

static void ref_iq3_s(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 110, y += 256) {
        const float d = h2f(b);
        for (int G = 0; G < 64; G++) {
            const int ib = G / 8;
            const int ls = (b[106 + ib / 2] >> 4 * (ib % 2)) & 15;
            const float db = d * (float)(1 + 2 * ls);
            const int idx = b[2 + G] | ((b[66 + ib] >> (G % 8)) & 1) << 8;
            for (int i = 0; i < 4; i++) {
                const int e = 4 * G + i;
                const int mag = (int)((tq_grid_iq3s[idx] >> 8 * i) & 0xff);
                y[e] = db * mag * ((b[74 + e / 8] >> (e % 8)) & 1 ? -1.f : 1.f);
            }
        }
    }
}

static void ref_iq4_xs(const void *src, float *y, int64_t n)
{
    for (const uint8_t *b = src; n > 0; n -= 256, b += 136, y += 256) {
        const float d = h2f(b);
        const int sh = b[2] | b[3] << 8;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 15) | ((sh >> 2 * ib) & 3) << 4;
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * tq_iq4nl[b[8 + 16 * ib + j] & 15];
                y[32 * ib + 16 + j] = dl * tq_iq4nl[b[8 + 16 * ib + j] >> 4];
            }
        }
    }
}

static const int round_trip_types[] = {10, 11, 12, 13, 14, 16, 17, 22, 21, 23};

/* The table's decoder, or the local one while the table has none. */
static dequant_row_fn decoder(int id, int *local)
{
    const type_traits *t = type_traits_get(id);
    *local = 0;
    if (t && t->dequant)
        return t->dequant;
    *local = 1;
    switch (id) {
    case 10: return ref_q2_k;
    case 11: return ref_q3_k;
    case 13: return ref_q5_k;
    case 16: return ref_iq2_xxs;
    case 17: return ref_iq2_xs;
    case 21: return ref_iq3_s;
    case 22: return ref_iq2_s;
    case 23: return ref_iq4_xs;
    default: return NULL;
    }
}

/* ||decode(quant(x)) - x|| / ||x|| over n elements (optionally only
 * elements [from, to)). */
static double rt_rel(quant_row_fn q, int id, const float *x, int64_t n, const float *im,
                     int64_t from, int64_t to)
{
    int local;
    const dequant_row_fn dq = decoder(id, &local);
    ck_assert_ptr_nonnull(dq);
    uint8_t *b = malloc(type_row_bytes(id, n));
    float *y = malloc((size_t)n * sizeof *y);
    q(x, b, n, im);
    dq(b, y, n);
    double se = 0, sx = 0;
    for (int64_t i = from; i < to; i++) {
        ck_assert_msg(isfinite(y[i]), "%s: element %lld decodes to %g", type_name(id),
                      (long long)i, y[i]);
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    free(b);
    free(y);
    return sqrt(se / sx);
}

START_TEST(test_decoder_is_the_tables)
{
    /* not a check of the quantizers: lists which decoders the round trips
     * below borrow from this file (they must match the table's once it has
     * them, which the lead's merge runs through the same tests) */
    for (size_t i = 0; i < sizeof round_trip_types / sizeof round_trip_types[0]; i++) {
        int local;
        ck_assert_ptr_nonnull(decoder(round_trip_types[i], &local));
        printf("quantize_types: %-7s decoded by %s\n", type_name(round_trip_types[i]),
               local ? "the test-local reference" : "the traits table");
    }
}
END_TEST

/* Bounds on N(0,1) rows (64 blocks), without and with an importance
 * matrix (random, 0.1..1.1; the error below is the plain one, which the
 * weighted search does not minimise), measured and given ~15 % margin; the
 * figures are in doc/quant.md ("Quantizers"). */
static const struct { int id; double plain, imat; } rt_bounds[] = {
    {10, 0.35, 0.32}, /* Q2_K: measured 0.3005, 0.2763 */
    {11, 0.175, 0.17}, /* Q3_K: measured 0.1520, 0.1473 */
    {12, 0.083, 0.083}, /* Q4_K: measured 0.0718, 0.0721 */
    {13, 0.042, 0.042}, /* Q5_K: measured 0.0364, 0.0360 */
    {14, 0.021, 0.021}, /* Q6_K: measured 0.0179, 0.0177 */
    {16, 0.4, 0.41}, /* IQ2_XXS: measured 0.3452, 0.3534 */
    {17, 0.345, 0.355}, /* IQ2_XS: measured 0.2996, 0.3094 */
    {22, 0.305, 0.295}, /* IQ2_S: measured 0.2656, 0.2561 */
    {21, 0.19, 0.162}, /* IQ3_S: measured 0.1640, 0.1408 */
    {23, 0.089, 0.088}, /* IQ4_XS: measured 0.0770, 0.0765 */
};

START_TEST(round_trip_error_on_gaussian_rows)
{
    const int64_t n = 256 * 64;
    float *x = malloc(n * sizeof *x), *im = malloc(n * sizeof *im);
    test_fill_normal(x, n, 1.0f, 7);
    uint64_t st = 99;
    for (int64_t i = 0; i < n; i++) /* importances in [0.1, 1.1) */
        im[i] = 0.1f + (float)(test_rand_u64(&st) >> 40) / (float)(1 << 24);
    for (size_t i = 0; i < sizeof rt_bounds / sizeof rt_bounds[0]; i++) {
        const type_traits *t = type_traits_get(rt_bounds[i].id);
        const double a = rt_rel(t->quant, t->id, x, n, NULL, 0, n);
        const double b = rt_rel(t->quant, t->id, x, n, im, 0, n);
        printf("quantize_types: gaussian rmse/||x|| %-7s %.4f, with imatrix %.4f "
               "(bounds %.3f, %.3f)\n", t->name, a, b, rt_bounds[i].plain, rt_bounds[i].imat);
        ck_assert_msg(a > 0 && a < rt_bounds[i].plain, "%s: %.4f", t->name, a);
        ck_assert_msg(b > 0 && b < rt_bounds[i].imat, "%s imatrix: %.4f", t->name, b);
    }
    free(x);
    free(im);
}
END_TEST

/* Importance weights steer the error: measured with the importances
 * themselves as the error's weights, every quantizer does better when it is
 * given them than when it is not. */
START_TEST(imatrix_lowers_the_weighted_error)
{
    const int64_t n = 256 * 32;
    float *x = malloc(n * sizeof *x), *im = malloc(n * sizeof *im), *y = malloc(n * sizeof *y);
    uint8_t *b = malloc(type_row_bytes(21, n) * 2);
    test_fill_normal(x, n, 1.0f, 21);
    uint64_t st = 5;
    for (int64_t i = 0; i < n; i++) /* strongly uneven: 0.01 .. 1 */
        im[i] = (test_rand_u64(&st) >> 63) ? 1.0f : 0.01f;
    for (size_t k = 0; k < sizeof round_trip_types / sizeof round_trip_types[0]; k++) {
        const type_traits *t = type_traits_get(round_trip_types[k]);
        int local;
        const dequant_row_fn dq = decoder(t->id, &local);
        double e[2];
        for (int with = 0; with < 2; with++) {
            t->quant(x, b, n, with ? im : NULL);
            dq(b, y, n);
            double se = 0;
            for (int64_t i = 0; i < n; i++)
                se += im[i] * ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            e[with] = se;
        }
        printf("quantize_types: importance-weighted error %-7s %.1f without, %.1f with "
               "the imatrix\n", t->name, e[0], e[1]);
        ck_assert_msg(e[1] < 0.95 * e[0], "%s: %.1f with vs %.1f without", t->name, e[1], e[0]);
    }
    free(x);
    free(im);
    free(y);
    free(b);
}
END_TEST

/* IQ3_S: after an all-zero sub-block, ggml's layout decodes the later
 * sub-blocks from the wrong slots; strata's block decodes them as well as
 * any other. */
START_TEST(iq3_s_zero_sub_block_stays_in_place)
{
    float x[256];
    test_fill_normal(x, 256, 1.0f, 33);
    memset(x + 64, 0, 32 * sizeof x[0]); /* sub-block 2 */
    const double fixed = rt_rel(quant_row_iq3_s, 21, x, 256, NULL, 96, 256);
    const double ggml = rt_rel(quant_row_iq3_s_ggml, 21, x, 256, NULL, 96, 256);
    const double before = rt_rel(quant_row_iq3_s, 21, x, 256, NULL, 0, 64);
    printf("quantize_types: IQ3_S after a zero sub-block: rmse/||x|| %.3f (ggml's layout "
           "%.3f), before it %.3f\n", fixed, ggml, before);
    ck_assert(fixed < 0.25);
    ck_assert(ggml > 0.8);
    ck_assert(before < 0.25);
}
END_TEST

/* Edge rows: all zero (every type decodes exact zeros: d = 0), tiny, and
 * one block quantized alone equals the same block inside a longer row. */
START_TEST(edge_rows_and_block_independence)
{
    const int64_t n = 768;
    float *x = calloc(n, sizeof *x), *y = malloc(n * sizeof *y), *im = malloc(n * sizeof *im);
    uint8_t *b = malloc(4096), *c = malloc(4096);
    for (int64_t i = 0; i < n; i++)
        im[i] = 0.5f + (float)(i % 7) / 7;
    for (size_t k = 0; k < sizeof round_trip_types / sizeof round_trip_types[0]; k++) {
        const type_traits *t = type_traits_get(round_trip_types[k]);
        int local;
        const dequant_row_fn dq = decoder(t->id, &local);
        const size_t bb = (size_t)t->bytes;
        for (int with = 0; with < 2; with++) {
            memset(x, 0, n * sizeof *x);
            t->quant(x, b, n, with ? im : NULL);
            dq(b, y, n);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(y[i] == 0, "%s: zero row decodes to %g at %lld", t->name, y[i],
                              (long long)i);
            /* block 0 Gaussian, block 1 tiny (1e-6: fp16 subnormal scales),
             * block 2 Gaussian with one zero sub-block */
            test_fill_normal(x, n, 1.0f, 40 + k);
            for (int64_t i = 256; i < 512; i++)
                x[i] *= 1e-6f;
            memset(x + 512 + 96, 0, 32 * sizeof *x);
            t->quant(x, b, n, with ? im : NULL);
            dq(b, y, n);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(isfinite(y[i]), "%s: non-finite at %lld", t->name, (long long)i);
            for (int blk = 0; blk < 3; blk++) {
                t->quant(x + 256 * blk, c, 256, with ? im + 256 * blk : NULL);
                ck_assert_msg(!memcmp(c, b + bb * blk, bb), "%s: block %d differs alone",
                              t->name, blk);
            }
        }
    }
    free(x);
    free(y);
    free(im);
    free(b);
    free(c);
}
END_TEST

/* ---- against the Python gguf package ---------------------------------------- */

static void write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Blocks from every quantizer, decoded by gguf.quants.dequantize, must equal
 * the decoder the round trips use, bit for bit: this pins the test-local
 * decoders (and the blocks' layout) to an implementation not written here. */
START_TEST(blocks_decode_as_python_gguf_does)
{
    if (!test_have_python("gguf,numpy"))
        TEST_SKIP("python3 with gguf and numpy not available");
    const int64_t n = 256 * 16;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *im = malloc(n * sizeof *im);
    uint8_t *b = malloc(type_row_bytes(14, n));
    test_fill_normal(x, n, 0.05f, 12);
    for (int64_t i = 0; i < n; i++)
        im[i] = 0.2f + (float)(i % 11) / 11;
    for (size_t k = 0; k < sizeof round_trip_types / sizeof round_trip_types[0]; k++) {
        const type_traits *t = type_traits_get(round_trip_types[k]);
        int local;
        const dequant_row_fn dq = decoder(t->id, &local);
        for (int with = 0; with < 2; with++) {
            t->quant(x, b, n, with ? im : NULL);
            dq(b, y, n);
            char bp[1024], fp[1024], cmd[4096], *out = NULL;
            snprintf(bp, sizeof bp, "%s/qt-%s.blocks", test_tmpdir(), t->name);
            snprintf(fp, sizeof fp, "%s/qt-%s.f32", test_tmpdir(), t->name);
            write_all(bp, b, type_row_bytes(t->id, n));
            write_all(fp, y, (size_t)n * sizeof *y);
            snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/quant_check.py compare %s %s %s",
                     test_root(), t->name, bp, fp);
            const int rc = test_run(cmd, &out);
            printf("quantize_types: python gguf (%s decoder%s): %s", local ? "local" : "table",
                   with ? ", imatrix" : "", out ? out : "(no output)\n");
            ck_assert_msg(rc == 0, "%s: %s", cmd, out ? out : "");
            free(out);
            remove(bp);
            remove(fp);
        }
    }
    free(x);
    free(y);
    free(im);
    free(b);
}
END_TEST

/* ---- the commands ------------------------------------------------------------ */

/* Rows that are not a multiple of 256 (SmolLM2's 576): the K/IQ types up to
 * 4.5 bpw fall back to Q4_0, Q5_K and Q6_K to Q8_0; IQ3_XXS keeps Q2_0. */
START_TEST(short_rows_fall_back)
{
    static const struct { int want, got; } cases[] = {
        {10, GGML_TYPE_Q4_0}, {11, GGML_TYPE_Q4_0}, {12, GGML_TYPE_Q4_0},
        {13, GGML_TYPE_Q8_0}, {14, GGML_TYPE_Q8_0}, {16, GGML_TYPE_Q4_0},
        {17, GGML_TYPE_Q4_0}, {21, GGML_TYPE_Q4_0}, {22, GGML_TYPE_Q4_0},
        {23, GGML_TYPE_Q4_0}, {GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_0},
    };
    const int64_t ne576[4] = {576, 64, 1, 1}, ne1536[4] = {1536, 576, 1, 1},
                  ne100[4] = {100, 4, 1, 1};
    strata_error err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        quantize_params p = {.type = cases[i].want, .embed_type = -1};
        int type, fb;
        ck_assert_int_eq(quantize_choose_type(&p, "blk.0.attn_q.weight", 2, ne576, &type, &fb,
                                              &err), 0);
        ck_assert_msg(type == cases[i].got && fb == 1, "%s: 576-wide rows get %s",
                      type_name(cases[i].want), type_name(type));
        ck_assert_int_eq(quantize_choose_type(&p, "blk.0.ffn_down.weight", 2, ne1536, &type,
                                              &fb, &err), 0);
        ck_assert_int_eq(type, cases[i].want);
        ck_assert_int_eq(fb, 0);
        ck_assert_int_eq(quantize_choose_type(&p, "odd.weight", 2, ne100, &type, &fb, &err), 0);
        ck_assert_int_eq(type, GGML_TYPE_F16);
    }
}
END_TEST


/* mkmodel writes each type directly; quantize converts an F16 model to it;
 * python gguf reads both files back and dequantizes every tensor. */
START_TEST(cli_writes_every_type)
{
    if (!test_cli())
        TEST_SKIP("strata-cli not built (STRATA_CLI unset)");
    static const char *types[] = {"q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                                  "iq2_xxs", "iq2_xs", "iq2_s", "iq3_s", "iq4_xs"};
    const int py = test_have_python("gguf,numpy");
    char in[1024], out[1024], *txt = NULL;
    snprintf(in, sizeof in, "%s/qt-f16.gguf", test_tmpdir());
    int rc = test_runf(&txt, "%s mkmodel -q --arch llama --layers 1 --dim 256 --heads 4 "
                       "--kv-heads 2 --ff 512 --vocab 300 --type f16 -o %s 2>&1",
                       test_cli(), in);
    ck_assert_msg(rc == 0, "mkmodel f16: %s", txt ? txt : "");
    free(txt);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(out, sizeof out, "%s/qt-%s.gguf", test_tmpdir(), types[i]);
        rc = test_runf(&txt, "%s quantize -q %s %s %s 2>&1", test_cli(), in, out, types[i]);
        ck_assert_msg(rc == 0 && strstr(txt, "bits per weight"), "quantize %s: %s", types[i],
                      txt ? txt : "");
        printf("quantize_types: quantize to %s: %s", types[i], strstr(txt, "  mix:"));
        free(txt);
        if (py) {
            rc = test_runf(&txt, "python3 %s/test/scripts/quant_check.py check-file %s %s 2>&1",
                           test_root(), out, in);
            ck_assert_msg(rc == 0, "check-file %s: %s", types[i], txt ? txt : "");
            free(txt);
        }
        remove(out);
        snprintf(out, sizeof out, "%s/qt-mk-%s.gguf", test_tmpdir(), types[i]);
        rc = test_runf(&txt, "%s mkmodel -q --arch llama --layers 1 --dim 256 --heads 4 "
                       "--kv-heads 2 --ff 512 --vocab 300 --type %s -o %s 2>&1",
                       test_cli(), types[i], out);
        ck_assert_msg(rc == 0, "mkmodel --type %s: %s", types[i], txt ? txt : "");
        free(txt);
        if (py) {
            rc = test_runf(&txt, "python3 %s/test/scripts/quant_check.py check-file %s 2>&1",
                           test_root(), out);
            ck_assert_msg(rc == 0, "check-file %s: %s", out, txt ? txt : "");
            free(txt);
        }
        remove(out);
    }
    remove(in);
    if (!py)
        test_note_skip("cli_writes_every_type_python", "python", "python3 with gguf and numpy not available");
}
END_TEST

static Suite *quantize_types_suite(void)
{
    Suite *s = suite_create("quantize_types");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, vectors_bit_exact);
    tcase_add_test(tc, test_decoder_is_the_tables);
    tcase_add_test(tc, round_trip_error_on_gaussian_rows);
    tcase_add_test(tc, imatrix_lowers_the_weighted_error);
    tcase_add_test(tc, iq3_s_zero_sub_block_stays_in_place);
    tcase_add_test(tc, edge_rows_and_block_independence);
    tcase_add_test(tc, blocks_decode_as_python_gguf_does);
    tcase_add_test(tc, short_rows_fall_back);
    tcase_add_test(tc, cli_writes_every_type);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(quantize_types_suite)
