/* test_soak.c: a soak of serving on the CPU (suite `soak`): four clients
 * x SOAK_ROUNDS rounds of conversations through the scheduler, on the demo
 * model, with a KV pool and a conversation cache too small for them, so
 * that conversations are evicted from their slots, running requests are
 * parked for pages and resumed, and images are evicted from the cache,
 * round after round.  Judged after every round:
 *
 *   - every answer equals its solo greedy answer (each conversation run
 *     alone on a sequence of its own, turn after turn, once, before the
 *     soak): parking, eviction and restoring change no token;
 *   - the cache's budgets hold, from its own counters (bytes used <=
 *     budget, images <= budget), read after the round and after every
 *     scheduling step (the step hook);
 *   - memory does not grow: the resident set (/proc/self/statm) after the
 *     warm-up (the first conversation of each client, SOAK_TURNS rounds)
 *     grows by at most SOAK_RSS_SLACK_MIB by any later round (not under
 *     AddressSanitizer: SOAK_CHECK_RSS), and the cache's bytes stay
 *     within its budget.
 *
 * Sizes, for ~60-90 s on the 2-core build box: 20 rounds (10 with
 * STRATA_TEST_SMALL, which the sanitizer runs set); a conversation
 * is SOAK_TURNS turns (then the client starts a new one), each adding
 * SOAK_NEW ordinary tokens (SOAK_NEW0 in its first turn) and asking for
 * SOAK_GEN greedy tokens, so one conversation stays within one 256-token
 * KV page, and the pool has SOAK_PAGES pages for four slots: whenever
 * all four run at once one must be parked.  The cache holds about three
 * conversations' K/V in SOAK_CACHE_MIB and SOAK_CACHE_IMAGES images. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/generate.h"
#include "engine/strata.h"
#include "kernels/ops.h"
#include "sched/scheduler.h"
#include "text/tokenizer.h"

#define SOAK_CLIENTS 4
#define SOAK_ROUNDS 20
#define SOAK_TURNS 5
#define SOAK_CONVS (SOAK_ROUNDS / SOAK_TURNS) /* conversations per client */
#define SOAK_NEW0 24
#define SOAK_NEW 8
#define SOAK_GEN 4
#define SOAK_MAXLEN (SOAK_NEW0 + SOAK_TURNS * (SOAK_NEW + SOAK_GEN))
#define SOAK_PAGES 3
#define SOAK_CACHE_MIB 2
#define SOAK_CACHE_IMAGES 3
#define SOAK_RSS_SLACK_MIB 8

/* Under AddressSanitizer freed blocks wait in its quarantine (256 MiB by
 * default) instead of being reused, so the resident set grows with the
 * churn by design (11 MiB over five rounds, measured); LeakSanitizer
 * checks for leaks there instead, and the cache's bytes are still held to
 * its budget. */
#if defined(__SANITIZE_ADDRESS__)
#define SOAK_CHECK_RSS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_CHECK_RSS 0
#endif
#endif
#ifndef SOAK_CHECK_RSS
#define SOAK_CHECK_RSS 1
#endif

/* One conversation's turns: the new tokens of each and, from the solo
 * run, the answer each must get. */
typedef struct soak_conv {
    int32_t fresh[SOAK_TURNS][SOAK_NEW0];
    int n_fresh[SOAK_TURNS];
    int32_t want[SOAK_TURNS][SOAK_GEN];
    int n_want[SOAK_TURNS];
} soak_conv;

static soak_conv convs[SOAK_CLIENTS][SOAK_CONVS];

static void soak_plan(const strata_engine *e)
{
    const tokenizer *tok = strata_tokenizer(e);
    int V = strata_n_vocab(e);
    for (int c = 0; c < SOAK_CLIENTS; c++)
        for (int j = 0; j < SOAK_CONVS; j++) {
            uint64_t st = 0x50a4ull + (uint64_t)(c * SOAK_CONVS + j) * 7919;
            for (int t = 0; t < SOAK_TURNS; t++) {
                soak_conv *cv = &convs[c][j];
                cv->n_fresh[t] = t ? SOAK_NEW : SOAK_NEW0;
                for (int i = 0; i < cv->n_fresh[t];) {
                    int32_t x = (int32_t)(test_rand_u64(&st) % (uint64_t)V);
                    if (tokenizer_token_type(tok, x) == TOKEN_TYPE_NORMAL &&
                        !tokenizer_is_stop(tok, x))
                        cv->fresh[t][i++] = x;
                }
            }
        }
}

/* A conversation alone: each turn feeds what its sequence does not hold
 * yet (the answer's last token, never fed after a length finish, then the
 * new tokens) and answers greedily, ending at a stop token, as the
 * scheduler does. */
