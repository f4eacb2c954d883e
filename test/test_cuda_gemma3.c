/* test_cuda_gemma3.c: suite "cuda_gemma3" — the card's gemma3 kernels
 * against their CPU twins (kernels/cuda/gemma3.cu, the window of
 * kernels/cuda/attention.cu), on seeded random inputs (never zeros).
 *
 * Tolerances:
 *   cuda_geglu / cuda_geglu_fused vs cpu_geglu: the same rounded operations
 *     except tanhf (CUDA's is within 2 ulp of the correctly rounded value),
 *     whose error is multiplied by 0.5 g u: |gpu - cpu| <= 4e-6 *
 *     max(|cpu|, |g u|);
 *   cuda_scale: bit-exact;  cuda_softcap vs cpu_softcap: 4e-6 * cap;
 *   cuda_attention_window (tensor cores, fp16 q and P) vs
 *     cpu_attention_window: max |gpu - ref| <= 4e-3 * max |ref| + 1e-5 per
 *     head, as test_cuda_attention.c; cuda_attention_plain_window (f32):
 *     2e-5 * max |ref| + 1e-6.
 * Invariance (bit for bit): a query's windowed output is the same from
 * decode (one query per call) and from prefill; a window at least as long
 * as the context is the unwindowed call. */
#include "testutil.h"

#ifdef STRATA_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "cuda_testutil.h"

static void fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = lo + (hi - lo) * (float)((test_rand_u64(&seed) >> 11) * (1.0 / 9007199254740992.0));
        if (x[i] == 0.0f)
            x[i] = 0.25f;
    }
}

START_TEST(geglu_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    enum { ROWS = 3, F = 1531, N = ROWS * F };
    float *g = malloc(N * 4), *u = malloc(N * 4), *want = malloc(N * 4), *got = malloc(N * 4);
    float *gu = malloc(2 * N * 4);
    fill_uniform(g, N, -9.0f, 9.0f, 3);
    fill_uniform(u, N, -2.0f, 2.0f, 4);
    cpu_geglu(g, u, N, want);
    float *dg = dup_to_dev(g, N * 4), *du = dup_to_dev(u, N * 4), *dy = dev_alloc(N * 4);
    OK(cuda_geglu(dg, du, dy, N, 0, &e_));
    to_host(got, dy, N * 4);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double err = fabs((double)got[i] - want[i]) / fmax(fabs(want[i]), fabs((double)g[i] * u[i]));
        worst = err > worst ? err : worst;
        ck_assert_msg(err <= 4e-6, "geglu(%g, %g): gpu %g cpu %g", g[i], u[i], got[i], want[i]);
    }
    /* stacked rows [gate | up] */
    for (int r = 0; r < ROWS; r++) {
        memcpy(gu + (size_t)r * 2 * F, g + (size_t)r * F, F * 4);
        memcpy(gu + (size_t)r * 2 * F + F, u + (size_t)r * F, F * 4);
    }
    float *dgu = dup_to_dev(gu, 2 * N * 4), *dy2 = dev_alloc(N * 4);
    OK(cuda_geglu_fused(dgu, ROWS, F, dy2, 0, &e_));
    float *got2 = malloc(N * 4);
    to_host(got2, dy2, N * 4);
    ck_assert_mem_eq(got2, got, N * 4); /* the same arithmetic per element */
    printf("  cuda_geglu: worst error %.3g (relative to max(|y|, |g u|)) over %d values\n", worst, N);
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dy);
    cudaFree(dgu);
    cudaFree(dy2);
    free(g);
    free(u);
    free(want);
    free(got);
    free(got2);
    free(gu);
}
END_TEST

START_TEST(scale_and_softcap_match_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    enum { ROWS = 3, N = 1000, STRIDE = 1003 };
    float *x = malloc(ROWS * STRIDE * 4), *want = malloc(ROWS * STRIDE * 4);
    float *got = malloc(ROWS * STRIDE * 4);
    fill_uniform(x, ROWS * STRIDE, -80.0f, 80.0f, 9);
    const float s = sqrtf(640.0f);
    for (int i = 0; i < ROWS * STRIDE; i++)
        want[i] = x[i] * s;
    float *dx = dup_to_dev(x, ROWS * STRIDE * 4);
    OK(cuda_scale(dx, ROWS * STRIDE, s, 0, &e_));
    to_host(got, dx, ROWS * STRIDE * 4);
    ck_assert_mem_eq(got, want, ROWS * STRIDE * 4);
    /* soft-cap of the first N of each row only: the gaps stay as they were */
    const float cap = 30.0f;
    memcpy(want, got, ROWS * STRIDE * 4);
    for (int r = 0; r < ROWS; r++)
        cpu_softcap(want + r * STRIDE, N, cap);
    OK(cuda_softcap(dx, ROWS, N, STRIDE, cap, 0, &e_));
    to_host(got, dx, ROWS * STRIDE * 4);
    for (int i = 0; i < ROWS * STRIDE; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= 4e-6f * cap, "softcap %d: gpu %g cpu %g", i,
                      got[i], want[i]);
    cudaFree(dx);
    free(x);
    free(want);
    free(got);
}
END_TEST

