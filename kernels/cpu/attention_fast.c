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
 *  - the AVX2 twin decodes a key or value once for the query heads that
 *    share it (grouped-query attention: Qwen2.5 0.5B's 7, Llama 3 8B's 4)
 *    and meets it with each head's query in turn;
 *  - query heads spread over the thread pool (kernels/cpu/threadpool.c)
 *    when the work is large enough to pay for the hand-off, in groups
 *    that still give every thread a task.
 *
 * Two twins with the same algorithm: attn_head_scalar (plain C, any CPU)
 * and attn_group_avx2 (AVX2/FMA/F16C, run only after fast_cpu_avx2_ok()),
 * which gives each head the bits it gets alone, whatever the group.
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
/* query heads whose keys and values one AVX2 task decodes once (GQA: the
 * heads of one KV head; 16 x 512 floats of accumulators on the stack) */
#define ATTN_GROUP_MAX 16

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

/* A token's key or value decoded to floats once for every query head of
 * its group (int8 codes, Q4_0 nibbles - 8, IQ4_NL levels and f16 are all
 * exact in float), with its per-32 scales; each head then performs the
 * operations of one head at a time on them, in their order (the key: the
 * product of each 8 q by 8 codes into a block sum, the block sum times
 * its scale into the dot, the 8 lanes summed; the value: p times the
 * block's scale, one FMA per 8), so grouping the heads changes no bit. */
AVX2_INLINE void key_decode_avx2(const kv_view *kv, size_t tok, float *kf, float *kd)
{
    const int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const uint16_t *k = kv->kh + tok * hd;
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(kf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))));
        return;
    }
    const int8_t *k = kv->kq + tok * hd;
    const uint16_t *d = kv->kd + tok * (hd / 32);
    for (int i = 0; i < hd; i += 8)
        _mm256_storeu_ps(kf + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                     _mm_loadl_epi64((const __m128i *)(k + i)))));
    for (int b = 0; b < hd / 32; b++)
        kd[b] = ld_fp16_avx2((const uint8_t *)(d + b));
}

AVX2_INLINE float key_dot_avx2(const kv_view *kv, const float *q, const float *kf, const float *kd)
{
    const int hd = kv->head_dim;
    __m256 s = _mm256_setzero_ps();
    if (kv->type == KV_F16) {
        for (int i = 0; i < hd; i += 8)
            s = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kf + i), s);
        return hsum_avx2(s);
    }
    for (int b = 0; b < hd / 32; b++) {
        __m256 bs = _mm256_setzero_ps();
        for (int g = 0; g < 4; g++)
            bs = _mm256_fmadd_ps(_mm256_loadu_ps(q + 32 * b + 8 * g),
                                 _mm256_loadu_ps(kf + 32 * b + 8 * g), bs);
        s = _mm256_fmadd_ps(bs, _mm256_set1_ps(kd[b]), s);
    }
    return hsum_avx2(s);
}

/* vf in element order: a block's low nibbles are elements 0..15, its high
 * nibbles 16..31. */
AVX2_INLINE void value_decode_avx2(const kv_view *kv, size_t tok, float *vf, float *vd)
{
    const int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const uint16_t *v = kv->vh + tok * hd;
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(vf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))));
        return;
    }
    const uint8_t *v = kv->vq + tok * (hd / 2);
    const uint16_t *d = kv->vd + tok * (hd / 32);
    const __m128i m4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const int nl = kv->type == KV_K8V4NL; /* codes index the IQ4_NL levels: one shuffle */
    const __m128i tab = _mm_loadu_si128((const __m128i *)iq4nl_values);
    for (int b = 0; b < hd / 32; b++) {
        vd[b] = ld_fp16_avx2((const uint8_t *)(d + b));
        const __m128i x = _mm_loadu_si128((const __m128i *)(v + 16 * b));
        const __m128i cl = _mm_and_si128(x, m4), ch = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
        const __m128i lo = nl ? _mm_shuffle_epi8(tab, cl) : _mm_sub_epi8(cl, eight);
        const __m128i hi = nl ? _mm_shuffle_epi8(tab, ch) : _mm_sub_epi8(ch, eight);
        const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int g = 0; g < 4; g++)
            _mm256_storeu_ps(vf + 32 * b + 8 * g, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[g])));
    }
}

AVX2_INLINE void value_add_avx2(const kv_view *kv, const float *vf, const float *vd, float p,
                                float *acc)
{
    const int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const __m256 pv = _mm256_set1_ps(p);
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(vf + i),
                                                      _mm256_loadu_ps(acc + i)));
        return;
    }
    for (int b = 0; b < hd / 32; b++) {
        const __m256 pd = _mm256_set1_ps(p * vd[b]);
        for (int g = 0; g < 4; g++) {
            float *a = acc + 32 * b + 8 * g;
            _mm256_storeu_ps(a, _mm256_fmadd_ps(pd, _mm256_loadu_ps(vf + 32 * b + 8 * g),
                                                _mm256_loadu_ps(a)));
        }
    }
}

/* ng query heads that share KV head kvh (q and out: ng x head_dim), each
 * with the operations of attn_head_scalar's loop in float; the keys and
 * values are decoded once for all of them. */
