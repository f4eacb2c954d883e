/* test_perplexity.c: perplexity of the demo model on the shipped
 * public-domain text (test/data/gettysburg_declaration.txt, see
 * test/data/README.md), as shipped (Q4_1) and re-quantized to Q2_0 and
 * IQ3_XXS, with the KV cache in f16, k8v4 and k8v4r (Q4_1 only).
 *
 * The command is the one doc/perplexity.md records:
 *   strata-cli perplexity -m MODEL -f test/data/gettysburg_declaration.txt -c 256 --kv KV
 * The CPU engine is deterministic (kernels/ops.h's invariance rule), so the
 * bounds below are the measured values with a margin for legitimate kernel
 * changes (summation order), not for noise.
 *
 * Each perplexity run reads 1280 tokens (5 windows of 256): seconds with
 * the fused CPU kernels.  Q2_0 and IQ3_XXS run with k8v4 by default, and the
 * ordering IQ3_XXS < Q2_0 is asserted; their f16 runs need
 * STRATA_SLOW_TESTS=1 and are skipped by name otherwise. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT "test/data/gettysburg_declaration.txt"

/* Q4_1 (as shipped) lies in [Q4_1_LO, Q4_1_HI] with either KV format. */
#define Q4_1_LO 16.0
#define Q4_1_HI 19.5

typedef struct ppl_result {
    double ppl, err;
    int tokens;
} ppl_result;

static int slow_tests(void)
{
    const char *v = getenv("STRATA_SLOW_TESTS");
    return v && atoi(v) > 0;
}

/* Run the recorded command; parse its final line.  Its output is a fixture
 * (made once per run): two cases need Q2_0's k8v4 figure.  The figures
 * judge the formats (cache, weights), recorded in doc/perplexity.md with
 * float activations, so the matmuls keep them (STRATA_MATMUL_F32=1) unless
 * int8 is asked for: the int8 codes' own case is test_ppl_int8 (the
 * default 16-bit codes judge like float activations, test_engine.c). */
static ppl_result perplexity_act(const char *cli, const char *model, const char *kv, int int8)
{
    char fmt[2048];
    snprintf(fmt, sizeof fmt, "STRATA_MATMUL_F32=%d STRATA_MATMUL_ACT=8 '%s' perplexity -m '%s' -f '%s/" TEXT
             "' -c 256 --kv %s >'%%s' 2>&1", !int8, cli, model, test_root(), kv);
    const char *log = test_fixture_cmd("ppl.txt", fmt);
    char *out = NULL;
    int rc = test_runf(&out, "cat '%s'", log);
    ck_assert_msg(rc == 0 && out, "cannot read %s", log);
    const char *fin = strstr(out, "final: ppl=");
    ppl_result r = {0, 0, 0};
    ck_assert_msg(fin && sscanf(fin, "final: ppl=%lf +/- %lf tokens=%d", &r.ppl, &r.err,
                                &r.tokens) == 3, "no final line:\n%s", out);
    printf("perplexity %s --kv %s: %.4f +/- %.4f over %d tokens\n", model, kv, r.ppl, r.err,
           r.tokens);
    fflush(stdout);
    free(out);
    /* 1529 tokens -> 5 windows of 256, 127 scored each */
    ck_assert_int_eq(r.tokens, 635);
    return r;
}

static ppl_result perplexity(const char *cli, const char *model, const char *kv)
{
    return perplexity_act(cli, model, kv, 0);
}

/* The demo model quantized to `type`: made once per run (a fixture), as
 * both low-bit cases need the Q2_0 file. */
static const char *quantize(const char *cli, const char *model, const char *type)
{
    char fmt[2048];
    snprintf(fmt, sizeof fmt, "'%s' quantize -q --pure '%s' '%%s' %s 2>&1", cli, model, type);
    return test_fixture_cmd("demo-quant.gguf", fmt);
}

#define NEED_CLI_AND_MODEL()                                                  \
    const char *cli = test_cli();                                             \
    const char *model = test_demo_model();                                    \
    if (!cli)                                                                 \
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)"); \
    if (!model)                                                               \
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)")

/* Measured on the CPU build (doc/perplexity.md): f16 17.676, k8v4 17.663
 * (-0.07 %), k8v4r 17.942 (+1.5 %).  On 635 scored tokens these moves are
 * within the figures' noise (the rotated cache is 41 % closer to float64 by
 * next-token KL, doc/perplexity.md): the bound is 2.5 % either way, well
 * inside the error bar (12 %), and no quantized figure may equal f16's. */
#define KV_PPL_REL 0.025
/* The int8 activations of the CPU matmuls (doc/cpu.md) on the f16 cache:
 * measured 17.583 against float's 17.676 (-0.5 %); bound 2.5 %, as for
 * the caches. */
START_TEST(test_ppl_int8)
{
    NEED_CLI_AND_MODEL();
    ppl_result f = perplexity(cli, model, "f16"), q = perplexity_act(cli, model, "f16", 1);
    ck_assert_msg(q.ppl > Q4_1_LO && q.ppl < Q4_1_HI, "Q4_1 int8 ppl %.4f", q.ppl);
    ck_assert_msg(fabs(q.ppl / f.ppl - 1.0) < KV_PPL_REL, "int8 %.4f vs float %.4f: more than "
                  "%.1f %% apart", q.ppl, f.ppl, 100 * KV_PPL_REL);
}
END_TEST

