/* test_cli.c: strata-cli end to end, as a user drives it: help texts, exit
 * statuses, `run` determinism across placements, `chat` through a pipe and
 * through a pseudo-terminal (tmux), including Ctrl-C during an answer.
 *
 * The model tests use the demo model (skipped by name when it is absent)
 * and greedy decoding with few tokens: the CPU decodes a few tokens per
 * second on a 2-core machine. */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "model/gguf.h"

#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)")

#define NEED_MODEL()                                                          \
    const char *model = test_demo_model();                                    \
    if (!model)                                                               \
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)")

/* test_run on a formatted command line. */
static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_help)
{
    NEED_CLI();
    char *out = NULL;
    ck_assert_int_eq(test_runf(&out, "'%s' --help", cli), 0);
    ck_assert_ptr_nonnull(strstr(out, "commands:"));
    free(out);
    /* no command: usage on stderr, status 2 */
    ck_assert_int_eq(test_runf(NULL, "'%s' 2>/dev/null", cli), 2);
    ck_assert_int_eq(test_runf(NULL, "'%s' no-such-command 2>/dev/null", cli), 2);
    static const char *cmds[] = {"chat", "run", "perplexity", "bench", "inspect", "quantize",
                                 "mkmodel", "serve", "imatrix"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int rc = test_runf(&out, "'%s' %s --help 2>&1", cli, cmds[i]);
        ck_assert_msg(rc == 0, "%s --help: exit %d", cmds[i], rc);
        ck_assert_msg(strstr(out, "usage") != NULL, "%s --help: no usage line:\n%s", cmds[i], out);
        free(out);
    }
    /* the perplexity help states which tokens are scored */
    test_runf(&out, "'%s' perplexity --help", cli);
    ck_assert_ptr_nonnull(strstr(out, "SECOND HALF"));
    free(out);
}
END_TEST

START_TEST(test_bad_input)
{
    NEED_CLI();
    char *out = NULL;
    /* a missing model: exit 1, one line naming the path */
    int rc = test_runf(&out, "'%s' run -m /nonexistent/strata-model.gguf -p hi 2>&1 >/dev/null", cli);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "/nonexistent/strata-model.gguf") != NULL, "error: %s", out);
    ck_assert_msg(count_lines(out) == 1, "want one line, got:\n%s", out);
    free(out);
    /* usage errors: exit 2 */
    ck_assert_int_eq(test_runf(NULL, "'%s' run --no-such-option 2>/dev/null", cli), 2);
    ck_assert_int_eq(test_runf(NULL, "'%s' run -n notanumber -p hi 2>/dev/null", cli), 2);
    ck_assert_int_eq(test_runf(NULL, "'%s' chat --kv q9 2>/dev/null", cli), 2);
    ck_assert_int_eq(test_runf(NULL, "'%s' perplexity 2>/dev/null", cli), 2);
    ck_assert_int_eq(test_runf(NULL, "'%s' bench --batch 0 2>/dev/null", cli), 2);
    /* perplexity: missing and empty texts are clear errors, before any model load */
    const char *dir = test_tmpdir();
    rc = test_runf(&out, "'%s' perplexity -m /nonexistent.gguf -f %s/missing.txt 2>&1", cli, dir);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "missing.txt") != NULL, "%s", out);
    free(out);
    rc = test_runf(&out, ": > %s/empty.txt; '%s' perplexity -f %s/empty.txt 2>&1", dir, cli, dir);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "empty") != NULL, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_bench_modes)
{
    NEED_CLI();
    char *out = NULL;
    ck_assert_int_eq(test_runf(&out, "'%s' bench --help", cli), 0);
    ck_assert_ptr_nonnull(strstr(out, "--quant"));
    ck_assert_ptr_nonnull(strstr(out, "--kernels"));
    ck_assert_ptr_nonnull(strstr(out, "--clients"));
    ck_assert_ptr_nonnull(strstr(out, "--conversations"));
    free(out);
    if (!test_have_gpu(NULL)) {
        /* a CPU build says the kernel bench needs CUDA and fails cleanly */
        int rc = test_runf(&out, "'%s' bench --kernels 2>&1", cli);
        ck_assert_int_eq(rc, 1);
        ck_assert_msg(strstr(out, "CUDA") != NULL, "%s", out);
        free(out);
    }
}
END_TEST

/* bench -m on a MoE model: a decode step counts the experts a step reads,
 * not all of them: with 4 of 16 experts per row, batch 1 reads the dense
 * weights plus a quarter of the expert bytes, and batch 16 more than
 * batch 1 but less than every byte.  The expected figures come from the
 * file's tensor sizes (gguf), not from the bench's own code. */
