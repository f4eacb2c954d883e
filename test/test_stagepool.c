/* test_stagepool.c: the stage pool (suite "stagepool").
 *
 * The concurrency test is the one that matters: its bodies wait for each
 * other at a barrier, so they can only finish if they really run at the
 * same time; the same bodies in serial mode must time out. */
#include "testutil.h"

#include "stagepool/stagepool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 4

/* ---- all bodies run, each on its own worker ---------------------------- */

typedef struct ran_ctx {
    int ran[N];
    pthread_t thread[N];
} ran_ctx;

static int body_mark(int stage, void *vctx)
{
    ran_ctx *c = vctx;
    c->ran[stage]++;
    c->thread[stage] = pthread_self();
    return 0;
}

START_TEST(all_bodies_run_on_their_workers)
{
    strata_error err = {0};
    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, 0);
    ran_ctx c = {0};
    ck_assert_int_eq(stagepool_run(p, body_mark, &c, &err), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(c.ran[i], 1);
        ck_assert(!pthread_equal(c.thread[i], pthread_self()));
        for (int j = 0; j < i; j++)
            ck_assert(!pthread_equal(c.thread[i], c.thread[j]));
    }
    /* The same workers serve the next run: they are persistent. */
    ran_ctx c2 = {0};
    ck_assert_int_eq(stagepool_run(p, body_mark, &c2, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert(pthread_equal(c.thread[i], c2.thread[i]));
    stagepool_free(p);
}
END_TEST

/* ---- concurrency really happens ---------------------------------------- */

typedef struct barrier_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int timeout_ms;
} barrier_ctx;

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Wait until all N stages have arrived; fail with a message on timeout. */
static int body_barrier(int stage, void *vctx)
{
    barrier_ctx *b = vctx;
    struct timespec dl;
    deadline_in(&dl, b->timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    b->arrived++;
    pthread_cond_broadcast(&b->cv);
    while (b->arrived < N && rc == 0)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &dl) != 0 && b->arrived < N)
            rc = strata_err(stagepool_stage_error(), STRATA_E_LIMIT,
                            "barrier timed out with %d of %d in", b->arrived, N);
    pthread_mutex_unlock(&b->mu);
    (void)stage;
    return rc;
}

static void barrier_init(barrier_ctx *b, int timeout_ms)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->arrived = 0;
    b->timeout_ms = timeout_ms;
}

static void barrier_destroy(barrier_ctx *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

START_TEST(bodies_run_at_the_same_time)
{
    strata_error err = {0};
    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, 0);
    for (int round = 0; round < 20; round++) {
        barrier_ctx b;
        barrier_init(&b, 10000);
        int rc = stagepool_run(p, body_barrier, &b, &err);
        ck_assert_msg(rc == 0, "round %d: %s", round, err.msg);
        barrier_destroy(&b);
    }

    /* The control: serially, stage 0 waits alone and times out. */
    stagepool_set_serial(p, 1);
    barrier_ctx b;
    barrier_init(&b, 50);
    int rc = stagepool_run(p, body_barrier, &b, &err);
    ck_assert_int_eq(rc, STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "stage 0: barrier timed out") != NULL, "%s",
                  err.msg);
    barrier_destroy(&b);
    stagepool_free(p);
}
END_TEST

/* ---- the first failing stage's error; the others still complete -------- */

typedef struct fail_ctx {
    int done[N];
} fail_ctx;

static int body_fail_1_and_3(int stage, void *vctx)
{
    fail_ctx *c = vctx;
    if (stage == 1) {
        /* Fail late, after stage 3 has already failed: order of failure in
         * time must not matter, only the stage index. */
        usleep(50 * 1000);
        c->done[stage] = 1;
        return strata_err(stagepool_stage_error(), STRATA_E_DEVICE,
                          "copy of layer 7 failed");
    }
    if (stage == 3) {
        c->done[stage] = 1;
        return strata_err(stagepool_stage_error(), STRATA_E_IO, "stage three");
    }
    usleep(20 * 1000);
    c->done[stage] = 1;
    return 0;
}

static int body_fail_silently(int stage, void *vctx)
{
    (void)vctx;
    return stage == 2 ? STRATA_E_NOMEM : 0;
}

static void check_first_failure(int serial)
{
    strata_error err = {0};
    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, serial);
    fail_ctx c = {0};
    int rc = stagepool_run(p, body_fail_1_and_3, &c, &err);
    ck_assert_int_eq(rc, STRATA_E_DEVICE);
    ck_assert_int_eq(err.code, STRATA_E_DEVICE);
    ck_assert_str_eq(err.msg, "stage 1: copy of layer 7 failed");
    for (int i = 0; i < N; i++)
        ck_assert_msg(c.done[i], "stage %d did not complete", i);

    /* A body that fails without a message still names its stage. */
    rc = stagepool_run(p, body_fail_silently, NULL, &err);
    ck_assert_int_eq(rc, STRATA_E_NOMEM);
    ck_assert_str_eq(err.msg, "stage 2: out of memory");

    /* A later clean run reports success: no stale error survives. */
    ran_ctx r = {0};
    strata_err_clear(&err);
    ck_assert_int_eq(stagepool_run(p, body_mark, &r, &err), 0);
    ck_assert_int_eq(err.code, 0);
    stagepool_free(p);
}

