/* test_scheduler_kv.c: resident reuse and KV room in the scheduler
 * (sched/scheduler.h, sched/sched_slots.c), and what its counters hold
 * when a request is reported finished.  Suite `scheduler`, cases
 * `resident`, `kvroom` and `finish`.
 *
 * A small generated llama (test_tiny_llama: 4 layers, dim 128) on the CPU
 * keeps these fast.  The judges: the same requests with resident reuse off
 * (every turn re-reads), each request's tokens alone on a sequence of its
 * own, and, for a sampled request, the same request in a pool large enough
 * that it is never parked. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>

#include "sched/scheduler.h"
#include "engine/strata.h"
#include "kernels/ops.h"
#include "test_scheduler.h"

#define KV_VOCAB 400

static const char *kv_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("sched-kv-llama", KV_VOCAB, 13);
    return path;
}

/* kv_pages: the per-stage KV pool in pages (0: the engine's default, a
 * whole context per slot). */
static int kv_backend = STRATA_BACKEND_CPU;   /* the cuda case sets it */

static strata_engine *kv_engine(int slots, int n_ctx, int kv_pages, const char *split)
{
    strata_params p = test_params(kv_model(), kv_backend);
    p.n_slots = slots;
    p.n_ctx = n_ctx;
    p.n_chunk = 16;
    p.n_threads = 1;
    p.kv_resident = kv_pages * KV_PAGE;
    p.layer_split = split;
    return test_open(&p);
}

static void rand_tokens(int32_t *t, int n, uint64_t seed)
{
    uint64_t st = seed * 6364136223846793005ULL + 1;
    for (int i = 0; i < n; i++)
        t[i] = 3 + (int32_t)(test_rand_u64(&st) % (KV_VOCAB - 3));
}

/* A step hook that holds the orchestration thread after its first step
 * until the test has submitted everything: then every request is queued
 * before the second step, however slowly the submitting thread runs, and
 * the schedule (one prompt per step, in submission order) is the same in
 * every run. */
typedef struct gate {
    atomic_int open;
} gate;

