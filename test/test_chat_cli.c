/* test_chat_cli.c: suite "chat_cli": `strata-cli chat` on the scheduler, end
 * to end through a pipe.
 *
 *   - a follow-up turn reuses the whole previous turn, kept in its slot by
 *     the scheduler (resident reuse): exactly its prompt and answer tokens
 *     (read from /stats), and reads only the new ones;
 *   - /reset and /system start a new conversation: nothing is reused;
 *   - the answers are the same with the conversation cache off, where
 *     follow-ups still reuse the slot and nothing is restored;
 *   - Ctrl-C (SIGINT) during an answer cancels it, keeps what was said in
 *     the history and returns to the prompt (demo model: it must still be
 *     answering when the signal comes; the tiny model finishes too fast);
 *   - an empty answer (a stop token sampled first): /stats gives the
 *     prompt's read time and says no token came.
 *
 * The tiny generated llama (test_tiny_llama) answers in milliseconds; its
 * text is noise (NUL bytes included: the output goes through tr or od
 * before it becomes a C string), the token counts are what is checked. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/make/mkmodel.h"

#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)")

static const char *tiny_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("chat-cli-llama", 400, 11);
    return path;
}

/* The tiny llama with output.weight all zeros: every logit is 0, so greedy
 * sampling takes the lowest id, MKMODEL_TOKEN_EOT (<|endoftext|>), a stop
 * token: every answer is empty. */
