/* test_cuda_attention.c: suite "cuda_attention" — cuda_attention (decode
 * and prefill) and cuda_attention_plain against cpu_attention on the same
 * paged cache, k8v4, k8v4nl (the IQ4_NL-coded V) and f16.
 *
 * Shapes: head_dim 64/128/256, group sizes (query heads per kv head) 1, 3,
 * 4, 7, 8; contexts 1, ragged page tails (255, 257, 300, ...), several pages,
 * and past the 1024-token decode chunk (split + fold); a batch of sequences
 * with shuffled page tables of their own.  Every case also runs with 64-token
 * chunks (cuda_attention_set_chunk), which puts up to 41 chunks and 6
 * super-chunks through the two-level fold.  Inputs are seeded Gaussians (q
 * scaled so that the softmax is neither flat nor one-hot).
 *
 * Tolerances, per query head vector, against the double-precision CPU
 * reference on the same quantized cache:
 *   fast kernel (fp16 q and P into fp32-accumulating tensor cores)
 *       max |gpu - ref| <= 4e-3 * max |ref| + 1e-5
 *   plain kernel (f32 throughout)
 *       max |gpu - ref| <= 2e-5 * max |ref| + 1e-6
 * Invariance (bit for bit): a query's output is the same from decode, from
 * prefill in one chunk or two, alone or in a batch, and on a second run
 * (the split tickets reset themselves).
 *
 * Case type 3 (TYPE_NL_BIG) is k8v4nl again with every 53rd token's V 4000
 * times larger (elements of up to ~16000): the store clamps those blocks'
 * scales to 56.5 (KV_NL_DMAX) and saturates their codes, so the one-FMA V
 * decode (the prefill kernels' only one; decode votes between it and an
 * exact two-operation one, which these scales never need) stays exact
 * there too; on the first shapes (hd 128 and 64). */
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


#define TYPE_NL_BIG (KV_K8V4NL + 1)
static float big_v = 0.0f; /* > 0: cache_make scales every 53rd token's V so */

/* The cache type of a case type, and whether its V has the large tokens. */
static int case_kv(int type)
{
    big_v = type == TYPE_NL_BIG ? 4000.0f : 0.0f;
    return type >= TYPE_NL_BIG ? KV_K8V4NL : type;
}

/* A cache of n_seq sequences, each with its own shuffled page table row
 * (pages_per entries), filled by cpu_kv_store for positions 0..len[s]-1;
 * the same bytes on the card. */
typedef struct att_cache {
    int type, n_kv, hd, n_seq, pages_per;
    int32_t *pages;
    kv_view host, dev;
    void *hbuf[4], *dbuf[4];
    size_t bytes[4];
    int32_t *dpages;
} att_cache;

