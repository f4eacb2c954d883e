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
 *                                 then cpu_rope: double angles)
 *   cuda_moe_router_route         logits |d| <= 1e-5 (|ref| + 1) of cpu_matmul
 *                                 (F32); cpu_moe_route on the card's logits:
 *                                 the same experts, weights |d| <= 1e-6 |ref|
 * and, bit for bit, a token alone against the same token inside a batch. */
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
#include "model/quant.h"

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
    /* invariance: the last token alone gives the bits it had in the batch */
    const int t = n_tok - 1;
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    OK(cuda_qk_norm_rope(dx + t * stride, dqw, nq, stride, dk + t * stride, dkw, nk, stride, 1, hd, 1e-6f,
                         dpos + t, &rp, 0, &e_));
    to_host(two, dx, n * 4);
    ck_assert_msg(!memcmp(two + t * stride, got + t * stride, (size_t)stride * 4),
                  "qk_norm_rope hd=%d neox=%d: token %d alone differs from the batch", hd, neox, t);
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
    check_qk(256, 40, 8, 1, 1, 256); /* 48 heads, wide heads */
    check_qk(512, 3, 2, 2, 0, 512);  /* the widest head a lane's registers hold */
    check_qk(128, 5, 0, 3, 1, 128);  /* q only (no k heads) */
}
END_TEST

/* The router's F32 product and the routing in one launch: the logits
 * bitwise cuda_matvec's, the choices and weights bitwise cuda_moe_route's
 * on them; against the twins, logits within 1e-5 of cpu_matmul (F32's
 * tolerance) and cpu_moe_route on the card's logits choosing the same
 * experts with weights within 1e-6.  Twice, so a ticket left behind by the
 * first launch would show (the second would route nothing). */
