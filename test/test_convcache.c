/* test_convcache.c: the conversation cache (suite "convcache"), its
 * parts from malloc or a counting allocator.  The same cache over an arena
 * of exactly its budget (the engine's pinned block) is suite
 * "convcache_arena" (test_convcache_arena.c); the pattern helpers and the
 * random-operations run that both use are in test_convcache.h. */
#include "testutil.h"

#include "cache/convcache.h"
#include "cache/xxh64.h"
#include "stagepool/stagepool.h"
#include "test_convcache.h"

#include <stdlib.h>
#include <string.h>

/* ---- the checksum itself ------------------------------------------------- */

START_TEST(xxh64_matches_reference_vectors)
{
    /* Values from libxxhash 0.8.1 (XXH64). */
    ck_assert_uint_eq(xxh64("", 0, 0), 0xef46db3751d8e999ull);
    ck_assert_uint_eq(xxh64("abc", 3, 0), 0x44bc2cf5ad770999ull);
    unsigned char b[300];
    for (int i = 0; i < 300; i++)
        b[i] = (unsigned char)(i * 7 + 3);
    ck_assert_uint_eq(xxh64(b, 37, 5), 0xd7c1990cfad8a552ull);
    ck_assert_uint_eq(xxh64(b, 259, 5), 0x682b1c8f53059b12ull);
    ck_assert_uint_eq(xxh64(b, 296, 5), 0x4153b6fb43907f20ull);
    ck_assert_uint_eq(xxh64(NULL, 0, 5), 0x4be1d406981cfd3bull);
}
END_TEST

/* ---- lookup ---------------------------------------------------------------- */

START_TEST(finds_longest_prefix)
{
    convcache *c = cache_new(2, 1 << 20, 16);
    strata_error err = {0};
    int32_t t[64], other[3] = {5, 6, 7};
    seq(t, 64, 1);
    ck_assert_int_eq(capture(c, 2, t, 10, NULL, NULL, &err), 0);
    ck_assert_int_eq(capture(c, 2, t, 20, NULL, NULL, &err), 0);
    ck_assert_int_eq(capture(c, 2, other, 3, NULL, NULL, &err), 0);

    convcache_image *img;
    ck_assert_int_eq(convcache_find(c, t, 15, &img), 10);
    int n;
    ck_assert(convcache_image_tokens(img, &n)[9] == 10 && n == 10);
    ck_assert_int_eq(convcache_find(c, t, 64, &img), 20);
    ck_assert_int_eq(convcache_find(c, t, 20, &img), 20); /* exact */
    ck_assert_int_eq(convcache_image_pos(img), 20);
    check_content(img, 2);
    ck_assert_int_eq(convcache_find(c, t, 9, &img), 0);    /* all longer */
    ck_assert(img == NULL);
    ck_assert_int_eq(convcache_find(c, other, 2, &img), 0);
    int32_t diverge[12];
    seq(diverge, 12, 1);
    diverge[11] = 99;
    ck_assert_int_eq(convcache_find(c, diverge, 12, &img), 10);
    diverge[3] = 99;
    ck_assert_int_eq(convcache_find(c, diverge, 12, &img), 0);
    ck_assert_int_eq(convcache_find(c, NULL, 3, &img), 0);

    convcache_stats st;
    convcache_get_stats(c, &st);
    ck_assert_uint_eq(st.hits, 4);
    ck_assert_uint_eq(st.misses, 4);
    ck_assert_int_eq(st.images, 3);
    check_invariants(c);
    convcache_free(c);
    convcache_free(NULL);
}
END_TEST

/* ---- LRU and the two budgets --------------------------------------------- */

