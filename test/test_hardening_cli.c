/* test_hardening_cli.c: suite "hardening_cli": what a new or hostile user
 * meets in strata-cli's first minutes, each case a regression test of a
 * fault that was found on the real binary:
 *
 *   - inspect --json on strings with invalid UTF-8 (overlong forms,
 *     surrogates, past U+10FFFF, F5.. lead bytes) prints valid JSON;
 *   - sampling values out of range, lists with empty entries and options a
 *     command would ignore are refused (exit 2, naming option and value);
 *     -c above the trained context and --devices on the CPU warn;
 *   - chat: a NUL byte refuses the line instead of cutting it; a system
 *     prompt that fills the context alone is named as the reason (/reset
 *     keeps it); /help lists the chat commands, not the options; /stats
 *     before the first parked turn says the cache is empty and its budget;
 *   - the demo model answers "What is the capital of France?" with Paris
 *     under its own defaults (--temp 0, and --kv f16 where the CPU's
 *     matmuls take float activations), other models keep k8v4;
 *   - run stops on Ctrl-C with its stats line;
 *   - without a GPU the backend line says so in plain words, and the
 *     Makefile names libcheck when check.h is missing;
 *   - every command and bench mode has a --help that exits 0 at once, runs
 *     nothing and names each option its parser takes (and none it refuses).
 *
 * Most cases use a tiny generated llama (test_tiny_llama): they are about
 * the front end, and it answers in milliseconds.  Its output is noise that
 * may hold NUL bytes, so answers go through tr before they are read. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"

#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("strata-cli not built (STRATA_CLI unset; run via make test)")

static const char *tiny(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("hardening-cli-llama", 400, 5);
    return path;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- 8: inspect --json and invalid UTF-8 ------------------------------- */

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_str(FILE *f, const char *s, size_t n)
{
    put_u64(f, n);
    fwrite(s, 1, n, f);
}

