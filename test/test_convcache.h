/* test_convcache.h: what the conversation cache's suites share
 * (test_convcache.c, test_convcache_arena.c).
 *
 * Image bytes are a deterministic pattern of (tokens up to the span's end,
 * first token, stage), so any image found later can be checked byte for
 * byte, including the prefix spans it shares with other images. */
#ifndef STRATA_TEST_CONVCACHE_H
#define STRATA_TEST_CONVCACHE_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cache/convcache.h"
#include "testutil.h"

#define MAX_STAGES 4

/* Bytes per token of a stage: stages differ, as layer counts do. */
static inline size_t bytes_per_token(int stage)
{
    return 4 + 4 * (size_t)stage;
}

static inline uint64_t span_seed(const int32_t *tokens, int t0, int t1, int stage)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < t1; i++)
        h = (h ^ (uint32_t)tokens[i]) * 0x100000001b3ull;
    return h ^ ((uint64_t)t0 << 32) ^ (uint64_t)stage * 0x9e3779b97f4a7c15ull;
}

static inline void fill_pattern(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0)
            r = test_rand_u64(&s);
        p[i] = (unsigned char)(r >> (8 * (i % 8)));
    }
}

static inline convcache *cache_new(int n_stages, size_t max_bytes, int max_images)
{
    strata_error err = {0};
    convcache_config cfg = {.n_stages = n_stages, .max_bytes = max_bytes,
                            .max_images = max_images};
    convcache *c = convcache_new(&cfg, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    return c;
}

/* Begin, fill every stage's new part with the pattern, and commit.  With
 * prefix, only the tokens after it are written. */
static inline int capture(convcache *c, int n_stages, const int32_t *tokens, int n,
                          convcache_image *prefix, convcache_image **out,
                          strata_error *err)
{
    int t0 = 0;
    if (prefix)
        convcache_image_tokens(prefix, &t0);
    size_t nb[MAX_STAGES];
    for (int s = 0; s < n_stages; s++)
        nb[s] = (size_t)(n - t0) * bytes_per_token(s);
    convcache_capture *cap;
    int rc = convcache_begin(c, tokens, n, n, prefix, nb, &cap, err);
    if (rc)
        return rc;
    ck_assert_int_eq(convcache_capture_first_token(cap), t0);
    for (int s = 0; s < n_stages; s++) {
        ck_assert_uint_eq(convcache_capture_part_bytes(cap, s), nb[s]);
        fill_pattern(convcache_capture_part(cap, s), nb[s],
                     span_seed(tokens, t0, n, s));
    }
    return convcache_commit(c, cap, out, err);
}

/* Every span of every stage holds its pattern, and the checksums agree. */
static inline void check_content(const convcache_image *img, int n_stages)
{
    int n;
    const int32_t *tokens = convcache_image_tokens(img, &n);
    strata_error err = {0};
    for (int s = 0; s < n_stages; s++) {
        int32_t next = 0;
        size_t total = 0;
        for (int i = 0; i < convcache_image_n_spans(img); i++) {
            convcache_span sp;
            ck_assert_int_eq(convcache_image_span(img, s, i, &sp, &err), 0);
            ck_assert_int_eq(sp.t0, next);
            size_t want = (size_t)(sp.t1 - sp.t0) * bytes_per_token(s);
            ck_assert_uint_eq(sp.bytes, want);
            unsigned char *buf = malloc(want + 1);
            fill_pattern(buf, want, span_seed(tokens, sp.t0, sp.t1, s));
            ck_assert_msg(want == 0 || memcmp(buf, sp.data, want) == 0,
                          "stage %d span %d..%d differs", s, sp.t0, sp.t1);
            free(buf);
            next = sp.t1;
            total += want;
        }
        ck_assert_int_eq(next, n);
        ck_assert_uint_eq(convcache_image_bytes(img, s), total);
    }
    ck_assert_msg(convcache_verify(img, -1, &err) == 0, "%s", err.msg);
}

static inline void check_invariants(convcache *c)
{
    strata_error err = {0};
    ck_assert_msg(convcache_check(c, &err) == 0, "%s", err.msg);
}

static inline void seq(int32_t *t, int n, int32_t start)
{
    for (int i = 0; i < n; i++)
        t[i] = start + i;
}

/* ---- the random-operations run, over any allocator ------------------------ */

/* The cache a stress run works on: 3 stages, 4-12 bytes per token. */
enum { STRESS_STAGES = 3, STRESS_MAX_BYTES = 4000, STRESS_MAX_IMAGES = 7 };

/* What the run knows of the allocator under the cache.  All zero: malloc,
 * which never refuses. */
typedef struct stress_alloc {
    /* Allocations it has refused so far, or NULL when it never does.  With
     * it, a capture may end in STRATA_E_NOMEM (refused after evicting all it
     * could), and the run must see some capture succeed after a refusal
     * (the cache evicted and retried). */
    const int *refusals;
    /* Called after every step with the cache's counters: the allocator's
     * own checks (NULL: none). */
    void (*check)(const convcache_stats *st, void *ctx);
    void *ctx;
} stress_alloc;

/* 20000 random finds, begins (fresh and extending), commits, aborts, pins
 * and unpins on c (made with the STRESS_ sizes), with the invariants and
 * the contents of every image found checked as it goes; the captures left
 * open at the end are aborted, and c is the caller's to free
 * (test_convcache.c). */
void convcache_stress(convcache *c, const stress_alloc *al);

#endif
