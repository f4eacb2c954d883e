/* kv.c: CPU reference for the k8v4 KV cache rows (kernels/ops.h).
 *
 * K uses ggml's Q8_0 recipe and V its Q4_0 recipe (doc/formats.md §3.1, §3.2),
 * bit for bit, with the fp16 scales stored apart from the quants. */
#include "kernels/ops.h"

#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/kv_block.h"

#include <math.h>
#include <stddef.h>

#include "model/quant.h"

/* Codes for every float input.  A NaN or Inf activation (from NaN weights,
 * say) used to reach a float-to-int conversion out of range, which C leaves
 * undefined, and then a left shift of the negative result.  Each code is
 * clamped in float first: finite inputs keep ggml's recipe bit for bit
 * (their codes already lie in range); a NaN element gets the code of zero;
 * an Inf element makes the scale Inf and every code that of zero (x * 0, or
 * Inf * 0 = NaN).  Garbage in, a defined block out; kernels/cuda/kv.cu does
 * the same. */
static int8_t k8_code(float r) /* r = roundf(x / d) */
{
    if (!(r == r))
        return 0;
    return (int8_t)(r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r);
}

static int v4_code(float r) /* r = x / d + 8.5, truncated */
{
    if (!(r == r))
        return 8;
    return (int)(r < 0.0f ? 0.0f : r > 15.0f ? 15.0f : r);
}

/* Q8_0: d = amax/127, q = roundf(x / d). */
void cpu_quant_k8(const float *x, int n, int8_t *q, uint16_t *d)
{
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int j = 0; j < 32; j++)
            q[32 * b + j] = k8_code(roundf(xb[j] * id));
        d[b] = f32_to_fp16(db);
    }
}

/* Q4_0: the element of largest magnitude (sign kept, first on ties) maps to
 * code 0; d = v / -8; code = min(15, trunc(x/d + 8.5)).  Element j sits in
 * the low nibble of byte j, element j+16 in the high nibble. */
void cpu_quant_v4(const float *x, int n, uint8_t *q, uint16_t *d)
{
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax;
        const float v = kv_block_extreme(xb, 32, &amax);
        float db = v / -8.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int j = 0; j < 16; j++) {
            int lo = v4_code(xb[j] * id + 8.5f);
            int hi = v4_code(xb[j + 16] * id + 8.5f);
            q[16 * b + j] = (uint8_t)(lo | (hi << 4));
        }
        d[b] = f32_to_fp16(db);
    }
}

/* V with the IQ4_NL levels (model/quant.h, iq4nl_values): after the
 * rotation a block of V is close to Gaussian, and these non-uniform levels
 * (denser near zero) fit it better than Q4_0's uniform ones.  The scale is
 * searched as ggml's IQ4_NL quantizer does: 15 candidates map the element
 * of largest |x| to -127 + t (t = -7..7; a negative scale lets either sign
 * take the table's wider end), each candidate's codes give the
 * least-squares scale d = sum(l x) / sum(l^2), and the candidate with the
 * largest d * sum(l x) (the least squared error) wins.  The fp16 d keeps
 * 7 significant bits (fp16_keep7) and at most 56.5 in magnitude
 * (kv_nl_scale: elements past 127 x 56.5 saturate), and the codes are then
 * re-chosen for that stored d (a NaN element counts as 0 in the sums and gets code 8; an
 * Inf makes d = 0).  Every step is a plain IEEE operation
 * and the sums run in the order of a 32-lane butterfly (kv_sum32), so
 * kernels/cuda/kv.cu reproduces the block bit for bit.  Layout as Q4_0. */
static const float nl_mid[15] = { /* midpoints of iq4nl_values */
    -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
    7.0f, 19.0f, 31.5f, 45.5f, 61.0f, 79.0f, 101.0f,
};

/* The nearest level's index (the lower one at a midpoint); NaN -> 8. */
int kv_nl_code(float r)
{
    if (!(r == r))
        return 8;
    int c = 0;
    for (int i = 0; i < 15; i++)
        c += r > nl_mid[i];
    return c;
}

/* Sum of 32 floats in the order of a warp's xor butterfly (offsets 16, 8,
 * 4, 2, 1), which the card's kernel uses. */
static float kv_sum32(float *a)
{
    for (int off = 16; off; off >>= 1)
        for (int i = 0; i < off; i++)
            a[i] = a[i] + a[i + off];
    return a[0];
}

