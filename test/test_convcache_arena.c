/* test_convcache_arena.c: the conversation cache over an arena of exactly
 * its budget, as the engine's pinned block gives it (cache/arena.h; suite
 * "convcache_arena").  There an allocation can fail although the budget
 * has room, for fragmentation (and for rounding to 64 bytes), and the cache
 * must evict and retry.  The cache itself over malloc is suite "convcache"
 * (test_convcache.c); the helpers both use are in test_convcache.h. */
#include "testutil.h"

#include "cache/arena.h"
#include "cache/convcache.h"
#include "test_convcache.h"

#include <stdlib.h>

/* ---- the arena under the cache ------------------------------------------ */

typedef struct arena_al {
    arena a;
    void *block;
    int refusals;        /* allocations the arena refused */
} arena_al;

static void *arena_al_alloc(size_t bytes, void *ctx)
{
    arena_al *x = ctx;
    void *p = arena_alloc(&x->a, bytes);
    x->refusals += p == NULL;
    return p;
}

static void arena_al_free(void *p, void *ctx)
{
    arena_al *x = ctx;
    ck_assert_int_eq(arena_free(&x->a, p), 0);
}

/* A cache whose parts come from an arena of exactly max_bytes. */
static convcache *arena_cache_new(arena_al *x, int n_stages, size_t max_bytes,
                                  int max_images)
{
    size_t rounded = (max_bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    x->block = aligned_alloc(ARENA_ALIGN, rounded);
    x->refusals = 0;
    ck_assert_int_eq(arena_init(&x->a, x->block, max_bytes), 0);
    ck_assert_uint_eq(x->a.bytes, max_bytes / ARENA_ALIGN * ARENA_ALIGN);
    strata_error err = {0};
    convcache_config cfg = {.n_stages = n_stages, .max_bytes = max_bytes,
                            .max_images = max_images,
                            .allocator = {arena_al_alloc, arena_al_free, x}};
    convcache *c = convcache_new(&cfg, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    return c;
}

static void arena_cache_free(convcache *c, arena_al *x)
{
    convcache_free(c);
    ck_assert_uint_eq(arena_used(&x->a), 0);
    ck_assert_int_eq(arena_free_extents(&x->a), 1);
    arena_fini(&x->a);
    free(x->block);
}

/* ---- fragmentation ----------------------------------------------------- */

/* One stage of 4 bytes per token: 16 tokens are one 64-byte arena unit.
 * The arena (16 units) ends up as A [0,4) | hole [4,8) | B [8,12) |
 * hole [12,16): half free, but no hole holds 6 units. */
START_TEST(arena_fragmentation_evicts_and_retries)
{
    arena_al x;
    convcache *c = arena_cache_new(&x, 1, 16 * 64, 8);
    strata_error err = {0};
    int32_t ta[64], tx[64], tb[64], te[96];
    seq(ta, 64, 100);
    seq(tx, 64, 200);
    seq(tb, 64, 300);
    seq(te, 96, 400);
    convcache_image *a, *b, *e;
    ck_assert_int_eq(capture(c, 1, ta, 64, NULL, &a, &err), 0);
    size_t nb[1] = {64 * 4};
    convcache_capture *cx;
    ck_assert_int_eq(convcache_begin(c, tx, 64, 64, NULL, nb, &cx, &err), 0);
    ck_assert_int_eq(capture(c, 1, tb, 64, NULL, &b, &err), 0);
    convcache_abort(c, cx);
    ck_assert_int_eq(arena_free_extents(&x.a), 2);
    ck_assert_uint_eq(arena_largest_free(&x.a), 4 * 64);
    convcache_pin(a);

    /* The budget has room (8 units used + 6 <= 16) but the arena has no
     * hole of 6 units; with B pinned too nothing can be evicted: NOMEM,
     * nothing lost, nothing left over. */
    convcache_pin(b);
    ck_assert_int_eq(capture(c, 1, te, 96, NULL, &e, &err), STRATA_E_NOMEM);
    ck_assert_int_eq(x.refusals, 1);
    convcache_stats st;
    convcache_get_stats(c, &st);
    ck_assert_int_eq(st.images, 2);
    ck_assert_int_eq(st.captures, 0);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.bytes_used, 8 * 64);
    ck_assert_uint_eq(arena_used(&x.a), 8 * 64);
    check_invariants(c);

    /* B unpinned: the refusal evicts it (its unit merges both holes) and
     * the retry fits.  The budget alone would not have evicted anything. */
    convcache_unpin(b);
    ck_assert_msg(capture(c, 1, te, 96, NULL, &e, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(x.refusals, 2);
    convcache_get_stats(c, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_int_eq(st.images, 2);
    convcache_image *found;
    ck_assert_int_eq(convcache_find(c, tb, 64, &found), 0);   /* B is gone */
    ck_assert_int_eq(convcache_find(c, ta, 64, &found), 64);  /* A is kept */
    ck_assert_uint_eq(st.bytes_used, 10 * 64);
    ck_assert_uint_eq(arena_used(&x.a), 10 * 64);
    check_content(a, 1);
    check_content(e, 1);
    check_invariants(c);
    const char *why = NULL;
    ck_assert_msg(arena_check(&x.a, &why) == 0, "%s", why);
    convcache_unpin(a);
    arena_cache_free(c, &x);
}
END_TEST

/* ---- random operations ------------------------------------------------- */

/* The stress run's allocator checks: rounded up to 64, the arena's bytes
 * cover the budget's, and its bookkeeping holds. */
static void arena_stress_check(const convcache_stats *st, void *ctx)
{
    arena_al *x = ctx;
    ck_assert_uint_ge(arena_used(&x->a), st->bytes_used);
    const char *why = NULL;
    ck_assert_msg(arena_check(&x->a, &why) == 0, "%s", why);
}

/* The random run of test_convcache.c, here where the parts are 4-12 bytes
 * per token, so rounding to 64 as well as fragmentation makes the arena
 * refuse allocations the budget admits. */
START_TEST(stress_random_operations_in_arena)
{
    arena_al x;
    convcache *c = arena_cache_new(&x, STRESS_STAGES, STRESS_MAX_BYTES, STRESS_MAX_IMAGES);
    stress_alloc al = {.refusals = &x.refusals, .check = arena_stress_check, .ctx = &x};
    convcache_stress(c, &al);
    arena_cache_free(c, &x);
}
END_TEST

static Suite *convcache_arena_suite(void)
{
    Suite *s = suite_create("convcache_arena");
    TCase *tc = tcase_create("arena");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, arena_fragmentation_evicts_and_retries);
    tcase_add_test(tc, stress_random_operations_in_arena);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(convcache_arena_suite)
