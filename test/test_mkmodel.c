/* test_mkmodel.c: `strata-cli mkmodel` and its vocabulary builder.
 *
 * The generated files are checked by independent means: the python `gguf`
 * package reads them (test/scripts/check_mkmodel.py recomputes the names,
 * shapes and keys of doc/formats.md section 4 from the parameters), the float64
 * reference (test/scripts/ref_forward.py) runs them and must produce finite,
 * spread-out logits, and strata's own strict reader must accept them. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/make/mkmodel.h"

/* One small model per architecture and weight type the GPU work cares about,
 * with head dims that are multiples of 32 (what the k8v4 cache needs), so
 * the engine can run the same shapes.
 * `check` holds the arguments check_mkmodel.py needs beyond the file. */
typedef struct tiny {
    const char *name;
    const char *args;
    const char *check;
} tiny;

static const tiny tinies[] = {
    {"llama-f32-tied",
     "--arch llama --layers 2 --dim 128 --heads 4 --kv-heads 2 --ff 256 --vocab 400 --type f32 "
     "--tied",
     "--arch llama --layers 2 --dim 128 --heads 4 --kv-heads 2 --head-dim 32 --ff 256 "
     "--vocab 400 --type f32 --tied"},
    {"qwen2-q8_0",
     "--arch qwen2 --layers 2 --dim 128 --heads 4 --kv-heads 2 --ff 320 --type q8_0",
     "--arch qwen2 --layers 2 --dim 128 --heads 4 --kv-heads 2 --head-dim 32 --ff 320 "
     "--vocab 1024 --type q8_0"},
    {"qwen3-q2_0",
     "--arch qwen3 --layers 2 --dim 128 --heads 4 --kv-heads 2 --head-dim 32 --ff 192 "
     "--type q2_0",
     "--arch qwen3 --layers 2 --dim 128 --heads 4 --kv-heads 2 --head-dim 32 --ff 192 "
     "--vocab 1024 --type q2_0"},
    {"qwen3moe-iq3_xxs",
     "--arch qwen3moe --layers 2 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 4 "
     "--experts-used 2 --ff-exp 256 --vocab 600 --type iq3_xxs",
     "--arch qwen3moe --layers 2 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 512 "
     "--experts 4 --experts-used 2 --ff-exp 256 --vocab 600 --type iq3_xxs"},
    {"gemma3-q8_0-window",
     "--arch gemma3 --layers 2 --dim 128 --heads 4 --kv-heads 1 --head-dim 64 --ff 256 "
     "--window 16 --vocab 500 --type q8_0 --tied",
     "--arch gemma3 --layers 2 --dim 128 --heads 4 --kv-heads 1 --head-dim 64 --ff 256 "
     "--window 16 --vocab 500 --type q8_0 --tied"},
};

static int run_cli(const char *args, const char *out, char **output)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s mkmodel %s %s%s 2>&1", test_cli(), args, out ? "-o " : "",
             out ? out : "");
    return test_run(cmd, output);
}

