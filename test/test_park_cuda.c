/* test_park_cuda.c: suite "park_cuda" — capture, restore and the slot
 * shuttle on the card (park/park.c, park_cuda.c: the pinned arena and the
 * per-stage copy streams), judged byte for byte: each stage's KV pool is
 * read back whole into a host mirror and the spans and K/V are read from it
 * row by row (test_park.h), as the CPU suite "park" does on host pools.
 * Then greedy tokens after a restore equal those of never having parked.
 * A layer split "1,2,3" puts four stages on the one card. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>

#include "cache/arena.h"
#include "cache/convcache.h"
#include "engine/engine_internal.h"
#include "park/park.h"
#include "kernels/ops.h"
#include "test_park.h"

#define N_VOCAB 512

static strata_engine *open_cuda(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("park-cuda-llama", N_VOCAB, 9);
    strata_params p = test_params(path, STRATA_BACKEND_CUDA);
    p.n_ctx = 4096;
    p.n_slots = 2;
    p.n_chunk = 64;
    p.layer_split = "1,2,3";
    return test_open(&p);
}

/* Stage i's pool with its buffers read back into host memory. */
static kv_pool *mirror(const strata_engine *e, int i)
{
    const kv_pool *p = e->stages[i].kv;
    kv_pool *m = malloc(sizeof *m);
    *m = *p;
    m->buf = calloc((size_t)p->n_layer * 4, sizeof *m->buf);
    for (int k = 0; k < p->n_layer * 4; k++) {
        size_t bytes = kv_page_buf_bytes(p, k % 4) * (size_t)p->n_pages;
        if (!p->buf[k] || !bytes)
            continue;
        m->buf[k] = malloc(bytes);
        ck_assert(cudaMemcpy(m->buf[k], p->buf[k], bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    return m;
}

static void mirror_free(kv_pool *m)
{
    for (int k = 0; k < m->n_layer * 4; k++)
        free(m->buf[k]);
    free(m->buf);
    free(m);
}

static void feed(strata_seq *s, const int32_t *t, int n, float *logits)
{
    strata_error err = {0};
    ck_assert_msg(strata_seq_feed(s, t, n, logits, NULL, &err) == 0, "feed: %s", err.msg);
}

static void capture(strata_park *pk, strata_seq *s, int want_kind)
{
    strata_error err = {0};
    int kind = -1;
    ck_assert_msg(park_capture(pk, s, -1, 0, &kind, &err) == 0, "capture: %s", err.msg);
    ck_assert_int_eq(kind, want_kind);
}

static const park_pool_reader MIRROR = {mirror, mirror_free};

static void assert_span_matches(strata_park *pk, const strata_seq *s, int t0)
{
    park_assert_span_matches(&MIRROR, pk, s, t0);
}

static void assert_same_kv(const strata_seq *a, const strata_seq *b, int n)
{
    park_assert_same_kv(&MIRROR, a, b, n);
}

static void greedy(strata_seq *s, float *lg, int n, int32_t *out)
{
    strata_error err = {0};
    for (int i = 0; i < n; i++) {
        out[i] = cpu_argmax(lg, N_VOCAB);
        ck_assert_msg(strata_seq_decode(s, out[i], lg, &err) == 0, "decode: %s", err.msg);
    }
}

START_TEST(park_cuda_roundtrip)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    strata_engine *e = open_cuda();
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_msg(pk != NULL, "park_new: %s", err.msg);
    ck_assert_ptr_nonnull(park_arena(pk));   /* the cache's one pinned block */
    ck_assert_int_eq(park_set_verify(pk, 1, NULL), 0);
    int32_t t[1100];
    uint64_t seed = 5;
    for (int i = 0; i < 1100; i++)
        t[i] = 3 + (int32_t)(test_rand_u64(&seed) % (N_VOCAB - 3));
    strata_seq *a = strata_seq_new(e, &err), *c = strata_seq_new(e, &err);
    /* a and c interleave, so a's pages are not consecutive */
    feed(a, t, 300, NULL);
    feed(c, t + 700, 300, NULL);
    feed(a, t + 300, 400, NULL);
    ck_assert_int_ne(a->kv[0].pages[2], a->kv[0].pages[1] + 1);
    capture(pk, c, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, c, 0);
    strata_seq_truncate(a, 300);
    capture(pk, a, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, a, 0);
    feed(a, t + 300, 400, NULL);
    capture(pk, a, PARK_CAPTURE_REUSED);
    assert_span_matches(pk, a, 300);

    /* restore into b (two spans), and all but the last token into d (the
     * last span is copied only in part, mid-page) */
    strata_seq *b = strata_seq_new(e, &err), *d = strata_seq_new(e, &err);
    int got = -1;
    ck_assert_int_eq(park_restore(pk, b, t, 701, &got, &err), 0);
    ck_assert_int_eq(got, 700);
    assert_same_kv(a, b, 700);
    ck_assert_int_eq(park_restore(pk, d, t, 700, &got, &err), 0);
    ck_assert_int_eq(got, 699);
    assert_same_kv(a, d, 699);

    /* the shuttle: through host memory and on the card */
    strata_seq *f = strata_seq_new(e, &err);
    ck_assert_int_eq(park_shuttle(pk, b, f, PARK_SHUTTLE_VIA_HOST | PARK_SHUTTLE_KEEP, &err), 0);
    assert_same_kv(a, f, 700);
    ck_assert_int_eq(park_shuttle(pk, f, c, 0, &err), 0);
    assert_same_kv(a, c, 700);

    /* greedy after the restore = greedy of the never-parked a */
    float *la = malloc(sizeof(float) * N_VOCAB), *ld = malloc(sizeof(float) * N_VOCAB);
    int32_t ta[8], td[8];
    strata_seq_truncate(a, 699);
    feed(a, t + 699, 1, la);
    feed(d, t + 699, 1, ld);
    ck_assert(!memcmp(la, ld, sizeof(float) * N_VOCAB));
    greedy(a, la, 8, ta);
    greedy(d, ld, 8, td);
    ck_assert(!memcmp(ta, td, sizeof ta));
    ck_assert_int_eq(convcache_check(park_cache(pk), &err), 0);
    free(la);
    free(ld);
    strata_seq_free(a);
    strata_seq_free(b);
    strata_seq_free(c);
    strata_seq_free(d);
    strata_seq_free(f);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* A prompt chunk that asks for no logits returns before the card is done
 * with it; a capture right after must still copy the finished K/V (its copy
 * stream waits for the stage's compute).  One long chunk keeps the card busy
 * while the capture is queued, so without that wait the image would hold
 * pages the chunk had not written yet. */
START_TEST(park_cuda_capture_waits_for_compute)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    static const char *path;
    if (!path)
        path = test_tiny_llama("park-cuda-llama", N_VOCAB, 9);
    strata_params p = test_params(path, STRATA_BACKEND_CUDA);
    p.n_ctx = 4096;
    p.n_slots = 1;
    p.n_chunk = 2048;
    strata_engine *e = test_open(&p);
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_msg(pk != NULL, "park_new: %s", err.msg);
    ck_assert_int_eq(park_set_verify(pk, 1, NULL), 0); /* the span check reads checksums */
    int n = 2000;
    int32_t *t = malloc((size_t)n * sizeof *t);
    uint64_t seed = 11;
    for (int i = 0; i < n; i++)
        t[i] = 3 + (int32_t)(test_rand_u64(&seed) % (N_VOCAB - 3));
    strata_seq *a = strata_seq_new(e, &err);
    feed(a, t, n, NULL);
    capture(pk, a, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, a, 0);
    free(t);
    strata_seq_free(a);
    park_free(pk);
    strata_close(e);
}
END_TEST

static Suite *park_cuda_suite(void)
{
    Suite *s = suite_create("park_cuda");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, park_cuda_roundtrip);
    tcase_add_test(tc, park_cuda_capture_waits_for_compute);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(park_cuda_needs_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *park_cuda_suite(void)
{
    Suite *s = suite_create("park_cuda");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, park_cuda_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(park_cuda_suite)
