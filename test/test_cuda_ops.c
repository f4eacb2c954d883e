/* test_cuda_ops.c: suite "cuda_ops" — the non-weight CUDA kernels against
 * their CPU twins (kernels/ops.h, engine/sample.c) on random (never zero)
 * inputs, several shapes with ragged tails.
 *
 * Tolerances (stated per kernel; "ulp-level" means the arithmetic is the
 * CPU's, in its order, and only a libm function may differ by an ulp):
 *   rmsnorm, rmsnorm_heads   |d| <= 1e-6 |ref| + 1e-30  (double sums)
 *   rope                     |d| <= 2e-6 (|a| + |b|)    (double angles)
 *   swiglu                   |d| <= 1e-6 |ref| + 1e-30  (expf, 2 ulp)
 *   add, bias_add            bit-exact
 *   rope_qk, add_rmsnorm,    as their parts, and bit-exact with the unfused
 *   swiglu_fused             kernels
 *   kv_store (k8v4, f16)     bit-exact pool bytes
 *   argmax, sample           the same token
 *   moe_route                same experts, weights |d| <= 1e-6
 *   moe group/gather/combine bit-exact
 * Invariance: a row computed alone equals the same row inside a batch, bit
 * for bit (rmsnorm, rope, kv_store). */
#include "testutil.h"

#ifdef STRATA_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/sample.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "cuda_testutil.h"
#include "model/quant.h"

static float *rnd(size_t n, float scale, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    test_fill_normal(x, n, scale, seed);
    return x;
}

static int close_rel(float got, float ref, float rel)
{
    return fabsf(got - ref) <= rel * fabsf(ref) + 1e-30f;
}

/* ---- rmsnorm --------------------------------------------------------------- */

START_TEST(rmsnorm_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int64_t ns[] = {576, 896, 1001, 4096};
    const int rows_[] = {1, 3, 7};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (size_t b = 0; b < 3; b++) {
            int64_t n = ns[a];
            int rows = rows_[b];
            float *x = rnd((size_t)rows * n, 2.0f, 11 + a * 7 + b);
            float *w = rnd((size_t)n, 1.0f, 99 + a);
            float *ref = malloc((size_t)rows * n * sizeof *ref);
            float *got = malloc((size_t)rows * n * sizeof *got);
            for (int r = 0; r < rows; r++)
                cpu_rmsnorm(x + r * n, w, n, 1e-6f, ref + r * n);
            float *dx = dup_to_dev(x, (size_t)rows * n * 4), *dw = dup_to_dev(w, (size_t)n * 4);
            float *dy = dev_alloc((size_t)rows * n * 4);
            OK(cuda_rmsnorm(dx, dw, dy, rows, n, 1e-6f, 0, &e_));
            to_host(got, dy, (size_t)rows * n * 4);
            int bad = 0;
            for (int64_t i = 0; i < rows * n; i++)
                bad += !close_rel(got[i], ref[i], 1e-6f);
            ck_assert_msg(!bad, "rmsnorm n=%lld rows=%d: %d elements off", (long long)n, rows, bad);
            /* invariance: the last row alone, bit for bit */
            float *alone = malloc((size_t)n * 4);
            OK(cuda_rmsnorm(dx + (rows - 1) * n, dw, dy, 1, n, 1e-6f, 0, &e_));
            to_host(alone, dy, (size_t)n * 4);
            ck_assert(!memcmp(alone, got + (rows - 1) * n, (size_t)n * 4));
            /* in place */
            OK(cuda_rmsnorm(dx, dw, dx, rows, n, 1e-6f, 0, &e_));
            to_host(alone, dx, (size_t)n * 4);
            ck_assert(!memcmp(alone, got, (size_t)n * 4));
            cudaFree(dx);
            cudaFree(dw);
            cudaFree(dy);
            free(alone);
            free(x);
            free(w);
            free(ref);
            free(got);
        }
    }
}
END_TEST

