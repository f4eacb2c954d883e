/* test_arena.c: the allocator over one block (suite "arena").
 *
 * Every live allocation is filled with a pattern of its own and checked
 * before it is freed, so two allocations that overlap show up as a
 * clobbered pattern even where the bookkeeping looks right. */
#include "testutil.h"

#include "cache/arena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t n)
{
    return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

static void check_arena(arena *a)
{
    const char *why = NULL;
    ck_assert_msg(arena_check(a, &why) == 0, "arena: %s", why);
}

/* ---- the basics ---------------------------------------------------------- */

START_TEST(alloc_is_aligned_and_counted)
{
    /* A base one byte past an aligned address: the arena starts at the
     * next aligned one and uses whole units only. */
    unsigned char *block = aligned_alloc(ARENA_ALIGN, 64 * ARENA_ALIGN);
    arena a;
    ck_assert_int_eq(arena_init(&a, block + 1, 64 * ARENA_ALIGN - 1), 0);
    ck_assert_ptr_eq(a.base, block + ARENA_ALIGN);
    ck_assert_uint_eq(a.bytes, 63 * ARENA_ALIGN);
    ck_assert_uint_eq(arena_largest_free(&a), 63 * ARENA_ALIGN);

    ck_assert_ptr_null(arena_alloc(&a, 0));
    ck_assert_ptr_null(arena_alloc(&a, SIZE_MAX));
    void *p = arena_alloc(&a, 1), *q = arena_alloc(&a, 65), *r = arena_alloc(&a, 64);
    ck_assert(p && q && r);
    ck_assert_uint_eq((uintptr_t)p % ARENA_ALIGN, 0);
    ck_assert_uint_eq((uintptr_t)q % ARENA_ALIGN, 0);
    ck_assert_uint_eq((uintptr_t)r % ARENA_ALIGN, 0);
    ck_assert_ptr_eq(p, a.base);                      /* carved from the start */
    ck_assert_ptr_eq(q, a.base + 64);
    ck_assert_ptr_eq(r, a.base + 192);                /* 65 took two units */
    ck_assert_uint_eq(arena_used(&a), 4 * ARENA_ALIGN);
    check_arena(&a);

    /* Exhaustion: the rest fits exactly once, then nothing does. */
    void *rest = arena_alloc(&a, 59 * ARENA_ALIGN);
    ck_assert_ptr_nonnull(rest);
    ck_assert_uint_eq(arena_largest_free(&a), 0);
    ck_assert_ptr_null(arena_alloc(&a, 1));
    ck_assert_int_eq(arena_free_extents(&a), 0);
    check_arena(&a);

    /* Frees, a double free and foreign pointers. */
    ck_assert_int_eq(arena_free(&a, q), 0);
    ck_assert_int_eq(arena_free(&a, q), -1);
    ck_assert_int_eq(arena_free(&a, (unsigned char *)p + 64 * 64), -1); /* out of the block */
    ck_assert_int_eq(arena_free(&a, (unsigned char *)rest + 64), -1);   /* inside, not a start */
    ck_assert_int_eq(arena_free(&a, NULL), 0);
    ck_assert_uint_eq(arena_used(&a), 61 * ARENA_ALIGN); /* 63 less q's two */
    ck_assert_ptr_eq(arena_alloc(&a, 128), q);        /* the hole it left */
    check_arena(&a);
    arena_fini(&a);
    free(block);
}
END_TEST

START_TEST(free_coalesces_with_both_neighbours)
{
    static _Alignas(64) unsigned char block[8 * 64];
    arena a;
    ck_assert_int_eq(arena_init(&a, block, sizeof block), 0);
    void *p[8];
    for (int i = 0; i < 8; i++)
        ck_assert_ptr_nonnull(p[i] = arena_alloc(&a, 64));
    ck_assert_int_eq(arena_free_extents(&a), 0);

    ck_assert_int_eq(arena_free(&a, p[1]), 0);        /* alone */
    ck_assert_int_eq(arena_free(&a, p[3]), 0);        /* alone */
    ck_assert_int_eq(arena_free_extents(&a), 2);
    ck_assert_int_eq(arena_free(&a, p[2]), 0);        /* joins 1 and 3 */
    ck_assert_int_eq(arena_free_extents(&a), 1);
    ck_assert_uint_eq(arena_largest_free(&a), 3 * 64);
    ck_assert_int_eq(arena_free(&a, p[0]), 0);        /* merges with the next */
    ck_assert_int_eq(arena_free(&a, p[7]), 0);
    ck_assert_int_eq(arena_free(&a, p[6]), 0);        /* merges with the next */
    ck_assert_int_eq(arena_free(&a, p[4]), 0);        /* merges with the previous */
    ck_assert_int_eq(arena_free_extents(&a), 2);
    check_arena(&a);
    ck_assert_int_eq(arena_free(&a, p[5]), 0);        /* both: one extent again */
    ck_assert_int_eq(arena_free_extents(&a), 1);
    ck_assert_uint_eq(arena_largest_free(&a), sizeof block);
    ck_assert_uint_eq(arena_used(&a), 0);
    check_arena(&a);
    arena_fini(&a);
}
END_TEST

START_TEST(alloc_takes_the_best_fit)
{
    static _Alignas(64) unsigned char block[16 * 64];
    arena a;
    ck_assert_int_eq(arena_init(&a, block, sizeof block), 0);
    /* Holes of 4 units at 0 and 2 units at 6, then the tail of 7 at 9. */
    void *h4 = arena_alloc(&a, 4 * 64), *k1 = arena_alloc(&a, 2 * 64);
    void *h2 = arena_alloc(&a, 2 * 64), *k2 = arena_alloc(&a, 64);
    ck_assert(h4 && k1 && h2 && k2);
    arena_free(&a, h4);
    arena_free(&a, h2);
    ck_assert_int_eq(arena_free_extents(&a), 3);
    ck_assert_ptr_eq(arena_alloc(&a, 2 * 64), h2);    /* not the first fit */
    ck_assert_ptr_eq(arena_alloc(&a, 3 * 64), h4);    /* 4 beats 7 */
    ck_assert_ptr_eq(arena_alloc(&a, 7 * 64), (unsigned char *)k2 + 64);
    ck_assert_ptr_null(arena_alloc(&a, 2 * 64));      /* one unit left, at 3 */
    ck_assert_ptr_eq(arena_alloc(&a, 64), (unsigned char *)h4 + 3 * 64);
    check_arena(&a);
    arena_fini(&a);
}
END_TEST

/* ---- randomized, against a model ---------------------------------------- */

typedef struct live {
    unsigned char *p;
    size_t bytes;        /* asked for */
    uint64_t seed;
} live;

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed >> (8 * (i % 8))) ^ (unsigned char)i;
}

