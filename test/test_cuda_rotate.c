/* test_cuda_rotate.c: suite "cuda_rotate" — the k8v4r rotation on the card
 * (kernels/cuda/rotate.cuh, inside the store's and the attention's
 * launches) against its CPU twin (kernels/cpu/rotate.c) on random (never
 * zero) inputs.
 *
 * Tolerance: bit-exact.  The twins do the same exact sign flips, the same
 * rounded adds on the same pairs in the same order and one rounded product
 * by the same float (rotate.cuh says why that is the CPU's arithmetic).
 * The rotation fused with the store (cuda_kv_rotate_store) against the
 * CPU's rotate then store: q rotated in place, k and v untouched, every
 * byte of the pool, for every supported head dim (32..512) and stacked
 * q|k|v rows (the engine's wqkv layout, strides larger than the heads); a
 * row alone equals the same row in a batch (the invariance rule).  The
 * unrotation fused into the attention (cuda_attention_rotated) against
 * cuda_attention_window then the CPU's cpu_kv_unrotate: the same bits.
 * The same rotations as launches of their own (cuda_kv_rotate,
 * cuda_kv_unrotate: a lab switch's) on stacked rows, k or v absent, 1 to 7
 * rows, bytes between rows untouched. */
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

/* The rotations as launches of their own (rotate.cu, the lab switch
 * STRATA_ROT_SPLIT).  One stacked row per token: q (nq heads) | k (nkv) | v (nkv) | 5 spare
 * floats that no kernel may touch. */
static void check_shape(int d, int nq, int nkv, int n_tok, int with_k, int with_v)
{
    int64_t dq = (int64_t)nq * d, dkv = (int64_t)nkv * d, stride = dq + 2 * dkv + 5;
    size_t n = (size_t)stride * n_tok;
    float *h = malloc(n * sizeof *h), *ref = malloc(n * sizeof *ref),
          *got = malloc(n * sizeof *got);
    test_fill_normal(h, n, 1.5f, (uint64_t)d * 1000 + nq * 10 + n_tok);
    memcpy(ref, h, n * sizeof *h);
    for (int t = 0; t < n_tok; t++) {
        float *r = ref + (size_t)t * stride;
        cpu_kv_rotate(r, nq, d);
        if (with_k)
            cpu_kv_rotate(r + dq, nkv, d);
        if (with_v)
            cpu_kv_rotate(r + dq + dkv, nkv, d);
    }
    float *dx = dup_to_dev(h, n * sizeof *h);
    OK(cuda_kv_rotate(dx, nq, stride, with_k ? dx + dq : NULL, with_v ? dx + dq + dkv : NULL,
                      nkv, stride, stride, n_tok, d, 0, &e_));
    to_host(got, dx, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &ref[i], sizeof(float)) == 0,
                      "rotate d %d nq %d nkv %d tok %d k %d v %d: float %zu: %.9g vs %.9g", d,
                      nq, nkv, n_tok, with_k, with_v, i, got[i], ref[i]);
    /* back: the attention output's rows (q's heads only) */
    for (int t = 0; t < n_tok; t++)
        cpu_kv_unrotate(ref + (size_t)t * stride, nq, d);
    OK(cuda_kv_unrotate(dx, nq, stride, n_tok, d, 0, &e_));
    to_host(got, dx, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &ref[i], sizeof(float)) == 0,
                      "unrotate d %d nq %d tok %d: float %zu: %.9g vs %.9g", d, nq, n_tok, i,
                      got[i], ref[i]);
    /* the last row alone gives the same bits as inside the batch */
    if (n_tok > 1) {
        float *one = h + (size_t)(n_tok - 1) * stride;
        float *d1 = dup_to_dev(one, (size_t)stride * sizeof *one);
        OK(cuda_kv_rotate(d1, nq, stride, NULL, NULL, 0, stride, stride, 1, d, 0, &e_));
        OK(cuda_kv_unrotate(d1, nq, stride, 1, d, 0, &e_));
        to_host(got, d1, (size_t)stride * sizeof *got);
        const float *in_batch = ref + (size_t)(n_tok - 1) * stride;
        ck_assert(memcmp(got, in_batch, (size_t)dq * sizeof *got) == 0);
        CK(cudaFree(d1));
    }
    CK(cudaFree(dx));
    free(h);
    free(ref);
    free(got);
}