START_TEST(rmsnorm_heads_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int hds[] = {64, 128, 256};
    for (int a = 0; a < 3; a++) {
        int hd = hds[a], nh = 5, rows = 3;
        int64_t stride = (int64_t)nh * hd + 16; /* a gap that must stay untouched */
        size_t n = (size_t)rows * stride;
        float *x = rnd(n, 1.5f, 300 + a), *w = rnd((size_t)hd, 1.0f, 400 + a);
        float *ref = malloc(n * 4), *got = malloc(n * 4);
        memcpy(ref, x, n * 4);
        for (int r = 0; r < rows; r++)
            cpu_rmsnorm_heads(ref + r * stride, w, nh, hd, 1e-6f);
        float *dx = dup_to_dev(x, n * 4), *dw = dup_to_dev(w, (size_t)hd * 4);
        OK(cuda_rmsnorm_heads(dx, dw, rows, nh, hd, stride, 1e-6f, 0, &e_));
        to_host(got, dx, n * 4);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !close_rel(got[i], ref[i], 1e-6f);
        ck_assert_msg(!bad, "rmsnorm_heads hd=%d: %d off", hd, bad);
        cudaFree(dx);
        cudaFree(dw);
        free(x);
        free(w);
        free(ref);
        free(got);
    }
}
END_TEST

/* ---- rope ---------------------------------------------------------------- */

