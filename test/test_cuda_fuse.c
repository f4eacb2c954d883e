/* test_cuda_fuse.c: suite "cuda_fuse" — the launches that fuse several of
 * the decode layer's small kernels (doc/cuda-kernels.md, "Fewer launches per
 * decode layer"), each against the CPU twins of its parts on random (never
 * zero) inputs and, bit for bit, against the unfused CUDA kernels it
 * replaces: fusing changes launches, not bits.  (The fused weight kernels
 * are in suite cuda_matvec, the engine with and without fusion in
 * cuda_engine.)
 *
 * Tolerances, the parts' (test_cuda_ops.c):
 *   cuda_moe_combine_add_rmsnorm  x bit-exact with cpu_moe_combine + cpu_add;
 *                                 xb |d| <= 1e-6 |ref| (double sum of squares)
 *   cuda_qk_norm_rope             |d| <= 2e-6 (|ref| + 1) (cpu_rmsnorm_heads,
 *                                 then cpu_rope: double angles) */
#include "testutil.h"

#ifdef STRATA_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_testutil.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

static float *rnd(size_t n, float scale, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    test_fill_normal(x, n, scale, seed);
    return x;
}

/* n_tok tokens, k slots, rows of D; sorted: the expert outputs through a
 * permutation (the prompt path's inv), else in (token, slot) order; norm:
 * the next layer's norm follows (else the add only); skew: x and xb start
 * 4 bytes in, so the norm takes the scalar path. */
static void check_combine(int n_tok, int k, int64_t D, int sorted, int norm, int skew)
{
    const int nk = n_tok * k;
    const size_t sz = (size_t)n_tok * D + 1;
    float *y = rnd((size_t)nk * D, 1.0f, 40 + D), *x0 = rnd(sz, 2.0f, 41 + D);
    float *nw = rnd((size_t)D, 1.0f, 42), *w = rnd((size_t)nk, 0.5f, 43);
    int32_t *inv = malloc((size_t)nk * sizeof *inv);
    for (int i = 0; i < nk; i++) /* a permutation: a stride coprime with nk */
        inv[i] = sorted ? (int32_t)(((int64_t)i * 7 + 3) % nk) : i;
    if (sorted)
        ck_assert_msg(nk % 7 != 0, "pick nk coprime with 7");
    /* the twins: combine, add, norm */
    float *att = malloc((size_t)n_tok * D * 4), *xref = malloc(sz * 4), *yref = malloc(sz * 4);
    memcpy(xref, x0, sz * 4);
    cpu_moe_combine(y, w, sorted ? inv : NULL, n_tok, k, D, att);
    for (int t = 0; t < n_tok; t++) {
        cpu_add(xref + skew + (size_t)t * D, att + (size_t)t * D, D);
        cpu_rmsnorm(xref + skew + (size_t)t * D, nw, D, 1e-6f, yref + (size_t)t * D);
    }
    float *dy = dup_to_dev(y, (size_t)nk * D * 4), *dx = dup_to_dev(x0, sz * 4);
    float *dnw = dup_to_dev(nw, (size_t)D * 4), *dw = dup_to_dev(w, (size_t)nk * 4);
    int32_t *dinv = dup_to_dev(inv, (size_t)nk * 4);
    float *dxb = dev_alloc(sz * 4), *datt = dev_alloc((size_t)n_tok * D * 4);
    float *got = malloc(sz * 4), *gb = malloc(sz * 4), *two = malloc(sz * 4);
    OK(cuda_moe_combine_add_rmsnorm(dy, dw, sorted ? dinv : NULL, n_tok, k, D, dx + skew,
                                    norm ? dnw : NULL, dxb + skew, 1e-6f, 0, &e_));
    to_host(got, dx, sz * 4);
    to_host(gb, dxb, sz * 4);
    ck_assert_msg(!memcmp(got, xref, sz * 4), "combine_add D=%lld: x not bit-exact with the twins",
                  (long long)D);
    int bad = 0;
    for (size_t i = 0; norm && i < (size_t)n_tok * D; i++)
        bad += !(fabsf(gb[skew + i] - yref[i]) <= 1e-6f * fabsf(yref[i]) + 1e-30f);
    ck_assert_msg(!bad, "combine_add_rmsnorm D=%lld: %d of xb off", (long long)D, bad);
    /* the unfused launches: the same bits */
    float *dxb2 = dev_alloc(sz * 4);
    CK(cudaMemcpy(dx, x0, sz * 4, cudaMemcpyHostToDevice));
    OK(cuda_moe_combine(dy, dw, sorted ? dinv : NULL, n_tok, k, D, datt, 0, &e_));
    OK(cuda_add(dx + skew, datt, (int64_t)n_tok * D, 0, &e_));
    if (norm)
        OK(cuda_rmsnorm(dx + skew, dnw, dxb2 + skew, n_tok, D, 1e-6f, 0, &e_));
    to_host(two, dx, sz * 4);
    ck_assert_msg(!memcmp(two, got, sz * 4), "combine_add D=%lld: x differs from the unfused",
                  (long long)D);
    if (norm) {
        to_host(two, dxb2, sz * 4);
        ck_assert_msg(!memcmp(two + skew, gb + skew, (size_t)n_tok * D * 4),
                      "combine_add_rmsnorm D=%lld: xb differs from the unfused", (long long)D);
    }
    cudaFree(dy);
    cudaFree(dx);
    cudaFree(dnw);
    cudaFree(dw);
    cudaFree(dinv);
    cudaFree(dxb);
    cudaFree(dxb2);
    cudaFree(datt);
    free(y);
    free(x0);
    free(nw);
    free(w);
    free(inv);
    free(att);
    free(xref);
    free(yref);
    free(got);
    free(gb);
    free(two);
}