static void cache_make(att_cache *c, int type, int n_kv, int hd, int n_seq, const int *len,
                       uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->type = type;
    c->n_kv = n_kv;
    c->hd = hd;
    c->n_seq = n_seq;
    int maxlen = 1;
    for (int s = 0; s < n_seq; s++)
        maxlen = len[s] > maxlen ? len[s] : maxlen;
    c->pages_per = (maxlen + KV_PAGE - 1) / KV_PAGE;
    int n_pages = n_seq * c->pages_per;
    c->pages = malloc((size_t)n_pages * sizeof *c->pages);
    for (int i = 0; i < n_pages; i++)
        c->pages[i] = i;
    uint64_t st = seed | 1;
    for (int i = n_pages - 1; i > 0; i--) { /* shuffle: pages far from order */
        int j = (int)(test_rand_u64(&st) % (uint64_t)(i + 1));
        int32_t t = c->pages[i];
        c->pages[i] = c->pages[j];
        c->pages[j] = t;
    }
    size_t rows = (size_t)n_pages * n_kv * KV_PAGE;
    if (type != KV_F16) { /* k8v4, k8v4nl: the same buffers */
        c->bytes[0] = rows * hd;
        c->bytes[1] = rows * (hd / 32) * 2;
        c->bytes[2] = rows * hd / 2;
        c->bytes[3] = rows * (hd / 32) * 2;
    } else {
        c->bytes[0] = rows * hd * 2;
        c->bytes[2] = rows * hd * 2;
    }
    for (int b = 0; b < 4; b++) {
        c->hbuf[b] = c->bytes[b] ? malloc(c->bytes[b]) : NULL;
        if (c->hbuf[b]) /* stale bytes past each sequence's end: 0x7c7c is an fp16 NaN */
            memset(c->hbuf[b], 0x7c, c->bytes[b]);
    }
    kv_view h = {0};
    h.type = type;
    h.n_kv_head = n_kv;
    h.head_dim = hd;
    if (type != KV_F16) { /* k8v4, k8v4nl: the same buffers */
        h.kq = c->hbuf[0];
        h.kd = c->hbuf[1];
        h.vq = c->hbuf[2];
        h.vd = c->hbuf[3];
    } else {
        h.kh = c->hbuf[0];
        h.vh = c->hbuf[2];
    }
    float *k = malloc((size_t)n_kv * hd * 4), *v = malloc((size_t)n_kv * hd * 4);
    for (int s = 0; s < n_seq; s++) {
        h.pages = c->pages + s * c->pages_per;
        for (int t = 0; t < len[s]; t++) {
            test_fill_normal(k, (size_t)n_kv * hd, 1.0f, seed * 1000003 + s * 100000 + t);
            test_fill_normal(v, (size_t)n_kv * hd, 1.0f, seed * 1000033 + s * 100000 + t + 7);
            if (big_v > 0.0f && t % 53 == 17)
                for (int i = 0; i < n_kv * hd; i++)
                    v[i] *= big_v;
            cpu_kv_store(&h, t, k, v);
        }
    }
    free(k);
    free(v);
    c->host = h;
    c->dpages = dup_to_dev(c->pages, (size_t)n_pages * 4);
    for (int b = 0; b < 4; b++)
        c->dbuf[b] = c->bytes[b] ? dup_to_dev(c->hbuf[b], c->bytes[b]) : NULL;
    kv_view d = h;
    d.pages = c->dpages;
    if (type != KV_F16) { /* k8v4, k8v4nl: the same buffers */
        d.kq = c->dbuf[0];
        d.kd = c->dbuf[1];
        d.vq = c->dbuf[2];
        d.vd = c->dbuf[3];
    } else {
        d.kh = c->dbuf[0];
        d.vh = c->dbuf[2];
    }
    c->dev = d;
}

static void cache_free(att_cache *c)
{
    for (int b = 0; b < 4; b++) {
        free(c->hbuf[b]);
        if (c->dbuf[b])
            cudaFree(c->dbuf[b]);
    }
    cudaFree(c->dpages);
    free(c->pages);
}

/* cpu_attention for sequence s, one query at position pos. */
static void cpu_ref(const att_cache *c, int s, const float *q, int n_head, int32_t pos,
                    float scale, float *out)
{
    kv_view h = c->host;
    h.pages = c->pages + s * c->pages_per;
    cpu_attention(q, n_head, &h, pos + 1, scale, out);
}

/* Worst error of got vs ref over one head vector, relative to max |ref|:
 * returns max|d| / (max|ref| + tiny); *nan set if got has a NaN. */
