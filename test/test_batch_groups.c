/* test_batch_groups.c: --batch-groups (doc/engine.md, "Batch groups").
 *
 * With a layer split, a decode step's rows flow through the stages as a
 * pipeline of G groups.  Every row's arithmetic is unchanged, so the judge
 * is the engine itself without a split and without groups: the logits of
 * every step must be equal bit for bit, and so the greedy tokens.  Eight
 * conversations with prompts of different lengths also stop after different
 * numbers of steps, so the batch shrinks 8, 7, ..., 1: groups of uneven
 * size (7 rows in 4 groups: 2 2 2 1) and fewer rows than groups (3 rows in
 * 4 groups) both occur.  The engine's count of (stage, group) runs shows the
 * grouped path really ran.
 *
 * The CPU cases run everywhere; the CUDA cases (stages sharing device 0)
 * skip without a card. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/sample.h"
#include "engine/strata.h"
#include "kernels/ops.h"

#ifdef STRATA_CUDA
#include "engine/cuda/cuda_stage.h"
#endif

#define N_CONV 8
#define MAX_STEPS (N_CONV + 4)
#define VOCAB 512

/* conversation q: prompt of 3 + 2q tokens, then 5 + q decode steps */
static int prompt_len(int q) { return 3 + 2 * q; }
static int steps_of(int q) { return 5 + q; }

static const char *tiny_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("groups-llama", VOCAB, 21);
    return path;
}

static strata_engine *open_groups(const char *model, int backend, const char *split, int slots,
                                  int groups)
{
    strata_params p = test_params(model, backend);
    p.layer_split = split;
    p.n_slots = slots;
    p.batch_groups = groups;
    p.n_ctx = 256;
    return test_open(&p);
}

/* What a run of the eight conversations produced. */
typedef struct conv_run {
    int32_t tok[N_CONV][MAX_STEPS];  /* token fed at each step */
    float *logits;                   /* [MAX_STEPS][N_CONV][V], NaN where not run */
    uint64_t group_runs;             /* e->group_runs after the run */
    uint64_t expect_runs;            /* stages x non-empty groups, summed over steps */
} conv_run;

/* Feed the prompts, then decode until every conversation has had its steps.
 * sample: through strata_decode_batch_sample with samplers (greedy, or
 * seeded top-k draws, which the CUDA backend makes on the card). */
static void run_convs(strata_engine *e, int sample, float temp, conv_run *out)
{
    int V = strata_n_vocab(e), S = strata_n_stages(e), G = e->p.batch_groups;
    strata_error err = {0};
    memset(out->tok, 0, sizeof out->tok);
    out->logits = malloc(sizeof(float) * (size_t)MAX_STEPS * N_CONV * V);
    for (size_t i = 0; i < (size_t)MAX_STEPS * N_CONV * V; i++)
        out->logits[i] = NAN;
    out->expect_runs = 0;
    uint64_t runs0 = e->group_runs;
    strata_seq *seqs[N_CONV];
    sampler smp[N_CONV];
    int32_t next[N_CONV];
    float *lg = malloc(sizeof(float) * (size_t)N_CONV * V);
    uint64_t rng = 77;
    for (int q = 0; q < N_CONV; q++) {
        int32_t ids[32];
        for (int i = 0; i < prompt_len(q); i++)
            ids[i] = (int32_t)(test_rand_u64(&rng) % VOCAB);
        seqs[q] = strata_seq_new(e, &err);
        ck_assert_ptr_nonnull(seqs[q]);
        ck_assert_int_eq(strata_seq_feed(seqs[q], ids, prompt_len(q), lg, NULL, &err), 0);
        next[q] = cpu_argmax(lg, V);
        sampler_params sp = sampler_defaults();
        sp.temp = temp;
        sp.seed = 100 + (uint64_t)q;
        sampler_init(&smp[q], &sp);
    }
    for (int t = 0; t < MAX_STEPS; t++) {
        strata_seq *act[N_CONV];
        sampler *asmp[N_CONV];
        int32_t toks[N_CONV], got[N_CONV];
        int idx[N_CONV], n = 0;
        for (int q = 0; q < N_CONV; q++) {
            if (t >= steps_of(q))
                continue;
            idx[n] = q;
            act[n] = seqs[q];
            asmp[n] = &smp[q];
            toks[n] = next[q];
            out->tok[q][t] = next[q];
            n++;
        }
        if (!n)
            break;
        if (sample) {
            int rc = strata_decode_batch_sample(act, toks, n, asmp, got, &err);
            ck_assert_msg(rc == 0, "decode_batch_sample step %d: %s", t, err.msg);
        } else {
            int rc = strata_decode_batch(act, toks, n, lg, &err);
            ck_assert_msg(rc == 0, "decode_batch step %d: %s", t, err.msg);
        }
        for (int i = 0; i < n; i++) {
            int q = idx[i];
            if (sample) {
                next[q] = got[i];
            } else {
                memcpy(out->logits + ((size_t)t * N_CONV + q) * V, lg + (size_t)i * V,
                       sizeof(float) * V);
                next[q] = cpu_argmax(lg + (size_t)i * V, V);
            }
        }
        if (S > 1 && G > 1)
            out->expect_runs += (uint64_t)S * (uint64_t)(n < G ? n : G);
    }
    out->group_runs = e->group_runs - runs0;
    for (int q = 0; q < N_CONV; q++) {
        strata_seq_free(seqs[q]);
        sampler_free(&smp[q]);
    }
    free(lg);
}

