/* test_scheduler.c: batch slots and the request API (sched/scheduler.h).
 *
 * The judge is the engine alone: every request's greedy tokens must equal
 * what strata_seq_feed + strata_seq_decode + argmax give for its prompt on a
 * sequence of its own, bit for bit, however the scheduler batches, chunks
 * and interleaves it.  The demo model keeps this honest (a random model's
 * argmax ties would hide little), so the tests skip without it.  CPU decode
 * is a few tokens per second on a small machine: prompts and answers are
 * short. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler.h"
#include "engine/strata.h"
#include "kernels/ops.h"
#include "model/quant.h"
#include "text/tokenizer.h"
#include "test_scheduler.h"

static strata_engine *open_engine(int slots)
{
    strata_params p = test_params(test_demo_model(), STRATA_BACKEND_CPU);
    p.n_slots = slots;
    p.n_ctx = 384;
    p.n_chunk = 32;
    return test_open(&p);
}

/* n deterministic prompt tokens (ordinary vocabulary, no control ids). */
static int32_t *make_prompt(int n, uint64_t seed)
{
    int32_t *t = malloc(sizeof *t * (size_t)n);
    uint64_t st = seed * 7919 + 1;
    for (int i = 0; i < n; i++)
        t[i] = 300 + (int32_t)(test_rand_u64(&st) % 20000);
    return t;
}

/* Tokens a callback request produced (the orchestration thread writes,
 * the test reads after sched_wait). */
typedef struct collect {
    int32_t toks[64];
    int n;
    int stop_after;   /* > 0: return non-zero at this many tokens */
} collect;

static int collect_token(int32_t tok, const char *text, size_t len, void *user)
{
    (void)text;
    (void)len;
    collect *c = user;
    if (tok < 0)
        return 0;
    if (c->n < 64)
        c->toks[c->n++] = tok;
    return c->stop_after > 0 && c->n >= c->stop_after;
}

/* 8 conversations of different lengths through 4 slots: half read through
 * the queue, half through a callback; the prompts are read in chunks of 8.
 * The last four wait for a slot. */
START_TEST(eight_conversations_equal_solo)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    enum { N = 8, GEN = 4 };
    static const int lens[N] = {3, 21, 7, 12, 30, 5, 17, 9};
    strata_engine *e = open_engine(4);
    int32_t *prompts[N], want[N][GEN];
    int n_want[N];
    for (int q = 0; q < N; q++) {
        prompts[q] = make_prompt(lens[q], (uint64_t)q + 1);
        n_want[q] = sched_test_solo(e, prompts[q], lens[q], GEN, want[q]);
    }
    /* The comparison has teeth only if the answers are not all empty. */
    int total = 0;
    for (int q = 0; q < N; q++)
        total += n_want[q];
    ck_assert_int_ge(total, N * GEN / 2);
    trace *tr = calloc(1, sizeof *tr);
    sched_params sp = sched_params_default();
    sp.chunk = 8;
    sp.on_step = record_step;
    sp.step_user = tr;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    ck_assert_int_eq(sched_n_slots(s), 4);
    sched_handle *h[N];
    collect col[N];
    memset(col, 0, sizeof col);
    for (int q = 0; q < N; q++) {
        sched_request r = sched_test_greedy(prompts[q], lens[q], GEN);
        if (q % 2) {
            r.on_token = collect_token;
            r.user = &col[q];
        }
        ck_assert_msg(sched_submit(s, &r, &h[q], &err) == 0, "%s", err.msg);
    }
    for (int q = 0; q < N; q++) {
        int32_t got[64];
        int n = q % 2 ? 0 : sched_test_drain(h[q], got, 64);
        sched_result res;
        ck_assert_int_eq(sched_wait(h[q], &res), 0);
        if (q % 2) {
            n = col[q].n;
            memcpy(got, col[q].toks, sizeof(int32_t) * (size_t)n);
        }
        sched_test_expect("conversation", q, got, n, want[q], n_want[q]);
        ck_assert_int_eq(res.n_gen, n_want[q]);
        ck_assert_int_eq(res.n_prompt, lens[q]);
        ck_assert_int_eq(res.finish, n_want[q] == GEN ? SCHED_FINISH_LENGTH : SCHED_FINISH_STOP);
        ck_assert(res.t_first >= res.t_admit && res.t_done >= res.t_first);
        sched_handle_free(h[q]);
    }
    sched_free(s);
    /* More requests than slots: some waited, and decode steps carried
     * several slots at once (the point of slots). */
    int max_batch = 0;
    for (int i = 0; i < tr->n; i++)
        if (tr->steps[i].n_decode > max_batch)
            max_batch = tr->steps[i].n_decode;
    ck_assert_int_ge(tr->max_queued, 1);
    ck_assert_int_ge(max_batch, 2);
    ck_assert_int_le(max_batch, 4);
    free(tr);
    for (int q = 0; q < N; q++)
        free(prompts[q]);
    strata_close(e);
}
END_TEST