START_TEST(inspect_json_invalid_utf8)
{
    NEED_CLI();
    if (!test_have_python("json"))
        TEST_SKIP("python3 not found");
    /* A GGUF v3 with no tensors and string values (and one key) holding
     * every kind of invalid UTF-8 a lax decoder lets through (keys must be
     * printable ASCII: the reader refuses others). */
    static const struct {
        const char *key, *val;
        size_t len;
    } kv[] = {
        {"general.architecture", "llama", 5},
        {"bad.overlong2", "a\xC0\xAF" "b", 4},          /* '/' in two bytes */
        {"bad.overlong3", "\xE0\x80\xAF", 3},           /* '/' in three */
        {"bad.overlong4", "\xF0\x80\x80\xAF", 4},       /* '/' in four */
        {"bad.surrogate", "\xED\xA0\x80x", 4},          /* U+D800 */
        {"bad.beyond", "\xF4\x90\x80\x80", 4},          /* U+110000 */
        {"bad.f5", "\xF5\x80\x80\x80 \xFF \xFE", 8},    /* lead bytes no code point has */
        {"bad.truncated", "ok\xE2\x82", 4},             /* end inside a character */
        {"bad.lone", "\x80\xBF", 2},                    /* continuation bytes alone */
    };
    const size_t n = sizeof kv / sizeof kv[0];
    char path[512];
    snprintf(path, sizeof path, "%s/bad-utf8.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite("GGUF", 1, 4, f);
    put_u32(f, 3);
    put_u64(f, 0);
    put_u64(f, n);
    for (size_t i = 0; i < n; i++) {
        put_str(f, kv[i].key, strlen(kv[i].key));
        put_u32(f, 8); /* GGUF_STRING */
        put_str(f, kv[i].val, kv[i].len);
    }
    ck_assert_int_eq(fclose(f), 0);
    char *out = NULL;
    /* Decoded strictly: Python's stdin may pass bad bytes through with
     * surrogateescape, which would hide the fault. */
    int rc = test_runf(&out, "'%s' inspect --json '%s' | python3 -c 'import json,sys; "
                             "d=json.loads(sys.stdin.buffer.read().decode(\"utf-8\")); "
                             "print(\"valid\", sum(\"\\ufffd\" in str(x) for x in "
                             "d[\"metadata\"]))' 2>&1", cli, path);
    remove(path);
    ck_assert_msg(rc == 0 && strstr(out, "valid "), "inspect --json is not valid JSON:\n%s", out);
    /* every bad entry shows a replacement character */
    int bad = atoi(strstr(out, "valid ") + 6);
    ck_assert_msg(bad == (int)n - 1, "%d of %d bad entries carry U+FFFD:\n%s", bad, (int)n - 1, out);
    free(out);
}
END_TEST

/* ---- 9: option values and options that would do nothing --------------- */

/* Run `strata-cli ARGS`: expect exit 2 and a message naming both words. */
static void refused(const char *cli, const char *args, const char *opt, const char *val)
{
    char *out = NULL;
    int rc = test_runf(&out, "'%s' %s </dev/null 2>&1 >/dev/null", cli, args);
    ck_assert_msg(rc == 2, "'%s': exit %d, want 2:\n%s", args, rc, out);
    ck_assert_msg(strstr(out, opt) && strstr(out, val), "'%s': the message does not name %s %s:\n%s",
                  args, opt, val, out);
    free(out);
}

START_TEST(sampling_ranges_refused)
{
    NEED_CLI();
    char args[1024];
    static const char *bad[][2] = {
        {"--temp", "-1"},          {"--temp", "nan"},         {"--temp", "inf"},
        {"--top-p", "2"},          {"--top-p", "-0.5"},       {"--top-p", "nan"},
        {"--min-p", "nan"},        {"--min-p", "1.5"},        {"--repeat-penalty", "0"},
        {"--repeat-penalty", "-1"}, {"--repeat-penalty", "nan"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 -t 1 %s %s", tiny(), bad[i][0],
                 bad[i][1]);
        refused(cli, args, bad[i][0], bad[i][1]);
        /* the same check in chat: the options are shared */
        snprintf(args, sizeof args, "chat -m '%s' -t 1 %s %s", tiny(), bad[i][0], bad[i][1]);
        refused(cli, args, bad[i][0], bad[i][1]);
    }
    /* the edges stay allowed */
    char *out = NULL;
    int rc = test_runf(&out, "'%s' run -m '%s' -p hi -n 2 -t 1 --temp 0 --top-p 1 --min-p 0 "
                             "--repeat-penalty 1.1 2>&1 >/dev/null", cli, tiny());
    ck_assert_msg(rc == 0, "valid edge values refused:\n%s", out);
    free(out);
}
END_TEST

START_TEST(ignored_options_refused)
{
    NEED_CLI();
    char args[1024];
    const char *m = tiny();
    /* -sys / --chat-template in run only mean something with --chat */
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 -sys pirate", m);
    refused(cli, args, "-sys", "pirate");
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 2 --chat-template chatml", m);
    refused(cli, args, "--chat-template", "chatml");
    /* run has no conversation cache, no slots */
    snprintf(args, sizeof args, "run -m '%s' -p hi --conversation-cache-mib 64", m);
    refused(cli, args, "--conversation-cache-mib", "64");
    snprintf(args, sizeof args, "run -m '%s' -p hi --batch 4", m);
    refused(cli, args, "--batch", "4");
    /* perplexity does not sample, prompt or chat */
    snprintf(args, sizeof args, "perplexity -m '%s' -f /dev/null --temp 0.5", m);
    refused(cli, args, "--temp", "0.5");
    snprintf(args, sizeof args, "perplexity -m '%s' -f /dev/null -n 5", m);
    refused(cli, args, "-n", "5");
    /* lists with an empty entry: "5," was one stage, not two */
    snprintf(args, sizeof args, "run -m '%s' -p hi --layer-split 5,", m);
    refused(cli, args, "--layer-split", "5,");
    snprintf(args, sizeof args, "run -m '%s' -p hi --layer-split ,1", m);
    refused(cli, args, "--layer-split", ",1");
    snprintf(args, sizeof args, "run -m '%s' -p hi --devices 0,,1", m);
    refused(cli, args, "--devices", "0,,1");
    snprintf(args, sizeof args, "bench -m '%s' --batch 1,2,", m);
    refused(cli, args, "--batch", "1,2,");
    /* --devices names cards; --backend cpu has none */
    snprintf(args, sizeof args, "run -m '%s' -p hi --backend cpu --devices 1", m);
    refused(cli, args, "--devices", "1");
    /* quantize -t read "abc" as 0 threads */
    refused(cli, "quantize -t abc in.gguf out.gguf q8_0", "-t", "abc");
    refused(cli, "quantize -t 0 in.gguf out.gguf q8_0", "-t", "0");
    /* bench modes: unknown options and bad counts */
    refused(cli, "bench --quant --rows abc", "--rows", "abc");
    refused(cli, "bench --quant --no-such-option", "--no-such-option", "unknown");
    refused(cli, "bench --conversations --clients x", "--clients", "x");
}
END_TEST

START_TEST(warnings_for_what_cannot_apply)
{
    NEED_CLI();
    char *out = NULL;
    /* the tiny model is trained on 4096 tokens (mkmodel's default) */
    int rc = test_runf(&out, "'%s' run -m '%s' -p hi -n 1 -t 1 -c 8192 2>&1 >/dev/null", cli,
                       tiny());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "warning") && strstr(out, "-c 8192") && strstr(out, "4096"),
                  "no warning for -c above the trained context:\n%s", out);
    free(out);
    rc = test_runf(&out, "'%s' run -m '%s' -p hi -n 1 -t 1 -c 4096 2>&1 >/dev/null", cli, tiny());
    ck_assert_msg(rc == 0 && !strstr(out, "warning"), "a warning within the context:\n%s", out);
    free(out);
    if (!test_have_gpu(NULL)) {
        rc = test_runf(&out, "'%s' run -m '%s' -p hi -n 1 -t 1 --devices 0 2>&1 >/dev/null", cli,
                       tiny());
        ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
        ck_assert_msg(strstr(out, "warning") && strstr(out, "--devices"),
                      "no warning for --devices on the CPU:\n%s", out);
        free(out);
    }
}
END_TEST