START_TEST(test_bench_moe_counts_read_experts)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char path[512], *out = NULL;
    snprintf(path, sizeof path, "%s/moe.gguf", dir);
    int rc = test_runf(&out, "'%s' mkmodel --arch qwen3moe --layers 2 --dim 256 --heads 4 --kv-heads 2 "
                             "--head-dim 64 --experts 16 --experts-used 4 --ff-exp 128 --ff 512 --vocab 1000 "
                             "--ctx 512 --type q8_0 -o '%s' 2>&1", cli, path);
    ck_assert_msg(rc == 0, "%s", out);
    free(out);
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    double all = 0, exps = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        all += (double)t->nbytes;
        if (strstr(t->name, "_exps."))
            exps += (double)t->nbytes;
    }
    gguf_close(g);
    ck_assert(exps > 0);
    rc = test_runf(&out, "'%s' bench -m '%s' -p 8 -n 2 --batch 1,16 --reps 1 --backend cpu -t 1 2>&1",
                   cli, path);
    ck_assert_msg(rc == 0, "%s", out);
    double mb1 = 0, mb16 = 0;
    const char *p1 = strstr(out, "decode batch  1"), *p16 = strstr(out, "decode batch 16");
    ck_assert_msg(p1 && p16, "%s", out);
    ck_assert(sscanf(strstr(p1, "reads "), "reads %lf MB", &mb1) == 1);
    ck_assert(sscanf(strstr(p16, "reads "), "reads %lf MB", &mb16) == 1);
    const double want1 = (all - exps + exps * 4 / 16) / 1e6;
    ck_assert_msg(fabs(mb1 - want1) < 0.06, "batch 1 reads %.2f MB, expected %.2f:\n%s", mb1, want1, out);
    ck_assert_msg(mb16 > mb1 && mb16 < all / 1e6, "batch 16 reads %.2f MB (batch 1 %.2f, all %.2f)", mb16,
                  mb1, all / 1e6);
    free(out);
}
END_TEST

/* bench --clients: the greedy answers of the one-at-a-time and slots runs
 * agree (the bench fails otherwise), --answers writes them, and a layer
 * split with batch groups gives the same file as one stage. */
START_TEST(test_bench_clients_answers)
{
    NEED_CLI();
    const char *model = test_tiny_llama("answers", 300, 11);
    const char *dir = test_tmpdir();
    char one[512], split[512], *out = NULL;
    snprintf(one, sizeof one, "%s/answers-one.txt", dir);
    snprintf(split, sizeof split, "%s/answers-split.txt", dir);
    int rc = test_runf(&out, "'%s' bench --clients 3 --rounds 2 --prompt-tokens 6 --gen-tokens 5 "
                             "-m '%s' --backend cpu -t 1 --answers '%s' 2>&1", cli, model, one);
    ck_assert_msg(rc == 0, "%s", out);
    free(out);
    rc = test_runf(&out, "'%s' bench --clients 4 --rounds 2 --prompt-tokens 6 --gen-tokens 5 "
                         "-m '%s' --backend cpu -t 1 --layer-split 2 --batch 4 --batch-groups 2 "
                         "--answers '%s' 2>&1", cli, model, split);
    ck_assert_msg(rc == 0, "%s", out);
    free(out);
    char *a = NULL, *b = NULL;
    ck_assert(test_runf(&a, "cat '%s'", one) == 0);
    ck_assert(test_runf(&b, "head -n 6 '%s'", split) == 0);
    int lines = 0;
    for (const char *p = a; *p; p++)
        lines += *p == '\n';
    ck_assert_msg(lines == 6, "%d lines:\n%s", lines, a);
    ck_assert_msg(strncmp(a, "0 0: ", 5) == 0, "%s", a);
    /* clients 0..2 ask the same prompts in both runs */
    ck_assert_msg(strcmp(a, b) == 0, "one stage:\n%s\nsplit:\n%s", a, b);
    free(a);
    free(b);
    remove(one);
    remove(split);
}
END_TEST

START_TEST(test_perplexity_short_text)
{
    NEED_CLI();
    NEED_MODEL();
    const char *dir = test_tmpdir();
    char *out = NULL;
    int rc = test_runf(&out, "echo 'Four score and seven years ago.' > %s/short.txt; "
                        "'%s' perplexity -m '%s' -f %s/short.txt -c 256 2>&1",
                  dir, cli, model, dir);
    ck_assert_int_eq(rc, 1);
    /* says how many tokens it has and how many it needs */
    ck_assert_msg(strstr(out, "tokens") && strstr(out, "512"), "%s", out);
    free(out);
}
END_TEST