START_TEST(rope_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    struct {
        int hd, n_rot, neox, ff;
        float base, scale;
    } cases[] = {
        {64, 64, 0, 0, 100000.0f, 1.0f},   {64, 64, 1, 0, 1e6f, 1.0f},
        {128, 128, 0, 1, 500000.0f, 1.0f}, {128, 128, 1, 0, 1e6f, 0.25f},
        {64, 32, 1, 0, 10000.0f, 1.0f},    {256, 256, 1, 1, 10000.0f, 1.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int hd = cases[ci].hd, nh = 7, n_tok = 9;
        int64_t stride = (int64_t)nh * hd + 8;
        size_t n = (size_t)n_tok * stride;
        float *x = rnd(n, 1.0f, 500 + ci), *ref = malloc(n * 4), *got = malloc(n * 4);
        int32_t pos[9] = {0, 1, 2, 17, 255, 256, 4097, 32767, 131071};
        float ff[128];
        for (int i = 0; i < cases[ci].n_rot / 2; i++)
            ff[i] = 1.0f + (float)(i % 7) * 0.5f;
        rope_params rp = {cases[ci].n_rot, cases[ci].neox, cases[ci].base, cases[ci].scale,
                          cases[ci].ff ? ff : NULL};
        memcpy(ref, x, n * 4);
        for (int t = 0; t < n_tok; t++)
            cpu_rope(ref + t * stride, nh, hd, pos[t], &rp);
        float *dx = dup_to_dev(x, n * 4);
        int32_t *dpos = dup_to_dev(pos, sizeof pos);
        float *dff = dup_to_dev(ff, sizeof ff);
        rope_params drp = rp;
        drp.freq_factors = cases[ci].ff ? dff : NULL;
        OK(cuda_rope(dx, n_tok, nh, hd, stride, dpos, &drp, 0, &e_));
        to_host(got, dx, n * 4);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += !(fabsf(ref[i] - got[i]) <= 2e-6f * (fabsf(ref[i]) + 1.0f));
        ck_assert_msg(!bad, "rope case %zu: %d off", ci, bad);
        /* invariance: token 7 alone gives the same bits as inside the batch */
        CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
        OK(cuda_rope(dx + 7 * stride, 1, nh, hd, stride, dpos + 7, &drp, 0, &e_));
        float *alone = malloc((size_t)stride * 4);
        to_host(alone, dx + 7 * stride, (size_t)stride * 4);
        ck_assert(!memcmp(alone, got + 7 * stride, (size_t)stride * 4));
        free(alone);
        cudaFree(dx);
        cudaFree(dpos);
        cudaFree(dff);
        free(x);
        free(ref);
        free(got);
    }
}
END_TEST

/* ---- fused launches (engine/cuda/backend_cuda.c) -------------------------------
 * Each against the CPU twins of its parts (tolerances as above) and, bit for
 * bit, against the unfused CUDA kernels: fusing changes launches, not bits. */

static void check_rope_qk(int hd, int nq, int nk, int n_tok)
{
    int64_t stride = (int64_t)(nq + nk) * hd + 8; /* q|k|gap, like a stacked qkv row */
    size_t n = (size_t)n_tok * stride;
    float *x = rnd(n, 1.0f, 900 + hd + nq), *ref = malloc(n * 4), *got = malloc(n * 4);
    float *two = malloc(n * 4);
    int32_t pos[5] = {3, 0, 511, 4097, 65000};
    rope_params rp = {hd, 1, 500000.0f, 1.0f, NULL};
    memcpy(ref, x, n * 4);
    for (int t = 0; t < n_tok; t++) {
        cpu_rope(ref + t * stride, nq, hd, pos[t], &rp);
        cpu_rope(ref + t * stride + (int64_t)nq * hd, nk, hd, pos[t], &rp);
    }
    float *dx = dup_to_dev(x, n * 4);
    int32_t *dpos = dup_to_dev(pos, sizeof pos);
    OK(cuda_rope_qk(dx, nq, stride, dx + (int64_t)nq * hd, nk, stride, n_tok, hd, dpos, &rp, 0,
                    &e_));
    to_host(got, dx, n * 4);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(fabsf(ref[i] - got[i]) <= 2e-6f * (fabsf(ref[i]) + 1.0f));
    ck_assert_msg(!bad, "rope_qk hd=%d: %d off", hd, bad);
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    OK(cuda_rope(dx, n_tok, nq, hd, stride, dpos, &rp, 0, &e_));
    OK(cuda_rope(dx + (int64_t)nq * hd, n_tok, nk, hd, stride, dpos, &rp, 0, &e_));
    to_host(two, dx, n * 4);
    ck_assert_msg(!memcmp(two, got, n * 4), "rope_qk hd=%d differs from two ropes", hd);
    cudaFree(dx);
    cudaFree(dpos);
    free(x);
    free(ref);
    free(got);
    free(two);
}

static void check_add_rmsnorm(int64_t n, int rows)
{
    size_t sz = (size_t)rows * n;
    float *x = rnd(sz, 2.0f, 950 + n), *d = rnd(sz, 1.0f, 960 + n), *w = rnd((size_t)n, 1.0f, 970);
    float *xref = malloc(sz * 4), *yref = malloc(sz * 4), *got = malloc(sz * 4);
    memcpy(xref, x, sz * 4);
    for (int r = 0; r < rows; r++) {
        cpu_add(xref + r * n, d + r * n, n);
        cpu_rmsnorm(xref + r * n, w, n, 1e-5f, yref + r * n);
    }
    float *dx = dup_to_dev(x, sz * 4), *dd = dup_to_dev(d, sz * 4), *dw = dup_to_dev(w, n * 4);
    OK(cuda_add_rmsnorm(dx, dd, dw, dd, rows, n, 1e-5f, 0, &e_)); /* y aliases d */
    to_host(got, dx, sz * 4);
    ck_assert_msg(!memcmp(got, xref, sz * 4), "add_rmsnorm n=%lld: x not bit-exact", (long long)n);
    to_host(got, dd, sz * 4);
    int bad = 0;
    for (size_t i = 0; i < sz; i++)
        bad += !close_rel(got[i], yref[i], 1e-6f);
    ck_assert_msg(!bad, "add_rmsnorm n=%lld rows=%d: %d off", (long long)n, rows, bad);
    /* the unfused pair gives the same bits */
    float *y2 = dev_alloc(sz * 4), *two = malloc(sz * 4);
    CK(cudaMemcpy(dx, x, sz * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dd, d, sz * 4, cudaMemcpyHostToDevice));
    OK(cuda_add(dx, dd, (int64_t)sz, 0, &e_));
    OK(cuda_rmsnorm(dx, dw, y2, rows, n, 1e-5f, 0, &e_));
    to_host(two, y2, sz * 4);
    ck_assert_msg(!memcmp(two, got, sz * 4), "add_rmsnorm n=%lld differs from add + rmsnorm",
                  (long long)n);
    cudaFree(dx);
    cudaFree(dd);
    cudaFree(dw);
    cudaFree(y2);
    free(x);
    free(d);
    free(w);
    free(xref);
    free(yref);
    free(got);
    free(two);
}

static void check_swiglu_fused(int64_t F, int rows)
{
    size_t sz = (size_t)rows * F;
    float *gu = rnd(2 * sz, 3.0f, 980 + F + rows), *ref = malloc(sz * 4), *got = malloc(sz * 4);
    for (int r = 0; r < rows; r++)
        cpu_swiglu(gu + 2 * r * F, gu + 2 * r * F + F, F, ref + r * F);
    float *dgu = dup_to_dev(gu, 2 * sz * 4), *dy = dev_alloc(sz * 4);
    OK(cuda_swiglu_fused(dgu, rows, F, dy, 0, &e_));
    to_host(got, dy, sz * 4);
    int bad = 0;
    for (size_t i = 0; i < sz; i++)
        bad += !close_rel(got[i], ref[i], 1e-6f);
    ck_assert_msg(!bad, "swiglu_fused F=%lld rows=%d: %d off", (long long)F, rows, bad);
    float *row = malloc((size_t)F * 4);
    for (int r = 0; r < rows; r++) { /* bit for bit the unfused kernel, row by row */
        OK(cuda_swiglu(dgu + 2 * r * F, dgu + 2 * r * F + F, dy, F, 0, &e_));
        to_host(row, dy, (size_t)F * 4);
        ck_assert_msg(!memcmp(row, got + r * F, (size_t)F * 4), "swiglu_fused row %d differs", r);
    }
    cudaFree(dgu);
    cudaFree(dy);
    free(gu);
    free(ref);
    free(got);
    free(row);
}

START_TEST(fused_ops_match_unfused)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    check_rope_qk(64, 9, 3, 5);
    check_rope_qk(128, 32, 8, 1);
    check_add_rmsnorm(576, 3);
    check_add_rmsnorm(4096, 1);
    check_add_rmsnorm(1001, 2); /* scalar path */
    check_swiglu_fused(1003, 5);
    check_swiglu_fused(4096, 1);
    check_swiglu_fused(14336, 3);
}
END_TEST