static void soak_solo(strata_engine *e, soak_conv *cv)
{
    strata_error err = {0};
    int V = strata_n_vocab(e);
    float *lg = malloc(sizeof(float) * V);
    int32_t conv[SOAK_MAXLEN];
    int n = 0;
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_msg(s && lg, "%s", err.msg);
    for (int t = 0; t < SOAK_TURNS; t++) {
        memcpy(conv + n, cv->fresh[t], sizeof(int32_t) * cv->n_fresh[t]);
        n += cv->n_fresh[t];
        int have = strata_seq_len(s);
        ck_assert_msg(strata_seq_feed(s, conv + have, n - have, lg, NULL, &err) == 0, "%s",
                      err.msg);
        int k = 0;
        while (k < SOAK_GEN) {
            int32_t x = cpu_argmax(lg, V);
            if (tokenizer_is_stop(strata_tokenizer(e), x))
                break;
            cv->want[t][k++] = x;
            conv[n++] = x;
            if (k < SOAK_GEN)
                ck_assert_msg(strata_seq_decode(s, x, lg, &err) == 0, "%s", err.msg);
        }
        cv->n_want[t] = k;
    }
    strata_seq_free(s);
    free(lg);
}

/* ---- the soak ---------------------------------------------------------------- */

typedef struct soak {
    strata_sched *s;
    pthread_barrier_t start, done;
    atomic_int stop;
    /* the largest the cache's counters were after any step */
    size_t max_bytes;
    int max_images;
} soak;

typedef struct client {
    soak *k;
    int index, rc;
    char why[768];
} client;

static void *client_main(void *arg)
{
    client *cl = arg;
    soak *k = cl->k;
    int32_t conv[SOAK_MAXLEN];
    int n = 0;
    for (int r = 0;; r++) {
        pthread_barrier_wait(&k->start);
        if (atomic_load(&k->stop))
            break;
        int j = r / SOAK_TURNS, t = r % SOAK_TURNS;
        const soak_conv *cv = &convs[cl->index][j];
        if (t == 0)
            n = 0;   /* a new conversation */
        if (!cl->rc) {
            memcpy(conv + n, cv->fresh[t], sizeof(int32_t) * cv->n_fresh[t]);
            n += cv->n_fresh[t];
            /* as serve/openai.c submits: ids, greedy, max_tokens */
            sched_request q = sched_request_default();
            q.tokens = conv;
            q.n_tokens = n;
            q.sampling.temp = 0;
            q.max_tokens = SOAK_GEN;
            sched_handle *h = NULL;
            strata_error err = {0};
            int32_t got[SOAK_GEN], x;
            int m = 0;
            if (sched_submit(k->s, &q, &h, &err)) {
                cl->rc = 1;
                snprintf(cl->why, sizeof cl->why, "round %d: submit: %.400s", r, err.msg);
            } else {
                while (sched_next(h, &x, -1) == 1)
                    if (m < SOAK_GEN)
                        got[m++] = x;
                sched_result res;
                if (sched_wait(h, &res)) {
                    cl->rc = 1;
                    snprintf(cl->why, sizeof cl->why, "round %d: %.400s", r, res.err.msg);
                }
                sched_handle_free(h);
            }
            if (!cl->rc && (m != cv->n_want[t] ||
                            memcmp(got, cv->want[t], sizeof(int32_t) * m))) {
                cl->rc = 1;
                int i = 0;
                while (i < m && i < cv->n_want[t] && got[i] == cv->want[t][i])
                    i++;
                snprintf(cl->why, sizeof cl->why, "round %d (conversation %d turn %d): %d "
                         "tokens, solo %d; first difference at token %d", r, j, t, m,
                         cv->n_want[t], i);
            }
            memcpy(conv + n, got, sizeof(int32_t) * m);
            n += m;
        }
        pthread_barrier_wait(&k->done);
    }
    return NULL;
}

/* After every step (orchestration thread, no lock held): the cache's own
 * counters, the largest seen. */
static void soak_step(const sched_step *st, void *user)
{
    (void)st;
    soak *k = user;
    if (!k->s)
        return;
    sched_cache_stats cs;
    sched_get_cache_stats(k->s, &cs);
    if (cs.cache.bytes_used > k->max_bytes)
        k->max_bytes = cs.cache.bytes_used;
    if (cs.cache.images > k->max_images)
        k->max_images = cs.cache.images;
}

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