static double head_err(const float *got, const float *ref, int hd, int *nan)
{
    double md = 0.0, mr = 0.0;
    for (int i = 0; i < hd; i++) {
        if (!(got[i] == got[i]))
            *nan = 1;
        double d = fabs((double)got[i] - ref[i]);
        md = d > md ? d : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    return md / (mr + 1e-3);
}

typedef struct shape {
    int hd, n_kv, group;
} shape;

static const shape fast_shapes[] = {
    {128, 2, 4}, {128, 1, 1}, {64, 3, 3}, {64, 2, 7}, {128, 2, 8}, {256, 1, 4},
};

START_TEST(decode_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    double worst_fast = 0.0, worst_plain = 0.0;
    /* chunk 0: the engine's; 64: many chunks and super-chunks (the two-level
     * fold) on contexts the CPU reference can afford */
    for (int chunk = 0; chunk <= 64; chunk += 64)
    for (int type = 0; type <= TYPE_NL_BIG; type++) {
        cuda_attention_set_chunk(chunk);
        for (size_t si = 0; si < sizeof fast_shapes / sizeof fast_shapes[0]; si++) {
            if (test_small() && si != 0 && si != 2) /* group 4 and 3, hd 128 and 64 */
                continue;
            if (type >= TYPE_NL_BIG && si != 0 && si != 2)
                continue;
            shape sh = fast_shapes[si];
            int n_head = sh.n_kv * sh.group, hd = sh.hd, n_seq = 4;
            int len[4] = {1, 257, 1100, 2600}; /* 1 token; page tail; 2 and 3 chunks */
            if (hd == 256)
                len[3] = 1500;
            const int max_ctx = 4096;
            att_cache c;
            cache_make(&c, case_kv(type), sh.n_kv, hd, n_seq, len, 17 + si + 100 * type);
            int32_t pos[4];
            for (int s = 0; s < n_seq; s++)
                pos[s] = len[s] - 1;
            int64_t qs = (int64_t)n_head * hd + 4; /* a padded row stride */
            size_t qn = (size_t)n_seq * qs;
            float *q = malloc(qn * 4);
            test_fill_normal(q, qn, 2.0f, 5000 + si);
            float scale = 1.0f / sqrtf((float)hd);
            float *dq = dup_to_dev(q, qn * 4), *dout = dev_alloc(qn * 4);
            int32_t *dpos = dup_to_dev(pos, sizeof pos);
            size_t sb = cuda_attention_scratch_bytes(&c.dev, n_head, n_seq, max_ctx);
            void *scratch = NULL;
            CK(cudaMalloc(&scratch, sb));
            CK(cudaMemset(scratch, 0, sb));
            float *got = malloc(qn * 4), *again = malloc(qn * 4), *plain = malloc(qn * 4);
            float *ref = malloc((size_t)n_head * hd * 4);
            OK(cuda_attention(&c.dev, c.pages_per, dpos, n_seq, 1, max_ctx, dq, qs, n_head, scale,
                              dout, qs, scratch, sb, 0, &e_));
            to_host(got, dout, qn * 4);
            OK(cuda_attention(&c.dev, c.pages_per, dpos, n_seq, 1, max_ctx, dq, qs, n_head, scale,
                              dout, qs, scratch, sb, 0, &e_));
            to_host(again, dout, qn * 4);
            OK(cuda_attention_plain(&c.dev, c.pages_per, dpos, n_seq, 1, dq, qs, n_head, scale,
                                    dout, qs, 0, &e_));
            to_host(plain, dout, qn * 4);
            for (int s = 0; s < n_seq; s++) {
                cpu_ref(&c, s, q + s * qs, n_head, pos[s], scale, ref);
                for (int h = 0; h < n_head; h++) {
                    int nan = 0;
                    double ef = head_err(got + s * qs + h * hd, ref + h * hd, hd, &nan);
                    double ep = head_err(plain + s * qs + h * hd, ref + h * hd, hd, &nan);
                    worst_fast = ef > worst_fast ? ef : worst_fast;
                    worst_plain = ep > worst_plain ? ep : worst_plain;
                    ck_assert_msg(!nan && ef <= 4e-3 && ep <= 2e-5,
                                  "decode chunk %d type %d hd %d group %d seq %d (len %d) head "
                                  "%d: fast err %.3g plain err %.3g nan %d",
                                  chunk, type, hd, sh.group, s, len[s], h, ef, ep, nan);
                }
            }
            /* second run: same bits (tickets reset) */
            ck_assert(!memcmp(got, again, qn * 4));
            /* batch invariance: the longest sequence alone, through a
             * one-row page table */
            {
                kv_view one = c.dev;
                one.pages = c.dpages + 3 * c.pages_per;
                OK(cuda_attention(&one, c.pages_per, dpos + 3, 1, 1, max_ctx, dq + 3 * qs, qs,
                                  n_head, scale, dout, qs, scratch, sb, 0, &e_));
                to_host(again, dout, (size_t)qs * 4);
                ck_assert(!memcmp(again, got + 3 * qs, (size_t)n_head * hd * 4));
            }
            cudaFree(scratch);
            cudaFree(dq);
            cudaFree(dout);
            cudaFree(dpos);
            free(q);
            free(got);
            free(again);
            free(plain);
            free(ref);
            cache_free(&c);
        }
    }
    cuda_attention_set_chunk(0);
    printf("cuda_attention decode: worst error fast %.3g, plain %.3g (of max |ref|)\n", worst_fast,
           worst_plain);
}
END_TEST

/* Prefill of n tokens at p0..p0+n-1 against cpu_attention, and bit for bit
 * against decode of each token and against a two-part prefill. */
START_TEST(prefill_matches_cpu_and_decode)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    struct {
        int p0, n;
    } runs[] = {{0, 37}, {250, 20}, {1000, 70}, {2040, 9}};
    double worst = 0.0;
    for (int chunk = 0; chunk <= 64; chunk += 64)
    for (int type = 0; type <= TYPE_NL_BIG; type++) {
        cuda_attention_set_chunk(chunk);
        for (size_t si = 0; si < sizeof fast_shapes / sizeof fast_shapes[0]; si++) {
            if (test_small() && si != 0 && si != 2) /* group 4 and 3, hd 128 and 64 */
                continue;
            if (type >= TYPE_NL_BIG && si != 0 && si != 2)
                continue;
            shape sh = fast_shapes[si];
            int n_head = sh.n_kv * sh.group, hd = sh.hd;
            for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                if (hd == 256 && ri == 3)
                    continue;
                int p0 = runs[ri].p0, n = runs[ri].n, len = p0 + n;
                att_cache c;
                cache_make(&c, case_kv(type), sh.n_kv, hd, 1, &len,
                           900 + si + 10 * ri + 100 * type);
                int64_t qs = (int64_t)n_head * hd;
                size_t qn = (size_t)n * qs;
                float *q = malloc(qn * 4);
                test_fill_normal(q, qn, 2.0f, 7000 + si + 10 * ri);
                float scale = 1.0f / sqrtf((float)hd);
                float *dq = dup_to_dev(q, qn * 4), *dout = dev_alloc(qn * 4);
                int32_t p0v = p0;
                int32_t *dp0 = dup_to_dev(&p0v, 4);
                float *got = malloc(qn * 4), *other = malloc(qn * 4);
                float *ref = malloc((size_t)qs * 4);
                OK(cuda_attention(&c.dev, c.pages_per, dp0, 1, n, len, dq, qs, n_head, scale, dout,
                                  qs, NULL, 0, 0, &e_));
                to_host(got, dout, qn * 4);
                for (int i = 0; i < n; i++) {
                    cpu_ref(&c, 0, q + i * qs, n_head, p0 + i, scale, ref);
                    for (int h = 0; h < n_head; h++) {
                        int nan = 0;
                        double e = head_err(got + i * qs + h * hd, ref + h * hd, hd, &nan);
                        worst = e > worst ? e : worst;
                        ck_assert_msg(!nan && e <= 4e-3,
                                      "prefill type %d hd %d group %d p0 %d n %d token %d head %d: "
                                      "err %.3g nan %d",
                                      type, hd, sh.group, p0, n, i, h, e, nan);
                    }
                }
                /* two-part prefill: same bits */
                int n1 = n / 3 + 1;
                int32_t p1v = p0 + n1;
                int32_t *dp1 = dup_to_dev(&p1v, 4);
                OK(cuda_attention(&c.dev, c.pages_per, dp0, 1, n1, len, dq, qs, n_head, scale, dout,
                                  qs, NULL, 0, 0, &e_));
                OK(cuda_attention(&c.dev, c.pages_per, dp1, 1, n - n1, len, dq + n1 * qs, qs,
                                  n_head, scale, dout + n1 * qs, qs, NULL, 0, 0, &e_));
                to_host(other, dout, qn * 4);
                ck_assert_msg(!memcmp(other, got, qn * 4), "prefill chunking changed bits");
                /* decode of each token (split launch sized for 4096): same bits */
                const int max_ctx = 4096;
                size_t sb = cuda_attention_scratch_bytes(&c.dev, n_head, 1, max_ctx);
                void *scratch = NULL;
                CK(cudaMalloc(&scratch, sb));
                CK(cudaMemset(scratch, 0, sb));
                int32_t *dpi = dev_alloc(4);
                for (int i = 0; i < n; i++) {
                    int32_t pi = p0 + i;
                    CK(cudaMemcpy(dpi, &pi, 4, cudaMemcpyHostToDevice));
                    OK(cuda_attention(&c.dev, c.pages_per, dpi, 1, 1, max_ctx, dq + i * qs, qs,
                                      n_head, scale, dout + i * qs, qs, scratch, sb, 0, &e_));
                }
                to_host(other, dout, qn * 4);
                for (int i = 0; i < n; i++)
                    ck_assert_msg(!memcmp(other + i * qs, got + i * qs, (size_t)qs * 4),
                                  "decode vs prefill bits: type %d hd %d group %d p0 %d token %d",
                                  type, hd, sh.group, p0, i);
                cudaFree(scratch);
                cudaFree(dpi);
                cudaFree(dp1);
                cudaFree(dq);
                cudaFree(dout);
                cudaFree(dp0);
                free(q);
                free(got);
                free(other);
                free(ref);
                cache_free(&c);
            }
        }
    }
    cuda_attention_set_chunk(0);
    printf("cuda_attention prefill: worst error %.3g (of max |ref|)\n", worst);
}
END_TEST