/* ---- element-wise ---------------------------------------------------------- */

START_TEST(elementwise_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int64_t ns[] = {1, 1003, 4096, 14336 * 3};
    for (size_t a = 0; a < 4; a++) {
        int64_t n = ns[a];
        float *g = rnd((size_t)n, 3.0f, 600 + a), *u = rnd((size_t)n, 1.0f, 700 + a);
        float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
        cpu_swiglu(g, u, n, ref);
        float *dg = dup_to_dev(g, (size_t)n * 4), *du = dup_to_dev(u, (size_t)n * 4);
        float *dy = dev_alloc((size_t)n * 4);
        OK(cuda_swiglu(dg, du, dy, n, 0, &e_));
        to_host(got, dy, (size_t)n * 4);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !close_rel(got[i], ref[i], 1e-6f);
        ck_assert_msg(!bad, "swiglu n=%lld: %d off", (long long)n, bad);
        OK(cuda_swiglu(dg, du, dg, n, 0, &e_)); /* y aliases gate */
        to_host(got, dg, (size_t)n * 4);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !close_rel(got[i], ref[i], 1e-6f);
        ck_assert_msg(!bad, "swiglu in place n=%lld: %d off", (long long)n, bad);

        /* add: bit-exact */
        CK(cudaMemcpy(dg, g, (size_t)n * 4, cudaMemcpyHostToDevice));
        memcpy(ref, u, (size_t)n * 4);
        cpu_add(ref, g, n);
        OK(cuda_add(du, dg, n, 0, &e_));
        to_host(got, du, (size_t)n * 4);
        ck_assert_msg(!memcmp(got, ref, (size_t)n * 4), "add n=%lld", (long long)n);
        cudaFree(dg);
        cudaFree(du);
        cudaFree(dy);
        free(g);
        free(u);
        free(ref);
        free(got);
    }
    /* bias add over strided rows */
    int rows = 5;
    int64_t n = 896 + 3, stride = 1000;
    float *y = rnd((size_t)rows * stride, 1.0f, 800), *b = rnd((size_t)n, 1.0f, 801);
    float *ref = malloc((size_t)rows * stride * 4), *got = malloc((size_t)rows * stride * 4);
    memcpy(ref, y, (size_t)rows * stride * 4);
    for (int r = 0; r < rows; r++)
        cpu_add(ref + r * stride, b, n);
    float *dy = dup_to_dev(y, (size_t)rows * stride * 4), *db = dup_to_dev(b, (size_t)n * 4);
    OK(cuda_bias_add(dy, db, rows, n, stride, 0, &e_));
    to_host(got, dy, (size_t)rows * stride * 4);
    ck_assert(!memcmp(got, ref, (size_t)rows * stride * 4));
    cudaFree(dy);
    cudaFree(db);
    free(y);
    free(b);
    free(ref);
    free(got);
}
END_TEST