AVX2_FN static void attn_group_avx2(const float *q, int ng, const kv_view *kv, int kvh,
                                    int32_t t_lo, int32_t n_ctx, float scale, float *out)
{
    const int hd = kv->head_dim;
    float acc[ATTN_GROUP_MAX][512], sc[ATTN_GROUP_MAX][KV_PAGE];
    float m[ATTN_GROUP_MAX], l[ATTN_GROUP_MAX], mp[ATTN_GROUP_MAX];
    float kf[512], vf[512], kd[16], vd[16];
    for (int g = 0; g < ng; g++) {
        memset(acc[g], 0, (size_t)hd * sizeof **acc);
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    /* keys t_lo..n_ctx-1: from t_lo's page, skipping its tokens before t_lo */
    for (int32_t t0 = t_lo / KV_PAGE * KV_PAGE; t0 < n_ctx; t0 += KV_PAGE) {
        const int nt = n_ctx - t0 < KV_PAGE ? n_ctx - t0 : KV_PAGE;
        const int ts = t_lo > t0 ? t_lo - t0 : 0;
        const size_t base = page_base(kv, t0 / KV_PAGE, kvh);
        for (int g = 0; g < ng; g++)
            mp[g] = -INFINITY;
        for (int t = ts; t < nt; t++) {
            key_decode_avx2(kv, base + t, kf, kd);
            for (int g = 0; g < ng; g++) {
                sc[g][t] = scale * key_dot_avx2(kv, q + (size_t)g * hd, kf, kd);
                mp[g] = sc[g][t] > mp[g] ? sc[g][t] : mp[g];
            }
        }
        for (int g = 0; g < ng; g++)
            if (mp[g] > m[g]) {
                const __m256 corr = _mm256_set1_ps(expf(m[g] - mp[g]));
                for (int i = 0; i < hd; i += 8)
                    _mm256_storeu_ps(acc[g] + i, _mm256_mul_ps(corr, _mm256_loadu_ps(acc[g] + i)));
                l[g] *= expf(m[g] - mp[g]);
                m[g] = mp[g];
            }
        for (int t = ts; t < nt; t++) {
            value_decode_avx2(kv, base + t, vf, vd);
            for (int g = 0; g < ng; g++) {
                const float p = expf(sc[g][t] - m[g]);
                l[g] += p;
                value_add_avx2(kv, vf, vd, p, acc[g]);
            }
        }
    }
    for (int g = 0; g < ng; g++) {
        const __m256 il = _mm256_set1_ps(1.0f / l[g]);
        for (int i = 0; i < hd; i += 8)
            _mm256_storeu_ps(out + (size_t)g * hd + i, _mm256_mul_ps(il, _mm256_loadu_ps(acc[g] + i)));
    }
}
#endif

/* ---- dispatch ----------------------------------------------------------- */

typedef struct attn_job {
    int avx2;
    const float *q;
    const kv_view *kv;
    int group, hd;
    int ng; /* heads a task (AVX2: a divisor of group, at most ATTN_GROUP_MAX) */
    int32_t t_lo, n_ctx;
    float scale;
    float *out;
} attn_job;

/* Task k: query heads k ng .. k ng + ng - 1, all of one KV head. */
static void attn_task(void *ctx, int64_t k)
{
    const attn_job *j = ctx;
    const int64_t h0 = k * j->ng;
    const int kvh = (int)h0 / j->group;
#if defined(__x86_64__)
    if (j->avx2) {
        attn_group_avx2(j->q + h0 * j->hd, j->ng, j->kv, kvh, j->t_lo, j->n_ctx, j->scale,
                        j->out + h0 * j->hd);
        return;
    }
#endif
    for (int64_t h = h0; h < h0 + j->ng; h++)
        attn_head_scalar(j->q + h * j->hd, j->kv, kvh, j->t_lo, j->n_ctx, j->scale,
                         j->out + h * j->hd);
}

/* Heads a task: the largest divisor of the group that ATTN_GROUP_MAX
 * allows and that still leaves a task for every thread (keys and values
 * are decoded once per task: fewer, larger tasks save decodes, more keep
 * every thread busy). */
static int attn_task_heads(int n_head, int group, int threads)
{
    for (int ng = group < ATTN_GROUP_MAX ? group : ATTN_GROUP_MAX; ng > 1; ng--)
        if (group % ng == 0 && n_head / ng >= threads)
            return ng;
    return 1;
}

static void attn_run(const float *q, int n_head, const kv_view *kv, int32_t t_lo, int32_t n_ctx,
                     float scale, float *out, int avx2)
{
    if (t_lo < 0)
        t_lo = 0;
    attn_job j = {
        .avx2 = 0, .q = q, .kv = kv, .group = n_head / kv->n_kv_head, .ng = 1,
        .hd = kv->head_dim, .t_lo = t_lo, .n_ctx = n_ctx, .scale = scale, .out = out,
    };
#if defined(__x86_64__)
    j.avx2 = avx2 && fast_cpu_avx2_ok();
#else
    (void)avx2;
#endif
    const int inline_run = (int64_t)(n_ctx - t_lo) * n_head * kv->head_dim < ATTN_INLINE_WORK;
    if (j.avx2)
        j.ng = attn_task_heads(n_head, j.group, inline_run ? 1 : tp_threads());
    if (inline_run) {
        for (int k = 0; k < n_head / j.ng; k++)
            attn_task(&j, k);
        return;
    }
    tp_parallel_for(n_head / j.ng, attn_task, &j);
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