/* Tokens and logits of a run equal the reference run's, bit for bit. */
static void same_run(const conv_run *ref, const conv_run *got, int V, int sample, const char *what)
{
    for (int q = 0; q < N_CONV; q++)
        for (int t = 0; t < steps_of(q); t++)
            ck_assert_msg(got->tok[q][t] == ref->tok[q][t],
                          "%s: conversation %d step %d: token %d, expected %d", what, q, t,
                          got->tok[q][t], ref->tok[q][t]);
    if (sample)
        return;
    for (int t = 0; t < MAX_STEPS; t++)
        for (int q = 0; q < N_CONV; q++) {
            if (t >= steps_of(q))
                continue;
            size_t at = ((size_t)t * N_CONV + q) * V;
            ck_assert_msg(!memcmp(got->logits + at, ref->logits + at, sizeof(float) * V),
                          "%s: conversation %d step %d: logits differ", what, q, t);
        }
}

/* {1, 2, 3, 4 stages} x {G = 1, 2, 4} against one stage without groups. */
static void groups_match(int backend, int sample, float temp)
{
    const char *model = tiny_model();
    static const char *splits[] = {NULL, "2", "1,2", "1,2,3"};
    static const int groups[] = {1, 2, 4};
    strata_engine *e = open_groups(model, backend, NULL, N_CONV, 1);
    int V = strata_n_vocab(e);
    conv_run ref;
    run_convs(e, sample, temp, &ref);
    ck_assert_int_eq((int)ref.group_runs, 0);
    strata_close(e);
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 3; k++) {
            e = open_groups(model, backend, splits[s], N_CONV, groups[k]);
            ck_assert_int_eq(strata_batch_groups(e), s > 0 ? groups[k] : 1);
            conv_run got;
            run_convs(e, sample, temp, &got);
            char what[96];
            snprintf(what, sizeof what, "%s split %s, --batch-groups %d%s",
                     backend == STRATA_BACKEND_CUDA ? "cuda" : "cpu",
                     splits[s] ? splits[s] : "none", groups[k], sample ? ", sampled" : "");
            same_run(&ref, &got, V, sample, what);
            /* the grouped path ran, once per stage and non-empty group */
            ck_assert_msg(got.group_runs == got.expect_runs, "%s: %llu (stage, group) runs, "
                          "expected %llu", what, (unsigned long long)got.group_runs,
                          (unsigned long long)got.expect_runs);
            if (s > 0 && groups[k] > 1)
                ck_assert_msg(got.group_runs > 0, "%s: no grouped run", what);
            free(got.logits);
            strata_close(e);
        }
    }
    free(ref.logits);
}

START_TEST(cpu_groups_equal_no_groups)
{
    groups_match(STRATA_BACKEND_CPU, 0, 0.0f);
}
END_TEST

START_TEST(cpu_groups_sampled_equal_no_groups)
{
    groups_match(STRATA_BACKEND_CPU, 1, 0.8f);
}
END_TEST

/* The rows of each group are the ones the split into contiguous groups of
 * near-equal size names (checked directly: sizes differ by at most one, and
 * every row is in exactly one group, for every n and G up to 12). */
