/* quantize_k.c: quantizers of the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
 *
 * ggml's reference recipes, step by step, so the bytes equal ggml's (test
 * vectors in test/data/quant_vectors.txt).  Each type has two paths, as in
 * ggml: without importance weights the "reference" one, with them the
 * weighted one that llama-quantize runs when given an imatrix.  Both
 * choose per sub-block a scale (and for Q2_K, Q4_K, Q5_K a min), quantize
 * those to a few bits under one fp16 per 256 elements, then re-derive every
 * code from the stored (rounded) scales, so the codes fit what a decoder
 * will see.  Block layouts: doc/quant.md. */
#include "model/quantize_types.h"

#include <math.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_search.h"

/* ---- shared packing ------------------------------------------------------ */

/* 2-bit codes, four per byte: byte 32h + l holds elements 128h + l, +32,
 * +64, +96 in bit pairs 0-1 .. 6-7 (Q2_K, and Q3_K's low bits). */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 |
                                      L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* Q4_K/Q5_K: eight 6-bit scales and mins in 12 bytes. */
static void pack_scale_min(uint8_t *q, int j, uint8_t ls, uint8_t lm)
{
    if (j < 4) {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = (uint8_t)((ls & 0xf) | (lm & 0xf) << 4);
        q[j - 4] |= (uint8_t)((ls >> 4) << 6);
        q[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

static void unpack_scale_min(const uint8_t *q, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q3_K: sixteen 6-bit scales (stored + 32) in 12 bytes. */
static void pack_q3_scale(uint8_t *q, int j, int l)
{
    if (j < 8)
        q[j] = (uint8_t)(l & 0xf);
    else
        q[j - 8] |= (uint8_t)((l & 0xf) << 4);
    q[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

static int unpack_q3_scale(const uint8_t *q, int j)
{
    int sc = j < 8 ? q[j] & 0xf : q[j - 8] >> 4;
    return (sc | ((q[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

/* sigma^2 of a super-block, times `factor` (1 or 2 by type) */
static float block_sigma2(const float *x, float factor)
{
    float s = 0;
    for (int i = 0; i < QK_K; i++)
        s += x[i] * x[i];
    return factor * s / QK_K;
}

/* ---- Q2_K: 84 bytes = scales[16] | qs[64] | d | dmin ------------------- */

static void q2_k_finish(const float *x, uint8_t *b, uint8_t *L)
{
    uint16_t dh, mh;
    memcpy(&dh, b + 80, 2);
    memcpy(&mh, b + 82, 2);
    const float dd = fp16_to_f32(dh), dm = fp16_to_f32(mh);
    for (int j = 0; j < 16; j++) {
        const float d = dd * (b[j] & 0xf);
        if (!d)
            continue;
        const float m = dm * (b[j] >> 4);
        for (int i = 0; i < 16; i++) {
            const int l = quant_nearest_int((x[16 * j + i] + m) / d);
            L[16 * j + i] = (uint8_t)(l < 0 ? 0 : l > 3 ? 3 : l);
        }
    }
    pack_2bit(L, b + 16);
}

static void q2_k_block(const float *x, const float *qw, uint8_t *b)
{
    uint8_t L[QK_K];
    float scales[16], mins[16], w[16], sw[16];
    uint16_t h;
    if (!qw) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int i = 0; i < 16; i++)
                w[i] = fabsf(x[16 * j + i]);
            scales[j] = qs_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j],
                                     -0.5f, 0.1f, 15, 1);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        memset(b, 0, 16);
        h = 0;
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++)
                b[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            h = f32_to_fp16(max_scale / 15.f);
        }
        memcpy(b + 80, &h, 2);
        h = 0;
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                b[j] |= (uint8_t)(quant_nearest_int(iscale * mins[j]) << 4);
            h = f32_to_fp16(max_min / 15.f);
        }
        memcpy(b + 82, &h, 2);
    } else {
        const float sigma2 = block_sigma2(x, 1);
        uint8_t Ls[16], Lm[16];
        for (int j = 0; j < 16; j++) {
            sw[j] = 0;
            for (int i = 0; i < 16; i++)
                w[i] = qw[16 * j + i] * sqrtf(sigma2 + x[16 * j + i] * x[16 * j + i]);
            for (int i = 0; i < 16; i++)
                sw[j] += w[i];
            scales[j] = qs_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j],
                                     -0.9f, 0.05f, 36, 0);
        }
        const float dm = qs_positive(16, 15, scales, Ls, sw);
        const float mm = qs_positive(16, 15, mins, Lm, sw);
        h = f32_to_fp16(dm);
        memcpy(b + 80, &h, 2);
        h = f32_to_fp16(mm);
        memcpy(b + 82, &h, 2);
        for (int j = 0; j < 16; j++)
            b[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
    }
    q2_k_finish(x, b, L);
}

void quant_row_q2_k(const float *src, void *dst, int64_t n, const float *imatrix)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        q2_k_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b + 84 * i);
}

/* ---- Q3_K: 110 bytes = hmask[32] | qs[64] | scales[12] | d ---------------- */

static void q3_k_block(const float *x, const float *qw, uint8_t *b)
{
    int8_t L[QK_K];
    float scales[16];
    uint8_t *sc = b + 96;
    uint16_t h = 0;
    memset(sc, 0, 12);
    if (!qw) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = qs_signed_refine(16, 4, x + 16 * j, L + 16 * j);
            const float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        if (max_scale != 0) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                /* ggml keeps the rounded value in an int8 first */
                int l = (int8_t)quant_nearest_int(iscale * scales[j]);
                l = (l < -32 ? -32 : l > 31 ? 31 : l) + 32;
                pack_q3_scale(sc, j, l);
            }
            h = f32_to_fp16(1 / iscale);
        }
    } else {
        const float sigma2 = block_sigma2(x, 2);
        float w[16], sw[16];
        int8_t Ls[16];
        for (int j = 0; j < 16; j++) {
            for (int i = 0; i < 16; i++)
                w[i] = qw[16 * j + i] * sqrtf(sigma2 + x[16 * j + i] * x[16 * j + i]);
            float s = 0;
            for (int i = 0; i < 16; i++)
                s += w[i];
            sw[j] = s;
            scales[j] = qs_signed(16, 4, x + 16 * j, L + 16 * j, w);
        }
        const float d_block = qs_signed(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; j++)
            pack_q3_scale(sc, j, Ls[j]);
        h = f32_to_fp16(d_block);
    }
    memcpy(b + 108, &h, 2);
    const float dd = fp16_to_f32(h);
    for (int j = 0; j < 16; j++) {
        const float d = dd * unpack_q3_scale(sc, j);
        if (!d)
            continue;
        for (int i = 0; i < 16; i++) {
            const int l = quant_nearest_int(x[16 * j + i] / d);
            L[16 * j + i] = (int8_t)((l < -4 ? -4 : l > 3 ? 3 : l) + 4);
        }
    }
    /* third bit of element e: bit e/32 of hmask[e%32] */
    uint8_t U[QK_K];
    memset(b, 0, 32);
    for (int e = 0; e < QK_K; e++) {
        int l = L[e];
        if (l > 3) {
            b[e % 32] |= (uint8_t)(1 << (e / 32));
            l -= 4;
        }
        U[e] = (uint8_t)l;
    }
    pack_2bit(U, b + 32);
}

