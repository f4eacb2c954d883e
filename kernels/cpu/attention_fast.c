/* attention_fast.c: cpu_attention_fast, attention over the paged KV cache
 * without converting the cache (kernels/ops.h), beside cpu_attention, the
 * float64 reference in kv.c.
 *
 * What makes it fast against the reference:
 *  - no per-token dequantization into a buffer: a k8v4 key is dotted with
 *    the query straight from its int8 codes (one fp16 scale per 32 codes:
 *    s = sum_b d_b * sum_i q_i k_i), and a value is added into the output
 *    straight from its Q4_0 nibbles (p * d_b folded into one multiplier;
 *    k8v4nl's nibbles index the IQ4_NL levels instead, one table lookup);
 *    an f16 cache is read with F16C;
 *  - float instead of double, and one exp per token: the softmax is online
 *    page by page (256 tokens): the page's scores first, then its maximum,
 *    one rescale of the accumulator per page, then exp and the V sum;
 *  - query heads spread over the thread pool (kernels/cpu/threadpool.c)
 *    when the work is large enough to pay for the hand-off.
 *
 * Two twins with the same algorithm: attn_head_scalar (plain C, any CPU)
 * and attn_head_avx2 (AVX2/FMA/F16C, run only after fast_cpu_avx2_ok()).
 * They differ only in the order of the float sums inside a dot product:
 * test/test_attention_fast.c holds both against the reference.
 *
 * Invariance (ops.h): a head's result depends only on q, the cache and
 * n_ctx, never on the thread that computes it or on other rows, so chunked
 * prompts and batched decode steps give the same bits. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "model/quant.h"

/* tokens x heads x head_dim below which one thread runs it: a decode step
 * of the demo model at 16 tokens of context (9 heads of 64) already gains
 * from the second thread (2 threads, 170 -> 175 tok/s) */
#define ATTN_INLINE_WORK (1 << 13)

/* Where head kvh's token span of logical page pg starts, in tokens. */
static size_t page_base(const kv_view *kv, int32_t pg, int kvh)
{
    return ((size_t)kv->pages[pg] * kv->n_kv_head + (size_t)kvh) * KV_PAGE;
}

/* ---- plain C ------------------------------------------------------------ */

static float key_dot_scalar(const kv_view *kv, size_t tok, const float *q)
{
    const int hd = kv->head_dim;
    float s = 0.0f;
    if (kv->type == KV_F16) {
        const uint16_t *k = kv->kh + tok * hd;
        for (int i = 0; i < hd; i++)
            s += q[i] * fp16_to_f32(k[i]);
        return s;
    }
    const int8_t *k = kv->kq + tok * hd;
    const uint16_t *d = kv->kd + tok * (hd / 32);
    for (int b = 0; b < hd / 32; b++) {
        float bs = 0.0f;
        for (int i = 0; i < 32; i++)
            bs += q[32 * b + i] * (float)k[32 * b + i];
        s += fp16_to_f32(d[b]) * bs;
    }
    return s;
}

static void value_add_scalar(const kv_view *kv, size_t tok, float p, float *acc)
{
    const int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const uint16_t *v = kv->vh + tok * hd;
        for (int i = 0; i < hd; i++)
            acc[i] += p * fp16_to_f32(v[i]);
        return;
    }
    const uint8_t *v = kv->vq + tok * (hd / 2);
    const uint16_t *d = kv->vd + tok * (hd / 32);
    if (kv->type == KV_K8V4NL) { /* codes index the IQ4_NL levels */
        for (int b = 0; b < hd / 32; b++) {
            const float pd = p * fp16_to_f32(d[b]);
            for (int j = 0; j < 16; j++) {
                acc[32 * b + j] += pd * (float)iq4nl_values[v[16 * b + j] & 15];
                acc[32 * b + j + 16] += pd * (float)iq4nl_values[v[16 * b + j] >> 4];
            }
        }
        return;
    }
    for (int b = 0; b < hd / 32; b++) {
        const float pd = p * fp16_to_f32(d[b]);
        for (int j = 0; j < 16; j++) {
            acc[32 * b + j] += pd * (float)((v[16 * b + j] & 15) - 8);
            acc[32 * b + j + 16] += pd * (float)((v[16 * b + j] >> 4) - 8);
        }
    }
}