/* ---- windowed attention ---------------------------------------------------- */

/* One sequence's cache of len tokens on shuffled pages, host and card. */
typedef struct wcache {
    kv_view host, dev;
    void *h[4], *d[4];
    int32_t *pages, *dpages;
} wcache;

static void wcache_make(wcache *c, int type, int n_kv, int hd, int len, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    int np = (len + KV_PAGE - 1) / KV_PAGE;
    c->pages = malloc((size_t)np * 4);
    for (int i = 0; i < np; i++)
        c->pages[i] = np - 1 - i; /* reversed: far from identity */
    size_t rows = (size_t)np * n_kv * KV_PAGE, bytes[4];
    if (type == KV_K8V4) {
        bytes[0] = rows * hd;
        bytes[1] = rows * (hd / 32) * 2;
        bytes[2] = rows * hd / 2;
        bytes[3] = rows * (hd / 32) * 2;
    } else {
        bytes[0] = bytes[2] = rows * hd * 2;
        bytes[1] = bytes[3] = 0;
    }
    for (int b = 0; b < 4; b++)
        if (bytes[b]) {
            c->h[b] = malloc(bytes[b]);
            memset(c->h[b], 0x7c, bytes[b]); /* fp16 NaN past the end */
        }
    kv_view h = {.type = type, .n_kv_head = n_kv, .head_dim = hd, .pages = c->pages};
    if (type == KV_K8V4) {
        h.kq = c->h[0];
        h.kd = c->h[1];
        h.vq = c->h[2];
        h.vd = c->h[3];
    } else {
        h.kh = c->h[0];
        h.vh = c->h[2];
    }
    float *k = malloc((size_t)n_kv * hd * 4), *v = malloc((size_t)n_kv * hd * 4);
    for (int t = 0; t < len; t++) {
        test_fill_normal(k, (size_t)n_kv * hd, 1.0f, seed * 7919 + 2 * t);
        test_fill_normal(v, (size_t)n_kv * hd, 1.0f, seed * 7919 + 2 * t + 1);
        cpu_kv_store(&h, t, k, v);
    }
    free(k);
    free(v);
    c->host = h;
    kv_view d = h;
    c->dpages = dup_to_dev(c->pages, (size_t)np * 4);
    d.pages = c->dpages;
    for (int b = 0; b < 4; b++)
        c->d[b] = bytes[b] ? dup_to_dev(c->h[b], bytes[b]) : NULL;
    if (type == KV_K8V4) {
        d.kq = c->d[0];
        d.kd = c->d[1];
        d.vq = c->d[2];
        d.vd = c->d[3];
    } else {
        d.kh = c->d[0];
        d.vh = c->d[2];
    }
    c->dev = d;
}

static void wcache_free(wcache *c)
{
    for (int b = 0; b < 4; b++) {
        free(c->h[b]);
        if (c->d[b])
            cudaFree(c->d[b]);
    }
    free(c->pages);
    cudaFree(c->dpages);
}

/* max |a - ref| over each head vs its max |ref|. */
static void check_heads(const float *got, const float *ref, int n_head, int hd, double rel,
                        double abs_, const char *what)
{
    for (int h = 0; h < n_head; h++) {
        double mr = 0, md = 0;
        for (int i = 0; i < hd; i++) {
            mr = fmax(mr, fabs(ref[h * hd + i]));
            md = fmax(md, fabs((double)got[h * hd + i] - ref[h * hd + i]));
        }
        ck_assert_msg(md <= rel * mr + abs_, "%s: head %d: max diff %.3g (max |ref| %.3g)", what,
                      h, md, mr);
    }
}

/* Prefill of the last n_tok queries of a len-token context with a window,
 * then the same queries one by one (decode), against the CPU twin. */
