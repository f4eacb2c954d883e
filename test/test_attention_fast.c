/* test_attention_fast.c: suite "attention_fast" — cpu_attention_fast
 * (kernels/cpu/attention_fast.c), both twins, against cpu_attention, the
 * float64 reference (kernels/cpu/kv.c), on caches of both types filled by
 * cpu_kv_store from Gaussian K/V (never zero), with pages in shuffled
 * order and contexts that end inside the first, second and third page.
 *
 * Tolerance: |fast - ref| <= 2e-5 * max_i |ref_i| + 1e-6 per element.  The
 * fast path sums in float (a head_dim dot product, a page's exp-weighted
 * sum of V) where the reference sums in double: relative rounding of a few
 * 1e-7 per add, a few hundred adds; measured worst 0.06 of the bound.
 * The two twins also agree within the same bound, and each is bitwise
 * deterministic (the same call twice, and on 1, 2 and 6 threads, gives the
 * same bits: the invariance rule). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"

enum { N_PAGES = 3, N_KV_HEAD = 2, N_HEAD = 6 };

typedef struct cache {
    kv_view kv;
    int32_t pages[N_PAGES];
    void *buf[6];
} cache;

/* A cache of N_PAGES pages stored in reverse physical order, every token
 * written with cpu_kv_store. */
static void cache_fill(cache *c, int type, int hd, uint64_t seed)
{
    const size_t toks = (size_t)N_PAGES * N_KV_HEAD * KV_PAGE;
    memset(c, 0, sizeof *c);
    c->kv.type = type;
    c->kv.n_kv_head = N_KV_HEAD;
    c->kv.head_dim = hd;
    for (int p = 0; p < N_PAGES; p++)
        c->pages[p] = N_PAGES - 1 - p;
    c->kv.pages = c->pages;
    if (type == KV_F16) {
        c->kv.kh = c->buf[0] = malloc(toks * hd * 2);
        c->kv.vh = c->buf[1] = malloc(toks * hd * 2);
    } else {
        c->kv.kq = c->buf[2] = malloc(toks * hd);
        c->kv.kd = c->buf[3] = malloc(toks * hd / 32 * 2);
        c->kv.vq = c->buf[4] = malloc(toks * hd / 2);
        c->kv.vd = c->buf[5] = malloc(toks * hd / 32 * 2);
    }
    float *k = malloc(sizeof *k * N_KV_HEAD * hd), *v = malloc(sizeof *v * N_KV_HEAD * hd);
    for (int32_t pos = 0; pos < N_PAGES * KV_PAGE; pos++) {
        test_fill_normal(k, (size_t)N_KV_HEAD * hd, 1.0f, seed + 2 * (uint64_t)pos);
        test_fill_normal(v, (size_t)N_KV_HEAD * hd, 1.0f, seed + 2 * (uint64_t)pos + 1);
        cpu_kv_store(&c->kv, pos, k, v);
    }
    free(k);
    free(v);
}

static void cache_free(cache *c)
{
    for (int i = 0; i < 6; i++)
        free(c->buf[i]);
}

static double worst_vs(const float *a, const float *ref, int n, double *bound)
{
    double mx = 0, worst = 0;
    for (int i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    *bound = 2e-5 * mx + 1e-6;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

START_TEST(fast_attention_matches_reference)
{
    static const int dims[] = {32, 64, 128};
    static const int32_t ctxs[] = {1, 37, 256, 257, 600, 3 * KV_PAGE};
    const int avx2 = fast_cpu_avx2_ok();
    if (!avx2)
        test_note_skip("fast_attention_matches_reference (AVX2 twin)", "cpu",
                       "CPU lacks AVX2/FMA/F16C");
    double worst_rel = 0;
    for (int type = KV_K8V4; type <= KV_F16; type++) {
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            const int hd = dims[di], n = N_HEAD * hd;
            cache c;
            cache_fill(&c, type, hd, 1000 + 100 * (uint64_t)type + di);
            float *q = malloc(sizeof *q * n), *ref = malloc(sizeof *ref * n);
            float *fs = malloc(sizeof *fs * n), *fv = malloc(sizeof *fv * n);
            test_fill_normal(q, n, 1.0f, 77 + di);
            for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
                const float scale = 1.0f / sqrtf((float)hd);
                cpu_attention(q, N_HEAD, &c.kv, ctxs[ci], scale, ref);
                for (int tw = 0; tw <= avx2; tw++) {
                    float *f = tw ? fv : fs;
                    cpu_attention_fast_isa(q, N_HEAD, &c.kv, ctxs[ci], scale, f, tw);
                    double bound, w = worst_vs(f, ref, n, &bound);
                    ck_assert_msg(w <= bound, "%s twin, kv %s, head_dim %d, ctx %d: error %.3g > %.3g",
                                  tw ? "AVX2" : "scalar", type == KV_F16 ? "f16" : "k8v4", hd,
                                  ctxs[ci], w, bound);
                    worst_rel = w / bound > worst_rel ? w / bound : worst_rel;
                }
                if (avx2) {
                    double bound, w = worst_vs(fv, fs, n, &bound);
                    ck_assert_msg(w <= bound, "twins differ: kv %s, head_dim %d, ctx %d: %.3g > %.3g",
                                  type == KV_F16 ? "f16" : "k8v4", hd, ctxs[ci], w, bound);
                }
            }
            free(q);
            free(ref);
            free(fs);
            free(fv);
            cache_free(&c);
        }
    }
    printf("  attention_fast: worst error %.2f of the bound\n", worst_rel);
}
END_TEST