static int make_silent(const char *p, const void *arg, char *why, size_t n_why)
{
    (void)arg;
    /* a copy of the shared tiny llama: the fixture other tests read stays whole */
    if (test_runf(NULL, "cp '%s' '%s'", tiny_model(), p) != 0) {
        snprintf(why, n_why, "cannot copy %s to %s", tiny_model(), p);
        return -1;
    }
    gguf *g = NULL;
    strata_error err = {0};
    if (gguf_open(p, &g, &err) != 0) {
        snprintf(why, n_why, "%s", err.msg);
        return -1;
    }
    const gguf_tensor *t = gguf_find_tensor(g, "output.weight");
    long off = t ? (long)(gguf_data_offset(g) + t->offset) : 0;
    size_t n = t ? t->nbytes : 0;
    gguf_close(g);
    unsigned char *zeros = calloc(n ? n : 1, 1);
    FILE *f = fopen(p, "r+b");
    int ok = t && zeros && f && fseek(f, off, SEEK_SET) == 0 && fwrite(zeros, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    free(zeros);
    if (!ok)
        snprintf(why, n_why, "cannot zero output.weight in %s", p);
    return ok ? 0 : -1;
}

static const char *silent_model(void)
{
    static const char *path;
    if (!path)
        path = test_fixture("tiny-llama-silent-v400-s11.gguf", make_silent, NULL);
    return path;
}

/* One /stats report of the last answer. */
typedef struct turn_stats {
    int prompt, reused, kept, restored, read, gen, ctx;
    char finish[16];
} turn_stats;

/* Parse the k-th (0-based) "strata: prompt" line of out; 0 if absent. */
static int stats_at(const char *out, int k, turn_stats *t)
{
    const char *p = out;
    for (int i = 0; p; i++) {
        p = strstr(p, "strata: prompt ");
        if (!p)
            return 0;
        if (i == k)
            break;
        p++;
    }
    memset(t, 0, sizeof *t);
    if (sscanf(p, "strata: prompt %d tok: %d reused (%d kept in the slot, %d restored in %*f s), "
                  "%d read", &t->prompt, &t->reused, &t->kept, &t->restored, &t->read) != 5)
        return 0;
    const char *d = strstr(p, "decode "), *c = strstr(p, "context "), *f = strstr(p, "finish ");
    return d && c && f && sscanf(d, "decode %d tok", &t->gen) == 1 &&
           sscanf(c, "context %d/", &t->ctx) == 1 && sscanf(f, "finish %15[a-z]", t->finish) == 1;
}

/* Tokens turn t left in the conversation cache: its prompt and every answer
 * token that was fed (after a length finish the last one was sampled, not
 * fed; after a stop all were). */
static int parked(const turn_stats *t)
{
    return t->prompt + t->gen - !strcmp(t->finish, "length");
}

#define TINY_ARGS "-n 16 --temp 0 --backend cpu -t 1"

START_TEST(followup_reuses_previous_turn)
{
    NEED_CLI();
    char *out = NULL;
    int rc = test_runf(&out, "printf 'hello there\\n/stats\\nand again\\n/stats\\nmore please\\n/stats\\n"
                        "/reset\\nhello there\\n/stats\\n/system You are terse.\\nhello there\\n"
                        "/stats\\n' | '%s' chat -m '%s' " TINY_ARGS " 2>&1 | tr -d '\\000'",
                  cli, tiny_model());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    turn_stats t[5];
    for (int k = 0; k < 5; k++)
        ck_assert_msg(stats_at(out, k, &t[k]), "no /stats %d:\n%s", k + 1, out);
    /* turn 1: nothing to reuse; its answer is part of the conversation */
    ck_assert_int_eq(t[0].reused, 0);
    ck_assert_int_eq(t[0].read, t[0].prompt);
    ck_assert_msg(t[0].gen > 0, "turn 1 answered nothing: nothing of an answer is tested");
    ck_assert_int_eq(t[0].ctx, t[0].prompt + t[0].gen);
    /* turns 2 and 3: the previous turn, exactly, was still in the slot; only
     * the end-of-turn marker and the new user turn were read */
    for (int k = 1; k < 3; k++) {
        ck_assert_msg(t[k].reused == parked(&t[k - 1]) && t[k].kept == t[k].reused,
                      "turn %d reused %d tokens (%d kept), turn %d left %d:\n%s", k + 1,
                      t[k].reused, t[k].kept, k, parked(&t[k - 1]), out);
        ck_assert_int_eq(t[k].read, t[k].prompt - t[k].reused);
        /* the prompt is the conversation so far plus a few new tokens */
        ck_assert_int_gt(t[k].prompt, t[k - 1].ctx);
    }
    /* /reset: the same first question is read again in full, nothing reused */
    ck_assert_int_eq(t[3].reused, 0);
    ck_assert_int_eq(t[3].prompt, t[0].prompt);
    ck_assert_int_eq(t[3].gen, t[0].gen);
    /* /system: a new conversation with another system turn */
    ck_assert_int_eq(t[4].reused, 0);
    ck_assert_int_ne(t[4].prompt, t[0].prompt);
    ck_assert_msg(strstr(out, "K/V reused") != NULL, "no cache line in /stats:\n%s", out);
    free(out);
}
END_TEST

START_TEST(cache_off_same_answers)
{
    NEED_CLI();
    const char *in = "printf 'hello there\\nand again\\nmore please\\n'";
    char *on = NULL, *off = NULL, *st = NULL;
    /* od: the noise the random model says may hold NUL bytes */
    ck_assert_int_eq(test_runf(&on, "%s | '%s' chat -m '%s' " TINY_ARGS " 2>/dev/null | od -c", in, cli,
                          tiny_model()), 0);
    ck_assert_int_eq(test_runf(&off, "%s | '%s' chat -m '%s' " TINY_ARGS
                                " --conversation-cache-mib 0 2>/dev/null | od -c", in, cli,
                                tiny_model()),
                     0);
    ck_assert_msg(strlen(on) > 60, "no answers: '%s'", on);
    ck_assert_str_eq(on, off);
    /* with the cache off the follow-up still reuses the slot; nothing is restored */
    ck_assert_int_eq(test_runf(&st, "printf 'hello there\\nand again\\n/stats\\n' | '%s' chat -m '%s' "
                               TINY_ARGS " --conversation-cache-mib 0 2>&1 | tr -d '\\000'",
                          cli, tiny_model()),
                     0);
    turn_stats t;
    ck_assert_msg(stats_at(st, 0, &t), "no /stats:\n%s", st);
    ck_assert_int_eq(t.restored, 0);
    ck_assert_int_gt(t.kept, 0);
    ck_assert_int_eq(t.read, t.prompt - t.kept);
    ck_assert_msg(strstr(st, "conversation cache: off") != NULL, "%s", st);
    free(on);
    free(off);
    free(st);
}
END_TEST

/* SIGINT to a chat reading a pipe, while it answers: the answer stops, the
 * program goes on (/stats, /quit, exit 0) and keeps the partial answer. */
START_TEST(sigint_cancels_the_answer)
{
    NEED_CLI();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)");
    const char *dir = test_tmpdir();
    char *out = NULL;
    /* The fifo keeps stdin open between the lines; the signal goes as soon
     * as the answer's first bytes are out. */
    int rc = test_runf(&out,
                  "cd '%s' && mkfifo in && { '%s' chat -m '%s' -n 2000 --temp 0 --backend cpu "
                  "<in >out 2>err & pid=$!; exec 3>in; "
                  "echo 'Write a very long story about a dragon and a knight.' >&3; i=0; "
                  "while [ ! -s out ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done; "
                  "kill -INT $pid; i=0; "
                  "while ! grep -q 'answer stopped' err && [ $i -lt 300 ]; do sleep 0.1; "
                  "i=$((i+1)); done; printf '/stats\\n/quit\\n' >&3; exec 3>&-; wait $pid; "
                  "echo \"exit=$?\"; cat out err; }",
                  dir, cli, model);
    ck_assert_msg(rc == 0, "chat under SIGINT: rc %d:\n%s", rc, out ? out : "");
    ck_assert_msg(strstr(out, "exit=0\n") != NULL, "chat did not exit cleanly:\n%s", out);
    ck_assert_msg(strstr(out, "(answer stopped)") != NULL, "not stopped:\n%s", out);
    turn_stats t;
    ck_assert_msg(stats_at(out, 0, &t), "no /stats after Ctrl-C:\n%s", out);
    ck_assert_str_eq(t.finish, "cancelled");
    ck_assert_msg(strstr(out, "[interrupted]") != NULL, "%s", out);
    /* well short of 2000 tokens, and all of it kept in the conversation */
    ck_assert_int_gt(t.gen, 0);
    ck_assert_int_lt(t.gen, 1000);
    ck_assert_int_eq(t.ctx, t.prompt + t.gen);
    free(out);
}
END_TEST