START_TEST(mkmodel_tiny_models_check_out)
{
    if (!test_cli())
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    int have_py = test_have_python("gguf, numpy");
    const char *dir = test_tmpdir();
    for (size_t i = 0; i < sizeof tinies / sizeof tinies[0]; i++) {
        const tiny *t = &tinies[i];
        char path[512], cmd[2048], *out = NULL;
        snprintf(path, sizeof path, "%s/%s.gguf", dir, t->name);
        int rc = run_cli(t->args, path, &out);
        ck_assert_msg(rc == 0, "%s: mkmodel exit %d: %s", t->name, rc, out ? out : "");
        free(out);

        /* strata's own strict reader accepts it */
        gguf *g = NULL;
        strata_error err = {0};
        ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s: %s", t->name, err.msg);
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "token_embd.weight"));
        gguf_close(g);

        if (!have_py)
            continue;
        snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/check_mkmodel.py %s %s 2>&1",
                 test_root(), path, t->check);
        rc = test_run(cmd, &out);
        ck_assert_msg(rc == 0 && out && !strncmp(out, "ok", 2), "%s: check_mkmodel: %s", t->name,
                      out ? out : "");
        free(out);

        snprintf(cmd, sizeof cmd,
                 "python3 %s/test/scripts/ref_forward.py %s --tokens 1,72,101,108,108,111 "
                 "--kv k8v4 --greedy 4 --stats 2>&1", test_root(), path);
        rc = test_run(cmd, &out);
        ck_assert_msg(rc == 0 && out, "%s: ref_forward exit %d: %s", t->name, rc, out ? out : "");
        const char *st = strstr(out, "stats:");
        ck_assert_msg(st != NULL, "%s: no stats line: %s", t->name, out);
        int pos = 0, vocab = 0, finite = 0;
        double sd_min = 0, sd_max = 0;
        ck_assert_int_eq(sscanf(st, "stats: positions=%d vocab=%d finite=%d std_min=%lf std_max=%lf",
                                &pos, &vocab, &finite, &sd_min, &sd_max), 5);
        ck_assert_int_eq(pos, 9); /* 6 prompt positions + 3 fed greedy tokens */
        ck_assert_int_eq(finite, 1);
        /* The weight scales aim at a logit std near 2; 0.5 .. 8 means neither
         * collapsed nor exploded activations. */
        ck_assert_msg(sd_min > 0.5 && sd_max < 8.0, "%s: logit std %g..%g", t->name, sd_min,
                      sd_max);
        ck_assert_ptr_nonnull(strstr(out, "greedy:"));
        free(out);
    }
    if (!have_py)
        TEST_SKIP("python", "python3 with gguf+numpy missing: file checks and reference run skipped");
}
END_TEST

static int files_equal(const char *a, const char *b)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return test_run(cmd, NULL) == 0;
}

START_TEST(mkmodel_same_seed_same_bytes)
{
    if (!test_cli())
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    const char *dir = test_tmpdir();
    const char *base = "-q --arch qwen3 --layers 1 --dim 256 --heads 2 --kv-heads 1 --head-dim 64 "
                       "--ff 512 --type iq3_xxs";
    const char *pooled = "-q --arch qwen3moe --layers 1 --dim 256 --heads 2 --kv-heads 1 "
                         "--experts 4 --experts-used 2 --ff-exp 256 --type q2_0 --block-pool 64";
    char a[512], b[512], c[512], d[512], e[512], args[1024];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(c, sizeof c, "%s/c.gguf", dir);
    snprintf(d, sizeof d, "%s/d.gguf", dir);
    snprintf(e, sizeof e, "%s/e.gguf", dir);
    /* Same seed, different thread counts: rows have their own streams. */
    snprintf(args, sizeof args, "%s --seed 7 --threads 1", base);
    ck_assert_int_eq(run_cli(args, a, NULL), 0);
    snprintf(args, sizeof args, "%s --seed 7 --threads 3", base);
    ck_assert_int_eq(run_cli(args, b, NULL), 0);
    snprintf(args, sizeof args, "%s --seed 8", base);
    ck_assert_int_eq(run_cli(args, c, NULL), 0);
    ck_assert_msg(files_equal(a, b), "same seed gave different bytes");
    ck_assert_msg(!files_equal(a, c), "different seeds gave the same bytes");
    /* The block-pool mode is deterministic too. */
    snprintf(args, sizeof args, "%s --seed 7 --threads 1", pooled);
    ck_assert_int_eq(run_cli(args, d, NULL), 0);
    snprintf(args, sizeof args, "%s --seed 7 --threads 4", pooled);
    ck_assert_int_eq(run_cli(args, e, NULL), 0);
    ck_assert_msg(files_equal(d, e), "block-pool mode is not deterministic");
}
END_TEST