/* ---- KV append ------------------------------------------------------------ */

typedef struct host_pool {
    kv_view v;     /* host pointers */
    size_t bytes[4];
    void *buf[4];
} host_pool;

static void pool_init(host_pool *p, int type, int n_kv_head, int hd, int n_pages)
{
    memset(p, 0, sizeof *p);
    size_t rows = (size_t)n_pages * n_kv_head * KV_PAGE;
    if (type != KV_F16) {
        p->bytes[0] = rows * hd;
        p->bytes[1] = rows * (hd / 32) * 2;
        p->bytes[2] = rows * hd / 2;
        p->bytes[3] = rows * (hd / 32) * 2;
    } else {
        p->bytes[0] = rows * hd * 2;
        p->bytes[2] = rows * hd * 2;
    }
    for (int i = 0; i < 4; i++) {
        p->buf[i] = p->bytes[i] ? malloc(p->bytes[i]) : NULL;
        if (p->buf[i])
            memset(p->buf[i], 0x5a, p->bytes[i]); /* stale bytes, not zeros */
    }
    p->v.type = type;
    p->v.n_kv_head = n_kv_head;
    p->v.head_dim = hd;
    if (type != KV_F16) {
        p->v.kq = p->buf[0];
        p->v.kd = p->buf[1];
        p->v.vq = p->buf[2];
        p->v.vd = p->buf[3];
    } else {
        p->v.kh = p->buf[0];
        p->v.vh = p->buf[2];
    }
}

/* The same pool on the card: a kv_view of device pointers (pages: dpages). */
static kv_view pool_upload(const host_pool *p, void *dbuf[4], const int32_t *dpages)
{
    kv_view d = p->v;
    for (int i = 0; i < 4; i++)
        dbuf[i] = p->bytes[i] ? dup_to_dev(p->buf[i], p->bytes[i]) : NULL;
    d.pages = dpages;
    d.kq = dbuf[0];
    d.kd = dbuf[1];
    d.vq = dbuf[2];
    d.vd = dbuf[3];
    d.kh = dbuf[0];
    d.vh = dbuf[2];
    if (p->v.type != KV_F16)
        d.kh = d.vh = NULL;
    else
        d.kq = NULL, d.kd = NULL, d.vq = NULL, d.vd = NULL;
    return d;
}

static void pool_free(host_pool *p)
{
    for (int i = 0; i < 4; i++)
        free(p->buf[i]);
}