static void attn_head_scalar(const float *q, const kv_view *kv, int kvh, int32_t t_lo, int32_t n_ctx,
                             float scale, float *out)
{
    const int hd = kv->head_dim;
    float acc[512], sc[KV_PAGE];
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)hd * sizeof *acc);
    /* keys t_lo..n_ctx-1: from t_lo's page, skipping its tokens before t_lo */
    for (int32_t t0 = t_lo / KV_PAGE * KV_PAGE; t0 < n_ctx; t0 += KV_PAGE) {
        const int nt = n_ctx - t0 < KV_PAGE ? n_ctx - t0 : KV_PAGE;
        const int ts = t_lo > t0 ? t_lo - t0 : 0;
        const size_t base = page_base(kv, t0 / KV_PAGE, kvh);
        float mp = -INFINITY;
        for (int t = ts; t < nt; t++) {
            sc[t] = scale * key_dot_scalar(kv, base + t, q);
            mp = sc[t] > mp ? sc[t] : mp;
        }
        if (mp > m) {
            const float corr = expf(m - mp); /* 0 on the first page */
            for (int i = 0; i < hd; i++)
                acc[i] *= corr;
            l *= corr;
            m = mp;
        }
        for (int t = ts; t < nt; t++) {
            const float p = expf(sc[t] - m);
            l += p;
            value_add_scalar(kv, base + t, p, acc);
        }
    }
    const float il = 1.0f / l;
    for (int i = 0; i < hd; i++)
        out[i] = acc[i] * il;
}

/* ---- AVX2 --------------------------------------------------------------- */

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

AVX2_INLINE float key_dot_avx2(const kv_view *kv, size_t tok, const float *q)
{
    const int hd = kv->head_dim;
    __m256 s = _mm256_setzero_ps();
    if (kv->type == KV_F16) {
        const uint16_t *k = kv->kh + tok * hd;
        for (int i = 0; i < hd; i += 8)
            s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s);
        return hsum_avx2(s);
    }
    const int8_t *k = kv->kq + tok * hd;
    const uint16_t *d = kv->kd + tok * (hd / 32);
    for (int b = 0; b < hd / 32; b++) {
        __m256 bs = _mm256_setzero_ps();
        for (int g = 0; g < 4; g++) {
            const __m128i k8 = _mm_loadl_epi64((const __m128i *)(k + 32 * b + 8 * g));
            bs = _mm256_fmadd_ps(_mm256_loadu_ps(q + 32 * b + 8 * g),
                                 _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(k8)), bs);
        }
        s = _mm256_fmadd_ps(bs, _mm256_set1_ps(ld_fp16_avx2((const uint8_t *)(d + b))), s);
    }
    return hsum_avx2(s);
}

AVX2_INLINE void value_add_avx2(const kv_view *kv, size_t tok, float p, float *acc)
{
    const int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const uint16_t *v = kv->vh + tok * hd;
        const __m256 pv = _mm256_set1_ps(p);
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv,
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))),
                _mm256_loadu_ps(acc + i)));
        return;
    }
    const uint8_t *v = kv->vq + tok * (hd / 2);
    const uint16_t *d = kv->vd + tok * (hd / 32);
    const __m128i m4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const int nl = kv->type == KV_K8V4NL; /* codes index the IQ4_NL levels: one shuffle */
    const __m128i tab = _mm_loadu_si128((const __m128i *)iq4nl_values);
    for (int b = 0; b < hd / 32; b++) {
        const __m256 pd = _mm256_set1_ps(p * ld_fp16_avx2((const uint8_t *)(d + b)));
        const __m128i x = _mm_loadu_si128((const __m128i *)(v + 16 * b));
        const __m128i cl = _mm_and_si128(x, m4), ch = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
        const __m128i lo = nl ? _mm_shuffle_epi8(tab, cl) : _mm_sub_epi8(cl, eight);
        const __m128i hi = nl ? _mm_shuffle_epi8(tab, ch) : _mm_sub_epi8(ch, eight);
        const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int g = 0; g < 4; g++) {
            float *a = acc + 32 * b + 8 * g;
            const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[g]));
            _mm256_storeu_ps(a, _mm256_fmadd_ps(pd, w, _mm256_loadu_ps(a)));
        }
    }
}

