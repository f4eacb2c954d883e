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
#include "test_quant.h"

/* ---- the vectors ---------------------------------------------------------- */

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
    static tv_case cases[32];
    const int n = tv_load("quant_vectors.txt", cases, 32);
    ck_assert_int_eq(n, 16);
    int with_imatrix = 0, iq3_s_fixed = 0;
    for (int i = 0; i < n; i++) {
        tv_case *c = &cases[i];
        ck_assert_str_eq(c->kind, "quant");
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
        tv_free(c);
    }
    ck_assert_int_eq(with_imatrix, 10);
    ck_assert_int_eq(iq3_s_fixed, 1); /* the 512 case has the empty sub-block */
}
END_TEST

/* ---- round trips --------------------------------------------------------- */

static const int round_trip_types[] = {10, 11, 12, 13, 14, 16, 17, 22, 21, 23};

/* The traits table's decoder of a round-trip type. */
static dequant_row_fn decoder(int id)
{
    const type_traits *t = type_traits_get(id);
    ck_assert_msg(t && t->dequant, "type %d: no decoder", id);
    return t->dequant;
}

START_TEST(test_decoder_is_the_tables)
{
    /* the round trips below decode through the traits table: every type
     * they quantize must have its decoder there */
    for (size_t i = 0; i < sizeof round_trip_types / sizeof round_trip_types[0]; i++) {
        const type_traits *t = type_traits_get(round_trip_types[i]);
        ck_assert_msg(t && t->dequant, "%s: the traits table has no decoder",
                      type_name(round_trip_types[i]));
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
        const double a = tv_round_trip_rel(t->quant, t->id, x, n, NULL, 0, n);
        const double b = tv_round_trip_rel(t->quant, t->id, x, n, im, 0, n);
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
        const dequant_row_fn dq = decoder(t->id);
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
    const double fixed = tv_round_trip_rel(quant_row_iq3_s, 21, x, 256, NULL, 96, 256);
    const double ggml = tv_round_trip_rel(quant_row_iq3_s_ggml, 21, x, 256, NULL, 96, 256);
    const double before = tv_round_trip_rel(quant_row_iq3_s, 21, x, 256, NULL, 0, 64);
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
        const dequant_row_fn dq = decoder(t->id);
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

/* Blocks from every quantizer, decoded by gguf.quants.dequantize, must equal
 * the decoder the round trips use, bit for bit: this pins the traits
 * table's decoders (and the blocks' layout) to an implementation not
 * written here. */
START_TEST(blocks_decode_as_python_gguf_does)
{
    if (!test_have_python("gguf,numpy"))
        TEST_SKIP("python3 with gguf and numpy not available");
    const int64_t n = 256 * 16;
    float *x = malloc(n * sizeof *x), *im = malloc(n * sizeof *im);
    uint8_t *b = malloc(type_row_bytes(14, n));
    test_fill_normal(x, n, 0.05f, 12);
    for (int64_t i = 0; i < n; i++)
        im[i] = 0.2f + (float)(i % 11) / 11;
    for (size_t k = 0; k < sizeof round_trip_types / sizeof round_trip_types[0]; k++) {
        const type_traits *t = type_traits_get(round_trip_types[k]);
        for (int with = 0; with < 2; with++) {
            t->quant(x, b, n, with ? im : NULL);
            tv_python_compare(with ? "quantize_types (imatrix)" : "quantize_types", t->id, b, n);
        }
    }
    free(x);
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