START_TEST(test_ppl_q4_1)
{
    NEED_CLI_AND_MODEL();
    ppl_result f16 = perplexity(cli, model, "f16");
    ck_assert_msg(f16.ppl > Q4_1_LO && f16.ppl < Q4_1_HI, "Q4_1 f16 ppl %.4f", f16.ppl);
    static const char *const kvs[] = {"k8v4", "k8v4r", "k8v4r2"};
    for (int i = 0; i < 3; i++) {
        ppl_result q = perplexity(cli, model, kvs[i]);
        ck_assert_msg(q.ppl > Q4_1_LO && q.ppl < Q4_1_HI, "Q4_1 %s ppl %.4f", kvs[i], q.ppl);
        ck_assert_msg(q.ppl != f16.ppl, "%s gave exactly the f16 figure: is --kv ignored?",
                      kvs[i]);
        ck_assert_msg(fabs(q.ppl / f16.ppl - 1.0) < KV_PPL_REL, "%s %.4f vs f16 %.4f: more "
                      "than %.1f %% apart", kvs[i], q.ppl, f16.ppl, 100 * KV_PPL_REL);
    }
}
END_TEST

/* 2-3 bit weights break a 135M model: Q2_0 and IQ3_XXS (which falls back to
 * Q2_0 for most matrices here) measure in the thousands to millions,
 * depending on the quantizer's recipe (doc/perplexity.md has both the ggml
 * reference recipe's and strata's search's figures).  So the bounds are the
 * ordering (far worse than Q4_1) and a ceiling above every recipe measured
 * (the largest, 6.2e6, is ggml's recipe with f16 KV): it catches a broken
 * kernel (NaN or infinite logits fail both bounds), not a worse recipe. */
#define LOWBIT_LO (100 * Q4_1_HI)
#define LOWBIT_HI 1e7

/* The small set (STRATA_TEST_SMALL: make asan) keeps the Q4_1 case: the
 * low-bit ones add two quantizations of the demo model and three more runs
 * of 1529 tokens, the longest part of an AddressSanitizer run, through the
 * same code. */
#define NOT_IN_SMALL_SET()                                                    \
    if (test_small())                                                         \
        TEST_SKIP("slow", "low-bit perplexity is not in the small set (STRATA_TEST_SMALL)")

START_TEST(test_ppl_q2_0)
{
    NOT_IN_SMALL_SET();
    NEED_CLI_AND_MODEL();
    const char *q2 = quantize(cli, model, "q2_0");
    ppl_result k84 = perplexity(cli, q2, "k8v4");
    ck_assert_msg(k84.ppl > LOWBIT_LO && k84.ppl < LOWBIT_HI, "Q2_0 k8v4 ppl %.1f", k84.ppl);
    if (!slow_tests())
        TEST_SKIP("slow", "Q2_0 with --kv f16 (set STRATA_SLOW_TESTS=1)");
    ppl_result f16 = perplexity(cli, q2, "f16");
    ck_assert_msg(f16.ppl > LOWBIT_LO && f16.ppl < LOWBIT_HI, "Q2_0 f16 ppl %.1f", f16.ppl);
}
END_TEST

START_TEST(test_ppl_iq3_xxs)
{
    NOT_IN_SMALL_SET();
    NEED_CLI_AND_MODEL();
    const char *iq3 = quantize(cli, model, "iq3_xxs");
    const char *q2 = quantize(cli, model, "q2_0");
    ppl_result k84 = perplexity(cli, iq3, "k8v4");
    ppl_result q2k = perplexity(cli, q2, "k8v4");
    ck_assert_msg(k84.ppl > LOWBIT_LO && k84.ppl < LOWBIT_HI, "IQ3_XXS k8v4 ppl %.1f", k84.ppl);
    /* the fifth of the weights that are IQ3_XXS (3.06 bpw) instead of Q2_0
     * help: measured ~2x lower with either recipe */
    ck_assert_msg(k84.ppl < q2k.ppl, "IQ3_XXS %.1f not better than Q2_0 %.1f", k84.ppl, q2k.ppl);
    if (!slow_tests())
        TEST_SKIP("slow", "IQ3_XXS with --kv f16 (set STRATA_SLOW_TESTS=1)");
    ppl_result f16 = perplexity(cli, iq3, "f16");
    ck_assert_msg(f16.ppl > LOWBIT_LO && f16.ppl < LOWBIT_HI, "IQ3_XXS f16 ppl %.1f", f16.ppl);
}
END_TEST
static Suite *perplexity_suite(void)
{
    Suite *s = suite_create("perplexity");
    TCase *tc = tcase_create("perplexity");
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, test_ppl_q4_1);
    tcase_add_test(tc, test_ppl_int8);
    tcase_add_test(tc, test_ppl_q2_0);
    tcase_add_test(tc, test_ppl_iq3_xxs);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(perplexity_suite)