/* ---- 10, 13: chat ---------------------------------------------------- */

START_TEST(chat_nul_byte_refuses_the_line)
{
    NEED_CLI();
    char *out = NULL;
    /* Before: "hel" was sent and "lo" dropped without a word. */
    int rc = test_runf(&out, "printf 'hel\\000lo\\n/stats\\n' | '%s' chat -m '%s' -n 4 --temp 0 "
                             "-t 1 2>&1 | tr -d '\\000'", cli, tiny());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "NUL byte") != NULL, "the NUL byte is not reported:\n%s", out);
    ck_assert_msg(strstr(out, "no answer yet") != NULL, "half a line was sent:\n%s", out);
    free(out);
}
END_TEST

START_TEST(chat_system_prompt_too_long)
{
    NEED_CLI();
    char *out = NULL;
    /* 600 words of system prompt in a 256-token context: /reset, which
     * keeps the system prompt, cannot help, and the hint must say what can */
    int rc = test_runf(&out, "{ printf '/system '; for i in $(seq 600); do printf 'word '; done; "
                             "printf '\\nhello\\n/reset\\nhello\\n'; } | '%s' chat -m '%s' -n 4 "
                             "--temp 0 -t 1 -c 256 2>&1 | tr -d '\\000'", cli, tiny());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "system prompt alone") != NULL,
                  "the hint does not name the system prompt:\n%s", out);
    ck_assert_msg(strstr(out, "use /reset to start over") == NULL, "the hint says /reset:\n%s",
                  out);
    free(out);
}
END_TEST