static int intact(const unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ((unsigned char)(seed >> (8 * (i % 8))) ^ (unsigned char)i))
            return 0;
    return 1;
}

static int by_address(const void *x, const void *y)
{
    const live *a = x, *b = y;
    return (a->p > b->p) - (a->p < b->p);
}

/* No two live allocations overlap, all lie in the block, and the used
 * bytes are the sum of their rounded sizes. */
static void check_model(arena *a, live *v, int n)
{
    live sorted[256];
    memcpy(sorted, v, (size_t)n * sizeof *v);
    qsort(sorted, (size_t)n, sizeof *sorted, by_address);
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        ck_assert(sorted[i].p >= a->base);
        ck_assert(sorted[i].p + round_up(sorted[i].bytes) <= a->base + a->bytes);
        if (i > 0)
            ck_assert_msg(sorted[i - 1].p + round_up(sorted[i - 1].bytes) <= sorted[i].p,
                          "allocations overlap");
        sum += round_up(sorted[i].bytes);
    }
    ck_assert_uint_eq(arena_used(a), sum);
    check_arena(a);
}

START_TEST(stress_against_a_model)
{
    const size_t block_bytes = 1 << 20;
    unsigned char *block = malloc(block_bytes + 7);
    arena a;
    ck_assert_int_eq(arena_init(&a, block + 7, block_bytes), 0);
    live v[256];
    int n = 0, refused = 0;
    uint64_t rng = 0x5eed;
    for (int step = 0; step < 20000; step++) {
        uint64_t r = test_rand_u64(&rng);
        if (n < 256 && (n == 0 || r % 100 < 55)) {
            /* sizes from 1 byte to 64 KiB, small ones more often */
            size_t bytes = 1 + (size_t)(test_rand_u64(&rng) % (r % 4 == 0 ? 65536 : 2048));
            size_t largest = arena_largest_free(&a);
            unsigned char *p = arena_alloc(&a, bytes);
            /* NULL exactly when no extent holds the rounded size */
            ck_assert_int_eq(p == NULL, largest < round_up(bytes));
            if (!p) {
                refused++;
                continue;
            }
            v[n] = (live){p, bytes, test_rand_u64(&rng)};
            fill(p, bytes, v[n].seed);
            n++;
        } else {
            int i = (int)(r % (uint64_t)n);
            ck_assert_msg(intact(v[i].p, v[i].bytes, v[i].seed), "an allocation was clobbered");
            ck_assert_int_eq(arena_free(&a, v[i].p), 0);
            v[i] = v[--n];
        }
        if (step % 97 == 0)
            check_model(&a, v, n);
    }
    check_model(&a, v, n);
    ck_assert_msg(refused > 0, "the stress never filled the arena");
    while (n > 0) {
        ck_assert(intact(v[n - 1].p, v[n - 1].bytes, v[n - 1].seed));
        ck_assert_int_eq(arena_free(&a, v[--n].p), 0);
    }
    ck_assert_int_eq(arena_free_extents(&a), 1);
    ck_assert_uint_eq(arena_largest_free(&a), a.bytes);
    ck_assert_uint_eq(arena_used(&a), 0);
    check_arena(&a);
    arena_fini(&a);
    free(block);
}
END_TEST