START_TEST(test_run_deterministic)
{
    NEED_CLI();
    NEED_MODEL();
    const char *args = "-p 'The capital of France is' -n 8 --temp 0";
    char *a = NULL, *b = NULL, *c = NULL;
    ck_assert_int_eq(test_runf(&a, "'%s' run -m '%s' %s 2>/dev/null", cli, model, args), 0);
    ck_assert_int_eq(test_runf(&b, "'%s' run -m '%s' %s 2>/dev/null", cli, model, args), 0);
    ck_assert_int_eq(
        test_runf(&c, "'%s' run -m '%s' %s --layer-split 10,20 2>/dev/null", cli, model, args), 0);
    ck_assert_msg(strlen(a) > 4, "no text generated: '%s'", a);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(a, c);
    free(a);
    free(b);
    free(c);
    /* the stats line goes to stderr, not into the text */
    ck_assert_int_eq(test_runf(&a, "'%s' run -m '%s' -p Hi -n 2 --temp 0 2>&1 >/dev/null", cli, model),
                     0);
    ck_assert_msg(strstr(a, "tok/s") != NULL, "stats: %s", a);
    free(a);
}
END_TEST

START_TEST(test_chat_pipe)
{
    NEED_CLI();
    NEED_MODEL();
    char *out = NULL;
    int rc = test_runf(&out, "printf 'What is 2+2?\\n/stats\\nAnd 3+3?\\n/reset\\nWhat is 2+2?\\n"
                        "/quit\\nThis line is never read.\\n' | '%s' chat -m '%s' -n 12 --temp 0 "
                        "2>/dev/null", cli, model);
    ck_assert_int_eq(rc, 0);
    /* stdout: answer 1, /stats (describe line with the budgets, then the
     * rates), answer 2, the reset note, answer 3 */
    /* the demo model's own default KV: k8v4 on a card, f16 on the CPU */
    const char *budgets = strstr(out, "KV f16");
    if (!budgets)
        budgets = strstr(out, "KV k8v4");
    ck_assert_msg(budgets != NULL, "/stats lacks the budgets:\n%s", out);
    const char *describe = budgets;
    while (describe > out && describe[-1] != '\n')
        describe--;
    const char *stats = strstr(describe, "tok/s");
    const char *reset = strstr(out, "(conversation reset)\n");
    ck_assert_msg(stats && reset && stats < reset, "stats/reset missing or misordered:\n%s", out);
    ck_assert_msg(describe - out > 1, "no first answer before /stats:\n%s", out);
    const char *nl = strchr(stats, '\n');
    ck_assert_msg(nl && reset - nl > 2, "no second answer between /stats and /reset:\n%s", out);
    /* after /reset the same question gets the same greedy answer as the
     * first time: the history really was forgotten */
    const char *third = reset + strlen("(conversation reset)\n");
    size_t first_len = (size_t)(describe - out);
    ck_assert_msg(strlen(third) >= first_len && !strncmp(out, third, first_len),
                  "answer after /reset differs from the first:\n%s", out);
    ck_assert_msg(strstr(out, "4") != NULL, "2+2 not answered:\n%s", out);
    free(out);
}
END_TEST

/* ---- chat on a pseudo-terminal (tmux) -------------------------------- */

typedef struct tmux_t {
    char sock[1024], sess[32];
} tmux_t;