START_TEST(mkmodel_bad_arguments_exit_2)
{
    if (!test_cli())
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    static const struct { const char *args, *says; } bad[] = {
        {"--layers 2 --dim 64 --heads 4 --ff 128 --type f32", "--arch is required"},
        {"--arch gpt5 --layers 2 --dim 64 --heads 4 --ff 128 --type f32", "gpt5"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --kv-heads 3 --ff 128 --type f32",
         "not a multiple of --kv-heads"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type f32 --vocab 100", "--vocab"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type iq1_s",
         "neither quantize nor decode"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type q9_9", "unknown type"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type f32 --experts 4",
         "qwen3moe"},
        {"--arch qwen3moe --layers 2 --dim 64 --heads 4 --type f32", "--experts"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 64 --window 8 --type f32", "--window"},
        {"--arch llama --layers two --dim 64 --heads 4 --ff 128 --type f32", "--layers"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --type f32", "--ff"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type f32 --frobnicate 1",
         "unknown option"},
        {"--arch llama --layers 2 --dim 64 --heads 4 --ff 128 --type f32", "-o is required"},
    };
    const char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/never.gguf", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        int last = i + 1 == sizeof bad / sizeof bad[0];
        int rc = run_cli(bad[i].args, last ? NULL : path, &out);
        ck_assert_msg(rc == 2, "'%s': exit %d, want 2", bad[i].args, rc);
        ck_assert_msg(out && strstr(out, bad[i].says), "'%s': message '%s' lacks '%s'",
                      bad[i].args, out ? out : "", bad[i].says);
        free(out);
    }
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f == NULL, "a failed mkmodel left a file behind");
    char *out = NULL;
    ck_assert_int_eq(run_cli("--help", NULL, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--arch"));
    free(out);
}
END_TEST

START_TEST(mkmodel_vocab_sizes)
{
    mkmodel_vocab v;
    strata_error err = {0};
    ck_assert_int_eq(mkmodel_vocab_build(MKMODEL_MIN_VOCAB - 1, &v, &err), STRATA_E_ARG);
    ck_assert_int_eq(mkmodel_vocab_build(MKMODEL_MIN_VOCAB, &v, &err), 0);
    ck_assert_uint_eq(v.n, MKMODEL_MIN_VOCAB);
    ck_assert_uint_eq(v.n_merges, 0);
    ck_assert_str_eq(v.tokens[MKMODEL_TOKEN_BOS], "<|im_start|>");
    ck_assert_str_eq(v.tokens[3 + ' '], "\xc4\xa0"); /* space -> U+0120 */
    ck_assert_str_eq(v.tokens[3 + '\n'], "\xc4\x8a"); /* LF -> U+010A */
    ck_assert_str_eq(v.tokens[3 + 'a'], "a");
    mkmodel_vocab_free(&v);

    /* A real model's size: learned merges first, then padding, all distinct. */
    ck_assert_int_eq(mkmodel_vocab_build(151936, &v, &err), 0);
    ck_assert_uint_eq(v.n, 151936);
    ck_assert_uint_eq(v.n_merges, 151936 - MKMODEL_MIN_VOCAB);
    ck_assert_uint_ge(v.n_learned, 200);
    /* the first learned merge is a frequent English pair */
    ck_assert_msg(strlen(v.merges[0]) <= 5, "first merge '%s'", v.merges[0]);
    mkmodel_vocab_free(&v);
    mkmodel_vocab_free(NULL);
}
END_TEST

static Suite *mkmodel_suite(void)
{
    Suite *s = suite_create("mkmodel");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, mkmodel_vocab_sizes);
    tcase_add_test(tc, mkmodel_bad_arguments_exit_2);
    tcase_add_test(tc, mkmodel_same_seed_same_bytes);
    tcase_add_test(tc, mkmodel_tiny_models_check_out);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(mkmodel_suite)