START_TEST(rotate_bit_exact_with_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP(why);
    static const int dims[] = {32, 64, 128, 256, 512};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        check_shape(dims[a], 9, 3, 1, 1, 1);  /* SmolLM2's heads: 9 q, 3 kv */
        check_shape(dims[a], 8, 2, 7, 1, 1);
        check_shape(dims[a], 4, 4, 3, 1, 0);
        check_shape(dims[a], 2, 1, 2, 0, 1);
    }
}
END_TEST

/* cuda_kv_rotate_store (kernels/cuda/kv.cu) against the CPU's rotate then
 * store, bit for bit: q rotated in place, k and v as they were, every byte
 * of the pool, for k8v4, k8v4nl and f16, with and without a K shift, 2
 * sequences of 3 rows at scattered positions of shuffled pages; then the
 * last row alone, which must store the same bytes and rotate q the same. */
static void check_rotate_store(int type, int d, int nq, int nkv, int with_shift)
{
    const int n_seq = 2, n_tok = 3, pages_per = 2, n_pages = n_seq * pages_per;
    int64_t dq = (int64_t)nq * d, dkv = (int64_t)nkv * d, stride = dq + 2 * dkv + 3;
    size_t n = (size_t)stride * n_seq * n_tok;
    float *h = malloc(n * sizeof *h), *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    test_fill_normal(h, n, 1.5f, (uint64_t)d * 77 + type * 5 + with_shift);
    memcpy(ref, h, n * sizeof *h);
    float *shift = malloc((size_t)dkv * sizeof *shift);
    test_fill_normal(shift, (size_t)dkv, 0.8f, 4242 + d);
    int32_t pages[4] = {2, 0, 3, 1}, pos[6];
    for (int i = 0; i < n_seq * n_tok; i++)
        pos[i] = (int32_t)((i * 173 + 31) % (pages_per * KV_PAGE));
    size_t rows = (size_t)n_pages * nkv * KV_PAGE, bytes[4];
    if (type == KV_F16) {
        bytes[0] = bytes[2] = rows * d * 2;
        bytes[1] = bytes[3] = 0;
    } else {
        bytes[0] = rows * d;
        bytes[1] = bytes[3] = rows * (d / 32) * 2;
        bytes[2] = rows * d / 2;
    }
    void *hb[4] = {0}, *db[4] = {0};
    for (int b = 0; b < 4; b++) {
        if (!bytes[b])
            continue;
        hb[b] = malloc(bytes[b]);
        memset(hb[b], 0x5a, bytes[b]); /* untouched rows must stay so on both sides */
        db[b] = dup_to_dev(hb[b], bytes[b]);
    }
    kv_view hv = {0};
    hv.type = type;
    hv.n_kv_head = nkv;
    hv.head_dim = d;
    hv.kshift = with_shift ? shift : NULL;
    kv_view dv = hv;
    if (type == KV_F16) {
        hv.kh = hb[0], hv.vh = hb[2];
        dv.kh = db[0], dv.vh = db[2];
    } else {
        hv.kq = hb[0], hv.kd = hb[1], hv.vq = hb[2], hv.vd = hb[3];
        dv.kq = db[0], dv.kd = db[1], dv.vq = db[2], dv.vd = db[3];
    }
    float *dshift = dup_to_dev(shift, (size_t)dkv * sizeof *shift);
    dv.kshift = with_shift ? dshift : NULL;
    int32_t *dpages = dup_to_dev(pages, sizeof pages), *dpos = dup_to_dev(pos, sizeof pos);
    dv.pages = dpages;
    float *kr = malloc((size_t)2 * dkv * sizeof *kr);
    for (int r = 0; r < n_seq * n_tok; r++) {
        float *x = ref + (size_t)r * stride;
        cpu_kv_rotate(x, nq, d);
        memcpy(kr, x + dq, (size_t)2 * dkv * sizeof *kr); /* k|v: the rows stay as they are */
        cpu_kv_rotate(kr, nkv, d);
        cpu_kv_rotate(kr + dkv, nkv, d);
        hv.pages = pages + (r / n_tok) * pages_per;
        cpu_kv_store(&hv, pos[r], kr, kr + dkv);
    }
    free(kr);
    float *dx = dup_to_dev(h, n * sizeof *h);
    OK(cuda_kv_rotate_store(&dv, pages_per, n_seq, n_tok, dpos, dx, nq, stride, dx + dq, stride,
                            dx + dq + dkv, stride, 0, &e_));
    to_host(got, dx, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&got[i], &ref[i], sizeof(float)) == 0,
                      "rotate_store type %d d %d: float %zu: %.9g vs %.9g", type, d, i, got[i],
                      ref[i]);
    /* the last row alone (sequence 1, its own position) over the same
     * pool: the same bytes again, q the same */
    const int last = n_seq * n_tok - 1;
    float *d1 = dup_to_dev(h + (size_t)last * stride, (size_t)stride * sizeof *h);
    int32_t *dpos1 = dup_to_dev(&pos[last], sizeof pos[last]);
    kv_view dv1 = dv;
    dv1.pages = dpages + (last / n_tok) * pages_per;
    OK(cuda_kv_rotate_store(&dv1, pages_per, 1, 1, dpos1, d1, nq, stride, d1 + dq, stride,
                            d1 + dq + dkv, stride, 0, &e_));
    to_host(got, d1, (size_t)stride * sizeof *got);
    ck_assert_msg(memcmp(got, ref + (size_t)last * stride, (size_t)stride * sizeof *got) == 0,
                  "rotate_store type %d d %d: the last row alone differs", type, d);
    CK(cudaFree(d1));
    CK(cudaFree(dpos1));
    for (int b = 0; b < 4; b++) {
        if (!bytes[b])
            continue;
        unsigned char *g = malloc(bytes[b]);
        to_host(g, db[b], bytes[b]);
        size_t first = bytes[b];
        for (size_t i = 0; i < bytes[b]; i++)
            if (g[i] != ((unsigned char *)hb[b])[i]) {
                first = i;
                break;
            }
        ck_assert_msg(first == bytes[b], "rotate_store type %d d %d shift %d buffer %d: byte %zu differs",
                      type, d, with_shift, b, first);
        free(g);
        CK(cudaFree(db[b]));
        free(hb[b]);
    }
    CK(cudaFree(dx));
    CK(cudaFree(dshift));
    CK(cudaFree(dpages));
    CK(cudaFree(dpos));
    free(h);
    free(ref);
    free(got);
    free(shift);
}