START_TEST(kv_store_bit_exact)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int hds[] = {64, 128, 256};
    for (int type = 0; type <= KV_K8V4NL; type++) { /* k8v4, f16, k8v4nl */
        for (int a = 0; a < 3; a++) {
            int hd = hds[a], nkv = 3, n_seq = 3, n_tok = 5, pages_per = 3;
            int n_pages = n_seq * pages_per;
            host_pool hp;
            pool_init(&hp, type, nkv, hd, n_pages);
            /* page tables: a shuffled assignment of the pool */
            int32_t pages[9] = {4, 0, 7, 2, 8, 5, 1, 6, 3};
            int32_t pos[15];
            for (int s = 0; s < n_seq; s++)
                for (int i = 0; i < n_tok; i++)
                    pos[s * n_tok + i] = (int32_t)(s * 211 + i * 97 + 250) % (pages_per * KV_PAGE);
            int64_t kstride = (int64_t)nkv * hd + 4, vstride = (int64_t)nkv * hd + 12;
            float *k = rnd((size_t)n_seq * n_tok * kstride, 2.0f, 900 + a + type);
            float *v = rnd((size_t)n_seq * n_tok * vstride, 0.7f, 950 + a + type);
            /* edge blocks: all zeros; ties of |x| with opposite signs */
            for (int j = 0; j < 32; j++) {
                k[j] = 0.0f;
                v[j] = 0.0f;
                v[32 + j] = (j % 2 ? -1.5f : 1.5f) * (j < 8 ? 1.0f : 0.5f);
            }
            /* a block of V elements up to ~20000: k8v4nl clamps its scale
             * to 56.5 (KV_NL_DMAX) and saturates the codes, on both sides */
            for (int j = 0; j < 32; j++)
                v[2 * vstride + 32 + j] *= 9000.0f;
            /* non-finite blocks (k8v4; f16 would compare NaN payloads): in
             * row 1, a NaN among finite values, an Inf, a block of NaN only;
             * both sides give the same defined block (kernels/cpu/kv.c) */
            if (type != KV_F16) {
                float *k1 = k + kstride, *v1 = v + vstride;
                k1[3] = NAN;
                v1[17] = NAN;
                k1[32 + 9] = INFINITY;
                v1[32 + 30] = -INFINITY;
                for (int j = 0; j < 32; j++)
                    k1[hd + j] = v1[hd + j] = NAN;
            }
            void *dbuf[4];
            int32_t *dpages = dup_to_dev(pages, sizeof pages), *dpos = dup_to_dev(pos, sizeof pos);
            kv_view dv = pool_upload(&hp, dbuf, dpages);
            float *dk = dup_to_dev(k, (size_t)n_seq * n_tok * kstride * 4);
            float *dvv = dup_to_dev(v, (size_t)n_seq * n_tok * vstride * 4);
            OK(cuda_kv_store(&dv, pages_per, n_seq, n_tok, dpos, dk, kstride, dvv, vstride, 0, &e_));
            for (int s = 0; s < n_seq; s++) {
                hp.v.pages = pages + s * pages_per;
                for (int i = 0; i < n_tok; i++) {
                    int r = s * n_tok + i;
                    cpu_kv_store(&hp.v, pos[r], k + r * kstride, v + r * vstride);
                }
            }
            for (int b = 0; b < 4; b++) {
                if (!hp.bytes[b])
                    continue;
                unsigned char *got = malloc(hp.bytes[b]);
                to_host(got, dbuf[b], hp.bytes[b]);
                size_t first = hp.bytes[b];
                for (size_t i = 0; i < hp.bytes[b]; i++)
                    if (got[i] != ((unsigned char *)hp.buf[b])[i]) {
                        first = i;
                        break;
                    }
                ck_assert_msg(first == hp.bytes[b], "kv_store type %d hd %d buffer %d: byte %zu differs",
                              type, hd, b, first);
                free(got);
                cudaFree(dbuf[b]);
            }
            cudaFree(dpages);
            cudaFree(dpos);
            cudaFree(dk);
            cudaFree(dvv);
            pool_free(&hp);
            free(k);
            free(v);
        }
    }
}
END_TEST

/* ---- argmax and sampling ---------------------------------------------------- */

START_TEST(argmax_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int64_t ns[] = {7, 1000, 49152, 151936};
    for (int a = 0; a < 4; a++) {
        int64_t n = ns[a], stride = n + 5;
        int rows = 4;
        float *x = rnd((size_t)rows * stride, 3.0f, 1000 + a);
        /* row 1: a tie for the maximum (lowest index must win); row 2: all equal */
        x[stride + n / 3] = 100.0f;
        x[stride + n - 1] = 100.0f;
        for (int64_t i = 0; i < n; i++)
            x[2 * stride + i] = -2.5f;
        float *dx = dup_to_dev(x, (size_t)rows * stride * 4);
        int32_t *dout = dev_alloc(rows * 4), got[4];
        OK(cuda_argmax(dx, rows, n, stride, dout, 0, &e_));
        to_host(got, dout, sizeof got);
        for (int r = 0; r < rows; r++)
            ck_assert_int_eq(got[r], cpu_argmax(x + r * stride, n));
        cudaFree(dx);
        cudaFree(dout);
        free(x);
    }
}
END_TEST