/* fp16 bits h rounded to 7 significant bits (the low 4 of the 10 mantissa
 * bits cleared, round half to even; a finite value never rounds to Inf).
 * With such a scale d, 1152 d is exact in fp16 (9 times a 7-bit mantissa
 * fits in 11 bits) for |d| < 56.9, so the card's attention decodes a level
 * l stored as the fp16 mantissa 1152 + l with one FMA, (1152 + l) d -
 * 1152 d, which is l d under one rounding, without a bias term to take
 * off (doc/cuda-attention.md, "The cache the kernels read").  The scale
 * moves by at most 2^-7 of itself; the codes are chosen after it.
 * kernels/cuda/kv.cu has the same function. */
uint16_t fp16_keep7(uint16_t h)
{
    uint32_t mag = h & 0x7fffu;
    if (mag >= 0x7c00u)
        return h; /* Inf, NaN: not a scale this quantizer writes */
    mag = (mag + 7u + ((mag >> 4) & 1u)) & ~0xfu;
    if (mag >= 0x7c00u)
        mag = 0x7bf0u;
    return (uint16_t)((h & 0x8000u) | mag);
}

uint16_t kv_nl_scale(uint16_t h)
{
    h = fp16_keep7(h);
    return (h & 0x7fffu) > KV_NL_DMAX ? (uint16_t)((h & 0x8000u) | KV_NL_DMAX) : h;
}