/* A 300-token prompt read in chunks of 32 while three others decode: the
 * others take a step between its chunks, and everyone's tokens stay solo. */
START_TEST(long_prompt_does_not_stop_the_others)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    enum { N = 4, LONG = 300, GEN = 12, LONG_GEN = 3 };
    static const int lens[N] = {6, 9, 4, LONG};
    strata_engine *e = open_engine(4);
    int32_t *prompts[N], want[N][GEN];
    int n_want[N];
    for (int q = 0; q < N; q++) {
        prompts[q] = make_prompt(lens[q], (uint64_t)q + 100);
        n_want[q] = sched_test_solo(e, prompts[q], lens[q], q == 3 ? LONG_GEN : GEN, want[q]);
    }
    trace *tr = calloc(1, sizeof *tr);
    sched_params sp = sched_params_default();
    sp.chunk = 32;
    sp.on_step = record_step;
    sp.step_user = tr;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    sched_handle *h[N];
    for (int q = 0; q < N; q++) {
        sched_request r = sched_test_greedy(prompts[q], lens[q], q == 3 ? LONG_GEN : GEN);
        ck_assert_msg(sched_submit(s, &r, &h[q], &err) == 0, "%s", err.msg);
    }
    sched_result res[N];
    for (int q = 0; q < N; q++) {
        int32_t got[64];
        int n = sched_test_drain(h[q], got, 64);
        ck_assert_int_eq(sched_wait(h[q], &res[q]), 0);
        sched_test_expect("request", q, got, n, want[q], n_want[q]);
    }
    sched_free(s);
    /* The long prompt's chunks, and what decoded beside each. */
    uint64_t long_id = sched_handle_id(h[3]);
    int chunks = 0, interleaved = 0, read = 0;
    for (int i = 0; i < tr->n; i++)
        if (tr->steps[i].prefill_id == long_id) {
            chunks++;
            read += tr->steps[i].prefill_tokens;
            ck_assert_int_le(tr->steps[i].prefill_tokens, 32);
            interleaved += tr->steps[i].n_decode > 0;
        }
    ck_assert_int_eq(read, LONG);
    ck_assert_int_eq(chunks, (LONG + 31) / 32);
    /* The short ones started decoding before the long prompt's second
     * chunk; unless all three stopped early they decoded beside each chunk. */
    int min_gen = GEN;
    for (int q = 0; q < 3; q++)
        min_gen = n_want[q] < min_gen ? n_want[q] : min_gen;
    ck_assert_int_ge(min_gen, 4); /* else the prompts need changing */
    ck_assert_int_ge(interleaved, min_gen < chunks ? min_gen : chunks);
    for (int q = 0; q < 3; q++)
        ck_assert_msg(res[q].t_first < res[3].t_first,
                      "request %d waited for the long prompt (ttft %.3f s vs %.3f s)", q,
                      res[q].t_first, res[3].t_first);
    for (int q = 0; q < N; q++) {
        sched_handle_free(h[q]);
        free(prompts[q]);
    }
    free(tr);
    strata_close(e);
}
END_TEST