START_TEST(group_rows_cover_every_row_once)
{
    for (int G = 1; G <= 12; G++)
        for (int n = 0; n <= 12; n++) {
            int next = 0, lo = n, hi = 0;
            for (int g = 0; g < G; g++) {
                int off, len;
                group_rows(n, G, g, &off, &len);
                ck_assert_int_eq(off, next);
                next += len;
                lo = len < lo ? len : lo;
                hi = len > hi ? len : hi;
            }
            ck_assert_int_eq(next, n);
            ck_assert_int_le(hi - lo, 1);
        }
}
END_TEST

START_TEST(bad_batch_groups_are_clear_errors)
{
    const char *model = tiny_model();
    strata_params p = test_params(model, STRATA_BACKEND_CPU);
    p.layer_split = "2";
    strata_engine *e = NULL;
    strata_error err = {0};
    p.n_slots = 8;
    p.batch_groups = 3;
    ck_assert_int_eq(strata_open(&p, &e, &err), STRATA_E_ARG);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(err.msg, "--batch-groups 3") && strstr(err.msg, "--batch 8"),
                  "message: %s", err.msg);
    p.batch_groups = -2;
    ck_assert_int_eq(strata_open(&p, &e, &err), STRATA_E_ARG);
    ck_assert_msg(strstr(err.msg, "--batch-groups -2"), "message: %s", err.msg);
    /* 0 and 1 are off; G = N is allowed (groups of one row) */
    for (int g = 0; g <= 8; g += 8) {
        p.batch_groups = g;
        ck_assert_int_eq(strata_open(&p, &e, &err), 0);
        strata_close(e);
        e = NULL;
    }

    if (!test_cli())
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    static const struct { const char *args, *says; } bad[] = {
        {"chat -m x.gguf --batch 4 --batch-groups 3", "--batch-groups 3 does not divide --batch 4"},
        {"chat -m x.gguf --batch-groups 2", "--batch-groups 2 does not divide --batch 1"},
        {"chat -m x.gguf --batch 4 --batch-groups 0", "--batch-groups '0' is not an integer >= 1"},
        {"chat -m x.gguf --batch 4 --batch-groups -1", "--batch-groups '-1' is not an integer >= 1"},
        {"chat -m x.gguf --slots 6 --batch-groups 4", "--batch-groups 4 does not divide --batch 6"},
        {"bench -m x.gguf --batch 1,2,6 --batch-groups 4", "--batch-groups 4 does not divide --batch 6"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], *out = NULL;
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 </dev/null", test_cli(), bad[i].args);
        int rc = test_run(cmd, &out);
        ck_assert_msg(rc == 2, "%s: exit %d, expected 2; output:\n%s", bad[i].args, rc, out);
        ck_assert_msg(strstr(out, bad[i].says), "%s: output does not say '%s':\n%s", bad[i].args,
                      bad[i].says, out);
        free(out);
    }
}
END_TEST

#ifdef STRATA_CUDA

#define NEED_GPU()                                                                          \
    do {                                                                                    \
        const char *why_;                                                                   \
        if (!test_have_gpu(&why_))                                                          \
            TEST_SKIP("gpu", why_);                                                         \
    } while (0)

/* Stages sharing device 0: the same bits as one stage without groups, for
 * the logits copied back and for ids sampled on the card. */
START_TEST(cuda_groups_equal_no_groups)
{
    NEED_GPU();
    groups_match(STRATA_BACKEND_CUDA, 0, 0.0f);
}
END_TEST

START_TEST(cuda_groups_sampled_on_card_equal_no_groups)
{
    NEED_GPU();
    groups_match(STRATA_BACKEND_CUDA, 1, 0.0f);  /* greedy on the card */
    groups_match(STRATA_BACKEND_CUDA, 1, 0.8f);  /* top-k 40 draws on the card */
}
END_TEST

/* Without graphs (STRATA_NO_GRAPHS) the grouped kernels give the same bits. */
START_TEST(cuda_groups_without_graphs)
{
    NEED_GPU();
    const char *model = tiny_model();
    strata_engine *e = open_groups(model, STRATA_BACKEND_CUDA, NULL, N_CONV, 1);
    int V = strata_n_vocab(e);
    conv_run ref, got;
    run_convs(e, 0, 0.0f, &ref);
    strata_close(e);
    setenv("STRATA_NO_GRAPHS", "1", 1);
    e = open_groups(model, STRATA_BACKEND_CUDA, "1,2,3", N_CONV, 4);
    run_convs(e, 0, 0.0f, &got);
    unsetenv("STRATA_NO_GRAPHS");
    same_run(&ref, &got, V, 0, "cuda 4 stages, 4 groups, no graphs");
    ck_assert(got.group_runs == got.expect_runs && got.group_runs > 0);
    free(ref.logits);
    free(got.logits);
    strata_close(e);
}
END_TEST

