/* dot_scalar_kiq.c: portable sub-block decoders for the K-quants (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K), the 2-4 bit IQ types (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_S, IQ4_XS) and the 32-element fallbacks Q5_0, Q5_1, IQ4_NL: the
 * scalar twins of dot_avx2_k.c / dot_avx2_iq.c, run through
 * dot_scalar.c's rows loop (see dot_kernels.h).
 *
 * Each writes the 32 weights of sub-block s of a row with the reference
 * decoder's expressions (model/quant_*.c), so they are the same floats.
 * For the 256-element types, sub-block s is sub-block s & 7 of block
 * s >> 3. */
#include <string.h>

#include "kernels/cpu/dot_kernels.h"
#include "model/quant.h"

static uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- 32-element legacy types ------------------------------------------- */

void dec_sub_q5_0(const uint8_t *row, int64_t s, float *w)
{
    const block_q5_0 *b = (const block_q5_0 *)(row + s * sizeof(block_q5_0));
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const uint32_t qh = ld32(b->qh);
    for (int j = 0; j < 16; j++) {
        /* int, not the u32 of qh: the code goes negative */
        const int lo = (b->qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        const int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        w[j] = (lo - 16) * d;
        w[j + 16] = (hi - 16) * d;
    }
}

void dec_sub_q5_1(const uint8_t *row, int64_t s, float *w)
{
    const block_q5_1 *b = (const block_q5_1 *)(row + s * sizeof(block_q5_1));
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float m = fp16_to_f32(ld16((const uint8_t *)&b->m));
    const uint32_t qh = ld32(b->qh);
    for (int j = 0; j < 16; j++) {
        w[j] = ((b->qs[j] & 15) | (int)((qh >> j) & 1) << 4) * d + m;
        w[j + 16] = ((b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) * d + m;
    }
}

void dec_sub_iq4_nl(const uint8_t *row, int64_t s, float *w)
{
    const block_iq4_nl *b = (const block_iq4_nl *)(row + s * sizeof(block_iq4_nl));
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    for (int j = 0; j < 16; j++) {
        w[j] = d * iq4nl_values[b->qs[j] & 15];
        w[j + 16] = d * iq4nl_values[b->qs[j] >> 4];
    }
}

/* ---- K-quants ------------------------------------------------------------ */

/* Q2_K sub-block ib: bit pair ib % 4 of qs[32 (ib / 4) + l], two 16-element
 * scale/min nibbles */
void dec_sub_q2_k(const uint8_t *row, int64_t s, float *w)
{
    const block_q2_k *b = (const block_q2_k *)(row + (s >> 3) * sizeof(block_q2_k));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float dmin = fp16_to_f32(ld16((const uint8_t *)&b->dmin));
    const uint8_t *q = b->qs + 32 * (ib / 4);
    for (int half = 0; half < 2; half++) {
        const uint8_t sc = b->scales[2 * ib + half];
        const float dl = d * (sc & 15), ml = dmin * (sc >> 4);
        for (int l = 16 * half; l < 16 * half + 16; l++)
            w[l] = dl * ((q[l] >> (2 * (ib % 4))) & 3) - ml;
    }
}

void dec_sub_q3_k(const uint8_t *row, int64_t s, float *w)
{
    const block_q3_k *b = (const block_q3_k *)(row + (s >> 3) * sizeof(block_q3_k));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const uint8_t *q = b->qs + 32 * (ib / 4);
    for (int half = 0; half < 2; half++) {
        const float dl = d * q3_k_scale(b->scales, 2 * ib + half);
        for (int l = 16 * half; l < 16 * half + 16; l++) {
            const int lo2 = (q[l] >> (2 * (ib % 4))) & 3;
            const int hb = (b->hmask[l] >> ib) & 1;
            w[l] = dl * (lo2 + 4 * hb - 4);
        }
    }
}

void dec_sub_q4_k(const uint8_t *row, int64_t s, float *w)
{
    const block_q4_k *b = (const block_q4_k *)(row + (s >> 3) * sizeof(block_q4_k));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float dmin = fp16_to_f32(ld16((const uint8_t *)&b->dmin));
    int sc, mn;
    q4_k_scale_min(ib, b->scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    const uint8_t *q = b->qs + 32 * (ib / 2);
    for (int l = 0; l < 32; l++)
        w[l] = d1 * (ib & 1 ? q[l] >> 4 : q[l] & 15) - m1;
}

void dec_sub_q5_k(const uint8_t *row, int64_t s, float *w)
{
    const block_q5_k *b = (const block_q5_k *)(row + (s >> 3) * sizeof(block_q5_k));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float dmin = fp16_to_f32(ld16((const uint8_t *)&b->dmin));
    int sc, mn;
    q4_k_scale_min(ib, b->scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    const uint8_t *q = b->qs + 32 * (ib / 2);
    for (int l = 0; l < 32; l++) {
        const int c = (ib & 1 ? q[l] >> 4 : q[l] & 15) | ((b->qh[l] >> ib) & 1) << 4;
        w[l] = d1 * c - m1;
    }
}

/* Q6_K sub-block ib: half ib / 4, quarter ib % 4 of it (model/quant_k.c's
 * table: quarters 0, 1 take low nibbles of ql[l], ql[l + 32], quarters 2, 3
 * their high nibbles; 2 high bits from qh[l] at bit 2 * quarter) */
void dec_sub_q6_k(const uint8_t *row, int64_t s, float *w)
{
    const block_q6_k *b = (const block_q6_k *)(row + (s >> 3) * sizeof(block_q6_k));
    const int ib = (int)(s & 7), h = ib / 4, qd = ib % 4;
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const uint8_t *L = b->ql + 64 * h + 32 * (qd & 1), *H = b->qh + 32 * h;
    const int8_t *C = b->scales + 8 * h + 2 * qd;
    for (int l = 0; l < 32; l++) {
        const int lo = qd < 2 ? L[l] & 15 : L[l] >> 4;
        const int q = (lo | ((H[l] >> (2 * qd)) & 3) << 4) - 32;
        w[l] = d * C[l / 16] * q;
    }
}

/* ---- IQ types ------------------------------------------------------------ */

static void iq2_group8(float *w, float db, uint64_t g, uint8_t sg)
{
    for (int k = 0; k < 8; k++)
        w[k] = db * (float)((g >> (8 * k)) & 0xff) * ((sg >> k) & 1 ? -1.f : 1.f);
}

void dec_sub_iq2_xxs(const uint8_t *row, int64_t s, float *w)
{
    const block_iq2_xxs *b = (const block_iq2_xxs *)(row + (s >> 3) * sizeof(block_iq2_xxs));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const uint8_t *rec = b->qs + 8 * ib;
    const uint32_t sw = ld32(rec + 4);
    const float db = d * (0.5f + (float)(sw >> 28)) * 0.25f;
    for (int l = 0; l < 4; l++)
        iq2_group8(w + 8 * l, db, iq2xxs_grid[rec[l]], iq3xxs_signs[(sw >> (7 * l)) & 127]);
}

void dec_sub_iq2_xs(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + (s >> 3) * sizeof(block_iq2_xs);
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16(b));
    const uint8_t sc = b[2 + 64 + ib];
    for (int l = 0; l < 4; l++) {
        const uint16_t v = ld16(b + 2 + 2 * (4 * ib + l));
        const float db = d * (0.5f + (float)(l < 2 ? sc & 15 : sc >> 4)) * 0.25f;
        iq2_group8(w + 8 * l, db, iq2xs_grid[v & 511], iq3xxs_signs[v >> 9]);
    }
}

void dec_sub_iq2_s(const uint8_t *row, int64_t s, float *w)
{
    const block_iq2_s *b = (const block_iq2_s *)(row + (s >> 3) * sizeof(block_iq2_s));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    for (int l = 0; l < 4; l++) {
        const int g = 4 * ib + l;
        const float db = d * (0.5f + (float)((b->scales[ib] >> (l < 2 ? 0 : 4)) & 15)) * 0.25f;
        const int idx = b->qs[g] | ((b->qh[ib] >> (2 * l)) & 3) << 8;
        iq2_group8(w + 8 * l, db, iq2s_grid[idx], b->signs[g]);
    }
}

void dec_sub_iq3_s(const uint8_t *row, int64_t s, float *w)
{
    const block_iq3_s *b = (const block_iq3_s *)(row + (s >> 3) * sizeof(block_iq3_s));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float db = d * (float)(1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15));
    for (int k = 0; k < 8; k++) {
        const uint32_t g = iq3s_grid[b->qs[8 * ib + k] | ((b->qh[ib] >> k) & 1) << 8];
        const uint8_t sg = b->signs[4 * ib + k / 2];
        for (int j = 0; j < 4; j++) {
            const int e = 4 * (k & 1) + j; /* bit of the sign byte */
            w[4 * k + j] = db * (float)((g >> (8 * j)) & 0xff) * ((sg >> e) & 1 ? -1.f : 1.f);
        }
    }
}

void dec_sub_iq4_xs(const uint8_t *row, int64_t s, float *w)
{
    const block_iq4_xs *b = (const block_iq4_xs *)(row + (s >> 3) * sizeof(block_iq4_xs));
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16((const uint8_t *)&b->d));
    const float dl = d * (float)(iq4_xs_scale(b, ib) - 32);
    const uint8_t *q = b->qs + 16 * ib;
    for (int j = 0; j < 16; j++) {
        w[j] = dl * iq4nl_values[q[j] & 15];
        w[j + 16] = dl * iq4nl_values[q[j] >> 4];
    }
}