START_TEST(evicts_least_recently_used)
{
    convcache *c = cache_new(1, 1 << 20, 3);
    strata_error err = {0};
    int32_t a[4] = {1, 1, 1, 1}, b[4] = {2, 2, 2, 2}, cc[4] = {3, 3, 3, 3},
            d[4] = {4, 4, 4, 4}, e[4] = {5, 5, 5, 5};
    convcache_image *img;
    ck_assert_int_eq(capture(c, 1, a, 4, NULL, NULL, &err), 0);
    ck_assert_int_eq(capture(c, 1, b, 4, NULL, NULL, &err), 0);
    ck_assert_int_eq(capture(c, 1, cc, 4, NULL, NULL, &err), 0);
    ck_assert_int_eq(convcache_find(c, a, 4, &img), 4); /* a is now newest */
    ck_assert_int_eq(capture(c, 1, d, 4, NULL, NULL, &err), 0);
    ck_assert_int_eq(convcache_find(c, b, 4, &img), 0); /* b was oldest */
    ck_assert_int_eq(convcache_find(c, a, 4, &img), 4);
    ck_assert_int_eq(capture(c, 1, e, 4, NULL, NULL, &err), 0);
    ck_assert_int_eq(convcache_find(c, cc, 4, &img), 0);
    ck_assert_int_eq(convcache_find(c, a, 4, &img), 4);
    ck_assert_int_eq(convcache_find(c, d, 4, &img), 4);
    ck_assert_int_eq(convcache_find(c, e, 4, &img), 4);
    convcache_stats st;
    convcache_get_stats(c, &st);
    ck_assert_uint_eq(st.evictions, 2);
    ck_assert_int_eq(st.images, 3);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(byte_budget_enforced)
{
    /* One stage, 4 bytes per token: a 25-token image is 100 bytes. */
    convcache *c = cache_new(1, 350, 100);
    strata_error err = {0};
    int32_t t[100];
    convcache_stats st;
    for (int i = 0; i < 10; i++) {
        seq(t, 25, 1000 * i);
        ck_assert_int_eq(capture(c, 1, t, 25, NULL, NULL, &err), 0);
        convcache_get_stats(c, &st);
        ck_assert_uint_le(st.bytes_used, 350);
        ck_assert_int_le(st.images, 3);
        check_invariants(c);
    }
    ck_assert_int_eq(st.images, 3);
    ck_assert_uint_eq(st.bytes_used, 300);
    ck_assert_uint_eq(st.evictions, 7);

    /* Bigger than the whole budget: a clear error, and nothing evicted. */
    seq(t, 100, 77);
    size_t nb[1] = {351};
    convcache_capture *cap;
    ck_assert_int_eq(convcache_begin(c, t, 100, 100, NULL, nb, &cap, &err),
                     STRATA_E_LIMIT);
    ck_assert(cap == NULL);
    ck_assert_msg(strstr(err.msg, "budget is 350 bytes") != NULL, "%s", err.msg);
    convcache_get_stats(c, &st);
    ck_assert_int_eq(st.images, 3);
    ck_assert_uint_eq(st.evictions, 7);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(image_budget_enforced)
{
    convcache *c = cache_new(2, 1 << 24, 4);
    strata_error err = {0};
    int32_t t[8];
    convcache_stats st;
    for (int i = 0; i < 20; i++) {
        seq(t, 8, 100 * i);
        ck_assert_int_eq(capture(c, 2, t, 8, NULL, NULL, &err), 0);
        convcache_get_stats(c, &st);
        ck_assert_int_le(st.images, 4);
    }
    ck_assert_int_eq(st.images, 4);
    ck_assert_uint_eq(st.evictions, 16);
    /* Captures in flight count too: 4 open captures fill the budget. */
    convcache_capture *cap[5];
    size_t nb[2] = {8, 8};
    for (int i = 0; i < 4; i++) {
        seq(t, 8, 5000 + 100 * i);
        ck_assert_int_eq(convcache_begin(c, t, 8, 8, NULL, nb, &cap[i], &err), 0);
    }
    convcache_get_stats(c, &st);
    ck_assert_int_eq(st.images, 0);
    ck_assert_int_eq(st.captures, 4);
    seq(t, 8, 9000);
    ck_assert_int_eq(convcache_begin(c, t, 8, 8, NULL, nb, &cap[4], &err),
                     STRATA_E_LIMIT);
    check_invariants(c);
    for (int i = 0; i < 4; i++) {
        if (i % 2)
            convcache_abort(c, cap[i]);
        else
            ck_assert_int_eq(convcache_commit(c, cap[i], NULL, &err), 0);
    }
    convcache_get_stats(c, &st);
    ck_assert_int_eq(st.images, 2);
    ck_assert_uint_eq(st.bytes_used, 32);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(pinned_images_are_never_evicted)
{
    convcache *c = cache_new(1, 1000, 2);
    strata_error err = {0};
    int32_t a[10], b[10], d[10];
    seq(a, 10, 100);
    seq(b, 10, 200);
    seq(d, 10, 300);
    convcache_image *ia, *ib;
    ck_assert_int_eq(capture(c, 1, a, 10, NULL, &ia, &err), 0);
    ck_assert_int_eq(capture(c, 1, b, 10, NULL, &ib, &err), 0);
    convcache_pin(ia);
    convcache_pin(ib);
    convcache_pin(ib);
    /* Both slots pinned: no room, nothing evicted. */
    ck_assert_int_eq(capture(c, 1, d, 10, NULL, NULL, &err), STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "in use") != NULL, "%s", err.msg);
    convcache_unpin(ib);
    ck_assert_int_eq(capture(c, 1, d, 10, NULL, NULL, &err), STRATA_E_LIMIT);
    convcache_unpin(ib);
    /* a is older but pinned: b goes. */
    ck_assert_int_eq(capture(c, 1, d, 10, NULL, NULL, &err), 0);
    convcache_image *img;
    ck_assert_int_eq(convcache_find(c, b, 10, &img), 0);
    ck_assert_int_eq(convcache_find(c, a, 10, &img), 10);
    check_content(ia, 1);

    /* The byte budget: 960 bytes held by a pinned image leave no room for
     * 44 more even after evicting everything else, so nothing is evicted. */
    convcache *c2 = cache_new(1, 1000, 10);
    int32_t big[300];
    seq(big, 300, 1);
    convcache_image *ibig;
    ck_assert_int_eq(capture(c2, 1, big, 240, NULL, &ibig, &err), 0);
    convcache_pin(ibig);
    ck_assert_int_eq(capture(c2, 1, d, 10, NULL, NULL, &err), 0); /* 1000: fits */
    ck_assert_int_eq(capture(c2, 1, big + 250, 11, NULL, NULL, &err),
                     STRATA_E_LIMIT);
    ck_assert_msg(strstr(err.msg, "960 are held by images in use") != NULL,
                  "%s", err.msg);
    convcache_stats st;
    convcache_get_stats(c2, &st);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_int_eq(st.images, 2);
    ck_assert_int_eq(st.pinned, 1);
    check_invariants(c2);
    convcache_unpin(ibig);
    ck_assert_int_eq(capture(c2, 1, big + 250, 11, NULL, NULL, &err), 0);
    convcache_get_stats(c2, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.bytes_used, 84);
    check_invariants(c2);
    convcache_free(c2);
    convcache_free(c);
}
END_TEST

/* ---- capture: abort, extend, checksums ------------------------------------ */

START_TEST(abort_leaves_nothing)
{
    convcache *c = cache_new(3, 1 << 20, 8);
    strata_error err = {0};
    int32_t t[50];
    seq(t, 50, 1);
    convcache_image *base;
    ck_assert_int_eq(capture(c, 3, t, 20, NULL, &base, &err), 0);
    convcache_stats before;
    convcache_get_stats(c, &before);

    size_t nb[3] = {120, 240, 360};
    convcache_capture *cap;
    ck_assert_int_eq(convcache_begin(c, t, 50, 50, NULL, nb, &cap, &err), 0);
    memset(convcache_capture_part(cap, 1), 0xab, 240);
    convcache_abort(c, cap);
    ck_assert_int_eq(convcache_begin(c, t, 50, 50, base, nb, &cap, &err), 0);
    convcache_abort(c, cap);
    convcache_abort(c, NULL);

    convcache_stats after;
    convcache_get_stats(c, &after);
    ck_assert_uint_eq(after.bytes_used, before.bytes_used);
    ck_assert_int_eq(after.images, 1);
    ck_assert_int_eq(after.captures, 0);
    ck_assert_uint_eq(after.aborts, 2);
    convcache_image *img;
    ck_assert_int_eq(convcache_find(c, t, 50, &img), 20);
    ck_assert(img == base);
    check_content(base, 3);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(extend_reuses_prefix_without_copy)
{
    const int S = 2;
    convcache *c = cache_new(S, 1 << 20, 2);
    strata_error err = {0};
    int32_t t[300];
    seq(t, 300, 7);
    convcache_image *a, *b, *b2;
    ck_assert_int_eq(capture(c, S, t, 100, NULL, &a, &err), 0);
    size_t a_bytes = 100 * (bytes_per_token(0) + bytes_per_token(1));
    convcache_stats st;
    convcache_get_stats(c, &st);
    ck_assert_uint_eq(st.bytes_used, a_bytes);

    ck_assert_int_eq(convcache_find(c, t, 150, &a), 100);
    ck_assert_int_eq(capture(c, S, t, 150, a, &b, &err), 0);
    convcache_get_stats(c, &st);
    /* Only the 50 new tokens took new bytes. */
    ck_assert_uint_eq(st.bytes_used, a_bytes * 3 / 2);
    ck_assert_uint_eq(st.bytes_reused, a_bytes);
    ck_assert_int_eq(convcache_image_n_spans(b), 2);
    for (int s = 0; s < S; s++) {
        convcache_span sa, sb;
        ck_assert_int_eq(convcache_image_span(a, s, 0, &sa, &err), 0);
        ck_assert_int_eq(convcache_image_span(b, s, 0, &sb, &err), 0);
        ck_assert(sa.data == sb.data); /* shared, not copied */
        ck_assert_int_eq(convcache_image_span(b, s, 1, &sb, &err), 0);
        ck_assert_int_eq(sb.t0, 100);
        ck_assert_int_eq(sb.t1, 150);
    }
    check_content(b, S);

    /* A chain: a third turn shares both spans. */
    ck_assert_int_eq(capture(c, S, t, 300, b, &b2, &err), 0);
    ck_assert_int_eq(convcache_image_n_spans(b2), 3);
    /* Budget of two images: a was evicted, but its span lives on in b, b2. */
    ck_assert_int_eq(convcache_find(c, t, 120, &a), 0);
    convcache_get_stats(c, &st);
    ck_assert_uint_eq(st.bytes_used, a_bytes * 3);
    check_content(b, S);
    check_content(b2, S);
    check_invariants(c);

    /* A prefix that is not a prefix, or the image itself, is refused. */
    convcache_capture *cap;
    size_t nb[2] = {4, 8};
    int32_t wrong[160];
    seq(wrong, 160, 7);
    wrong[5] = -1;
    ck_assert_int_eq(convcache_begin(c, wrong, 160, 160, b, nb, &cap, &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(convcache_begin(c, t, 150, 150, b, nb, &cap, &err),
                     STRATA_E_ARG);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(duplicate_commit_keeps_one_image)
{
    convcache *c = cache_new(1, 1 << 20, 4);
    strata_error err = {0};
    int32_t t[10];
    seq(t, 10, 1);
    size_t nb[1] = {40};
    convcache_capture *c1, *c2;
    ck_assert_int_eq(convcache_begin(c, t, 10, 10, NULL, nb, &c1, &err), 0);
    ck_assert_int_eq(convcache_begin(c, t, 10, 10, NULL, nb, &c2, &err), 0);
    fill_pattern(convcache_capture_part(c1, 0), 40, span_seed(t, 0, 10, 0));
    fill_pattern(convcache_capture_part(c2, 0), 40, span_seed(t, 0, 10, 0));
    convcache_image *i1, *i2;
    ck_assert_int_eq(convcache_commit(c, c1, &i1, &err), 0);
    ck_assert_int_eq(convcache_commit(c, c2, &i2, &err), 0);
    ck_assert(i1 == i2);
    convcache_stats st;
    convcache_get_stats(c, &st);
    ck_assert_int_eq(st.images, 1);
    ck_assert_uint_eq(st.bytes_used, 40);
    check_invariants(c);
    convcache_free(c);
}
END_TEST

START_TEST(checksum_detects_flipped_byte)
{
    convcache *c = cache_new(3, 1 << 20, 4);
    strata_error err = {0};
    int32_t t[40];
    seq(t, 40, 3);
    convcache_image *a, *b;
    ck_assert_int_eq(capture(c, 3, t, 30, NULL, &a, &err), 0);
    ck_assert_int_eq(capture(c, 3, t, 40, a, &b, &err), 0);
    ck_assert_int_eq(convcache_verify(b, -1, &err), 0);

    convcache_span sp;
    ck_assert_int_eq(convcache_image_span(b, 1, 0, &sp, &err), 0);
    unsigned char *p = (unsigned char *)sp.data; /* the test corrupts it */
    p[77] ^= 0x10;
    ck_assert_int_eq(convcache_verify(b, -1, &err), STRATA_E_FORMAT);
    ck_assert_msg(strstr(err.msg, "stage 1, tokens 0..30") != NULL, "%s", err.msg);
    ck_assert_int_eq(convcache_verify(a, 1, &err), STRATA_E_FORMAT);
    ck_assert_int_eq(convcache_verify(b, 0, &err), 0);
    ck_assert_int_eq(convcache_verify(b, 2, &err), 0);
    ck_assert_int_eq(convcache_verify(b, 3, &err), STRATA_E_ARG);
    p[77] ^= 0x10;
    ck_assert_int_eq(convcache_verify(b, -1, &err), 0);

    ck_assert_int_eq(convcache_image_span(b, 2, 1, &sp, &err), 0);
    p = (unsigned char *)sp.data;
    p[sp.bytes - 1] ^= 1;
    ck_assert_int_eq(convcache_verify(b, 2, &err), STRATA_E_FORMAT);
    ck_assert_msg(strstr(err.msg, "stage 2, tokens 30..40") != NULL, "%s", err.msg);
    ck_assert_int_eq(convcache_verify(a, -1, &err), 0);
    convcache_free(c);

    /* Checksums switched off: verify says so rather than passing. */
    convcache_config cfg = {.n_stages = 1, .max_bytes = 1 << 20,
                            .max_images = 4, .skip_checksums = 1};
    c = convcache_new(&cfg, &err);
    ck_assert_int_eq(capture(c, 1, t, 30, NULL, &a, &err), 0);
    ck_assert_int_eq(convcache_verify(a, -1, &err), STRATA_E_UNSUPPORTED);
    convcache_free(c);
}
END_TEST

/* ---- a pluggable allocator, and its failure ------------------------------- */

typedef struct count_alloc {
    int allocs, frees;
    int fail_at;          /* fail the n-th allocation (1-based), 0: never */
} count_alloc;

static void *counting_alloc(size_t bytes, void *ctx)
{
    count_alloc *a = ctx;
    if (++a->allocs == a->fail_at)
        return NULL;
    return malloc(bytes);
}

static void counting_free(void *p, void *ctx)
{
    count_alloc *a = ctx;
    a->frees++;
    free(p);
}

START_TEST(allocator_is_pluggable_and_failure_is_clean)
{
    count_alloc ca = {0};
    convcache_config cfg = {.n_stages = 3, .max_bytes = 1 << 20, .max_images = 8,
                            .allocator = {counting_alloc, counting_free, &ca}, .format = 2};
    strata_error err = {0};
    convcache *c = convcache_new(&cfg, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    int32_t t[20];
    seq(t, 20, 1);
    convcache_image *a;
    ck_assert_int_eq(capture(c, 3, t, 10, NULL, &a, &err), 0);
    ck_assert_int_eq(ca.allocs, 3);
    ck_assert_int_eq(convcache_image_format(a), 2); /* the config's tag, on every image */

    ca.fail_at = ca.allocs + 2; /* the second stage of the next capture */
    ck_assert_int_eq(capture(c, 3, t, 20, a, NULL, &err), STRATA_E_NOMEM);
    ck_assert_msg(strstr(err.msg, "stage 1") != NULL, "%s", err.msg);
    ck_assert_int_eq(ca.frees, 1); /* stage 0's part, given back */
    convcache_stats st;
    convcache_get_stats(c, &st);
    /* The prefix is not evicted to retry: its spans are the capture's too,
     * so evicting it would free nothing. */
    ck_assert_int_eq(st.images, 1);
    ck_assert_int_eq(st.evictions, 0);
    ck_assert_int_eq(st.captures, 0);
    ck_assert_uint_eq(st.bytes_used, 10 * (4 + 8 + 12));
    check_content(a, 3);
    check_invariants(c);

    /* Zero-sized parts allocate nothing. */
    int32_t z[5] = {9, 9, 9, 9, 9};
    size_t nb[3] = {0, 16, 0};
    convcache_capture *cap;
    int before = ca.allocs;
    ck_assert_int_eq(convcache_begin(c, z, 5, 5, NULL, nb, &cap, &err), 0);
    ck_assert(convcache_capture_part(cap, 0) == NULL);
    ck_assert_int_eq(ca.allocs, before + 1);
    ck_assert_int_eq(convcache_commit(c, cap, NULL, &err), 0);
    convcache_free(c);
    ck_assert_int_eq(ca.allocs - 1, ca.frees); /* minus the failed one */

    cfg.allocator.free = NULL;
    ck_assert(convcache_new(&cfg, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_ARG);
}
END_TEST

/* ---- capture bodies on the stage pool -------------------------------------- */

typedef struct pool_capture {
    convcache_capture *cap;
    const int32_t *tokens;
    int n;
    int fail_stage;
} pool_capture;

static int body_write_part(int stage, void *vctx)
{
    pool_capture *pc = vctx;
    int32_t t0 = convcache_capture_first_token(pc->cap);
    fill_pattern(convcache_capture_part(pc->cap, stage),
                 convcache_capture_part_bytes(pc->cap, stage),
                 span_seed(pc->tokens, t0, pc->n, stage));
    if (stage == pc->fail_stage)
        return strata_err(stagepool_stage_error(), STRATA_E_DEVICE,
                          "injected copy failure");
    convcache_capture_seal(pc->cap, stage);
    return 0;
}

/* Capture through the pool as the engine will: every stage writes its own
 * part at the same time; a failure anywhere aborts the whole image. */
static int pool_capture_run(convcache *c, stagepool *p, const int32_t *t,
                            int n, convcache_image *prefix, int fail_stage,
                            convcache_image **out, strata_error *err)
{
    int t0 = 0;
    if (prefix)
        convcache_image_tokens(prefix, &t0);
    size_t nb[MAX_STAGES];
    for (int s = 0; s < MAX_STAGES; s++)
        nb[s] = (size_t)(n - t0) * bytes_per_token(s);
    pool_capture pc = {.tokens = t, .n = n, .fail_stage = fail_stage};
    int rc = convcache_begin(c, t, n, n, prefix, nb, &pc.cap, err);
    if (rc)
        return rc;
    rc = stagepool_run(p, body_write_part, &pc, err);
    if (rc) {
        convcache_abort(c, pc.cap);
        return rc;
    }
    return convcache_commit(c, pc.cap, out, err);
}

START_TEST(stage_failure_leaves_no_torn_image)
{
    convcache *c = cache_new(MAX_STAGES, 1 << 22, 8);
    strata_error err = {0};
    stagepool *p = stagepool_new(MAX_STAGES, NULL, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    stagepool_set_serial(p, 0);
    int32_t t[4000];
    seq(t, 4000, 11);

    convcache_image *a, *b, *img;
    ck_assert_int_eq(pool_capture_run(c, p, t, 3000, NULL, -1, &a, &err), 0);
    check_content(a, MAX_STAGES);
    convcache_stats before;
    convcache_get_stats(c, &before);

    ck_assert_int_eq(pool_capture_run(c, p, t, 4000, a, 2, NULL, &err),
                     STRATA_E_DEVICE);
    ck_assert_str_eq(err.msg, "stage 2: injected copy failure");
    convcache_stats after;
    convcache_get_stats(c, &after);
    ck_assert_uint_eq(after.bytes_used, before.bytes_used);
    ck_assert_int_eq(after.images, 1);
    ck_assert_int_eq(convcache_find(c, t, 4000, &img), 3000);
    check_invariants(c);

    /* Parallel and serial captures give byte-identical images. */
    ck_assert_int_eq(pool_capture_run(c, p, t, 4000, a, -1, &b, &err), 0);
    check_content(b, MAX_STAGES);
    uint64_t par[MAX_STAGES], ser[MAX_STAGES];
    for (int s = 0; s < MAX_STAGES; s++) {
        convcache_span sp;
        convcache_image_span(b, s, 1, &sp, &err);
        par[s] = xxh64(sp.data, sp.bytes, 0);
    }
    convcache *c2 = cache_new(MAX_STAGES, 1 << 22, 8);
    stagepool_set_serial(p, 1);
    ck_assert_int_eq(pool_capture_run(c2, p, t, 3000, NULL, -1, &a, &err), 0);
    ck_assert_int_eq(pool_capture_run(c2, p, t, 4000, a, -1, &b, &err), 0);
    for (int s = 0; s < MAX_STAGES; s++) {
        convcache_span sp;
        convcache_image_span(b, s, 1, &sp, &err);
        ser[s] = xxh64(sp.data, sp.bytes, 0);
        ck_assert_uint_eq(par[s], ser[s]);
    }
    convcache_free(c2);
    stagepool_free(p);
    convcache_free(c);
}
END_TEST

/* ---- random operations, invariants after every step ----------------------- */

/* Here over malloc; test_convcache_arena.c runs it over an arena. */
void convcache_stress(convcache *c, const stress_alloc *al)
{
    const int S = STRESS_STAGES;
    const size_t max_bytes = STRESS_MAX_BYTES;
    const int max_images = STRESS_MAX_IMAGES;
    const int *refusals = al->refusals;
    int nomem = 0, retried = 0;
    strata_error err = {0};
    uint64_t rng = 12345;
    enum { MAX_OPEN = 3, MAX_PIN = 2, MAXLEN = 60 };
    struct { convcache_capture *cap; int32_t tokens[MAXLEN]; int n; } open[MAX_OPEN];
    int n_open = 0;
    convcache_image *pinned[MAX_PIN];
    int n_pinned = 0;
    int limits = 0, commits = 0, hits = 0;

    for (int step = 0; step < 20000; step++) {
        int32_t t[MAXLEN];
        int n = 1 + (int)(test_rand_u64(&rng) % MAXLEN);
        /* A tiny alphabet, so conversations share prefixes often. */
        for (int i = 0; i < n; i++)
            t[i] = (int32_t)(test_rand_u64(&rng) % 3);
        int op = (int)(test_rand_u64(&rng) % 10);
        convcache_image *img;

        if (op < 3) {                                   /* lookup */
            int len = convcache_find(c, t, n, &img);
            if (len > 0) {
                hits++;
                int m;
                const int32_t *it = convcache_image_tokens(img, &m);
                ck_assert_int_eq(m, len);
                ck_assert(memcmp(it, t, (size_t)len * sizeof *t) == 0);
                check_content(img, S);
            }
        } else if (op < 6 && n_open < MAX_OPEN) {       /* begin */
            int len = convcache_find(c, t, n, &img);
            if (len == n)
                continue;
            size_t nb[3];
            for (int s = 0; s < S; s++)
                nb[s] = (size_t)(n - len) * bytes_per_token(s);
            convcache_capture *cap;
            int refused = refusals ? *refusals : 0;
            int rc = convcache_begin(c, t, n, n, img, nb, &cap, &err);
            if (rc == STRATA_E_LIMIT) {
                limits++;
            } else if (refusals && rc == STRATA_E_NOMEM) {
                nomem++;      /* refused after evicting all it could */
            } else {
                retried += refusals && *refusals > refused;
                ck_assert_msg(rc == 0, "%s", err.msg);
                for (int s = 0; s < S; s++)
                    fill_pattern(convcache_capture_part(cap, s), nb[s],
                                 span_seed(t, len, n, s));
                open[n_open].cap = cap;
                memcpy(open[n_open].tokens, t, sizeof t);
                open[n_open].n = n;
                n_open++;
            }
        } else if (op < 8 && n_open > 0) {              /* end a capture */
            int k = (int)(test_rand_u64(&rng) % (uint64_t)n_open);
            if (test_rand_u64(&rng) % 4 == 0) {
                convcache_abort(c, open[k].cap);
            } else {
                ck_assert_int_eq(convcache_commit(c, open[k].cap, &img, &err), 0);
                commits++;
                /* Right after its commit it is found whole. */
                convcache_image *again;
                ck_assert_int_eq(convcache_find(c, open[k].tokens, open[k].n,
                                                &again), open[k].n);
                ck_assert(again == img);
                check_content(img, S);
            }
            open[k] = open[--n_open];
        } else if (op == 8) {                           /* pin */
            if (n_pinned < MAX_PIN && convcache_find(c, t, n, &img) > 0) {
                convcache_pin(img);
                pinned[n_pinned++] = img;
            }
        } else if (n_pinned > 0) {                      /* unpin */
            int k = (int)(test_rand_u64(&rng) % (uint64_t)n_pinned);
            check_content(pinned[k], S);     /* survived every eviction */
            convcache_unpin(pinned[k]);
            pinned[k] = pinned[--n_pinned];
        }
        convcache_stats st;
        convcache_get_stats(c, &st);
        ck_assert_uint_le(st.bytes_used, max_bytes);
        ck_assert_int_le(st.images + st.captures, max_images);
        if (step % 16 == 0)
            check_invariants(c);
        if (al->check)
            al->check(&st, al->ctx);
    }
    check_invariants(c);
    convcache_stats st;
    convcache_get_stats(c, &st);
    /* The run exercised every path. */
    ck_assert_int_gt(limits, 0);
    ck_assert_int_gt(commits, 100);
    ck_assert_int_gt(hits, 100);
    ck_assert_uint_gt(st.evictions, 100);
    ck_assert_uint_gt(st.bytes_reused, 0);
    if (refusals)
        ck_assert_msg(retried > 0, "no capture fitted after evicting for the "
                      "allocator (%d refused outright)", nomem);
    while (n_open > 0)
        convcache_abort(c, open[--n_open].cap);
}

START_TEST(stress_random_operations)
{
    convcache *c = cache_new(STRESS_STAGES, STRESS_MAX_BYTES, STRESS_MAX_IMAGES);
    convcache_stress(c, &(stress_alloc){0});
    convcache_free(c);
}
END_TEST


static Suite *convcache_suite(void)
{
    Suite *s = suite_create("convcache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, xxh64_matches_reference_vectors);
    tcase_add_test(tc, finds_longest_prefix);
    tcase_add_test(tc, evicts_least_recently_used);
    tcase_add_test(tc, byte_budget_enforced);
    tcase_add_test(tc, image_budget_enforced);
    tcase_add_test(tc, pinned_images_are_never_evicted);
    tcase_add_test(tc, abort_leaves_nothing);
    tcase_add_test(tc, extend_reuses_prefix_without_copy);
    tcase_add_test(tc, duplicate_commit_keeps_one_image);
    tcase_add_test(tc, checksum_detects_flipped_byte);
    tcase_add_test(tc, allocator_is_pluggable_and_failure_is_clean);
    tcase_add_test(tc, stage_failure_leaves_no_torn_image);
    tcase_add_test(tc, stress_random_operations);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(convcache_suite)