/* A sliding window (gemma3's local layers): keys t0..ctx-1 only, against
 * cpu_attention_window, with t0 inside a page, on a page boundary and 0. */
START_TEST(fast_attention_window_matches_reference)
{
    static const int32_t t0s[] = {0, 1, 255, 256, 300, 599};
    const int avx2 = fast_cpu_avx2_ok();
    const int hd = 64, n = N_HEAD * hd;
    const int32_t ctx = 600;
    for (int type = KV_K8V4; type <= KV_F16; type++) {
        cache c;
        cache_fill(&c, type, hd, 7000 + (uint64_t)type);
        float *q = malloc(sizeof *q * n), *ref = malloc(sizeof *ref * n), *f = malloc(sizeof *f * n);
        float *full = malloc(sizeof *full * n);
        test_fill_normal(q, n, 1.0f, 93);
        cpu_attention(q, N_HEAD, &c.kv, ctx, 0.125f, full);
        for (size_t i = 0; i < sizeof t0s / sizeof t0s[0]; i++) {
            cpu_attention_window(q, N_HEAD, &c.kv, t0s[i], ctx, 0.125f, ref);
            for (int tw = 0; tw <= avx2; tw++) {
                cpu_attention_fast_window_isa(q, N_HEAD, &c.kv, t0s[i], ctx, 0.125f, f, tw);
                double bound, w = worst_vs(f, ref, n, &bound);
                ck_assert_msg(w <= bound, "%s twin, kv %s, window from %d: error %.3g > %.3g",
                              tw ? "AVX2" : "scalar", type == KV_F16 ? "f16" : "k8v4", t0s[i], w,
                              bound);
            }
            /* a window that starts later must change the answer (the test can fail) */
            if (t0s[i] > 0)
                ck_assert_msg(memcmp(f, full, sizeof *f * n) != 0, "window from %d ignored", t0s[i]);
        }
        free(q);
        free(ref);
        free(f);
        free(full);
        cache_free(&c);
    }
}
END_TEST

/* The same bits on 1, 2 and 6 threads: heads handed out to either thread,
 * and (AVX2) decoded in groups of 3 heads (1 and 2 threads) or one head a
 * task (6 threads). */
START_TEST(fast_attention_is_invariant)
{
    const int hd = 64, n = N_HEAD * hd;
    const int32_t ctx = 700; /* above the inline threshold: the pool runs it */
    for (int type = KV_K8V4; type <= KV_F16; type++) {
        cache c;
        cache_fill(&c, type, hd, 5000 + (uint64_t)type);
        float *q = malloc(sizeof *q * n), *a = malloc(sizeof *a * n), *b = malloc(sizeof *b * n);
        test_fill_normal(q, n, 1.0f, 91);
        tp_set_threads(1);
        cpu_attention_fast(q, N_HEAD, &c.kv, ctx, 0.125f, a);
        for (int nt = 2; nt <= 6; nt += 4) {
            tp_set_threads(nt);
            cpu_attention_fast(q, N_HEAD, &c.kv, ctx, 0.125f, b);
            ck_assert_msg(!memcmp(a, b, sizeof *a * n), "1 and %d threads differ (kv type %d)", nt,
                          type);
        }
        free(q);
        free(a);
        free(b);
        cache_free(&c);
    }
    tp_set_threads(0);
}
END_TEST

static Suite *attention_fast_suite(void)
{
    Suite *s = suite_create("attention_fast");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fast_attention_matches_reference);
    tcase_add_test(tc, fast_attention_window_matches_reference);
    tcase_add_test(tc, fast_attention_is_invariant);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(attention_fast_suite)