START_TEST(rotate_store_bit_exact_with_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP(why);
    static const int dims[] = {32, 64, 128, 256, 512};
    static const int types[] = {KV_K8V4, KV_K8V4NL, KV_F16};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++)
        for (int t = 0; t < 3; t++) {
            check_rotate_store(types[t], dims[a], 8, 2, 1);
            check_rotate_store(types[t], dims[a], 9, 3, 0);
        }
}
END_TEST

/* cuda_attention_rotated (the unrotation inside the attention kernel's
 * output write) against cuda_attention_window then cpu_kv_unrotate, bit
 * for bit: decode over several chunks (the split and its folds), decode
 * in one chunk, prefill, a window, and the plain kernel's shapes (group
 * 9, head_dim 32), over a pool of random valid bytes. */
static void check_attention_rotated(int type, int d, int nkv, int group, int n_tok, int ctx,
                                    int window)
{
    const int n_seq = 2, n_head = nkv * group, pages_per = (ctx + KV_PAGE - 1) / KV_PAGE;
    const int n_pages = n_seq * pages_per;
    size_t rows = (size_t)n_pages * nkv * KV_PAGE, bytes[4];
    if (type == KV_F16) {
        bytes[0] = bytes[2] = rows * d * 2;
        bytes[1] = bytes[3] = 0;
    } else {
        bytes[0] = rows * d;
        bytes[1] = bytes[3] = rows * (d / 32) * 2;
        bytes[2] = rows * d / 2;
    }
    void *db[4] = {0};
    uint64_t st = (uint64_t)d * 31 + (uint64_t)type * 7 + (uint64_t)ctx;
    for (int b = 0; b < 4; b++) {
        if (!bytes[b])
            continue;
        unsigned char *hb = malloc(bytes[b]);
        for (size_t i = 0; i < bytes[b]; i += 2) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            uint16_t v = (uint16_t)st;
            if (type == KV_F16)
                v = (uint16_t)(0x3000 | (v & 0x83ff));
            else if (b == 1 || b == 3)
                v = (uint16_t)(0x2500 + (v & 0xff)); /* scales near 0.02 */
            else
                v &= 0x7f7f; /* int8 quants without -128; nibbles */
            memcpy(hb + i, &v, 2);
        }
        db[b] = dup_to_dev(hb, bytes[b]);
        free(hb);
    }
    int32_t *pages = malloc((size_t)n_pages * sizeof *pages);
    for (int i = 0; i < n_pages; i++)
        pages[i] = (int32_t)((i * 7 + 3) % n_pages);
    kv_view kv = {0};
    kv.type = type;
    kv.n_kv_head = nkv;
    kv.head_dim = d;
    if (type == KV_F16) {
        kv.kh = db[0], kv.vh = db[2];
    } else {
        kv.kq = db[0], kv.kd = db[1], kv.vq = db[2], kv.vd = db[3];
    }
    kv.pages = dup_to_dev(pages, (size_t)n_pages * sizeof *pages);
    int32_t first[2] = {ctx - n_tok, ctx - n_tok - 37};
    int32_t *dfirst = dup_to_dev(first, sizeof first);
    int64_t qs = (int64_t)n_head * d + 8;
    size_t nq = (size_t)n_seq * n_tok * qs;
    float *hq = malloc(nq * sizeof *hq);
    test_fill_normal(hq, nq, 1.0f, 555 + (uint64_t)d);
    float *dq = dup_to_dev(hq, nq * sizeof *hq);
    float *o1 = dev_alloc(nq * sizeof(float)), *o2 = dev_alloc(nq * sizeof(float));
    CK(cudaMemset(o1, 0, nq * sizeof(float)));
    CK(cudaMemset(o2, 0, nq * sizeof(float)));
    size_t sb = cuda_attention_scratch_bytes(&kv, n_head, n_seq, ctx);
    void *scratch = dev_alloc(sb);
    CK(cudaMemset(scratch, 0, sb));
    float sc = 1.0f / sqrtf((float)d);
    OK(cuda_attention_window(&kv, pages_per, dfirst, n_seq, n_tok, ctx, window, dq, qs, n_head, sc,
                             o1, qs, scratch, sb, 0, &e_));
    OK(cuda_attention_rotated(&kv, pages_per, dfirst, n_seq, n_tok, ctx, window, dq, qs, n_head,
                              sc, o2, qs, scratch, sb, 0, &e_));
    float *g1 = malloc(nq * sizeof *g1), *g2 = malloc(nq * sizeof *g2);
    to_host(g1, o1, nq * sizeof *g1);
    to_host(g2, o2, nq * sizeof *g2);
    for (int r = 0; r < n_seq * n_tok; r++) /* the rows' heads; the 8 spare floats stay 0 */
        cpu_kv_unrotate(g1 + (size_t)r * qs, n_head, d);
    size_t first_diff = nq, nonzero = 0;
    for (size_t i = 0; i < nq; i++) {
        nonzero += g1[i] != 0.0f;
        if (first_diff == nq && memcmp(&g1[i], &g2[i], sizeof(float)))
            first_diff = i;
    }
    ck_assert_msg(first_diff == nq,
                  "attention_rotated type %d d %d group %d n_tok %d ctx %d window %d: float %zu: "
                  "%.9g vs %.9g", type, d, group, n_tok, ctx, window, first_diff,
                  first_diff < nq ? g2[first_diff] : 0.0, first_diff < nq ? g1[first_diff] : 0.0);
    ck_assert_msg(nonzero > nq / 2, "attention_rotated: output mostly zero (%zu of %zu)", nonzero, nq);
    for (int b = 0; b < 4; b++)
        if (db[b])
            CK(cudaFree(db[b]));
    CK(cudaFree((void *)kv.pages));
    CK(cudaFree(dfirst));
    CK(cudaFree(dq));
    CK(cudaFree(o1));
    CK(cudaFree(o2));
    CK(cudaFree(scratch));
    free(pages);
    free(hq);
    free(g1);
    free(g2);
}