static void gate_step(const sched_step *st, void *user)
{
    (void)st;
    gate *g = user;
    while (!atomic_load(&g->open))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static strata_sched *kv_sched_hook(strata_engine *e, int reuse, size_t cache_mib, int chunk,
                                   void (*hook)(const sched_step *, void *), void *user)
{
    sched_params sp = sched_params_default();
    sp.chunk = chunk;
    sp.no_resident_reuse = !reuse;
    sp.cache_mib = cache_mib;
    sp.cache_slots = cache_mib ? 16 : 0;
    sp.on_step = hook;
    sp.step_user = user;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    return s;
}

static strata_sched *kv_sched(strata_engine *e, int reuse, size_t cache_mib, int chunk, trace *tr)
{
    return kv_sched_hook(e, reuse, cache_mib, chunk, record_step, tr);
}

/* Prompt tokens the model read for request id (all its chunks). */
static int tokens_read(const trace *tr, uint64_t id)
{
    int n = 0;
    for (int i = 0; i < tr->n; i++)
        if (tr->steps[i].prefill_id == id)
            n += tr->steps[i].prefill_tokens;
    return n;
}

/* ---- resident reuse -------------------------------------------------------- */

enum { RT_GEN = 8, RT_MAXP = 160, RT_TURNS = 6 };

/* One finished turn. */
typedef struct turn {
    int32_t gen[RT_GEN];
    int n_gen;
    sched_result res;
    uint64_t id;
    int read;               /* prompt tokens the model read (step trace) */
    int held;               /* tokens its sequence held at the end */
} turn;

/* Submit conv[0..n), wait, record. */
static void run_turn(strata_sched *s, const int32_t *conv, int n, turn *o)
{
    sched_request r = sched_test_greedy(conv, n, RT_GEN);
    sched_handle *h;
    strata_error err = {0};
    ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
    o->n_gen = sched_test_drain(h, o->gen, RT_GEN);
    ck_assert_int_eq(sched_wait(h, &o->res), 0);
    ck_assert(o->res.finish == SCHED_FINISH_LENGTH || o->res.finish == SCHED_FINISH_STOP);
    /* Stop: every answer token was fed; length: all but the last. */
    o->held = n + o->n_gen - (o->res.finish == SCHED_FINISH_LENGTH);
    o->id = sched_handle_id(h);
    sched_handle_free(h);
}

/* After sched_free (the trace is complete and no longer written). */
static void count_reads(const trace *tr, turn *t, int n)
{
    for (int k = 0; k < n; k++)
        t[k].read = tokens_read(tr, t[k].id);
}

/* conv += the answer, then `extra` new tokens. */
static void extend(int32_t *conv, int *n, const turn *o, int extra, uint64_t seed)
{
    memcpy(conv + *n, o->gen, sizeof(int32_t) * (size_t)o->n_gen);
    *n += o->n_gen;
    rand_tokens(conv + *n, extra, seed);
    *n += extra;
}

/* Conversations A (four turns) and B (two), interleaved on two slots:
 * A1 B1 A2 B2 A3 A4, each turn extending its conversation's last one; A4 is
 * exactly what A3 left resident (the corner where the last token must be
 * given back to be read again). */
static void reuse_scenario(int reuse, turn *t, sched_cache_stats *st)
{
    strata_engine *e = kv_engine(2, 256, 0, NULL);
    trace *tr = calloc(1, sizeof *tr);
    strata_sched *s = kv_sched(e, reuse, 0, 8, tr);
    int32_t a[RT_MAXP], b[RT_MAXP];
    int na = 20, nb = 13;
    rand_tokens(a, na, 1);
    rand_tokens(b, nb, 2);
    run_turn(s, a, na, &t[0]);    /* A1 */
    run_turn(s, b, nb, &t[1]);    /* B1 */
    extend(a, &na, &t[0], 5, 3);
    run_turn(s, a, na, &t[2]);    /* A2 */
    extend(b, &nb, &t[1], 6, 4);
    run_turn(s, b, nb, &t[3]);    /* B2 */
    extend(a, &na, &t[2], 7, 5);
    run_turn(s, a, na, &t[4]);    /* A3 */
    extend(a, &na, &t[4], 0, 0);
    na = t[4].held;                   /* A4: A3's conversation, exactly */
    run_turn(s, a, na, &t[5]);
    sched_get_cache_stats(s, st);
    sched_free(s);
    count_reads(tr, t, RT_TURNS);
    free(tr);
    strata_close(e);
}

START_TEST(resident_turns_read_only_new_tokens)
{
    turn off[RT_TURNS], on[RT_TURNS];
    sched_cache_stats st_off, st_on;
    reuse_scenario(0, off, &st_off);
    reuse_scenario(1, on, &st_on);
    int total = 0;
    for (int k = 0; k < RT_TURNS; k++) {
        sched_test_expect("turn", k, on[k].gen, on[k].n_gen, off[k].gen, off[k].n_gen);
        ck_assert_int_eq(on[k].res.n_prompt, off[k].res.n_prompt);
        /* Reuse off: every turn reads its whole prompt. */
        ck_assert_int_eq(off[k].res.n_resident, 0);
        ck_assert_int_eq(off[k].read, off[k].res.n_prompt);
        /* Reuse on: it reads exactly what it did not keep. */
        ck_assert_int_eq(on[k].read, on[k].res.n_prompt - on[k].res.n_resident);
        total += off[k].n_gen;
    }
    ck_assert_int_ge(total, RT_TURNS * RT_GEN / 2); /* else little is compared */
    /* The first turn of each conversation finds nothing; each follow-up
     * keeps the whole previous turn in its slot and reads the new tokens. */
    static const int prev[RT_TURNS] = {-1, -1, 0, 1, 2, -1};
    for (int k = 0; k < 5; k++) {
        int want = prev[k] < 0 ? 0 : on[prev[k]].held;
        ck_assert_msg(on[k].res.n_resident == want, "turn %d kept %d tokens, %d resident", k,
                      on[k].res.n_resident, want);
        if (prev[k] >= 0)
            ck_assert_int_eq(on[k].res.slot, on[prev[k]].res.slot);
    }
    ck_assert_int_gt(on[2].res.n_resident, 20);
    /* A4 = A3's conversation: all but its last token kept, one read. */
    ck_assert_int_eq(on[5].res.n_prompt, on[4].held);
    ck_assert_int_eq(on[5].res.n_resident, on[4].held - 1);
    ck_assert_int_eq(on[5].read, 1);
    ck_assert_int_eq(st_on.resident_hits, 4);
    ck_assert_int_eq(st_on.resident_tokens,
                     (uint64_t)(on[2].res.n_resident + on[3].res.n_resident +
                                on[4].res.n_resident + on[5].res.n_resident));
    ck_assert_int_eq(st_on.resident_evictions, 0);
    ck_assert_int_eq(st_off.resident_hits, 0);
}
END_TEST

/* Two slots, both idle-resident (A1, B1), and an unrelated C: C takes the
 * least recently used (A's) slot, whose conversation is dropped (captured
 * first with the cache on).  B2 still finds B resident.  A2 then takes the
 * LRU slot (C's); with the cache it restores A1 from the capture. */
static void evict_scenario(int reuse, size_t cache_mib, turn *t, sched_cache_stats *st)
{
    strata_engine *e = kv_engine(2, 256, 0, NULL);
    trace *tr = calloc(1, sizeof *tr);
    strata_sched *s = kv_sched(e, reuse, cache_mib, 8, tr);
    int32_t a[RT_MAXP], b[RT_MAXP], c[RT_MAXP];
    int na = 18, nb = 15, nc = 11;
    rand_tokens(a, na, 11);
    rand_tokens(b, nb, 12);
    rand_tokens(c, nc, 13);
    run_turn(s, a, na, &t[0]);    /* A1 */
    run_turn(s, b, nb, &t[1]);    /* B1 */
    run_turn(s, c, nc, &t[2]);    /* C: evicts A */
    extend(b, &nb, &t[1], 4, 14);
    run_turn(s, b, nb, &t[3]);    /* B2: B resident */
    extend(a, &na, &t[0], 6, 15);
    run_turn(s, a, na, &t[4]);    /* A2: evicts C */
    /* Counters are published before the last step's hook: settled now. */
    sched_get_cache_stats(s, st);
    sched_free(s);
    count_reads(tr, t, 5);
    free(tr);
    strata_close(e);
}

START_TEST(idle_resident_slots_are_evicted_lru)
{
    turn ref[5], t[5];
    sched_cache_stats st_ref, st;
    evict_scenario(0, 0, ref, &st_ref);
    for (size_t mib = 0; mib <= 16; mib += 16) {
        char what[32];
        snprintf(what, sizeof what, "cache %zu MiB", mib);
        evict_scenario(1, mib, t, &st);
        for (int k = 0; k < 5; k++)
            sched_test_expect(what, k, t[k].gen, t[k].n_gen, ref[k].gen, ref[k].n_gen);
        ck_assert_int_ne(t[0].res.slot, t[1].res.slot);    /* B1 took the free slot */
        ck_assert_int_eq(t[2].res.slot, t[0].res.slot);    /* C: A's, the LRU */
        ck_assert_int_eq(t[2].res.n_resident, 0);
        ck_assert_int_eq(t[3].res.slot, t[1].res.slot);    /* B2: B still there */
        ck_assert_int_eq(t[3].res.n_resident, t[1].held);
        ck_assert_int_eq(t[4].res.slot, t[2].res.slot);    /* A2: C's, the LRU */
        ck_assert_int_eq(t[4].res.n_resident, 0);
        ck_assert_int_eq(t[4].res.n_restored, mib ? t[0].held : 0);
        ck_assert_int_eq(t[4].read, t[4].res.n_prompt - t[4].res.n_restored);
        ck_assert_int_eq(st.resident_evictions, 2);
        ck_assert_int_eq(st.resident_hits, 1);
        ck_assert_int_eq(st.captures, mib ? 2 : 0);        /* A1, then C, on eviction */
    }
}
END_TEST

/* ---- KV room ------------------------------------------------------------- */

enum { KR_N = 4, KR_GEN = 16 };

/* Four requests whose prompts fill most of a page: each needs a second page
 * during its answer (prompt + 15 fed tokens > 256), so four need eight
 * pages.  Each prompt is read in one step (chunk 256): all four run at
 * once.  Request 3 (index 3) samples (temperature, seeded), the others are
 * greedy; stop tokens are ignored so every request does the same work. */
static const int kr_len[KR_N] = {250, 246, 252, 244};

typedef struct kr_run {
    int32_t gen[KR_N][KR_GEN];
    int n_gen[KR_N];
    sched_result res[KR_N];
    sched_cache_stats st;
} kr_run;

static void kr_prompts(int32_t *p[KR_N])
{
    for (int q = 0; q < KR_N; q++) {
        p[q] = malloc(sizeof(int32_t) * (size_t)kr_len[q]);
        rand_tokens(p[q], kr_len[q], 100 + (uint64_t)q);
    }
}

static void kr_scenario(int kv_pages, const char *split, size_t cache_mib, kr_run *o)
{
    memset(o, 0, sizeof *o);
    strata_engine *e = kv_engine(KR_N, 512, kv_pages, split);
    gate g = {0};
    strata_sched *s = kv_sched_hook(e, 1, cache_mib, 256, gate_step, &g);
    int32_t *p[KR_N];
    kr_prompts(p);
    sched_handle *h[KR_N];
    for (int q = 0; q < KR_N; q++) {
        sched_request r = sched_test_greedy(p[q], kr_len[q], KR_GEN);
        r.ignore_stop = 1;
        if (q == 3) {
            r.sampling = sampler_defaults();
            r.sampling.temp = 0.9f;
            r.sampling.seed = 1234;
        }
        strata_error err = {0};
        ck_assert_msg(sched_submit(s, &r, &h[q], &err) == 0, "%s", err.msg);
    }
    atomic_store(&g.open, 1);
    for (int q = 0; q < KR_N; q++) {
        o->n_gen[q] = sched_test_drain(h[q], o->gen[q], KR_GEN);
        sched_wait(h[q], &o->res[q]);
        sched_handle_free(h[q]);
    }
    sched_get_cache_stats(s, &o->st);
    sched_free(s);
    strata_close(e);
    for (int q = 0; q < KR_N; q++)
        free(p[q]);
}

/* The greedy requests' solo tokens (stop tokens ignored, as they are). */
static void kr_solo(int32_t want[KR_N][KR_GEN], int n_want[KR_N])
{
    strata_engine *e = kv_engine(1, 512, 0, NULL);
    int32_t *p[KR_N];
    kr_prompts(p);
    for (int q = 0; q < KR_N; q++) {
        n_want[q] = sched_test_solo_ex(e, p[q], kr_len[q], KR_GEN, 1, want[q]);
        free(p[q]);
    }
    strata_close(e);
}

/* Five pages for eight pages of demand, the conversation cache on: requests
 * are parked (newest first) and resume later, every one producing the
 * tokens it produces with room to spare; the sampled one too, so its
 * generator went along.  One stage and two. */
/* The parking part of the case below, on the backend kv_engine opens. */
static void parks_and_resumes(void)
{
    int32_t want[KR_N][KR_GEN];
    int n_want[KR_N];
    kr_solo(want, n_want);
    kr_run *ref = malloc(sizeof *ref), *o = malloc(sizeof *o);
    kr_scenario(0, NULL, 16, ref);  /* a whole context per slot: no parks */
    ck_assert_int_eq(ref->st.parks, 0);
    for (int q = 0; q < KR_N; q++) {
        ck_assert_int_eq(ref->res[q].finish, SCHED_FINISH_LENGTH);
        if (q != 3)
            sched_test_expect("roomy", q, ref->gen[q], ref->n_gen[q], want[q], n_want[q]);
    }
    static const char *splits[] = {NULL, "2"};
    for (int k = 0; k < 2; k++) {
        kr_scenario(5, splits[k], 16, o);
        char what[48];
        snprintf(what, sizeof what, "5 pages, split %s", splits[k] ? splits[k] : "none");
        int parks = 0;
        for (int q = 0; q < KR_N; q++) {
            ck_assert_msg(o->res[q].finish == SCHED_FINISH_LENGTH, "%s: request %d: %s %s", what,
                          q, sched_finish_name(o->res[q].finish), o->res[q].err.msg);
            sched_test_expect(what, q, o->gen[q], o->n_gen[q], ref->gen[q], ref->n_gen[q]);
            parks += o->res[q].n_parks;
        }
        /* The schedule is fixed (the gate): requests 0 and 2 need their
         * second page at one step with one free, and the newest holder (3)
         * is parked; then 1 needs one with none free, and 2 (the newest
         * still running) is parked.  Both resume from their images. */
        ck_assert_int_eq(o->st.parks, 2);
        ck_assert_int_eq(o->res[3].n_parks, 1);
        ck_assert_int_eq(o->res[2].n_parks, 1);
        ck_assert_int_eq(parks, 2);
        ck_assert_int_eq(o->st.unparks, 2);
        ck_assert_int_eq(o->st.restores, 2);
        ck_assert_int_eq(o->st.kv_failures, 0);
    }
    free(ref);
    free(o);
}

START_TEST(exhausted_pool_parks_and_resumes)
{
    parks_and_resumes();

    /* A conversation larger than the whole pool cannot be helped by
     * parking: it fails, with the cache on too, and says so. */
    int32_t big[600];
    rand_tokens(big, 600, 9);
    strata_engine *e = kv_engine(2, 1024, 2, NULL);
    strata_sched *s = kv_sched_hook(e, 1, 16, 64, NULL, NULL);
    sched_request r = sched_test_greedy(big, 600, 4);
    sched_handle *h;
    strata_error err = {0};
    ck_assert_int_eq(sched_submit(s, &r, &h, &err), 0);
    sched_result res;
    ck_assert_int_eq(sched_wait(h, &res), STRATA_E_LIMIT);
    ck_assert_msg(strstr(res.err.msg, "needs 3 more pages") && strstr(res.err.msg, "alone"), "%s",
                  res.err.msg);
    sched_handle_free(h);
    sched_free(s);
    strata_close(e);
}
END_TEST

/* The same on the card (one stage and two sharing it): parked and resumed
 * requests produce the ids of the roomy run, bit for bit. */
START_TEST(exhausted_pool_parks_and_resumes_cuda)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    kv_backend = STRATA_BACKEND_CUDA;
    parks_and_resumes();
    kv_backend = STRATA_BACKEND_CPU;
}
END_TEST