AVX2_FN static void attn_head_avx2(const float *q, const kv_view *kv, int kvh, int32_t t_lo, int32_t n_ctx,
                                   float scale, float *out)
{
    const int hd = kv->head_dim;
    float acc[512], sc[KV_PAGE];
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)hd * sizeof *acc);
    /* keys t_lo..n_ctx-1: from t_lo's page, skipping its tokens before t_lo */
    for (int32_t t0 = t_lo / KV_PAGE * KV_PAGE; t0 < n_ctx; t0 += KV_PAGE) {
        const int nt = n_ctx - t0 < KV_PAGE ? n_ctx - t0 : KV_PAGE;
        const int ts = t_lo > t0 ? t_lo - t0 : 0;
        const size_t base = page_base(kv, t0 / KV_PAGE, kvh);
        float mp = -INFINITY;
        for (int t = ts; t < nt; t++) {
            sc[t] = scale * key_dot_avx2(kv, base + t, q);
            mp = sc[t] > mp ? sc[t] : mp;
        }
        if (mp > m) {
            const __m256 corr = _mm256_set1_ps(expf(m - mp));
            for (int i = 0; i < hd; i += 8)
                _mm256_storeu_ps(acc + i, _mm256_mul_ps(corr, _mm256_loadu_ps(acc + i)));
            l *= expf(m - mp);
            m = mp;
        }
        for (int t = ts; t < nt; t++) {
            const float p = expf(sc[t] - m);
            l += p;
            value_add_avx2(kv, base + t, p, acc);
        }
    }
    const __m256 il = _mm256_set1_ps(1.0f / l);
    for (int i = 0; i < hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(il, _mm256_loadu_ps(acc + i)));
}
#endif

/* ---- dispatch ----------------------------------------------------------- */

typedef void (*attn_head_fn)(const float *q, const kv_view *kv, int kvh, int32_t t_lo,
                             int32_t n_ctx, float scale, float *out);

typedef struct attn_job {
    attn_head_fn head;
    const float *q;
    const kv_view *kv;
    int group, hd;
    int32_t t_lo, n_ctx;
    float scale;
    float *out;
} attn_job;

static void attn_task(void *ctx, int64_t h)
{
    const attn_job *j = ctx;
    j->head(j->q + h * j->hd, j->kv, (int)h / j->group, j->t_lo, j->n_ctx, j->scale,
            j->out + h * j->hd);
}

static void attn_run(const float *q, int n_head, const kv_view *kv, int32_t t_lo, int32_t n_ctx,
                     float scale, float *out, int avx2)
{
    if (t_lo < 0)
        t_lo = 0;
    attn_job j = {
        .head = attn_head_scalar, .q = q, .kv = kv, .group = n_head / kv->n_kv_head,
        .hd = kv->head_dim, .t_lo = t_lo, .n_ctx = n_ctx, .scale = scale, .out = out,
    };
#if defined(__x86_64__)
    if (avx2 && fast_cpu_avx2_ok())
        j.head = attn_head_avx2;
#else
    (void)avx2;
#endif
    if ((int64_t)(n_ctx - t_lo) * n_head * kv->head_dim < ATTN_INLINE_WORK) {
        for (int h = 0; h < n_head; h++)
            attn_task(&j, h);
        return;
    }
    tp_parallel_for(n_head, attn_task, &j);
}

void cpu_attention_fast_isa(const float *q, int n_head, const kv_view *kv, int32_t n_ctx,
                            float scale, float *out, int avx2)
{
    attn_run(q, n_head, kv, 0, n_ctx, scale, out, avx2);
}

void cpu_attention_fast_window_isa(const float *q, int n_head, const kv_view *kv, int32_t t0,
                                   int32_t n_ctx, float scale, float *out, int avx2)
{
    attn_run(q, n_head, kv, t0, n_ctx, scale, out, avx2);
}

void cpu_attention_fast(const float *q, int n_head, const kv_view *kv, int32_t n_ctx,
                        float scale, float *out)
{
    attn_run(q, n_head, kv, 0, n_ctx, scale, out, cpu_fast_isa());
}

void cpu_attention_fast_window(const float *q, int n_head, const kv_view *kv, int32_t t0,
                               int32_t n_ctx, float scale, float *out)
{
    attn_run(q, n_head, kv, t0, n_ctx, scale, out, cpu_fast_isa());
}