START_TEST(chat_help_lists_the_commands)
{
    NEED_CLI();
    char *out = NULL;
    int rc = test_runf(&out, "printf '/help\\n' | '%s' chat -m '%s' -t 1 2>/dev/null", cli, tiny());
    ck_assert_int_eq(rc, 0);
    static const char *cmds[] = {"/reset", "/system", "/stats", "/help", "/quit"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_msg(strstr(out, cmds[i]) != NULL, "/help lacks %s:\n%s", cmds[i], out);
    int lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    /* the options (--temp ...) belong to chat --help, not to /help */
    ck_assert_msg(strstr(out, "--temp") == NULL && lines <= 12,
                  "/help prints %d lines, the options among them:\n%s", lines, out);
    free(out);
}
END_TEST

START_TEST(chat_stats_before_the_first_answer)
{
    NEED_CLI();
    char *out = NULL;
    int rc = test_runf(&out, "printf '/stats\\n' | '%s' chat -m '%s' -t 1 "
                             "--conversation-cache-mib 32 2>/dev/null", cli, tiny());
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "of 0 MiB") == NULL, "/stats says 'of 0 MiB':\n%s", out);
    ck_assert_msg(strstr(out, "empty") && strstr(out, "32 MiB"),
                  "/stats does not say the cache is empty, with its budget:\n%s", out);
    free(out);
}
END_TEST

/* ---- 11: the demo model's first impression ----------------------------- */

START_TEST(demo_model_answers_paris)
{
    NEED_CLI();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not found (make model, or STRATA_MODEL)");
    char *out = NULL;
    /* no --kv, no --temp: the defaults `make chat` gets */
    int rc = test_runf(&out, "printf 'What is the capital of France?\\n/stats\\n' | '%s' chat "
                             "-m '%s' -n 48 --backend cpu 2>&1", cli, model);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "Paris") != NULL, "the demo model does not say Paris:\n%s", out);
    /* on the CPU: the default 16-bit activation codes and f16
     * (cli_opts_demo_defaults) */
    const char *kv = "KV f16";
    ck_assert_msg(strstr(out, kv) != NULL, "the demo model is not on %s:\n%s", kv, out);
    free(out);
    /* other models keep the engine's default, and --kv wins on the demo */
    rc = test_runf(&out, "printf '/stats\\n' | '%s' chat -m '%s' -t 1 2>&1 | tr -d '\\000'", cli,
                   tiny());
    ck_assert_msg(rc == 0 && strstr(out, "KV k8v4"), "not k8v4 on another model:\n%s", out);
    free(out);
    rc = test_runf(&out, "printf '/stats\\n' | '%s' chat -m '%s' --kv k8v4 --backend cpu 2>&1",
                   cli, model);
    ck_assert_msg(rc == 0 && strstr(out, "KV k8v4"), "--kv k8v4 ignored on the demo:\n%s", out);
    free(out);
}
END_TEST

/* ---- 13: run and Ctrl-C ------------------------------------------------ */

START_TEST(run_ctrl_c_prints_stats)
{
    NEED_CLI();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not found (make model, or STRATA_MODEL): the tiny model "
                  "finishes before a signal comes");
    const char *dir = test_tmpdir();
    char *out = NULL;
    /* SIGINT once the answer's first bytes are out; then the stats line.
     * (A background job of a script starts with SIGINT ignored: only a
     * handler of its own makes run hear it.  A run that does not stop
     * within 30 s is killed, and the test fails on its exit status.) */
    int rc = test_runf(&out,
                       "cd '%s' && { '%s' run -m '%s' -p 'Once upon a time' -n 3000 --temp 0 "
                       "--backend cpu >run.out 2>run.err & pid=$!; i=0; "
                       "while [ ! -s run.out ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done; "
                       "kill -INT $pid; i=0; "
                       "while kill -0 $pid 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; "
                       "i=$((i+1)); done; kill -KILL $pid 2>/dev/null; "
                       "wait $pid; echo \"exit=$?\"; cat run.err; "
                       "rm -f run.out run.err; }", dir, cli, model);
    ck_assert_msg(rc == 0, "rc %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "exit=130\n") != NULL, "run did not exit 130 on Ctrl-C:\n%s", out);
    ck_assert_msg(strstr(out, "tok/s") && strstr(out, "[interrupted]"),
                  "no stats line after Ctrl-C:\n%s", out);
    free(out);
}
END_TEST