/* A stop token sampled first: an empty answer.  /stats must still time the
 * reading (it ends at that sample, not at a first token that never came:
 * "read (-0.00 s" once) and say that no token came, not give a time to it
 * ("first token after 0.000 s" once). */
START_TEST(empty_answer_stats)
{
    NEED_CLI();
    ck_assert_int_eq(MKMODEL_TOKEN_EOT, 0); /* the lowest id, as silent_model needs */
    char *out = NULL;
    int rc = test_runf(&out, "printf 'hello there\\n/stats\\nand again\\n/stats\\n' | '%s' chat "
                             "-m '%s' " TINY_ARGS " 2>&1 | tr -d '\\000'", cli, silent_model());
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    for (int k = 0; k < 2; k++) {
        turn_stats t;
        ck_assert_msg(stats_at(out, k, &t), "no /stats %d:\n%s", k + 1, out);
        ck_assert_msg(t.gen == 0 && !strcmp(t.finish, "stop"),
                      "turn %d: %d tokens, finish %s: the model is not silent:\n%s", k + 1,
                      t.gen, t.finish, out);
        ck_assert_int_eq(t.ctx, t.prompt);
    }
    const char *p = out;
    for (int k = 0; k < 2; k++) {
        p = strstr(p, " read (");
        ck_assert_msg(p != NULL, "no read time in /stats %d:\n%s", k + 1, out);
        double s = -1;
        p += strlen(" read (");
        ck_assert_msg(*p != '-' && sscanf(p, "%lf s", &s) == 1 && s >= 0,
                      "/stats %d: negative read time:\n%s", k + 1, out);
    }
    ck_assert_msg(strstr(out, "first token after") == NULL, "a first-token time with no token:\n%s",
                  out);
    ck_assert_msg(strstr(out, "no token") != NULL, "/stats does not say no token came:\n%s", out);
    free(out);
}
END_TEST

/* `strata-cli chat --backend cuda` with the demo model: two turns on the
 * card, the first answered right (greedy), the second continuing the first
 * from its slot (every token of turn 1 reused, only the new ones read). */
START_TEST(demo_chat_on_the_card)
{
    NEED_CLI();
    const char *why = NULL;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)");
    char *out = NULL;
    int rc = test_runf(&out, "printf 'What is the capital of France?\\n/stats\\nAnd of "
                             "Germany?\\n/stats\\n/quit\\n' | '%s' chat -m '%s' -n 64 --temp 0 "
                             "--backend cuda 2>&1; echo \"exit=$?\"", cli, model);
    ck_assert_msg(rc == 0 && strstr(out, "exit=0\n"), "chat --backend cuda failed:\n%s", out);
    ck_assert_msg(strstr(out, "on the card") != NULL, "not on the card:\n%s", out);
    ck_assert_msg(strstr(out, "Paris") != NULL, "the first answer lacks Paris:\n%s", out);
    turn_stats t1, t2;
    ck_assert_msg(stats_at(out, 0, &t1) && stats_at(out, 1, &t2), "no /stats:\n%s", out);
    ck_assert_msg(t1.gen > 0 && t2.gen > 0, "an empty answer:\n%s", out);
    ck_assert_int_eq(t2.reused, parked(&t1));
    ck_assert_int_eq(t2.read, t2.prompt - t2.reused);
    free(out);
}
END_TEST

/* -n 0 is refused: the scheduler reads max_tokens <= 0 as no limit. */
START_TEST(n_zero_is_a_clear_error)
{
    NEED_CLI();
    char *out = NULL;
    int rc = test_runf(&out, "'%s' chat -m '%s' -n 0 </dev/null 2>&1", cli, tiny_model());
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(out, "-n 0") != NULL, "%s", out);
    free(out);
}
END_TEST

static Suite *chat_cli_suite(void)
{
    Suite *s = suite_create("chat_cli");
    TCase *tc = tcase_create("chat_cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, followup_reuses_previous_turn);
    tcase_add_test(tc, cache_off_same_answers);
    tcase_add_test(tc, sigint_cancels_the_answer);
    tcase_add_test(tc, n_zero_is_a_clear_error);
    tcase_add_test(tc, empty_answer_stats);
    tcase_add_test(tc, demo_chat_on_the_card);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(chat_cli_suite)