/* One slot: a cancelled request gives the slot up at the next step and the
 * one waiting behind it runs; a queued request cancelled before admission
 * never runs; a callback's non-zero return cancels too. */
START_TEST(cancel_frees_the_slot)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    strata_engine *e = open_engine(1);
    int32_t *pa = make_prompt(5, 1), *pb = make_prompt(6, 2), *pc = make_prompt(4, 3);
    int32_t want_b[3];
    int n_want_b = sched_test_solo(e, pb, 6, 3, want_b);
    trace *tr = calloc(1, sizeof *tr);
    sched_params sp = sched_params_default();
    sp.on_step = record_step;
    sp.step_user = tr;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);

    sched_request ra = sched_test_greedy(pa, 5, 200);
    sched_handle *ha, *hq, *hb, *hc;
    ck_assert_int_eq(sched_submit(s, &ra, &ha, &err), 0);
    sched_request rq = sched_test_greedy(pc, 4, 3);
    ck_assert_int_eq(sched_submit(s, &rq, &hq, &err), 0);
    sched_request rb = sched_test_greedy(pb, 6, 3);
    ck_assert_int_eq(sched_submit(s, &rb, &hb, &err), 0);
    sched_cancel(hq); /* still queued behind a */

    int32_t t;
    ck_assert_int_eq(sched_next(ha, &t, -1), 1);
    ck_assert_int_eq(sched_next(ha, &t, -1), 1);
    int at_cancel = atomic_load(&tr->recorded);
    sched_cancel(ha);
    sched_result r;
    ck_assert_int_eq(sched_wait(ha, &r), 0);
    ck_assert_int_eq(r.finish, SCHED_FINISH_CANCELLED);
    ck_assert_int_lt(r.n_gen, 200);
    /* Tokens produced before the cancel was seen stay readable. */
    int left = 0;
    while (sched_next(ha, &t, 0) == 1)
        left++;
    ck_assert_int_eq(left, r.n_gen - 2);

    ck_assert_int_eq(sched_wait(hq, &r), 0);
    ck_assert_int_eq(r.finish, SCHED_FINISH_CANCELLED);
    ck_assert_int_eq(r.slot, -1);
    ck_assert_int_eq(r.n_gen, 0);
    ck_assert_int_eq(sched_next(hq, &t, 0), 0);

    int32_t got[8];
    int n = sched_test_drain(hb, got, 8);
    ck_assert_int_eq(sched_wait(hb, &r), 0);
    sched_test_expect("after cancel", 0, got, n, want_b, n_want_b);
    ck_assert_int_eq(r.slot, 0);

    /* Cancel from the callback after two tokens. */
    collect col = {.stop_after = 2};
    sched_request rc_ = sched_test_greedy(pc, 4, 50);
    rc_.on_token = collect_token;
    rc_.user = &col;
    ck_assert_int_eq(sched_submit(s, &rc_, &hc, &err), 0);
    ck_assert_int_eq(sched_wait(hc, &r), 0);
    ck_assert_int_eq(r.finish, SCHED_FINISH_CANCELLED);
    ck_assert_int_eq(r.n_gen, 2);
    ck_assert_int_eq(col.n, 2);

    uint64_t q_id = sched_handle_id(hq), b_id = sched_handle_id(hb);
    sched_free(s);
    /* Read after sched_free: the step hook runs on the orchestration thread.
     * After the cancel, a took at most the step already under way: the
     * next one admitted b (with one slot, every decode step before b's
     * prompt is a's).  The cancelled queued request never ran. */
    int a_steps_after = 0, b_at = -1;
    for (int i = 0; i < tr->n; i++) {
        ck_assert(tr->steps[i].prefill_id != q_id);
        if (tr->steps[i].prefill_id == b_id && b_at < 0)
            b_at = i;
        if (b_at < 0 && i >= at_cancel && tr->steps[i].n_decode)
            a_steps_after++;
    }
    ck_assert_int_ge(b_at, 0);
    ck_assert_int_le(a_steps_after, 1);
    sched_handle_free(ha);
    sched_handle_free(hq);
    sched_handle_free(hb);
    sched_handle_free(hc);
    free(tr);
    free(pa);
    free(pb);
    free(pc);
    strata_close(e);
}
END_TEST