/* Shapes the fast kernel does not take run the plain one. */
START_TEST(plain_fallback_shapes)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const shape odd[] = {{96, 2, 2}, {64, 1, 16}};
    for (int type = 0; type <= KV_K8V4NL; type++) {
        for (int si = 0; si < 2; si++) {
            shape sh = odd[si];
            int n_head = sh.n_kv * sh.group, hd = sh.hd, len = 600, n = 3;
            att_cache c;
            cache_make(&c, type, sh.n_kv, hd, 1, &len, 4242 + si);
            int64_t qs = (int64_t)n_head * hd;
            float *q = malloc((size_t)n * qs * 4), *got = malloc((size_t)n * qs * 4);
            float *ref = malloc((size_t)qs * 4);
            test_fill_normal(q, (size_t)n * qs, 2.0f, 99 + si);
            int32_t p0 = len - n;
            float scale = 1.0f / sqrtf((float)hd);
            float *dq = dup_to_dev(q, (size_t)n * qs * 4), *dout = dev_alloc((size_t)n * qs * 4);
            int32_t *dp0 = dup_to_dev(&p0, 4);
            OK(cuda_attention(&c.dev, c.pages_per, dp0, 1, n, len, dq, qs, n_head, scale, dout, qs,
                              NULL, 0, 0, &e_));
            to_host(got, dout, (size_t)n * qs * 4);
            for (int i = 0; i < n; i++) {
                cpu_ref(&c, 0, q + i * qs, n_head, p0 + i, scale, ref);
                for (int h = 0; h < n_head; h++) {
                    int nan = 0;
                    double e = head_err(got + i * qs + h * hd, ref + h * hd, hd, &nan);
                    ck_assert_msg(!nan && e <= 2e-5, "plain hd %d group %d: err %.3g", hd,
                                  sh.group, e);
                }
            }
            cudaFree(dq);
            cudaFree(dout);
            cudaFree(dp0);
            free(q);
            free(got);
            free(ref);
            cache_free(&c);
        }
    }
}
END_TEST

static Suite *cuda_attention_suite(void)
{
    Suite *s = suite_create("cuda_attention");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, decode_matches_cpu);
    tcase_add_test(tc, prefill_matches_cpu_and_decode);
    tcase_add_test(tc, plain_fallback_shapes);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_attention_needs_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *cuda_attention_suite(void)
{
    Suite *s = suite_create("cuda_attention");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cuda_attention_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_attention_suite)