static void check_router(int E, int64_t D, int n_tok, int k)
{
    float *wr = rnd((size_t)E * D, 0.05f, 800 + E), *x = rnd((size_t)n_tok * D, 1.0f, 801 + n_tok);
    float *ref = malloc((size_t)n_tok * E * 4), *lg = malloc((size_t)n_tok * E * 4);
    float *lg2 = malloc((size_t)n_tok * E * 4), *w = malloc((size_t)n_tok * k * 4);
    float *w2 = malloc((size_t)n_tok * k * 4), *cw = malloc((size_t)n_tok * k * 4);
    int32_t *sel = malloc((size_t)n_tok * k * 4), *sel2 = malloc((size_t)n_tok * k * 4);
    int32_t *csel = malloc((size_t)n_tok * k * 4);
    float *dwr = dev_alloc(cuda_weight_bytes(GGML_TYPE_F32, E, D));
    OK(cuda_weight_upload(GGML_TYPE_F32, E, D, wr, dwr, 0, &e_));
    float *dx = dup_to_dev(x, (size_t)n_tok * D * 4), *dlg = dev_alloc((size_t)n_tok * E * 4);
    float *dw = dev_alloc((size_t)n_tok * k * 4);
    int32_t *dsel = dev_alloc((size_t)n_tok * k * 4);
    unsigned *dticket = dev_alloc(CUDA_MOE_ROUTER_TICKETS * sizeof(unsigned));
    CK(cudaMemset(dticket, 0, CUDA_MOE_ROUTER_TICKETS * sizeof(unsigned)));
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaMemset(dsel, 0xff, (size_t)n_tok * k * 4));
        CK(cudaMemset(dw, 0xff, (size_t)n_tok * k * 4));
        OK(cuda_moe_router_route(dwr, E, D, dx, n_tok, k, dlg, dsel, dw, dticket, 0, &e_));
        to_host(lg, dlg, (size_t)n_tok * E * 4);
        to_host(sel, dsel, (size_t)n_tok * k * 4);
        to_host(w, dw, (size_t)n_tok * k * 4);
        /* the unfused pair */
        OK(cuda_matvec(GGML_TYPE_F32, dwr, E, D, dx, n_tok, dlg, 0, &e_));
        OK(cuda_moe_route(dlg, n_tok, E, k, dsel, dw, 0, &e_));
        to_host(lg2, dlg, (size_t)n_tok * E * 4);
        to_host(sel2, dsel, (size_t)n_tok * k * 4);
        to_host(w2, dw, (size_t)n_tok * k * 4);
        ck_assert_msg(!memcmp(lg, lg2, (size_t)n_tok * E * 4), "router %dx%lld: logits differ (rep %d)", E,
                      (long long)D, rep);
        ck_assert_msg(!memcmp(sel, sel2, (size_t)n_tok * k * 4), "router %dx%lld: choices differ (rep %d)", E,
                      (long long)D, rep);
        ck_assert_msg(!memcmp(w, w2, (size_t)n_tok * k * 4), "router %dx%lld: weights differ (rep %d)", E,
                      (long long)D, rep);
    }
    /* invariance: the last token alone gives the bits it had in the batch */
    if (n_tok > 1) {
        const int t = n_tok - 1;
        OK(cuda_moe_router_route(dwr, E, D, dx + (size_t)t * D, 1, k, dlg, dsel, dw, dticket, 0, &e_));
        to_host(lg2, dlg, (size_t)E * 4);
        to_host(sel2, dsel, (size_t)k * 4);
        to_host(w2, dw, (size_t)k * 4);
        ck_assert_msg(!memcmp(lg2, lg + (size_t)t * E, (size_t)E * 4) &&
                          !memcmp(sel2, sel + (size_t)t * k, (size_t)k * 4) &&
                          !memcmp(w2, w + (size_t)t * k, (size_t)k * 4),
                      "router %dx%lld: token %d alone differs from the batch", E, (long long)D, t);
    }
    cpu_matmul(GGML_TYPE_F32, wr, E, D, x, n_tok, ref);
    int bad = 0;
    for (int i = 0; i < n_tok * E; i++)
        bad += !(fabsf(lg[i] - ref[i]) <= 1e-5f * (fabsf(ref[i]) + 1.0f));
    ck_assert_msg(!bad, "router %dx%lld: %d logits off cpu_matmul", E, (long long)D, bad);
    cpu_moe_route(lg, n_tok, E, k, csel, cw); /* the card's logits (in place) */
    for (int i = 0; i < n_tok * k; i++) {
        ck_assert_msg(sel[i] == csel[i], "router entry %d: expert %d vs %d", i, sel[i], csel[i]);
        ck_assert_msg(fabsf(w[i] - cw[i]) <= 1e-6f * fabsf(cw[i]) + 1e-30f, "router weight %g vs %g", w[i],
                      cw[i]);
    }
    cudaFree(dwr);
    cudaFree(dx);
    cudaFree(dlg);
    cudaFree(dw);
    cudaFree(dsel);
    cudaFree(dticket);
    free(wr);
    free(x);
    free(ref);
    free(lg);
    free(lg2);
    free(w);
    free(w2);
    free(cw);
    free(sel);
    free(sel2);
    free(csel);
}

START_TEST(moe_router_route_matches)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    check_router(128, 2048, 1, 8); /* the 30B-A3B decode step */
    check_router(128, 2048, 8, 8); /* a decode batch of 8 */
    check_router(8, 256, 3, 2);    /* one block of rows */
    check_router(60, 512, 5, 4);   /* a partial block of rows */
    check_router(256, 512, 2, 16);
    check_router(64, 4608, 3, 4);  /* three chunks of columns, the last partial */
    check_router(16, 2056, 2, 2);  /* a second chunk of two float4 (F32 rows: cols % 8 == 0) */
}
END_TEST

static Suite *cuda_fuse_suite(void)
{
    Suite *s = suite_create("cuda_fuse");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, moe_router_route_matches);
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