void quant_row_q3_k(const float *src, void *dst, int64_t n, const float *imatrix)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        q3_k_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b + 110 * i);
}

/* ---- Q4_K and Q5_K: d | dmin | scales[12] | (qh[32]) | qs[128] ----------- */

/* The part the two types share: per 32-element sub-block a scale and a min
 * (codes 0..nmax), both quantized to 6 bits under d and dmin.  Fills the
 * 16 header bytes and the final codes L. */
static void q45_k_scales(const float *x, const float *qw, int nmax, float rmin,
                         float rdelta, int nstep, uint8_t *b, uint8_t *L)
{
    float scales[8], mins[8], w[32];
    uint8_t *q = b + 4;
    uint16_t dh, mh;
    memset(q, 0, 12);
    if (!qw) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int i = 0; i < 32; i++)
                sum_x2 += x[32 * j + i] * x[32 * j + i];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int i = 0; i < 32; i++)
                w[i] = av_x + fabsf(x[32 * j + i]);
            scales[j] = qs_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j],
                                     rmin, rdelta, nstep, 0);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; j++) {
            uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
            uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
            pack_scale_min(q, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
        }
        dh = f32_to_fp16(max_scale / 63.f);
        mh = f32_to_fp16(max_min / 63.f);
    } else {
        const float sigma2 = block_sigma2(x, 2);
        float sw[8];
        uint8_t Ls[8], Lm[8];
        for (int j = 0; j < 8; j++) {
            for (int i = 0; i < 32; i++)
                w[i] = qw[32 * j + i] * sqrtf(sigma2 + x[32 * j + i] * x[32 * j + i]);
            float s = 0;
            for (int i = 0; i < 32; i++)
                s += w[i];
            sw[j] = s;
            scales[j] = qs_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j],
                                     -0.9f, 0.05f, 36, 0);
        }
        const float d_block = qs_positive(8, 63, scales, Ls, sw);
        const float m_block = qs_positive(8, 63, mins, Lm, sw);
        /* ggml clamps to 63 here for Q5_K only; it matters only for a
         * negative sub-block scale, whose code wrapped to 255 */
        for (int j = 0; j < 8; j++) {
            const int c = nmax == 31;
            pack_scale_min(q, j, c && Ls[j] > 63 ? 63 : Ls[j], c && Lm[j] > 63 ? 63 : Lm[j]);
        }
        dh = f32_to_fp16(d_block);
        mh = f32_to_fp16(m_block);
    }
    memcpy(b, &dh, 2);
    memcpy(b + 2, &mh, 2);
    const float dd = fp16_to_f32(dh), dm = fp16_to_f32(mh);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        unpack_scale_min(q, j, &sc, &mn);
        const float d = dd * sc;
        if (!d)
            continue;
        const float m = dm * mn;
        for (int i = 0; i < 32; i++) {
            const int l = quant_nearest_int((x[32 * j + i] + m) / d);
            L[32 * j + i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        }
    }
}