START_TEST(first_failing_stage_reported_parallel)
{
    check_first_failure(0);
}
END_TEST

START_TEST(first_failing_stage_reported_serial)
{
    check_first_failure(1);
}
END_TEST

/* ---- serial mode gives the same results --------------------------------- */

#define WORK 4096

typedef struct work_ctx {
    uint64_t out[N][WORK];
    int order[N];
    pthread_mutex_t mu; /* guards next (a lock, not an atomic: drd and
                           helgrind understand locks) */
    int next;           /* the order is only meaningful in serial mode */
    pthread_t thread[N];
} work_ctx;

static int body_work(int stage, void *vctx)
{
    work_ctx *c = vctx;
    uint64_t s = 1000 + (uint64_t)stage;
    for (int i = 0; i < WORK; i++)
        c->out[stage][i] = test_rand_u64(&s);
    c->thread[stage] = pthread_self();
    pthread_mutex_lock(&c->mu);
    c->order[stage] = c->next++;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

START_TEST(serial_mode_matches_parallel)
{
    strata_error err = {0};
    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    work_ctx *par = calloc(1, sizeof *par), *ser = calloc(1, sizeof *ser),
             *loop = calloc(1, sizeof *loop);
    ck_assert(par && ser && loop);
    pthread_mutex_init(&par->mu, NULL);
    pthread_mutex_init(&ser->mu, NULL);
    pthread_mutex_init(&loop->mu, NULL);

    stagepool_set_serial(p, 0);
    ck_assert_int_eq(stagepool_is_serial(p), 0);
    ck_assert_int_eq(stagepool_run(p, body_work, par, &err), 0);
    stagepool_set_serial(p, 1);
    ck_assert_int_eq(stagepool_is_serial(p), 1);
    ck_assert_int_eq(stagepool_run(p, body_work, ser, &err), 0);
    ck_assert_int_eq(stagepool_for_each(NULL, N, body_work, loop, &err), 0);

    ck_assert(memcmp(par->out, ser->out, sizeof par->out) == 0);
    ck_assert(memcmp(par->out, loop->out, sizeof par->out) == 0);
    for (int i = 0; i < N; i++) {
        /* Serially: on the calling thread, stage 0 first. */
        ck_assert(pthread_equal(ser->thread[i], pthread_self()));
        ck_assert_int_eq(ser->order[i], i);
        ck_assert_int_eq(loop->order[i], i);
    }
    pthread_mutex_destroy(&par->mu);
    pthread_mutex_destroy(&ser->mu);
    pthread_mutex_destroy(&loop->mu);
    free(par);
    free(ser);
    free(loop);
    stagepool_free(p);
}
END_TEST

START_TEST(environment_selects_serial)
{
    strata_error err = {0};
    setenv("STRATA_STAGE_COPY_PARALLEL", "0", 1);
    stagepool *p = stagepool_new(2, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(stagepool_is_serial(p), 1);
    stagepool_free(p);
    setenv("STRATA_STAGE_COPY_PARALLEL", "1", 1);
    p = stagepool_new(2, NULL, &err);
    ck_assert_int_eq(stagepool_is_serial(p), 0);
    stagepool_free(p);
    unsetenv("STRATA_STAGE_COPY_PARALLEL");
    p = stagepool_new(2, NULL, &err);
    ck_assert_int_eq(stagepool_is_serial(p), 0);
    stagepool_free(p);
}
END_TEST

/* ---- hooks, repeated life cycles, init failure --------------------------- */

typedef struct hook_ctx {
    pthread_mutex_t mu;
    int inits, finis;
    int fini_of[N];
    int fail_stage;     /* -1: none */
} hook_ctx;

static int hook_init(int stage, void *vctx)
{
    hook_ctx *h = vctx;
    pthread_mutex_lock(&h->mu);
    h->inits++;
    pthread_mutex_unlock(&h->mu);
    if (stage == h->fail_stage)
        return strata_err(stagepool_stage_error(), STRATA_E_DEVICE,
                          "cannot bind card %d", 7);
    return 0;
}

static void hook_fini(int stage, void *vctx)
{
    hook_ctx *h = vctx;
    pthread_mutex_lock(&h->mu);
    h->finis++;
    h->fini_of[stage]++;
    pthread_mutex_unlock(&h->mu);
}

static int body_count(int stage, void *vctx)
{
    int *hits = vctx;
    hits[stage]++;
    return 0;
}

START_TEST(repeated_create_destroy)
{
    hook_ctx h = {.fail_stage = -1};
    pthread_mutex_init(&h.mu, NULL);
    stagepool_hooks hooks = {hook_init, hook_fini, &h};
    strata_error err = {0};
    int hits[N] = {0};
    const int rounds = 200;
    for (int r = 0; r < rounds; r++) {
        int n = 1 + r % N;
        stagepool *p = stagepool_new(n, &hooks, &err);
        ck_assert_msg(p != NULL, "round %d: %s", r, err.msg);
        stagepool_set_serial(p, 0);
        ck_assert_int_eq(stagepool_n_stages(p), n);
        /* Every other pool is freed without ever running a body. */
        if (r % 2 == 0)
            ck_assert_int_eq(stagepool_run(p, body_count, hits, &err), 0);
        stagepool_free(p);
    }
    ck_assert_int_eq(h.inits, h.finis);
    ck_assert_int_eq(h.inits, rounds / N * (1 + 2 + 3 + 4));
    int total = 0;
    for (int i = 0; i < N; i++)
        total += hits[i];
    /* Runs happen on even rounds: n = 1 (r % 4 == 0) or n = 3 (r % 4 == 2). */
    ck_assert_int_eq(total, rounds / 4 * (1 + 3));
    pthread_mutex_destroy(&h.mu);
    stagepool_free(NULL);
}
END_TEST

START_TEST(many_runs_on_one_pool)
{
    strata_error err = {0};
    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, 0);
    int hits[N] = {0};
    for (int r = 0; r < 2000; r++)
        ck_assert_int_eq(stagepool_run(p, body_count, hits, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(hits[i], 2000);
    stagepool_free(p);
}
END_TEST

START_TEST(worker_init_failure_is_clean)
{
    hook_ctx h = {.fail_stage = 2};
    pthread_mutex_init(&h.mu, NULL);
    stagepool_hooks hooks = {hook_init, hook_fini, &h};
    strata_error err = {0};
    stagepool *p = stagepool_new(N, &hooks, &err);
    ck_assert(p == NULL);
    ck_assert_int_eq(err.code, STRATA_E_DEVICE);
    ck_assert_str_eq(err.msg, "stage 2: cannot bind card 7");
    ck_assert_int_eq(h.inits, N);
    /* fini only where init succeeded: every stage but 2. */
    ck_assert_int_eq(h.finis, N - 1);
    ck_assert_int_eq(h.fini_of[2], 0);
    pthread_mutex_destroy(&h.mu);
}
END_TEST

/* ---- misuse is an error, not a hang -------------------------------------- */

typedef struct nest_ctx {
    stagepool *p;
    int rc[N];
} nest_ctx;

static int body_nested(int stage, void *vctx)
{
    nest_ctx *c = vctx;
    int hits[N] = {0};
    c->rc[stage] = stagepool_run(c->p, body_count, hits, NULL);
    return 0;
}

START_TEST(misuse_is_reported)
{
    strata_error err = {0};
    ck_assert(stagepool_new(0, NULL, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_ARG);
    ck_assert_int_eq(stagepool_run(NULL, body_count, NULL, &err), STRATA_E_ARG);

    stagepool *p = stagepool_new(N, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, 0);
    ck_assert_int_eq(stagepool_run(p, NULL, NULL, &err), STRATA_E_ARG);
    int hits[N] = {0};
    ck_assert_int_eq(stagepool_for_each(p, N - 1, body_count, hits, &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(stagepool_for_each(p, N, body_count, hits, &err), 0);
    ck_assert_int_eq(hits[N - 1], 1);

    nest_ctx c = {.p = p};
    ck_assert_int_eq(stagepool_run(p, body_nested, &c, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(c.rc[i], STRATA_E_ARG);
    stagepool_set_serial(p, 1);
    ck_assert_int_eq(stagepool_run(p, body_nested, &c, &err), 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(c.rc[i], STRATA_E_ARG);
    ck_assert(stagepool_stage_error() == NULL);
    stagepool_free(p);
}
END_TEST

static Suite *stagepool_suite(void)
{
    Suite *s = suite_create("stagepool");
    TCase *tc = tcase_create("core");
    /* Valgrind (helgrind, drd) runs these ~50x slower than native. */
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, all_bodies_run_on_their_workers);
    tcase_add_test(tc, bodies_run_at_the_same_time);
    tcase_add_test(tc, first_failing_stage_reported_parallel);
    tcase_add_test(tc, first_failing_stage_reported_serial);
    tcase_add_test(tc, serial_mode_matches_parallel);
    tcase_add_test(tc, environment_selects_serial);
    tcase_add_test(tc, repeated_create_destroy);
    tcase_add_test(tc, many_runs_on_one_pool);
    tcase_add_test(tc, worker_init_failure_is_clean);
    tcase_add_test(tc, misuse_is_reported);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(stagepool_suite)