/* The same five pages without a cache: the request that cannot get its
 * page fails with an error naming the sizes, the others are untouched.
 * And a prompt that finds no page at all is refused the same way. */
START_TEST(exhausted_pool_without_cache_fails_one)
{
    int32_t want[KR_N][KR_GEN];
    int n_want[KR_N];
    kr_solo(want, n_want);
    kr_run *o = malloc(sizeof *o);
    kr_scenario(5, NULL, 0, o);
    int failed = -1;
    for (int q = 0; q < KR_N; q++) {
        if (o->res[q].finish == SCHED_FINISH_ERROR) {
            ck_assert_msg(failed < 0, "requests %d and %d both failed", failed, q);
            failed = q;
            continue;
        }
        ck_assert_int_eq(o->res[q].finish, SCHED_FINISH_LENGTH);
        if (q != 3)
            sched_test_expect("no cache", q, o->gen[q], o->n_gen[q], want[q], n_want[q]);
    }
    /* Requests 0 and 2 need their second page at the same step with one
     * free: the newer (2) fails. */
    ck_assert_int_eq(failed, 2);
    const sched_result *r = &o->res[2];
    ck_assert_int_eq(r->err.code, STRATA_E_LIMIT);
    ck_assert_msg(strstr(r->err.msg, "needs 1 more page") && strstr(r->err.msg, "pool's 5 pages") &&
                      strstr(r->err.msg, "conversation cache"),
                  "unclear: %s", r->err.msg);
    ck_assert_int_lt(o->n_gen[2], KR_GEN);
    sched_test_expect("before failing", 2, o->gen[2], o->n_gen[2], want[2], o->n_gen[2]);
    ck_assert_int_eq(o->st.kv_failures, 1);
    ck_assert_int_eq(o->st.parks, 0);
    free(o);

    /* Two pages, a 400-token prompt holding both: a second request finds
     * none and is refused; the first is untouched. */
    int32_t big[400], small[10], got[KR_GEN], wbig[KR_GEN];
    rand_tokens(big, 400, 7);
    rand_tokens(small, 10, 8);
    strata_engine *e = kv_engine(2, 512, 2, NULL);
    int n_wbig = sched_test_solo_ex(e, big, 400, KR_GEN, 1, wbig);
    gate g = {0};
    strata_sched *s = kv_sched_hook(e, 1, 0, 64, gate_step, &g);
    sched_request ra = sched_test_greedy(big, 400, KR_GEN), rb = sched_test_greedy(small, 10, 4);
    ra.ignore_stop = 1;
    sched_handle *ha, *hb;
    strata_error err = {0};
    ck_assert_int_eq(sched_submit(s, &ra, &ha, &err), 0);
    ck_assert_int_eq(sched_submit(s, &rb, &hb, &err), 0);
    atomic_store(&g.open, 1);
    sched_result res;
    ck_assert_int_eq(sched_wait(hb, &res), STRATA_E_LIMIT);
    ck_assert_msg(strstr(res.err.msg, "0 of the pool's 2 pages are free"), "%s", res.err.msg);
    ck_assert_int_eq(res.n_gen, 0);
    int n = sched_test_drain(ha, got, KR_GEN);
    ck_assert_int_eq(sched_wait(ha, &res), 0);
    sched_test_expect("beside a refused one", 0, got, n, wbig, n_wbig);
    sched_handle_free(ha);
    sched_handle_free(hb);
    sched_free(s);
    strata_close(e);
}
END_TEST