void quant_row_q4_k(const float *src, void *dst, int64_t n, const float *imatrix)
{
    uint8_t *b = dst;
    uint8_t L[QK_K];
    for (int64_t k = 0; k < n / QK_K; k++, b += 144) {
        q45_k_scales(src + k * QK_K, imatrix ? imatrix + k * QK_K : NULL, 15, -1.f,
                     0.1f, 20, b, L);
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                b[16 + j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void quant_row_q5_k(const float *src, void *dst, int64_t n, const float *imatrix)
{
    uint8_t *b = dst;
    uint8_t L[QK_K];
    for (int64_t k = 0; k < n / QK_K; k++, b += 176) {
        q45_k_scales(src + k * QK_K, imatrix ? imatrix + k * QK_K : NULL, 31, -0.5f,
                     0.1f, 15, b, L);
        /* fifth bit of element e: bit e/32 of qh[e%32] */
        uint8_t *qh = b + 16, *ql = b + 48;
        memset(qh, 0, 32);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int a = L[64 * p + l], c = L[64 * p + 32 + l];
                if (a > 15) {
                    a -= 16;
                    qh[l] |= (uint8_t)(1 << (2 * p));
                }
                if (c > 15) {
                    c -= 16;
                    qh[l] |= (uint8_t)(2 << (2 * p));
                }
                ql[32 * p + l] = (uint8_t)(a | c << 4);
            }
    }
}

/* ---- Q6_K: ql[128] | qh[64] | scales[16] (int8) | d ---------------------- */

static void q6_k_block(const float *x, const float *qw, block_q6_k *y)
{
    int8_t L[QK_K];
    float scales[16], w[16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        /* weights: the importance as given (ggml does not mix in sigma
         * here), else x^2 */
        for (int i = 0; i < 16; i++)
            w[i] = qw ? qw[16 * j + i] : x[16 * j + i] * x[16 * j + i];
        scales[j] = qs_signed(16, 32, x + 16 * j, L + 16 * j, w);
        const float a = fabsf(scales[j]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[j];
        }
    }
    memset(y, 0, sizeof *y);
    if (max_abs < 1e-15f)
        return;
    const float iscale = -128.f / max_scale;
    y->d = f32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; j++) {
        const int l = quant_nearest_int(iscale * scales[j]);
        y->scales[j] = (int8_t)(l < 127 ? l : 127);
    }
    const float dd = fp16_to_f32(y->d);
    for (int j = 0; j < 16; j++) {
        const float d = dd * y->scales[j];
        if (!d)
            continue;
        for (int i = 0; i < 16; i++) {
            const int l = quant_nearest_int(x[16 * j + i] / d);
            L[16 * j + i] = (int8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
        }
    }
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            const uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf;
            const uint8_t q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;
            ql[l] = (uint8_t)(q1 | q3 << 4);
            ql[l + 32] = (uint8_t)(q2 | q4 << 4);
            qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 |
                              (L[j + l + 64] >> 4) << 4 | (L[j + l + 96] >> 4) << 6);
        }
}

void quant_row_q6_k(const float *src, void *dst, int64_t n, const float *imatrix)
{
    block_q6_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        q6_k_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, &b[i]);
}