START_TEST(moe_combine_add_rmsnorm_matches)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    check_combine(1, 8, 2048, 0, 1, 0); /* a decode step of the 30B-A3B shape */
    check_combine(3, 2, 256, 0, 1, 0);
    check_combine(5, 3, 1000, 1, 1, 0); /* prompt: expert-sorted rows */
    check_combine(2, 4, 516, 0, 1, 1);  /* scalar norm path */
    check_combine(2, 4, 1001, 1, 1, 0); /* odd width */
    check_combine(3, 2, 256, 0, 0, 0);  /* the stage's last layer: the add only */
}
END_TEST

static void check_qk(int hd, int nq, int nk, int n_tok, int neox, int n_rot)
{
    int64_t stride = (int64_t)(nq + 2 * nk) * hd; /* q|k|v, as a stacked qkv row */
    size_t n = (size_t)n_tok * stride;
    float *x = rnd(n, 1.0f, 700 + hd + nq), *ref = malloc(n * 4), *got = malloc(n * 4);
    float *two = malloc(n * 4), *qw = rnd((size_t)hd, 1.0f, 710), *kw = rnd((size_t)hd, 1.0f, 711);
    int32_t pos[5] = {3, 0, 511, 4097, 65000};
    rope_params rp = {n_rot, neox, 1000000.0f, 1.0f, NULL};
    memcpy(ref, x, n * 4);
    for (int t = 0; t < n_tok; t++) {
        float *q = ref + t * stride, *k = q + (int64_t)nq * hd;
        cpu_rmsnorm_heads(q, qw, nq, hd, 1e-6f);
        cpu_rmsnorm_heads(k, kw, nk, hd, 1e-6f);
        cpu_rope(q, nq, hd, pos[t], &rp);
        cpu_rope(k, nk, hd, pos[t], &rp);
    }
    float *dx = dup_to_dev(x, n * 4), *dqw = dup_to_dev(qw, (size_t)hd * 4);
    float *dkw = dup_to_dev(kw, (size_t)hd * 4);
    int32_t *dpos = dup_to_dev(pos, sizeof pos);
    float *dk = dx + (int64_t)nq * hd;
    OK(cuda_qk_norm_rope(dx, dqw, nq, stride, dk, dkw, nk, stride, n_tok, hd, 1e-6f, dpos, &rp, 0,
                         &e_));
    to_host(got, dx, n * 4);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(fabsf(ref[i] - got[i]) <= 2e-6f * (fabsf(ref[i]) + 1.0f));
    ck_assert_msg(!bad, "qk_norm_rope hd=%d neox=%d: %d off the twins", hd, neox, bad);
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    OK(cuda_rmsnorm_heads(dx, dqw, n_tok, nq, hd, stride, 1e-6f, 0, &e_));
    OK(cuda_rmsnorm_heads(dk, dkw, n_tok, nk, hd, stride, 1e-6f, 0, &e_));
    OK(cuda_rope_qk(dx, nq, stride, dk, nk, stride, n_tok, hd, dpos, &rp, 0, &e_));
    to_host(two, dx, n * 4);
    ck_assert_msg(!memcmp(two, got, n * 4), "qk_norm_rope hd=%d neox=%d differs from the unfused",
                  hd, neox);
    cudaFree(dx);
    cudaFree(dqw);
    cudaFree(dkw);
    cudaFree(dpos);
    free(x);
    free(ref);
    free(got);
    free(two);
    free(qw);
    free(kw);
}

START_TEST(qk_norm_rope_matches)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    check_qk(128, 32, 4, 1, 1, 128); /* the 30B-A3B decode step */
    check_qk(64, 9, 3, 5, 1, 64);    /* more heads than warps; a batch */
    check_qk(128, 16, 8, 3, 0, 128); /* adjacent pairs */
    check_qk(64, 4, 2, 2, 1, 32);    /* partial rotation: the tail is only normed */
    check_qk(256, 40, 8, 1, 1, 256); /* 48 heads over 16 warps, wide heads */
}
END_TEST

static Suite *cuda_fuse_suite(void)
{
    Suite *s = suite_create("cuda_fuse");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, moe_combine_add_rmsnorm_matches);
    tcase_add_test(tc, qk_norm_rope_matches);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_fuse_needs_cuda)
{
    TEST_SKIP("gpu", "built without CUDA");
}
END_TEST

static Suite *cuda_fuse_suite(void)
{
    Suite *s = suite_create("cuda_fuse");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, cuda_fuse_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_fuse_suite)