/* ---- two threads ---------------------------------------------------------- */

typedef struct worker {
    arena *a;
    uint64_t seed;
    int clobbered, done;
} worker;

static void *churn(void *vw)
{
    worker *w = vw;
    live v[32];
    int n = 0;
    uint64_t rng = w->seed;
    for (int step = 0; step < 20000; step++) {
        uint64_t r = test_rand_u64(&rng);
        w->done++;
        if (n < 32 && (n == 0 || r % 2)) {
            size_t bytes = 1 + (size_t)(r % 4096);
            unsigned char *p = arena_alloc(w->a, bytes);
            if (!p)
                continue;
            v[n] = (live){p, bytes, r ^ w->seed};
            fill(p, bytes, v[n].seed);
            n++;
        } else {
            int i = (int)(r % (uint64_t)n);
            w->clobbered += !intact(v[i].p, v[i].bytes, v[i].seed);
            arena_free(w->a, v[i].p);
            v[i] = v[--n];
        }
    }
    while (n > 0) {
        w->clobbered += !intact(v[n - 1].p, v[n - 1].bytes, v[n - 1].seed);
        arena_free(w->a, v[--n].p);
    }
    return NULL;
}

START_TEST(two_threads_alloc_and_free)
{
    const size_t block_bytes = 256 << 10;  /* 64 live of up to 4 KiB: sometimes full */
    unsigned char *block = malloc(block_bytes);
    arena a;
    ck_assert_int_eq(arena_init(&a, block, block_bytes), 0);
    worker w[2] = {{&a, 11, 0, 0}, {&a, 22, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(w[i].clobbered, 0);
        ck_assert_int_eq(w[i].done, 20000);
    }
    ck_assert_int_eq(arena_free_extents(&a), 1);
    ck_assert_uint_eq(arena_used(&a), 0);
    check_arena(&a);
    arena_fini(&a);
    free(block);
}
END_TEST

static Suite *arena_suite(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, alloc_is_aligned_and_counted);
    tcase_add_test(tc, free_coalesces_with_both_neighbours);
    tcase_add_test(tc, alloc_takes_the_best_fit);
    tcase_add_test(tc, stress_against_a_model);
    tcase_add_test(tc, two_threads_alloc_and_free);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(arena_suite)