START_TEST(sample_matches_cpu_chain)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    struct {
        float temp;
        int top_k;
        float top_p, min_p;
    } ps[] = {{0.8f, 40, 0.95f, 0.05f}, {1.0f, 1, 1.0f, 0.0f},   {1.5f, 256, 0.9f, 0.0f},
              {0.3f, 100, 1.0f, 0.1f},  {2.0f, 256, 1.0f, 0.0f}, {0.0f, 40, 0.95f, 0.05f}};
    const int64_t vocab[] = {300, 49152, 151936};
    int draws = 0, same = 0;
    for (int vi = 0; vi < 3; vi++) {
        int64_t n = vocab[vi];
        int rows = 6;
        float *x = rnd((size_t)rows * n, 2.0f, 2000 + vi);
        /* exact ties in the head of the distribution */
        x[5] = x[7] = 9.0f;
        float *dx = dup_to_dev(x, (size_t)rows * n * 4);
        float *du = dev_alloc(rows * 4);
        int32_t *dout = dev_alloc(rows * 4);
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
            sampler_params sp = sampler_defaults();
            sp.temp = ps[pi].temp;
            sp.top_k = ps[pi].top_k;
            sp.top_p = ps[pi].top_p;
            sp.min_p = ps[pi].min_p;
            sp.repeat_penalty = 1.0f;
            float u[6];
            int32_t want[6], got[6];
            for (int r = 0; r < rows; r++) {
                sp.seed = 77 + r + 13 * pi;
                sampler s, peek;
                sampler_init(&s, &sp);
                peek = s;
                u[r] = sampler_uniform(&peek);
                float *row = malloc((size_t)n * 4);
                memcpy(row, x + r * n, (size_t)n * 4);
                want[r] = sampler_sample(&s, row, (int)n, NULL, 0);
                free(row);
                sampler_free(&s);
            }
            CK(cudaMemcpy(du, u, sizeof u, cudaMemcpyHostToDevice));
            cuda_sample_params cp = {ps[pi].temp, ps[pi].top_k, ps[pi].top_p, ps[pi].min_p};
            OK(cuda_sample(dx, rows, n, n, &cp, du, dout, 0, &e_));
            to_host(got, dout, sizeof got);
            for (int r = 0; r < rows; r++) {
                draws++;
                same += got[r] == want[r];
                ck_assert_msg(got[r] == want[r], "sample vocab %lld params %zu row %d: %d vs %d",
                              (long long)n, pi, r, got[r], want[r]);
            }
        }
        cuda_sample_params off = {0.8f, 0, 1.0f, 0.0f};
        strata_error e;
        ck_assert_int_eq(cuda_sample(dx, rows, n, n, &off, du, dout, 0, &e), STRATA_E_UNSUPPORTED);
        cudaFree(dx);
        cudaFree(du);
        cudaFree(dout);
        free(x);
    }
    ck_assert_int_eq(same, draws);
}
END_TEST

/* ---- MoE --------------------------------------------------------------------- */