START_TEST(attention_rotated_bit_exact)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP(why);
    static const int dims[] = {64, 128, 256};
    static const int types[] = {KV_K8V4, KV_K8V4NL, KV_F16};
    for (int a = 0; a < 3; a++)
        for (int t = 0; t < 3; t++) {
            check_attention_rotated(types[t], dims[a], 2, 4, 1, 2600, 0);  /* split: 3 chunks */
            check_attention_rotated(types[t], dims[a], 2, 4, 1, 700, 0);   /* one chunk */
            check_attention_rotated(types[t], dims[a], 2, 4, 9, 1300, 0);  /* prefill */
            check_attention_rotated(types[t], dims[a], 2, 2, 3, 900, 300); /* a window */
        }
    check_attention_rotated(KV_K8V4NL, 128, 1, 9, 2, 600, 0); /* group 9: the plain kernel */
    check_attention_rotated(KV_K8V4NL, 32, 2, 2, 1, 600, 0);  /* head_dim 32: plain */
    check_attention_rotated(KV_K8V4, 512, 1, 2, 1, 600, 0);   /* head_dim 512: plain */
}
END_TEST

START_TEST(rotate_refuses_bad_shapes)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP(why);
    float *dx = dev_alloc(4096 * sizeof(float));
    strata_error err = {0};
    kv_view kv = {0};
    kv.type = KV_K8V4;
    kv.n_kv_head = 2;
    kv.head_dim = 64;
    /* q's stride below its heads */
    ck_assert_int_eq(cuda_kv_rotate_store(&kv, 1, 1, 1, NULL, dx, 2, 64, dx, 128, dx, 128, 0,
                                          &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(cuda_kv_rotate(dx, 2, 192, NULL, NULL, 0, 0, 0, 1, 96, 0, &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(cuda_kv_unrotate(dx, 2, 64, 1, 64, 0, &err), STRATA_E_ARG); /* stride */
    kv.head_dim = 96; /* not a power of two */
    ck_assert_int_eq(cuda_kv_rotate_store(&kv, 1, 1, 1, NULL, dx, 2, 192, dx, 192, dx, 192, 0,
                                          &err),
                     STRATA_E_ARG);
    ck_assert_int_eq(cuda_attention_rotated(&kv, 1, NULL, 1, 1, 96, 0, dx, 192, 2, 1.0f, dx, 192,
                                            NULL, 0, 0, &err),
                     STRATA_E_ARG);
    CK(cudaFree(dx));
}
END_TEST

static Suite *cuda_rotate_suite(void)
{
    Suite *s = suite_create("cuda_rotate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rotate_bit_exact_with_cpu);
    tcase_add_test(tc, rotate_store_bit_exact_with_cpu);
    tcase_add_test(tc, attention_rotated_bit_exact);
    tcase_add_test(tc, rotate_refuses_bad_shapes);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_rotate_needs_cuda)
{
    TEST_SKIP("built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *cuda_rotate_suite(void)
{
    Suite *s = suite_create("cuda_rotate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cuda_rotate_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_rotate_suite)