static int tmux(const tmux_t *t, char **out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tmux(const tmux_t *t, char **out, const char *fmt, ...)
{
    char args[2048], cmd[3200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "tmux -S '%s' %s 2>&1", t->sock, args);
    return test_run(cmd, out);
}

/* The pane's text (history included), malloc'd. */
static char *pane(const tmux_t *t)
{
    char *out = NULL;
    tmux(t, &out, "capture-pane -p -J -S -1000 -t %s", t->sess);
    return out ? out : strdup("");
}

static int count_str(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

/* Wait until the pane shows `sub` at least `times` times; 1 if it did. */
static int wait_for(const tmux_t *t, const char *sub, int times, int seconds)
{
    for (int i = 0; i < seconds * 5; i++) {
        char *p = pane(t);
        int n = count_str(p, sub);
        free(p);
        if (n >= times)
            return 1;
        usleep(200000);
    }
    return 0;
}

static int pane_dead(const tmux_t *t)
{
    char *out = NULL;
    tmux(t, &out, "display-message -p -t %s '#{pane_dead}'", t->sess);
    int dead = !out || out[0] != '0';
    free(out);
    return dead;
}

/* ck_assert_msg that first stops the test's private tmux server, so a
 * failing run leaves no chat process behind. */
#define TMUX_CHECK(t, cond, ...)                                              \
    do {                                                                      \
        if (!(cond)) {                                                        \
            tmux((t), NULL, "kill-server");                                   \
            ck_abort_msg(__VA_ARGS__);                                        \
        }                                                                     \
    } while (0)

START_TEST(test_chat_tty)
{
    NEED_CLI();
    NEED_MODEL();
    if (system("command -v tmux >/dev/null 2>&1") != 0)
        TEST_SKIP("tool", "tmux not installed (apt-get install tmux)");
    /* a private server socket in the test's directory: never touches
     * anyone else's tmux, and goes with the directory */
    tmux_t t;
    const char *dir = test_tmpdir();
    ck_assert_ptr_nonnull(dir);
    snprintf(t.sock, sizeof t.sock, "%s/tmux.sock", dir);
    snprintf(t.sess, sizeof t.sess, "chat");
    /* On the CPU: a card finishes a 2000-token answer before the Ctrl-C
     * six seconds in (seen on the H200), and this test is about the front
     * end, not the backend. */
    ck_assert_int_eq(tmux(&t, NULL, "new-session -d -s %s -x 160 -y 50 "
                                    "\"'%s' chat -m '%s' -n 2000 --temp 0 --backend cpu\"",
                                    t.sess, cli, model),
                     0);
    tmux(&t, NULL, "set-option -t %s remain-on-exit on", t.sess);
    /* the prompt "> " follows the banner once the weights are loaded */
    TMUX_CHECK(&t, wait_for(&t, "Ctrl-C stops an answer", 1, 60), "no banner");
    TMUX_CHECK(&t, wait_for(&t, "> ", 1, 30), "no prompt");
    tmux(&t, NULL, "send-keys -t %s 'What is 2+2?' Enter", t.sess);
    int ok = wait_for(&t, "> ", 2, 180);
    char *p = pane(&t);
    TMUX_CHECK(&t, ok, "first answer did not finish:\n%s", p);
    free(p);

    /* a long answer, interrupted after a few seconds */
    tmux(&t, NULL, "send-keys -t %s 'Write a very long story about a dragon and a knight.' Enter",
         t.sess);
    sleep(6);
    tmux(&t, NULL, "send-keys -t %s C-c", t.sess);
    ok = wait_for(&t, "(answer stopped)", 1, 30);
    p = pane(&t);
    TMUX_CHECK(&t, ok, "Ctrl-C did not stop the answer:\n%s", p);
    free(p);
    TMUX_CHECK(&t, !pane_dead(&t), "chat died on Ctrl-C");
    TMUX_CHECK(&t, wait_for(&t, "> ", 3, 30), "no prompt after Ctrl-C");

    /* still answering */
    tmux(&t, NULL, "send-keys -t %s 'What is 3+3?' Enter", t.sess);
    ok = wait_for(&t, "> ", 4, 180);
    p = pane(&t);
    TMUX_CHECK(&t, ok, "no answer after Ctrl-C:\n%s", p);
    /* the text between the question and the next prompt is the answer */
    const char *q = strstr(p, "3+3?");
    const char *next = q ? strstr(q, "> ") : NULL;
    TMUX_CHECK(&t, next && next - q > (long)strlen("3+3?") + 2, "empty answer:\n%s", p);
    free(p);

    /* the stopped answer stayed in its slot with the turns before it (the
     * scheduler keeps a cancelled conversation resident): the last turn
     * reused it and read only the rest */
    tmux(&t, NULL, "send-keys -t %s /stats Enter", t.sess);
    ok = wait_for(&t, "conversation cache:", 1, 30);
    p = pane(&t);
    const char *sl = strstr(p, "strata: prompt ");
    int n_prompt = 0, n_reused = 0;
    TMUX_CHECK(&t, ok && sl && sscanf(sl, "strata: prompt %d tok: %d reused", &n_prompt,
                                      &n_reused) == 2, "no /stats:\n%s", p);
    TMUX_CHECK(&t, n_reused > 0 && n_reused < n_prompt,
               "last turn reused %d of %d prompt tokens:\n%s", n_reused, n_prompt, p);
    free(p);

    tmux(&t, NULL, "send-keys -t %s /quit Enter", t.sess);
    for (int i = 0; i < 50 && !pane_dead(&t); i++)
        usleep(200000);
    TMUX_CHECK(&t, pane_dead(&t), "/quit did not end the program");
    char *st = NULL;
    tmux(&t, &st, "display-message -p -t %s '#{pane_dead_status}'", t.sess);
    TMUX_CHECK(&t, st && atoi(st) == 0, "exit status %s", st ? st : "?");
    free(st);
    tmux(&t, NULL, "kill-server");
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_bench_modes);
    tcase_add_test(tc, test_bench_moe_counts_read_experts);
    tcase_add_test(tc, test_bench_clients_answers);
    tcase_add_test(tc, test_perplexity_short_text);
    tcase_add_test(tc, test_run_deterministic);
    tcase_add_test(tc, test_chat_pipe);
    tcase_add_test(tc, test_chat_tty);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(cli_suite)