/* ---- finished means counted ---------------------------------------------- */

enum { FC_TURNS = 32, FC_PROMPT = 64 };

/* When sched_wait returns, the scheduler is done with the request and its
 * counters say so: with resident reuse off, the conversation was captured
 * as its turn ended; a request failed for KV pages was counted.  (The
 * scheduler used to wake the caller first and capture after, so a client
 * reading the counters right after a turn could miss that turn's capture:
 * a race, which the old order lost at most such turns on a two-core
 * machine, and within the first 7 of these in every run.) */
START_TEST(counters_include_a_request_when_wait_returns)
{
    strata_engine *e = kv_engine(1, 256, 0, NULL);
    strata_sched *s = kv_sched_hook(e, 0, 64, 256, NULL, NULL);
    int32_t *conv = malloc(sizeof *conv * FC_PROMPT);
    sched_cache_stats st;
    for (int k = 0; k < FC_TURNS; k++) {
        rand_tokens(conv, FC_PROMPT, 50 + (uint64_t)k);
        sched_request r = sched_test_greedy(conv, FC_PROMPT, 2);
        sched_handle *h;
        strata_error err = {0};
        ck_assert_msg(sched_submit(s, &r, &h, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(sched_wait(h, NULL), 0);
        sched_get_cache_stats(s, &st);
        int images = k + 1 < st.cache.images_max ? k + 1 : st.cache.images_max;
        ck_assert_msg(st.captures == (uint64_t)k + 1 && st.cache.images == images,
                      "turn %d: %llu captures and %d images when sched_wait returned", k + 1,
                      (unsigned long long)st.captures, st.cache.images);
        sched_handle_free(h);
    }
    ck_assert_int_eq(st.capture_failures, 0);
    free(conv);
    sched_free(s);
    strata_close(e);

    /* No cache, a pool of one page, a prompt that needs two: refused for
     * pages, and counted by the time the caller hears. */
    int32_t big[300];
    rand_tokens(big, 300, 9);
    e = kv_engine(1, 512, 1, NULL);
    s = kv_sched_hook(e, 1, 0, 64, NULL, NULL);
    sched_request r = sched_test_greedy(big, 300, 2);
    sched_handle *h;
    strata_error err = {0};
    ck_assert_int_eq(sched_submit(s, &r, &h, &err), 0);
    ck_assert_int_eq(sched_wait(h, NULL), STRATA_E_LIMIT);
    sched_get_cache_stats(s, &st);
    ck_assert_int_eq(st.kv_failures, 1);
    sched_handle_free(h);
    sched_free(s);
    strata_close(e);
}
END_TEST

static Suite *scheduler_kv_suite(void)
{
    /* its own name (test_scheduler.c's is "scheduler"), so it can be run
     * and timed alone: CK_RUN_SUITE=scheduler_kv */
    Suite *s = suite_create("scheduler_kv");
    TCase *resident = tcase_create("resident");
    tcase_set_timeout(resident, 900);
    tcase_add_test(resident, resident_turns_read_only_new_tokens);
    tcase_add_test(resident, idle_resident_slots_are_evicted_lru);
    suite_add_tcase(s, resident);
    TCase *room = tcase_create("kvroom");
    tcase_set_timeout(room, 900);
    tcase_add_test(room, exhausted_pool_parks_and_resumes);
    tcase_add_test(room, exhausted_pool_parks_and_resumes_cuda);
    tcase_add_test(room, exhausted_pool_without_cache_fails_one);
    suite_add_tcase(s, room);
    TCase *finish = tcase_create("finish");
    tcase_set_timeout(finish, 900);
    tcase_add_test(finish, counters_include_a_request_when_wait_returns);
    suite_add_tcase(s, finish);
    return s;
}

TEST_SUITE(scheduler_kv_suite)