/* ---- 12: plain words without a GPU or libcheck --------------------------- */

START_TEST(no_gpu_message)
{
    NEED_CLI();
    if (test_have_gpu(NULL))
        TEST_SKIP("other", "a GPU is present: this test is for a machine without one");
    char *out = NULL;
    int rc = test_runf(&out, "'%s' run -m '%s' -p hi -n 1 -t 1 2>&1 >/dev/null", cli, tiny());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "using the CPU") != NULL, "no plain backend line:\n%s", out);
    ck_assert_msg(strstr(out, "insufficient") == NULL, "the runtime's words leak:\n%s", out);
    free(out);
    /* the card benchmarks: a clear refusal, in a CPU build and in a CUDA
     * build on a machine without a driver */
    rc = test_runf(&out, "'%s' bench --kernels 2>&1", cli);
    ck_assert_msg(rc == 1 && strstr(out, "CUDA") && !strstr(out, "insufficient"),
                  "bench --kernels without a GPU (exit %d):\n%s", rc, out);
    free(out);
}
END_TEST

START_TEST(make_names_libcheck)
{
    /* -nostdinc hides every header, check.h too */
    char *out = NULL;
    int rc = test_runf(&out, "make -s -C '%s' need-libcheck CC='cc -nostdinc' CUDA=0 2>&1",
                       test_root());
    ck_assert_msg(rc != 0, "need-libcheck passed without headers:\n%s", out);
    ck_assert_msg(strstr(out, "install libcheck") && strstr(out, "apt-get install check"),
                  "make does not say to install libcheck:\n%s", out);
    free(out);
    rc = test_runf(&out, "make -s -C '%s' need-libcheck CUDA=0 2>&1", test_root());
    ck_assert_msg(rc == 0, "need-libcheck fails with libcheck present:\n%s", out);
    free(out);
}
END_TEST

/* ---- 14: --help of every command and bench mode ------------------------ */

typedef struct help_case {
    const char *args;      /* after strata-cli */
    const char *has[40];   /* options the parser takes: each must be named */
    const char *not[12];   /* options it refuses: none may be named */
} help_case;

#define ENGINE_OPTS "-m", "--backend", "--kv", "--kv-resident", "--layer-split", "--devices", \
                    "--chunk", "--threads"
#define SAMPLING_OPTS "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", \
                      "--repeat-last-n", "--seed"