static void window_case(int type, int n_head, int n_kv, int hd, int len, int n_tok, int window)
{
    wcache c;
    wcache_make(&c, type, n_kv, hd, len, (uint64_t)len * 31 + window);
    const int D = n_head * hd, p0 = len - n_tok;
    float *q = malloc((size_t)n_tok * D * 4), *ref = malloc((size_t)D * 4);
    float *pre = malloc((size_t)n_tok * D * 4), *dec = malloc((size_t)D * 4);
    float *plain = malloc((size_t)n_tok * D * 4);
    test_fill_normal(q, (size_t)n_tok * D, 0.35f, (uint64_t)window * 101 + hd);
    float *dq = dup_to_dev(q, (size_t)n_tok * D * 4), *dout = dev_alloc((size_t)n_tok * D * 4);
    int32_t pos = p0, *dpos = dup_to_dev(&pos, 4);
    const float scale = 1.0f / sqrtf((float)hd);
    char what[160];
    OK(cuda_attention_window(&c.dev, 0, dpos, 1, n_tok, len, window, dq, D, n_head, scale, dout,
                             D, NULL, 0, 0, &e_));
    to_host(pre, dout, (size_t)n_tok * D * 4);
    OK(cuda_attention_plain_window(&c.dev, 0, dpos, 1, n_tok, window, dq, D, n_head, scale, dout,
                                   D, 0, &e_));
    to_host(plain, dout, (size_t)n_tok * D * 4);
    /* decode: each query alone, with the split scratch when the context
     * passes one chunk */
    size_t sb = cuda_attention_scratch_bytes(&c.dev, n_head, 1, len);
    void *scratch = NULL;
    CK(cudaMalloc(&scratch, sb));
    CK(cudaMemset(scratch, 0, sb));
    for (int i = 0; i < n_tok; i++) {
        int p = p0 + i;
        cpu_attention_window(q + (size_t)i * D, n_head, &c.host, p + 1 - window, p + 1, scale, ref);
        snprintf(what, sizeof what, "%s hd %d heads %d/%d len %d window %d query %d",
                 type == KV_K8V4 ? "k8v4" : "f16", hd, n_head, n_kv, len, window, p);
        check_heads(pre + (size_t)i * D, ref, n_head, hd, 4e-3, 1e-5, what);
        check_heads(plain + (size_t)i * D, ref, n_head, hd, 2e-5, 1e-6, what);
        int32_t pp = p;
        CK(cudaMemcpy(dpos, &pp, 4, cudaMemcpyHostToDevice));
        OK(cuda_attention_window(&c.dev, 0, dpos, 1, 1, len, window, dq + (size_t)i * D, D, n_head,
                                 scale, dout, D, scratch, sb, 0, &e_));
        to_host(dec, dout, (size_t)D * 4);
        ck_assert_msg(!memcmp(dec, pre + (size_t)i * D, (size_t)D * 4),
                      "%s: decode and prefill differ", what);
    }
    /* a window covering the whole context is no window at all */
    CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
    OK(cuda_attention_window(&c.dev, 0, dpos, 1, n_tok, len, len, dq, D, n_head, scale, dout, D,
                             NULL, 0, 0, &e_));
    to_host(pre, dout, (size_t)n_tok * D * 4);
    OK(cuda_attention(&c.dev, 0, dpos, 1, n_tok, len, dq, D, n_head, scale, dout, D, NULL, 0, 0,
                      &e_));
    to_host(plain, dout, (size_t)n_tok * D * 4);
    ck_assert_msg(!memcmp(pre, plain, (size_t)n_tok * D * 4), "window %d >= len %d changed bits",
                  len, len);
    cudaFree(scratch);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dpos);
    free(q);
    free(ref);
    free(pre);
    free(dec);
    free(plain);
    wcache_free(&c);
}

START_TEST(attention_window_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    static const int types[2] = {KV_K8V4, KV_F16};
    for (int t = 0; t < 2; t++) {
        /* gemma3 270M's shape: 4 heads on 1 kv head of 256 */
        window_case(types[t], 4, 1, 256, 300, 24, 17);
        window_case(types[t], 4, 1, 256, 700, 9, 512);
        window_case(types[t], 4, 1, 256, 40, 40, 1);
        /* head_dim 64/128, groups 1 and 4, a context past one decode chunk */
        window_case(types[t], 8, 2, 128, 1500, 5, 600);
        if (!test_small()) {
            window_case(types[t], 4, 4, 64, 1300, 33, 100);
            window_case(types[t], 8, 2, 128, 2100, 3, 1030);
        }
    }
}
END_TEST

static Suite *cuda_gemma3_suite(void)
{
    Suite *s = suite_create("cuda_gemma3");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, geglu_matches_cpu);
    tcase_add_test(tc, scale_and_softcap_match_cpu);
    tcase_add_test(tc, attention_window_matches_cpu);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_gemma3_needs_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *cuda_gemma3_suite(void)
{
    Suite *s = suite_create("cuda_gemma3");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, cuda_gemma3_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_gemma3_suite)