/* 64 slots in 32 groups, the batch shrinking from 64 to 1: more (rows,
 * offset, block) graphs than the cache holds, so graphs are replaced while
 * steps run; every step's logits still equal the ungrouped engine's. */
START_TEST(cuda_group_graph_cache_is_bounded)
{
    NEED_GPU();
    enum { SLOTS = 64, G = 32 };
    const char *model = tiny_model();
    /* distinct graph keys the run will need (group 0 uses the whole-step graphs) */
    static char seen[MAX_GRAPH_ROWS + 1][SLOTS][G];
    memset(seen, 0, sizeof seen);
    int keys = 0;
    for (int n = SLOTS; n >= 1; n--)
        for (int g = 1; g < G; g++) {
            int off, len;
            group_rows(n, G, g, &off, &len);
            if (len && !seen[len][off][g]++)
                keys++;
        }
    ck_assert_int_gt(keys, GROUP_GRAPHS);
    strata_engine *a = open_groups(model, STRATA_BACKEND_CUDA, NULL, SLOTS, 1);
    strata_engine *b = open_groups(model, STRATA_BACKEND_CUDA, "2", SLOTS, G);
    int V = strata_n_vocab(a);
    strata_error err = {0};
    strata_seq *sa[SLOTS], *sb[SLOTS];
    int32_t tok[SLOTS];
    float *la = malloc(sizeof(float) * (size_t)SLOTS * V), *lb = malloc(sizeof(float) * (size_t)SLOTS * V);
    uint64_t rng = 5;
    for (int q = 0; q < SLOTS; q++) {
        int32_t ids[4];
        for (int i = 0; i < 4; i++)
            ids[i] = (int32_t)(test_rand_u64(&rng) % VOCAB);
        sa[q] = strata_seq_new(a, &err);
        sb[q] = strata_seq_new(b, &err);
        ck_assert_int_eq(strata_seq_feed(sa[q], ids, 4, la, NULL, &err), 0);
        ck_assert_int_eq(strata_seq_feed(sb[q], ids, 4, lb, NULL, &err), 0);
        tok[q] = cpu_argmax(la, V);
    }
    for (int n = SLOTS; n >= 1; n--) {
        ck_assert_int_eq(strata_decode_batch(sa, tok, n, la, &err), 0);
        ck_assert_int_eq(strata_decode_batch(sb, tok, n, lb, &err), 0);
        ck_assert_msg(!memcmp(la, lb, sizeof(float) * (size_t)n * V),
                      "batch of %d in %d groups: logits differ", n, G);
        for (int q = 0; q < n; q++)
            tok[q] = cpu_argmax(la + (size_t)q * V, V);
    }
    for (int q = 0; q < SLOTS; q++) {
        strata_seq_free(sa[q]);
        strata_seq_free(sb[q]);
    }
    free(la);
    free(lb);
    strata_close(a);
    strata_close(b);
}
END_TEST

#else /* !STRATA_CUDA */

START_TEST(cuda_batch_groups_need_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

#endif

static Suite *batch_groups_suite(void)
{
    Suite *s = suite_create("batch_groups");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, group_rows_cover_every_row_once);
    tcase_add_test(tc, cpu_groups_equal_no_groups);
    tcase_add_test(tc, cpu_groups_sampled_equal_no_groups);
    tcase_add_test(tc, bad_batch_groups_are_clear_errors);
    suite_add_tcase(s, tc);
    TCase *gpu = tcase_create("gpu");
#ifdef STRATA_CUDA
    tcase_add_test(gpu, cuda_groups_equal_no_groups);
    tcase_add_test(gpu, cuda_groups_sampled_on_card_equal_no_groups);
    tcase_add_test(gpu, cuda_groups_without_graphs);
    tcase_add_test(gpu, cuda_group_graph_cache_is_bounded);
#else
    tcase_add_test(gpu, cuda_batch_groups_need_cuda);
#endif
    suite_add_tcase(s, gpu);
    return s;
}
TEST_SUITE(batch_groups_suite)