START_TEST(moe_route_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    /* scale 2: every token's logits within ~15 of its max, so the softmax's
     * double sum takes the exact parallel path (moe.cu, route_block); scale
     * 12: far apart, the one-thread sum in index order */
    struct {
        int ne, k, n_tok;
        float scale;
    } cs[] = {{8, 2, 5, 2.0f}, {64, 8, 37, 2.0f}, {128, 8, 130, 2.0f}, {256, 16, 3, 2.0f}, {128, 8, 40, 12.0f}};
    for (int ci = 0; ci < 5; ci++) {
        int ne = cs[ci].ne, k = cs[ci].k, nt = cs[ci].n_tok;
        float *lg = rnd((size_t)nt * ne, cs[ci].scale, 3000 + ci);
        int32_t *sel = malloc((size_t)nt * k * 4), *gsel = malloc((size_t)nt * k * 4);
        float *w = malloc((size_t)nt * k * 4), *gw = malloc((size_t)nt * k * 4);
        float *prob = malloc((size_t)nt * ne * 4);
        memcpy(prob, lg, (size_t)nt * ne * 4); /* cpu_moe_route works in place */
        cpu_moe_route(prob, nt, ne, k, sel, w);
        free(prob);
        float *dl = dup_to_dev(lg, (size_t)nt * ne * 4);
        int32_t *dsel = dev_alloc((size_t)nt * k * 4);
        float *dw = dev_alloc((size_t)nt * k * 4);
        OK(cuda_moe_route(dl, nt, ne, k, dsel, dw, 0, &e_));
        to_host(gsel, dsel, (size_t)nt * k * 4);
        to_host(gw, dw, (size_t)nt * k * 4);
        for (int i = 0; i < nt * k; i++) {
            ck_assert_msg(gsel[i] == sel[i], "route case %d entry %d: expert %d vs %d", ci, i,
                          gsel[i], sel[i]);
            ck_assert_msg(close_rel(gw[i], w[i], 1e-6f), "route weight %g vs %g", gw[i], w[i]);
        }

        /* group / gather / combine */
        int64_t D = 96;
        int32_t *off = malloc((size_t)(ne + 1) * 4), *rows = malloc((size_t)nt * k * 4);
        int32_t *inv = malloc((size_t)nt * k * 4);
        int32_t *doff = dev_alloc((size_t)(ne + 1) * 4), *drows = dev_alloc((size_t)nt * k * 4);
        int32_t *dinv = dev_alloc((size_t)nt * k * 4);
        OK(cuda_moe_group(dsel, nt, k, ne, doff, drows, dinv, 0, &e_));
        to_host(off, doff, (size_t)(ne + 1) * 4);
        to_host(rows, drows, (size_t)nt * k * 4);
        to_host(inv, dinv, (size_t)nt * k * 4);
        /* the CPU twin groups the card's choices: the same three arrays */
        int32_t *coff = malloc((size_t)(ne + 1) * 4), *crows = malloc((size_t)nt * k * 4);
        int32_t *cinv = malloc((size_t)nt * k * 4);
        cpu_moe_group(gsel, nt, k, ne, coff, crows, cinv);
        ck_assert(!memcmp(off, coff, (size_t)(ne + 1) * 4));
        ck_assert(!memcmp(rows, crows, (size_t)nt * k * 4));
        ck_assert(!memcmp(inv, cinv, (size_t)nt * k * 4));
        ck_assert_int_eq(off[ne], nt * k);
        free(coff);
        free(crows);
        free(cinv);
        float *x = rnd((size_t)nt * D, 1.0f, 3100 + ci), *xg = malloc((size_t)nt * k * D * 4);
        float *dx = dup_to_dev(x, (size_t)nt * D * 4), *dxg = dev_alloc((size_t)nt * k * D * 4);
        OK(cuda_moe_gather(dx, nt, k, D, drows, dxg, 0, &e_));
        to_host(xg, dxg, (size_t)nt * k * D * 4);
        float *cxg = malloc((size_t)nt * k * D * 4);
        cpu_moe_gather(x, nt, k, D, rows, cxg);
        ck_assert(!memcmp(xg, cxg, (size_t)nt * k * D * 4));
        free(cxg);
        /* combine from the sorted rows (stand-in expert outputs: xg * 1.5) */
        float *y = malloc((size_t)nt * k * D * 4), *ref = malloc((size_t)nt * D * 4);
        float *got = malloc((size_t)nt * D * 4);
        for (size_t i = 0; i < (size_t)nt * k * D; i++)
            y[i] = xg[i] * 1.5f + 0.25f;
        cpu_moe_combine(y, gw, inv, nt, k, D, ref);
        float *dy = dup_to_dev(y, (size_t)nt * k * D * 4), *dout = dev_alloc((size_t)nt * D * 4);
        OK(cuda_moe_combine(dy, dw, dinv, nt, k, D, dout, 0, &e_));
        to_host(got, dout, (size_t)nt * D * 4);
        ck_assert(!memcmp(got, ref, (size_t)nt * D * 4));
        cudaFree(dy);
        cudaFree(dout);
        cudaFree(dx);
        cudaFree(dxg);
        cudaFree(doff);
        cudaFree(drows);
        cudaFree(dinv);
        cudaFree(dl);
        cudaFree(dsel);
        cudaFree(dw);
        free(x);
        free(xg);
        free(y);
        free(ref);
        free(got);
        free(off);
        free(rows);
        free(inv);
        free(lg);
        free(sel);
        free(gsel);
        free(w);
        free(gw);
    }
}
END_TEST

static Suite *cuda_ops_suite(void)
{
    Suite *s = suite_create("cuda_ops");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rmsnorm_matches_cpu);
    tcase_add_test(tc, rmsnorm_heads_matches_cpu);
    tcase_add_test(tc, rope_matches_cpu);
    tcase_add_test(tc, elementwise_matches_cpu);
    tcase_add_test(tc, fused_ops_match_unfused);
    tcase_add_test(tc, kv_store_bit_exact);
    tcase_add_test(tc, argmax_matches_cpu);
    tcase_add_test(tc, sample_matches_cpu_chain);
    tcase_add_test(tc, moe_route_matches_cpu);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_ops_need_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *cuda_ops_suite(void)
{
    Suite *s = suite_create("cuda_ops");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cuda_ops_need_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_ops_suite)