static const help_case help_cases[] = {
    {"run", {ENGINE_OPTS, SAMPLING_OPTS, "--verbose", "-c", "-n", "-p", "--chat", "-sys", "--chat-template"},
     {"--conversation-cache-mib", "--batch", "--batch-groups", "-f"}},
    {"chat", {ENGINE_OPTS, SAMPLING_OPTS, "--verbose", "-c", "-n", "-sys", "--chat-template", "--batch",
              "--batch-groups", "--conversation-cache-mib", "--conversation-cache-slots"},
     {"--prompt", "--chat ", "-f,"}},
    {"perplexity", {ENGINE_OPTS, "-c", "-f", "--chunks"},
     {"--temp", "--top-k", "-sys", "--chat-template", "--prompt", "--n-predict",
      "--conversation-cache-mib", "--batch", "--verbose", "min(model, 4096)"}},
    {"inspect", {"--json"}, {"--temp"}},
    {"quantize", {"--keep-type", "--embed-type", "--threads", "--quiet", "--pure", "--imatrix"},
     {"--temp"}},
    {"imatrix", {ENGINE_OPTS, "-c", "-f", "-o", "--chunks"}, {"--temp", "-sys", "--batch"}},
    {"mkmodel", {"--arch", "--layers", "--dim", "--heads", "--kv-heads", "--head-dim", "--ff",
                 "--experts", "--experts-used", "--ff-exp", "--vocab", "--ctx", "--rope-base",
                 "--eps", "--type", "--ftype", "--tied", "--pre", "--seed", "--threads", "--block-pool",
                 "--output", "--quiet"},
     {"--temp"}},
    {"bench", {ENGINE_OPTS, "-c", "-p", "-n", "--batch", "--ctx", "--reps", "--json",
               "--batch-groups", "--quant", "--kernels", "--attention", "--clients",
               "--conversations", "--workload"},
     {"--temp", "--conversation-cache-mib", "-sys", "--verbose"}},
    {"bench --quant", {"--rows", "--cols", "--seconds"}, {"--temp", "-m,"}},
    {"bench --kernels", {"--types", "--shapes", "--reps", "--json", "--runs", "--quick"},
     {"--temp", "-m,"}},
    {"bench --attention", {"--runs", "--quick", "--kv", "--ctx", "--batch"},
     {"--temp", "-m,", "--types"}},
    {"bench --clients", {ENGINE_OPTS, "--verbose", "-c", "--clients", "--rounds", "--prompt-tokens",
                         "--gen-tokens", "--answers", "--json", "--batch", "--batch-groups",
                         "--conversation-cache-mib", "--conversation-cache-slots"},
     {"--temp", "-sys"}},
    {"bench --conversations", {ENGINE_OPTS, "-c", "--clients", "--rounds", "--tokens",
                               "--followup", "--conversation-cache-mib",
                               "--conversation-cache-slots", "--seed", "--json", "--batch"},
     {"--temp", "-sys", "--verbose"}},
    {"bench --workload", {ENGINE_OPTS, "-c", "--clients", "--rounds", "--tokens", "--gen-tokens",
                          "--seed", "--json", "--batch", "--batch-groups",
                          "--conversation-cache-mib", "--conversation-cache-slots"},
     {"--temp", "-sys", "--verbose", "--prompt-tokens"}},
};

/* Named as an option: preceded by a space, followed by space, comma, '=',
 * '|', ']' or newline (so "-c" is not found inside "--ctx"). */
static int names(const char *text, const char *opt)
{
    size_t n = strlen(opt);
    for (const char *p = strstr(text, opt); p; p = strstr(p + 1, opt)) {
        char before = p == text ? ' ' : p[-1], after = p[n];
        if ((before == ' ' || before == '[' || before == '\n') &&
            (!after || strchr(" ,=|]\n", after) || opt[n - 1] == ' ' || opt[n - 1] == ','))
            return 1;
    }
    return 0;
}