START_TEST(soak_serving)
{
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)");
    strata_params p = test_params(model, STRATA_BACKEND_CPU);
    p.n_slots = SOAK_CLIENTS;
    p.n_ctx = 2 * KV_PAGE;
    p.kv_resident = SOAK_PAGES * KV_PAGE;
    p.layer_split = "15";   /* two stages: the stage pool's copies run */
    strata_engine *e = test_open(&p);
    soak_plan(e);
    int rounds = test_small() ? SOAK_ROUNDS / 2 : SOAK_ROUNDS;
    double t0 = strata_now();
    for (int c = 0; c < SOAK_CLIENTS; c++)
        for (int j = 0; j < rounds / SOAK_TURNS; j++)
            soak_solo(e, &convs[c][j]);
    double t_solo = strata_now() - t0;

    static soak k;
    memset(&k, 0, sizeof k);
    pthread_barrier_init(&k.start, NULL, SOAK_CLIENTS + 1);
    pthread_barrier_init(&k.done, NULL, SOAK_CLIENTS + 1);
    sched_params sp = sched_params_default();
    sp.cache_mib = SOAK_CACHE_MIB;
    sp.cache_slots = SOAK_CACHE_IMAGES;
    sp.on_step = soak_step;
    sp.step_user = &k;
    strata_error err = {0};
    strata_sched *s = sched_new(e, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    k.s = s;   /* before any submit: the step hook runs only after one */
    client cl[SOAK_CLIENTS];
    pthread_t th[SOAK_CLIENTS];
    for (int c = 0; c < SOAK_CLIENTS; c++) {
        cl[c] = (client){&k, c, 0, ""};
        ck_assert_int_eq(pthread_create(&th[c], NULL, client_main, &cl[c]), 0);
    }
    char fail[1024] = "";
    double rss_warm = 0, rss_max = 0;
    sched_cache_stats st = {0};
    size_t budget = (size_t)SOAK_CACHE_MIB << 20;
    for (int r = 0; r < rounds && !fail[0]; r++) {
        pthread_barrier_wait(&k.start);
        pthread_barrier_wait(&k.done);
        for (int c = 0; c < SOAK_CLIENTS && !fail[0]; c++)
            if (cl[c].rc)
                snprintf(fail, sizeof fail, "client %d: %s", c, cl[c].why);
        sched_get_cache_stats(s, &st);
        if (!fail[0] && (st.cache.bytes_max != budget || st.cache.bytes_used > budget ||
                         st.cache.images > SOAK_CACHE_IMAGES || k.max_bytes > budget ||
                         k.max_images > SOAK_CACHE_IMAGES))
            snprintf(fail, sizeof fail, "round %d: the cache holds %zu of %zu bytes and %d of %d "
                     "images (at most %zu bytes and %d images after a step)", r,
                     st.cache.bytes_used, st.cache.bytes_max, st.cache.images, SOAK_CACHE_IMAGES,
                     k.max_bytes, k.max_images);
        double rss = rss_mib();
        if (r == SOAK_TURNS - 1)
            rss_warm = rss;
        if (r >= SOAK_TURNS && rss > rss_max)
            rss_max = rss;
        if (!fail[0] && SOAK_CHECK_RSS && r >= SOAK_TURNS &&
            rss > rss_warm + SOAK_RSS_SLACK_MIB)
            snprintf(fail, sizeof fail, "round %d: resident set %.1f MiB, %.1f after the "
                     "warm-up: grew more than %d MiB", r, rss, rss_warm, SOAK_RSS_SLACK_MIB);
    }
    atomic_store(&k.stop, 1);
    pthread_barrier_wait(&k.start);
    for (int c = 0; c < SOAK_CLIENTS; c++)
        pthread_join(th[c], NULL);
    sched_get_cache_stats(s, &st);
    sched_free(s);
    pthread_barrier_destroy(&k.start);
    pthread_barrier_destroy(&k.done);
    strata_close(e);
    fprintf(stderr, "soak: %d clients x %d rounds in %.1f s (solo answers %.1f s): captures "
                    "%llu (fresh %llu, K/V reused %llu), restores %llu, parks %llu, evictions "
                    "%llu from slots and %llu from the cache; cache at most %zu of %zu bytes, "
                    "%d of %d images; resident set %.1f MiB after the warm-up, at most %.1f\n",
            SOAK_CLIENTS, rounds, strata_now() - t0 - t_solo, t_solo,
            (unsigned long long)st.captures,
            (unsigned long long)st.park.captures[0], (unsigned long long)st.park.captures[1],
            (unsigned long long)st.park.restores, (unsigned long long)st.parks,
            (unsigned long long)st.resident_evictions, (unsigned long long)st.cache.evictions,
            k.max_bytes, budget, k.max_images, SOAK_CACHE_IMAGES, rss_warm, rss_max);
    ck_assert_msg(!fail[0], "%s", fail);
    /* the soak took the paths it is meant to soak */
    ck_assert_msg(st.parks > 0 && st.parks == st.unparks, "parks %llu, unparks %llu",
                  (unsigned long long)st.parks, (unsigned long long)st.unparks);
    ck_assert_msg(st.cache.evictions > 0 && st.resident_evictions > 0 && st.park.restores > 0 &&
                      st.park.captures[0] > 0,
                  "no cache evictions, slot evictions, restores or captures");
    ck_assert_msg(st.kv_failures == 0 && st.capture_failures == 0,
                  "%llu requests failed for pages, %llu captures failed",
                  (unsigned long long)st.kv_failures, (unsigned long long)st.capture_failures);
}
END_TEST

static Suite *soak_suite(void)
{
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, soak_serving);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(soak_suite)