void cpu_quant_v4nl(const float *x, int n, uint8_t *q, uint16_t *d)
{
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax;
        const float mx = kv_block_extreme(xb, 32, &amax);
        float best = -1.0f, db = 0.0f;
        if (amax > 0.0f && amax <= 3.0e38f) { /* zero, Inf: d = 0, every code 8 */
            for (int t = -7; t <= 7; t++) {
                float id = (float)(t - 127) / mx, px[32];
                int sqq = 0;
                for (int j = 0; j < 32; j++) {
                    int l = iq4nl_values[kv_nl_code(xb[j] * id)];
                    px[j] = xb[j] == xb[j] ? (float)l * xb[j] : 0.0f; /* NaN: as 0 */
                    sqq += l * l;
                }
                float sqx = kv_sum32(px);
                float dt = sqx / (float)sqq, score = dt * sqx;
                if (score > best) {
                    best = score;
                    db = dt;
                }
            }
        }
        d[b] = kv_nl_scale(f32_to_fp16(db));
        float ds = fp16_to_f32(d[b]);
        float id = ds != 0.0f ? 1.0f / ds : 0.0f;
        for (int j = 0; j < 16; j++) {
            int lo = kv_nl_code(xb[j] * id), hi = kv_nl_code(xb[j + 16] * id);
            q[16 * b + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void cpu_dequant_v4nl(const uint8_t *q, const uint16_t *d, int n, float *x)
{
    for (int b = 0; b < n / 32; b++) {
        float db = fp16_to_f32(d[b]);
        for (int j = 0; j < 16; j++) {
            x[32 * b + j] = db * iq4nl_values[q[16 * b + j] & 15];
            x[32 * b + j + 16] = db * iq4nl_values[q[16 * b + j] >> 4];
        }
    }
}

void cpu_dequant_k8(const int8_t *q, const uint16_t *d, int n, float *x)
{
    for (int i = 0; i < n; i++)
        x[i] = fp16_to_f32(d[i / 32]) * q[i];
}

void cpu_dequant_v4(const uint8_t *q, const uint16_t *d, int n, float *x)
{
    for (int b = 0; b < n / 32; b++) {
        float db = fp16_to_f32(d[b]);
        for (int j = 0; j < 16; j++) {
            x[32 * b + j] = db * ((q[16 * b + j] & 15) - 8);
            x[32 * b + j + 16] = db * ((q[16 * b + j] >> 4) - 8);
        }
    }
}

/* Element offset of (pos, head) in a pool with `per_tok` elements per token:
 * [page][head][KV_PAGE][per_tok]. */
static size_t kv_offset(const kv_view *kv, int32_t pos, int head, int per_tok)
{
    size_t page = (size_t)kv->pages[pos / KV_PAGE];
    size_t slot = ((page * kv->n_kv_head + head) * KV_PAGE) + pos % KV_PAGE;
    return slot * per_tok;
}

void cpu_kv_store(const kv_view *kv, int32_t pos, const float *k, const float *v)
{
    int hd = kv->head_dim;
    float ks[KV_ROT_MAX_DIM]; /* head_dim <= 512 (checked at model load) */
    for (int h = 0; h < kv->n_kv_head; h++) {
        const float *kh = k + (size_t)h * hd, *vh = v + (size_t)h * hd;
        if (kv->kshift) {
            for (int i = 0; i < hd; i++)
                ks[i] = kh[i] - kv->kshift[(size_t)h * hd + i];
            kh = ks;
        }
        if (kv->type == KV_F16) {
            uint16_t *ko = kv->kh + kv_offset(kv, pos, h, hd);
            uint16_t *vo = kv->vh + kv_offset(kv, pos, h, hd);
            for (int i = 0; i < hd; i++) {
                ko[i] = f32_to_fp16(kh[i]);
                vo[i] = f32_to_fp16(vh[i]);
            }
            continue;
        }
        /* the AVX2 twins (kv_avx2.c) give the plain C bits */
        const int avx2 = cpu_fast_isa();
        (avx2 ? cpu_quant_k8_avx2 : cpu_quant_k8)(kh, hd, kv->kq + kv_offset(kv, pos, h, hd),
                                                  kv->kd + kv_offset(kv, pos, h, hd / 32));
        (kv->type == KV_K8V4NL ? (avx2 ? cpu_quant_v4nl_avx2 : cpu_quant_v4nl) : cpu_quant_v4)(
            vh, hd, kv->vq + kv_offset(kv, pos, h, hd / 2), kv->vd + kv_offset(kv, pos, h, hd / 32));
    }
}

/* Dequantize one cached K or V head vector into out[head_dim]. */
static void kv_load(const kv_view *kv, int32_t pos, int head, int want_v, float *out)
{
    int hd = kv->head_dim;
    if (kv->type == KV_F16) {
        const uint16_t *src = (want_v ? kv->vh : kv->kh) + kv_offset(kv, pos, head, hd);
        for (int i = 0; i < hd; i++)
            out[i] = fp16_to_f32(src[i]);
    } else if (!want_v) {
        cpu_dequant_k8(kv->kq + kv_offset(kv, pos, head, hd),
                       kv->kd + kv_offset(kv, pos, head, hd / 32), hd, out);
    } else {
        (kv->type == KV_K8V4NL ? cpu_dequant_v4nl : cpu_dequant_v4)(
            kv->vq + kv_offset(kv, pos, head, hd / 2), kv->vd + kv_offset(kv, pos, head, hd / 32),
            hd, out);
    }
}

/* Plain attention: scores in double, softmax, weighted sum of V.  Memory:
 * n_ctx floats of scores per head (allocated on the stack in chunks is not
 * worth it for a reference; the caller's context bounds it). */
void cpu_attention(const float *q, int n_head, const kv_view *kv, int32_t n_ctx,
                   float scale, float *out)
{
    cpu_attention_window(q, n_head, kv, 0, n_ctx, scale, out);
}

void cpu_attention_window(const float *q, int n_head, const kv_view *kv, int32_t t0,
                          int32_t n_ctx, float scale, float *out)
{
    int hd = kv->head_dim;
    int group = n_head / kv->n_kv_head;
    float kbuf[512], vbuf[512]; /* head_dim <= 512 (checked at model load) */
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + (size_t)h * hd;
        float *oh = out + (size_t)h * hd;
        int kvh = h / group;
        /* Online softmax keeps the reference O(head_dim) in memory. */
        double m = -INFINITY, l = 0.0;
        double acc[512];
        for (int i = 0; i < hd; i++)
            acc[i] = 0.0;
        for (int32_t t = t0 < 0 ? 0 : t0; t < n_ctx; t++) {
            kv_load(kv, t, kvh, 0, kbuf);
            double s = 0.0;
            for (int i = 0; i < hd; i++)
                s += (double)qh[i] * kbuf[i];
            s *= scale;
            kv_load(kv, t, kvh, 1, vbuf);
            double mn = s > m ? s : m;
            double corr = exp(m - mn), p = exp(s - mn);
            l = l * corr + p;
            for (int i = 0; i < hd; i++)
                acc[i] = acc[i] * corr + p * vbuf[i];
            m = mn;
        }
        for (int i = 0; i < hd; i++)
            oh[i] = (float)(acc[i] / l);
    }
}