START_TEST(every_help_is_exact)
{
    NEED_CLI();
    char *out = NULL;
    for (size_t i = 0; i < sizeof help_cases / sizeof help_cases[0]; i++) {
        const help_case *h = &help_cases[i];
        /* HOME without a demo model, and a model path that does not exist:
         * a help that ran anything would fail or print */
        double t0 = now_s();
        int rc = test_runf(&out, "cd '%s' && HOME=/nonexistent '%s' %s --help 2>err.txt; "
                                 "s=$?; cat err.txt; rm -f err.txt; exit $s", test_tmpdir(), cli,
                           h->args);
        double dt = now_s() - t0;
        ck_assert_msg(rc == 0, "%s --help: exit %d:\n%s", h->args, rc, out);
        ck_assert_msg(dt < 5.0, "%s --help took %.1f s: it ran something", h->args, dt);
        ck_assert_msg(strstr(out, "usage: strata-cli") != NULL, "%s --help: no usage:\n%s",
                      h->args, out);
        ck_assert_msg(strstr(out, "strata: ") == NULL && strstr(out, "loading") == NULL,
                      "%s --help ran something:\n%s", h->args, out);
        for (size_t k = 0; k < 40 && h->has[k]; k++)
            ck_assert_msg(names(out, h->has[k]), "%s --help does not name %s:\n%s", h->args,
                          h->has[k], out);
        for (size_t k = 0; k < 12 && h->not[k]; k++)
            ck_assert_msg(h->not[k][0] == '-' ? !names(out, h->not[k]) : !strstr(out, h->not[k]), "%s --help names %s, which it refuses:\n%s",
                          h->args, h->not[k], out);
        free(out);
    }
    /* bench --help lists each mode once */
    ck_assert_int_eq(test_runf(&out, "'%s' bench --help", cli), 0);
    const char *k = strstr(out, "--kernels ");
    ck_assert_msg(k && !strstr(k + 1, "\n  --kernels "), "--kernels listed twice:\n%s", out);
    free(out);
    /* perplexity: one -c default, its own */
    ck_assert_int_eq(test_runf(&out, "'%s' perplexity --help", cli), 0);
    ck_assert_msg(strstr(out, "default 512") && !strstr(out, "4096"), "two -c defaults:\n%s", out);
    free(out);
}
END_TEST

/* The refused options of the help table really are refused, and the
 * options the help names are really parsed: a name the parser does not
 * know is "unknown", one it refuses "does nothing". */
START_TEST(help_matches_the_parser)
{
    NEED_CLI();
    char *out = NULL;
    /* a model that is not there: an option the parser takes gets as far
     * as the load (or the text) and fails there */
    static const struct {
        const char *args;
        int taken;
    } probes[] = {
        {"run -m /nonexistent.gguf -p hi --top-k 5", 1},
        {"run -m /nonexistent.gguf -p hi --chat --chat-template chatml", 1},
        {"run -m /nonexistent.gguf -p hi --batch-groups 1", 0},
        {"chat -m /nonexistent.gguf --batch-groups 1", 1},
        {"chat -m /nonexistent.gguf -p hi", 0},
        {"perplexity -m /nonexistent.gguf -f /dev/null --chunks 1", 1},
        {"perplexity -m /nonexistent.gguf -f /dev/null --top-k 5", 0},
        {"perplexity -m /nonexistent.gguf -f /dev/null -p x", 0},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        int rc = test_runf(&out, "'%s' %s </dev/null 2>&1", cli, probes[i].args);
        int refused_it = rc == 2 && (strstr(out, "does nothing") || strstr(out, "unknown option"));
        ck_assert_msg(refused_it != probes[i].taken, "%s: %s (exit %d):\n%s", probes[i].args,
                      probes[i].taken ? "refused" : "taken", rc, out);
        free(out);
    }
}
END_TEST

static Suite *hardening_cli_suite(void)
{
    Suite *s = suite_create("hardening_cli");
    TCase *tc = tcase_create("hardening_cli");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, inspect_json_invalid_utf8);
    tcase_add_test(tc, sampling_ranges_refused);
    tcase_add_test(tc, ignored_options_refused);
    tcase_add_test(tc, warnings_for_what_cannot_apply);
    tcase_add_test(tc, chat_nul_byte_refuses_the_line);
    tcase_add_test(tc, chat_system_prompt_too_long);
    tcase_add_test(tc, chat_help_lists_the_commands);
    tcase_add_test(tc, chat_stats_before_the_first_answer);
    tcase_add_test(tc, demo_model_answers_paris);
    tcase_add_test(tc, run_ctrl_c_prints_stats);
    tcase_add_test(tc, no_gpu_message);
    tcase_add_test(tc, make_names_libcheck);
    tcase_add_test(tc, every_help_is_exact);
    tcase_add_test(tc, help_matches_the_parser);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(hardening_cli_suite)