/* Several threads submit at once through 2 slots; each gets its own
 * prompt's solo tokens. */
typedef struct submitter {
    strata_sched *s;
    const int32_t *prompt[2];
    int len[2];
    int32_t got[2][8];
    int n_got[2];
    int rc;
} submitter;

static void *submit_thread(void *arg)
{
    submitter *sb = arg;
    for (int k = 0; k < 2; k++) {
        sched_request r = sched_test_greedy(sb->prompt[k], sb->len[k], 3);
        sched_handle *h;
        strata_error err = {0};
        if ((sb->rc = sched_submit(sb->s, &r, &h, &err)))
            return NULL;
        sb->n_got[k] = sched_test_drain(h, sb->got[k], 8);
        sb->rc = sched_wait(h, NULL);
        sched_handle_free(h);
        if (sb->rc)
            return NULL;
    }
    return NULL;
}

START_TEST(concurrent_submitters)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    enum { T = 4 };
    strata_engine *e = open_engine(2);
    int32_t *p0 = make_prompt(4, 11), *p1 = make_prompt(7, 12), want[2][3];
    int n_want[2] = {sched_test_solo(e, p0, 4, 3, want[0]), sched_test_solo(e, p1, 7, 3, want[1])};
    strata_error err = {0};
    strata_sched *s = sched_new(e, NULL, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    submitter sb[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        memset(&sb[i], 0, sizeof sb[i]);
        sb[i].s = s;
        /* Half the threads start with the other prompt. */
        sb[i].prompt[0] = i % 2 ? p1 : p0;
        sb[i].len[0] = i % 2 ? 7 : 4;
        sb[i].prompt[1] = i % 2 ? p0 : p1;
        sb[i].len[1] = i % 2 ? 4 : 7;
        ck_assert_int_eq(pthread_create(&th[i], NULL, submit_thread, &sb[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(sb[i].rc, 0);
        for (int k = 0; k < 2; k++) {
            int w = sb[i].prompt[k] == p0 ? 0 : 1;
            sched_test_expect("thread", i, sb[i].got[k], sb[i].n_got[k], want[w], n_want[w]);
        }
    }
    sched_free(s);
    free(p0);
    free(p1);
    strata_close(e);
}
END_TEST

/* sched_free with requests running and queued: every one finishes as
 * cancelled, the handles stay readable, nothing leaks (ASan build); a
 * handle freed while its request runs is released by the scheduler. */
START_TEST(free_with_pending_requests)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    strata_engine *e = open_engine(1);
    int32_t *p = make_prompt(5, 7);
    strata_error err = {0};
    strata_sched *s = sched_new(e, NULL, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    enum { N = 4 };
    sched_handle *h[N], *orphan;
    for (int q = 0; q < N; q++) {
        sched_request r = sched_test_greedy(p, 5, 300);
        ck_assert_int_eq(sched_submit(s, &r, &h[q], &err), 0);
    }
    sched_request r = sched_test_greedy(p, 5, 300);
    ck_assert_int_eq(sched_submit(s, &r, &orphan, &err), 0);
    sched_handle_free(orphan); /* queued, nobody listens: dropped */
    int32_t t;
    ck_assert_int_eq(sched_next(h[0], &t, -1), 1);
    sched_free(s);
    for (int q = 0; q < N; q++) {
        sched_result res;
        ck_assert_int_eq(sched_wait(h[q], &res), 0);
        ck_assert_int_eq(res.finish, SCHED_FINISH_CANCELLED);
        if (q > 0)
            ck_assert_int_eq(res.n_gen, 0);
        sched_handle_free(h[q]);
    }
    free(p);
    strata_close(e);
}
END_TEST

/* A request made of chat messages is rendered with the model's format and
 * gives the same tokens as its rendering submitted as ids; callbacks get
 * the text. */
typedef struct textbuf {
    char s[512];
    size_t n;
} textbuf;

static int append_text(int32_t tok, const char *text, size_t len, void *user)
{
    (void)tok;
    textbuf *b = user;
    if (b->n + len < sizeof b->s) {
        memcpy(b->s + b->n, text, len);
        b->n += len;
        b->s[b->n] = 0;
    }
    return 0;
}

START_TEST(chat_messages_request)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    strata_engine *e = open_engine(2);
    strata_error err = {0};
    strata_sched *s = sched_new(e, NULL, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    chat_msg msgs[1] = {{"user", "What is the capital of France?"}};
    textbuf tb = {0};
    sched_request r = sched_request_default();
    r.sampling.temp = 0;
    r.messages = msgs;
    r.n_messages = 1;
    r.max_tokens = 4;
    r.on_token = append_text;
    r.user = &tb;
    sched_handle *h;
    ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
    sched_result res;
    ck_assert_int_eq(sched_wait(h, &res), 0);
    ck_assert_int_gt(res.n_prompt, 10);
    ck_assert_int_eq(res.n_gen, 4);
    ck_assert_msg(tb.n > 0, "no text reached the callback");
    sched_handle_free(h);
    sched_free(s);
    strata_close(e);
}
END_TEST

/* Requests the scheduler cannot run are refused at submission. */
START_TEST(bad_requests_are_refused)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    strata_engine *e = open_engine(1);
    strata_error err = {0};
    strata_sched *s = sched_new(e, NULL, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    sched_handle *h = (sched_handle *)1;
    sched_request r = sched_request_default();
    ck_assert_int_eq(sched_submit(s, &r, &h, &err), STRATA_E_ARG);
    ck_assert_ptr_null(h);
    int32_t bad[2] = {5, 1 << 30};
    r = sched_test_greedy(bad, 2, 1);
    ck_assert_int_eq(sched_submit(s, &r, &h, &err), STRATA_E_ARG);
    ck_assert_msg(strstr(err.msg, "vocabulary"), "%s", err.msg);
    int32_t *big = make_prompt(strata_n_ctx(e) + 1, 3);
    r = sched_test_greedy(big, strata_n_ctx(e) + 1, 1);
    ck_assert_int_eq(sched_submit(s, &r, &h, &err), STRATA_E_LIMIT);
    free(big);
    sched_free(s);
    strata_close(e);
}
END_TEST

/* ---- the conversation cache ------------------------------------------------
 *
 * A small generated llama (mkmodel: 4 layers, so a split of up to 4 stages
 * runs) keeps these fast.  Two conversations, A and B, of three and two
 * turns; each turn's prompt is the previous turn's prompt, its answer and a
 * few new tokens, which is what a client continuing a conversation sends.
 * The judge is the same run with the cache off (every turn re-reads its
 * history): all generated ids must be identical, with the cache on, with
 * a budget so small that images are evicted, serial and parallel stage
 * copies, and several stages. */

#define CC_VOCAB 400

static const char *cache_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("sched-cache-llama", CC_VOCAB, 11);
    return path;
}

typedef struct cache_conf {
    const char *split;      /* --layer-split, or NULL */
    const char *parallel;   /* STRATA_STAGE_COPY_PARALLEL, or NULL (unset) */
    size_t mib;             /* 0: cache off */
    int images;
} cache_conf;

enum { CC_TURNS = 5, CC_GEN = 8, CC_MAXP = 128 };

/* What one run produced, turn by turn (A1 B1 A2 B2 A3). */
typedef struct cache_run {
    int32_t gen[CC_TURNS][CC_GEN];
    int n_gen[CC_TURNS], n_prompt[CC_TURNS], n_restored[CC_TURNS];
    int parked[CC_TURNS];   /* tokens the turn left in its sequence */
    sched_cache_stats st;
} cache_run;

static int cc_backend = STRATA_BACKEND_CPU;   /* the cuda case sets it */

static strata_engine *cache_engine(const cache_conf *c)
{
    if (c->parallel)
        setenv("STRATA_STAGE_COPY_PARALLEL", c->parallel, 1);
    else
        unsetenv("STRATA_STAGE_COPY_PARALLEL");
    strata_params p = test_params(cache_model(), cc_backend);
    p.n_slots = 2;
    p.n_ctx = 256;
    p.n_chunk = 16;
    p.n_threads = 1;
    p.layer_split = c->split;
    strata_engine *e = test_open(&p);
    unsetenv("STRATA_STAGE_COPY_PARALLEL");
    return e;
}

/* One turn: submit conv[0..*n), wait, append the answer and `extra` new
 * tokens to conv for the next turn. */
static void cache_turn(strata_sched *s, cache_run *o, int t, int32_t *conv, int *n,
                       uint64_t extra_seed)
{
    sched_request r = sched_test_greedy(conv, *n, CC_GEN);
    sched_handle *h;
    strata_error err = {0};
    ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
    o->n_gen[t] = sched_test_drain(h, o->gen[t], CC_GEN);
    sched_result res;
    ck_assert_int_eq(sched_wait(h, &res), 0);
    ck_assert(res.finish == SCHED_FINISH_LENGTH || res.finish == SCHED_FINISH_STOP);
    ck_assert_int_eq(res.n_gen, o->n_gen[t]);
    o->n_prompt[t] = res.n_prompt;
    o->n_restored[t] = res.n_restored;
    /* Stop: every answer token was fed; length: all but the last. */
    o->parked[t] = *n + res.n_gen - (res.finish == SCHED_FINISH_LENGTH);
    sched_handle_free(h);
    memcpy(conv + *n, o->gen[t], sizeof(int32_t) * (size_t)o->n_gen[t]);
    *n += o->n_gen[t];
    uint64_t st = extra_seed;
    for (int i = 0; i < 5; i++)
        conv[(*n)++] = 3 + (int32_t)(test_rand_u64(&st) % (CC_VOCAB - 3));
}

static void cache_scenario(const cache_conf *c, cache_run *o)
{
    memset(o, 0, sizeof *o);
    strata_engine *e = cache_engine(c);
    sched_params sp = sched_params_default();
    sp.chunk = 8;
    sp.cache_mib = c->mib;
    sp.cache_slots = c->images;
    /* These cases test the cache: every turn's conversation leaves its slot
     * (resident reuse would keep A and B in their slots and never ask the
     * cache; test_scheduler_kv.c tests that). */
    sp.no_resident_reuse = 1;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    int32_t a[CC_MAXP], b[CC_MAXP];
    int na = 20, nb = 13;
    uint64_t st = 5;
    for (int i = 0; i < na; i++)
        a[i] = 3 + (int32_t)(test_rand_u64(&st) % (CC_VOCAB - 3));
    for (int i = 0; i < nb; i++)
        b[i] = 3 + (int32_t)(test_rand_u64(&st) % (CC_VOCAB - 3));
    cache_turn(s, o, 0, a, &na, 101);  /* A1 */
    cache_turn(s, o, 1, b, &nb, 102);  /* B1 */
    cache_turn(s, o, 2, a, &na, 103);  /* A2: continues A1 */
    cache_turn(s, o, 3, b, &nb, 104);  /* B2 */
    cache_turn(s, o, 4, a, &na, 105);  /* A3: continues A2 (K/V reused) */
    /* A3's capture is counted: sched_wait returned after it. */
    sched_get_cache_stats(s, &o->st);
    sched_free(s);
    strata_close(e);
}

static void expect_same_run(const char *what, const cache_run *got, const cache_run *want)
{
    for (int t = 0; t < CC_TURNS; t++) {
        ck_assert_int_eq(got->n_prompt[t], want->n_prompt[t]);
        sched_test_expect(what, t, got->gen[t], got->n_gen[t], want->gen[t], want->n_gen[t]);
    }
}

/* Every follow-up turn restored exactly the previous turn's parked tokens. */
static void expect_restored(const char *what, const cache_run *o)
{
    static const int prev[CC_TURNS] = {-1, -1, 0, 1, 2};
    for (int t = 0; t < CC_TURNS; t++) {
        int want = prev[t] < 0 ? 0 : o->parked[prev[t]];
        ck_assert_msg(o->n_restored[t] == want, "%s: turn %d restored %d tokens, %d parked", what,
                      t, o->n_restored[t], want);
    }
    ck_assert_int_eq(o->st.on, 1);
    ck_assert_int_eq(o->st.captures, CC_TURNS);
    ck_assert_int_eq(o->st.restores, 3);
    ck_assert_int_eq(o->st.capture_failures, 0);
    /* A2's and A3's captures, B2's: each extends its parked prefix */
    ck_assert_int_eq(o->st.park.captures[PARK_CAPTURE_REUSED], 3);
}

START_TEST(cache_restores_and_matches_rereading)
{
    cache_run *ref = malloc(sizeof *ref), *o = malloc(sizeof *o);
    cache_conf off = {NULL, NULL, 0, 0};
    cache_scenario(&off, ref);
    int total = 0;
    for (int t = 0; t < CC_TURNS; t++) {
        ck_assert_int_eq(ref->n_restored[t], 0);
        total += ref->n_gen[t];
    }
    ck_assert_int_ge(total, CC_TURNS * CC_GEN / 2); /* else nothing is compared */
    ck_assert_int_eq(ref->st.on, 0);

    cache_conf on = {NULL, NULL, 16, 16};
    cache_scenario(&on, o);
    expect_same_run("cache on", o, ref);
    expect_restored("cache on", o);
    ck_assert_int_gt(o->n_restored[2], 20);

    /* One image: each capture evicts the other conversation's, so every
     * turn misses and re-reads, with the same answers. */
    cache_conf tiny = {NULL, NULL, 1, 1};
    cache_scenario(&tiny, o);
    expect_same_run("one image", o, ref);
    for (int t = 0; t < CC_TURNS; t++)
        ck_assert_int_eq(o->n_restored[t], 0);
    ck_assert_int_ge(o->st.cache.evictions, 3);
    ck_assert_int_le(o->st.cache.images, 1);
    free(ref);
    free(o);
}
END_TEST

/* The same answers with the cache off and on, serial and parallel stage
 * copies, one to four stages (on the backend cache_engine opens). */
static void split_serial_parallel(void)
{
    cache_run *ref = malloc(sizeof *ref), *o = malloc(sizeof *o);
    cache_conf off = {NULL, NULL, 0, 0};
    cache_scenario(&off, ref);
    static const cache_conf confs[] = {
        {NULL, "0", 16, 16},       {NULL, "1", 16, 16},
        {"1,2,3", "0", 16, 16},    {"1,2,3", "1", 16, 16},
        {"2", "1", 16, 16},        {"1,2,3", NULL, 0, 0},
    };
    for (size_t k = 0; k < sizeof confs / sizeof *confs; k++) {
        char what[64];
        snprintf(what, sizeof what, "split %s, parallel %s, %zu MiB",
                 confs[k].split ? confs[k].split : "none",
                 confs[k].parallel ? confs[k].parallel : "unset", confs[k].mib);
        cache_scenario(&confs[k], o);
        expect_same_run(what, o, ref);
        if (confs[k].mib)
            expect_restored(what, o);
    }
    free(ref);
    free(o);
}

START_TEST(cache_split_serial_parallel)
{
    split_serial_parallel();
}
END_TEST

/* The same on the card: the stages share it, the cache is the pinned
 * arena, the copies run on the workers' copy streams. */
START_TEST(cache_split_serial_parallel_cuda)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    cc_backend = STRATA_BACKEND_CUDA;
    split_serial_parallel();
    cc_backend = STRATA_BACKEND_CPU;
}
END_TEST

/* ChatML: the next turn's messages (previous ones, the answer as the
 * assistant's content, a new user message) render to tokens that begin
 * with the previous turn's parked tokens, so the cache finds them.  Needs
 * the demo model's real tokenizer and template. */
START_TEST(cache_chat_messages_continue)
{
    if (!test_demo_model())
        TEST_SKIP("model", "demo model not present (make model)");
    strata_engine *e = open_engine(1);
    /* reuse 0: the cache restores the first turn; 1: it stays resident in
     * the slot and the second turn reads only what is new. */
    for (int reuse = 0; reuse < 2; reuse++) {
        sched_params sp = sched_params_default();
        sp.cache_mib = 64;
        sp.no_resident_reuse = !reuse;
        strata_error err = {0};
        strata_sched *s = sched_new(e, &sp, &err);
        ck_assert_msg(s != NULL, "%s", err.msg);
        chat_msg msgs[3] = {{"user", "Name a colour."}, {"assistant", NULL}, {"user", "Another?"}};
        textbuf tb = {0};
        sched_result r1, r2;
        for (int turn = 0; turn < 2; turn++) {
            sched_request r = sched_request_default();
            r.sampling.temp = 0;
            r.messages = msgs;
            r.n_messages = turn ? 3 : 1;
            r.max_tokens = 4;
            r.on_token = append_text;
            r.user = &tb;
            sched_handle *h;
            ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
            ck_assert_int_eq(sched_wait(h, turn ? &r2 : &r1), 0);
            sched_handle_free(h);
            msgs[1].content = tb.s;   /* the answer, as a client sends it back */
        }
        int parked = r1.n_prompt + r1.n_gen - (r1.finish == SCHED_FINISH_LENGTH);
        int got = reuse ? r2.n_resident : r2.n_restored;
        ck_assert_msg(got == parked, "reuse %d: turn 2 kept %d of %d tokens (answer '%s')", reuse,
                      got, parked, tb.s);
        ck_assert_int_eq(reuse ? r2.n_restored : r2.n_resident, 0);
        sched_free(s);
    }
    strata_close(e);
}
END_TEST

static Suite *scheduler_suite(void)
{
    Suite *s = suite_create("scheduler");
    /* Two cases so a slow sanitizer (TSan) can run the threaded API alone:
     * CK_RUN_CASE=api. */
    TCase *api = tcase_create("api");
    tcase_set_timeout(api, 900);
    tcase_add_test(api, bad_requests_are_refused);
    tcase_add_test(api, cancel_frees_the_slot);
    tcase_add_test(api, free_with_pending_requests);
    tcase_add_test(api, concurrent_submitters);
    tcase_add_test(api, chat_messages_request);
    suite_add_tcase(s, api);
    TCase *parity = tcase_create("parity");
    tcase_set_timeout(parity, 900);
    tcase_add_test(parity, eight_conversations_equal_solo);
    tcase_add_test(parity, long_prompt_does_not_stop_the_others);
    suite_add_tcase(s, parity);
    TCase *cache = tcase_create("cache");
    tcase_set_timeout(cache, 900);
    tcase_add_test(cache, cache_restores_and_matches_rereading);
    tcase_add_test(cache, cache_split_serial_parallel);
    tcase_add_test(cache, cache_split_serial_parallel_cuda);
    tcase_add_test(cache, cache_chat_messages_continue);
    suite_add_tcase(s, cache);
    return s;
}

TEST_SUITE(scheduler_suite)
