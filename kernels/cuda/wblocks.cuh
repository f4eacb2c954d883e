/* wblocks.cuh: the weight types the card reads straight from their ggml
 * blocks: Q4_1 Q5_0 Q5_1 IQ4_NL (32-element blocks) and Q2_K Q3_K Q4_K
 * Q5_K Q6_K IQ2_XXS IQ2_XS IQ2_S IQ3_S IQ4_XS (256-element super-blocks).
 * Included by wtile.cuh; also compiled for the host (the decoders are
 * __host__ __device__, so a host program can hold them against the CPU
 * decoders of model/quant*.c).
 *
 * Layout ("block tiles").  A k-tile is 256 columns; a row's share of it, its
 * "row chunk", is the row's ggml bytes for those 256 columns as they are in
 * the file (one super-block, or eight 32-element blocks): RB bytes.  A tile
 * is the 16 row chunks of 16 consecutive rows back to back (row r at
 * (r % 16) * RB), 16 * RB bytes, a multiple of 32 since RB is even; tiles
 * are stored as the other types' (tile (R, T) at (R * ntk + T) * 16 * RB).
 * Packing only moves whole blocks; rows past the end and columns past the
 * last block are zero bytes, which every one of these types decodes to 0
 * (each value is a product with the block's fp16 d, or d and dmin).
 *
 * Decoding.  dec8<TYPE>(chunk, e0, v) writes elements e0..e0+7 (e0 a
 * multiple of 8) of a row chunk as f32, with exactly the CPU decoder's
 * float expression (same operands, same order, no fused multiply-add), so
 * cuda_embed is bit-exact and make blocks-check compares bit for bit.  The
 * matrix kernels (decode, prefill, grouped MoE) use dec8h<TYPE>, the same
 * values computed in half2 (below), and run the F16 path's mma (fp16 x
 * fp16, f32 accumulation).  Fields are read 8 bytes at a time in one, two
 * or four loads as the block's alignment allows (Q3_K, Q6_K, the IQ2s,
 * IQ3_S, Q5_0, IQ4_NL chunks sit at odd multiples of 2).  The K-quants,
 * the IQ2s, IQ3_S and IQ4_XS decode through Row<TYPE> instead: what a
 * lane reads of a row chunk for a whole tile, read once (wrows.cuh). */
#ifndef STRATA_WBLOCKS_CUH
#define STRATA_WBLOCKS_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef __CUDACC__
#error "wblocks.cuh is compiled by nvcc"
#endif

#define _Static_assert static_assert /* model/quant.h is C11 */
extern "C" {
#include "model/quant.h"
}
#undef _Static_assert

/* the loops are unrolled on the card; the host compiler knows no such pragma */
#ifdef __CUDA_ARCH__
#define WB_UNROLL _Pragma("unroll")
#else
#define WB_UNROLL
#endif

namespace wb {

/* Bytes of a row chunk (256 columns), 0 for types not read this way. */
__host__ __device__ constexpr int rb(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_1: return 8 * 20;
    case GGML_TYPE_Q5_0: return 8 * 22;
    case GGML_TYPE_Q5_1: return 8 * 24;
    case GGML_TYPE_IQ4_NL: return 8 * 18;
    case GGML_TYPE_Q2_K: return 84;
    case GGML_TYPE_Q3_K: return 110;
    case GGML_TYPE_Q4_K: return 144;
    case GGML_TYPE_Q5_K: return 176;
    case GGML_TYPE_Q6_K: return 210;
    case GGML_TYPE_IQ2_XXS: return 66;
    case GGML_TYPE_IQ2_XS: return 74;
    case GGML_TYPE_IQ2_S: return 82;
    case GGML_TYPE_IQ3_S: return 110;
    case GGML_TYPE_IQ4_XS: return 136;
    default: return 0;
    }
}
/* Elements per ggml block of these types. */
__host__ __device__ constexpr int blk_elems(int type)
{
    return type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_IQ4_NL
               ? 32
               : 256;
}

/* ---- tables: the model's on the host, copies in global memory on the card
 * (lanes look up different entries: global memory through L1, not the
 * constant bank, which would serialise them) */
#ifdef __CUDA_ARCH__
#define WB_TAB(name) d_##name
#else
#define WB_TAB(name) name
#endif
static __device__ const uint64_t d_iq2xxs_grid[256] = {
#include "model/iq2xxs_grid.inc"
};
static __device__ const uint64_t d_iq2xs_grid[512] = {
#include "model/iq2xs_grid.inc"
};
static __device__ const uint64_t d_iq2s_grid[1024] = {
#include "model/iq2s_grid.inc"
};
static __device__ const uint32_t d_iq3s_grid[512] = {
#include "model/iq3s_grid.inc"
};

/* ---- exact float arithmetic (no contraction into FMA on the card) ------ */
__host__ __device__ __forceinline__ float fmul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ __forceinline__ float fadd(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
__host__ __device__ __forceinline__ float fsub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
__host__ __device__ __forceinline__ float h2f(const uint8_t *p)
{
    const uint16_t bits = (uint16_t)(p[0] | p[1] << 8);
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(bits));
#else
    return fp16_to_f32(bits);
#endif
}
/* 2-byte aligned little-endian loads */
__host__ __device__ __forceinline__ uint32_t u16(const uint8_t *p) { return *(const uint16_t *)p; }
__host__ __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return u16(p) | u16(p + 2) << 16; }
__host__ __device__ __forceinline__ uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }
/* (float)x for |x| < 2^22 without I2F, which runs at 1/8 of the FMA rate
 * on the card: the bits of 1.5 * 2^23 + x, minus 1.5 * 2^23 (both exact) */
__host__ __device__ __forceinline__ float i2f(int x)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(__int_as_float(x + 0x4B400000), 12582912.f);
#else
    return (float)x;
#endif
}
/* Eight bytes at p, which is AL-aligned (8, 4 or 2): one, two or four
 * loads instead of eight; byte8(v, i) takes byte i back out. */
template <int AL> __host__ __device__ __forceinline__ uint2 ld8b(const uint8_t *p)
{
    if (AL >= 8)
        return *(const uint2 *)p;
    if (AL >= 4)
        return make_uint2(*(const uint32_t *)p, *(const uint32_t *)(p + 4));
    return make_uint2(u32(p), u32(p + 4));
}
__host__ __device__ __forceinline__ uint32_t byte8(uint2 v, int i) { return ((i < 4 ? v.x : v.y) >> (8 * (i & 3))) & 0xffu; }
/* IQ4_NL's level of nibble q: on the card from registers (two byte
 * permutes and a select), not a per-value table load */
__host__ __device__ __forceinline__ int iq4nl(uint32_t q)
{
#ifdef __CUDA_ARCH__
    /* -127 -104 -83 -65 | -49 -35 -22 -10 | 1 13 25 38 | 53 69 89 113 as bytes */
    const uint32_t lo = __byte_perm(0xbfad9881u, 0xf6eaddcfu, q & 7), hi = __byte_perm(0x26190d01u, 0x71594535u, q & 7);
    return (int)(int8_t)(q & 8 ? hi : lo);
#else
    return iq4nl_values[q];
#endif
}
__host__ __device__ __forceinline__ float sgn(uint32_t bits, int k) { return (bits >> k) & 1 ? -1.f : 1.f; }
/* IQ2_XXS / IQ2_XS sign fields: 7 bits, the 8th makes the count even */
__host__ __device__ __forceinline__ uint32_t sign7(uint32_t s)
{
#ifdef __CUDA_ARCH__
    return s | (uint32_t)(__popc(s) & 1) << 7;
#else
    return s | (uint32_t)(__builtin_popcount(s) & 1) << 7;
#endif
}

/* ---- decoders: elements e0..e0+7 of a row chunk c ----------------------- */
template <int TYPE> __host__ __device__ __forceinline__ void dec8(const uint8_t *c, int e0, float (&v)[8]);

/* Q4_1: x = code * d + m (byte j: element j low, j + 16 high) */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q4_1>(const uint8_t *c, int e0, float (&v)[8])
{
    const uint8_t *b = c + (e0 >> 5) * 20;
    const int e = e0 & 31, hi = e >> 4;
    const float d = h2f(b), m = h2f(b + 2);
    const uint2 w = ld8b<4>(b + 4 + (e & 15));
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int q = hi ? byte8(w, i) >> 4 : byte8(w, i) & 15;
        v[i] = fadd(fmul(i2f(q), d), m);
    }
}
/* Q5_0: x = (code | fifth bit << 4) - 16, times d; qh bit j for element j */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q5_0>(const uint8_t *c, int e0, float (&v)[8])
{
    const uint8_t *b = c + (e0 >> 5) * 22;
    const int e = e0 & 31, hi = e >> 4;
    const float d = h2f(b);
    const uint32_t qh = u32(b + 2);
    const uint2 w = ld8b<2>(b + 6 + (e & 15));
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int q = ((hi ? byte8(w, i) >> 4 : byte8(w, i) & 15) | ((qh >> (e + i)) & 1) << 4) - 16;
        v[i] = fmul(i2f(q), d);
    }
}
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q5_1>(const uint8_t *c, int e0, float (&v)[8])
{
    const uint8_t *b = c + (e0 >> 5) * 24;
    const int e = e0 & 31, hi = e >> 4;
    const float d = h2f(b), m = h2f(b + 2);
    const uint32_t qh = *(const uint32_t *)(b + 4);
    const uint2 w = ld8b<8>(b + 8 + (e & 15));
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int q = (hi ? byte8(w, i) >> 4 : byte8(w, i) & 15) | ((qh >> (e + i)) & 1) << 4;
        v[i] = fadd(fmul(i2f(q), d), m);
    }
}
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ4_NL>(const uint8_t *c, int e0, float (&v)[8])
{
    const uint8_t *b = c + (e0 >> 5) * 18;
    const int e = e0 & 31, hi = e >> 4;
    const float d = h2f(b);
    const uint2 w = ld8b<2>(b + 2 + (e & 15));
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fmul(d, i2f(iq4nl(hi ? byte8(w, i) >> 4 : byte8(w, i) & 15)));
}

/* Q4_K / Q5_K's 6-bit scale and min of sub-block s (model/quant.h's
 * q4_k_scale_min on a 2-aligned pointer) */
__host__ __device__ __forceinline__ void k_scale_min(int s, const uint8_t *q, int *sc, int *mn)
{
    if (s < 4) {
        *sc = q[s] & 63;
        *mn = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
        *mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

/* Q2_K (scales[16] qs[64] d dmin): byte qs[32h + l] holds element 128h +
 * 32j + l in bit pair j; x = (d * sc) * code - dmin * min per 16 */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q2_K>(const uint8_t *b, int e0, float (&v)[8])
{
    const int h = e0 >> 7, j = (e0 >> 5) & 3, l = e0 & 31, s = e0 >> 4;
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    const float dl = fmul(d, i2f(b[s] & 15)), ml = fmul(dmin, i2f(b[s] >> 4));
    const uint2 w = ld8b<4>(b + 16 + 32 * h + l);
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fsub(fmul(dl, i2f((byte8(w, i) >> (2 * j)) & 3)), ml);
}
/* Q3_K (hmask[32] qs[64] scales[12] d): low pair as Q2_K, a clear high bit
 * (bit e / 32 of hmask[e % 32]) subtracts 4 */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q3_K>(const uint8_t *b, int e0, float (&v)[8])
{
    const int h = e0 >> 7, j = (e0 >> 5) & 3, l = e0 & 31, s = e0 >> 4;
    const uint8_t *sc = b + 96;
    const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    const int hi = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
    const float dl = fmul(h2f(b + 108), i2f(lo + 16 * hi - 32));
    const uint2 w = ld8b<2>(b + 32 + 32 * h + l), hm = ld8b<2>(b + l);
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int c = (int)((byte8(w, i) >> (2 * j)) & 3) + 4 * (int)((byte8(hm, i) >> (e0 >> 5)) & 1) - 4;
        v[i] = fmul(dl, i2f(c));
    }
}
/* Q4_K (d dmin scales[12] qs[128]): 64-element chunk p, low nibbles
 * sub-block 2p, high nibbles 2p + 1 */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q4_K>(const uint8_t *b, int e0, float (&v)[8])
{
    const int p = e0 >> 6, half = (e0 >> 5) & 1, l = e0 & 31;
    int sc, mn;
    k_scale_min(2 * p + half, b + 4, &sc, &mn);
    const float d1 = fmul(h2f(b), i2f(sc)), m1 = fmul(h2f(b + 2), i2f(mn));
    const uint2 w = ld8b<8>(b + 16 + 32 * p + l);
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fsub(fmul(d1, i2f(half ? byte8(w, i) >> 4 : byte8(w, i) & 15)), m1);
}
/* Q5_K (d dmin scales[12] qh[32] qs[128]): Q4_K plus bit s of qh[l] */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q5_K>(const uint8_t *b, int e0, float (&v)[8])
{
    const int p = e0 >> 6, half = (e0 >> 5) & 1, l = e0 & 31, s = 2 * p + half;
    int sc, mn;
    k_scale_min(s, b + 4, &sc, &mn);
    const float d1 = fmul(h2f(b), i2f(sc)), m1 = fmul(h2f(b + 2), i2f(mn));
    const uint2 w = ld8b<8>(b + 48 + 32 * p + l), qh = ld8b<8>(b + 16 + l);
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int c = (int)(half ? byte8(w, i) >> 4 : byte8(w, i) & 15) | (int)((byte8(qh, i) >> s) & 1) << 4;
        v[i] = fsub(fmul(d1, i2f(c)), m1);
    }
}
/* Q6_K (ql[128] qh[64] scales[16] d): half h of 128, quarter k = (e % 128)
 * / 32: low nibble of ql[64h + l + 32 (k & 1)] (high nibble for k >= 2),
 * bit pair k of qh[32h + l]; x = (d * scale) * (q - 32) */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_Q6_K>(const uint8_t *b, int e0, float (&v)[8])
{
    const int h = e0 >> 7, k = (e0 >> 5) & 3, l = e0 & 31;
    const float dl = fmul(h2f(b + 208), i2f((int8_t)b[192 + 8 * h + (l >> 4) + 2 * k]));
    const uint2 L = ld8b<2>(b + 64 * h + l + 32 * (k & 1)), H = ld8b<2>(b + 128 + 32 * h + l);
WB_UNROLL
    for (int i = 0; i < 8; i++) {
        const int q = (int)((k >= 2 ? byte8(L, i) >> 4 : byte8(L, i) & 15) | ((byte8(H, i) >> (2 * k)) & 3) << 4) - 32;
        v[i] = fmul(dl, i2f(q));
    }
}
/* The 2-bit IQ types: eight magnitudes of one grid entry with eight signs,
 * db = (d * (0.5 + ls)) * 0.25, x = (db * mag) * sign. */
__host__ __device__ __forceinline__ void iq2_group8(float db, uint64_t g, uint32_t sg, float (&v)[8])
{
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fmul(fmul(db, i2f((int)((g >> (8 * i)) & 0xff))), sgn(sg, i));
}
/* IQ2_XXS (d, then per 32 elements 4 index bytes and a u32 of 4 x 7 signs |
 * scale << 28) */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ2_XXS>(const uint8_t *b, int e0, float (&v)[8])
{
    const uint8_t *rec = b + 2 + 8 * (e0 >> 5);
    const int l = (e0 >> 3) & 3;
    const uint32_t w = u32(rec + 4);
    const float db = fmul(fmul(h2f(b), fadd(0.5f, i2f((int)(w >> 28)))), 0.25f);
    iq2_group8(db, WB_TAB(iq2xxs_grid)[rec[l]], sign7((w >> (7 * l)) & 127), v);
}
/* IQ2_XS (d, 32 u16 of 9-bit index | 7 signs, 8 scale bytes, a nibble per 16) */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ2_XS>(const uint8_t *b, int e0, float (&v)[8])
{
    const int g = e0 >> 3;
    const int ls = (b[66 + (g >> 2)] >> ((g & 3) < 2 ? 0 : 4)) & 15;
    const float db = fmul(fmul(h2f(b), fadd(0.5f, i2f(ls))), 0.25f);
    const uint32_t q = u16(b + 2 + 2 * g);
    iq2_group8(db, WB_TAB(iq2xs_grid)[q & 511], sign7(q >> 9), v);
}
/* IQ2_S (d, qs[32], signs[32], qh[8], scales[8]): 10-bit index, 8 explicit signs */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ2_S>(const uint8_t *b, int e0, float (&v)[8])
{
    const int g = e0 >> 3, ib = g >> 2, l = g & 3;
    const int ls = (b[74 + ib] >> (l < 2 ? 0 : 4)) & 15;
    const float db = fmul(fmul(h2f(b), fadd(0.5f, i2f(ls))), 0.25f);
    const int idx = b[2 + g] | ((b[66 + ib] >> (2 * l)) & 3) << 8;
    iq2_group8(db, WB_TAB(iq2s_grid)[idx], b[34 + g], v);
}
/* IQ3_S (d, qs[64], qh[8], signs[32], scales[4]): two groups of 4 per 8,
 * 9-bit indices into a grid of odd magnitudes; x = ((d * (1 + 2 ls)) * mag) * sign */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ3_S>(const uint8_t *b, int e0, float (&v)[8])
{
    const int ib = e0 >> 5, G = e0 >> 2, k = G & 7;
    const int ls = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
    const float db = fmul(h2f(b), i2f(1 + 2 * ls));
    const uint32_t qh = b[66 + ib], sg = b[74 + (e0 >> 3)];
    const uint32_t g0 = WB_TAB(iq3s_grid)[b[2 + G] | ((qh >> k) & 1) << 8];
    const uint32_t g1 = WB_TAB(iq3s_grid)[b[3 + G] | ((qh >> (k + 1)) & 1) << 8];
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fmul(fmul(db, i2f((int)(((i < 4 ? g0 : g1) >> (8 * (i & 3))) & 0xff))), sgn(sg, i));
}
/* IQ4_XS (d, scales_h u16, scales_l[4], qs[128]): x = (d * (ls - 32)) * T[nibble],
 * byte j of a sub-block: element j low, j + 16 high */
template <> __host__ __device__ __forceinline__ void dec8<GGML_TYPE_IQ4_XS>(const uint8_t *b, int e0, float (&v)[8])
{
    const int ib = e0 >> 5, e = e0 & 31, hi = e >> 4;
    const int ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | ((u16(b + 2) >> (2 * ib)) & 3) << 4;
    const float dl = fmul(h2f(b), i2f(ls - 32));
    const uint2 w = ld8b<8>(b + 8 + 16 * ib + (e & 15));
WB_UNROLL
    for (int i = 0; i < 8; i++)
        v[i] = fmul(dl, i2f(iq4nl(hi ? byte8(w, i) >> 4 : byte8(w, i) & 15)));
}

/* ---- fp16 decoders for the matrix kernels ---------------------------------
 * dec8 spends ~5 instructions a value (extract, int -> float, multiply, add)
 * plus the fp16 packing; the matrix kernels are bound by instruction issue,
 * so the types whose values are an affine map of small unsigned codes,
 * x = s * q + o per 8 values, decode in half2 instead: the 8 codes as bytes
 * (a few shifts and masks per 4), each pair moved under fp16's 1024 exponent
 * by one byte permute (0x64 | q: the half 1024 + q, exact), 1024 taken off
 * (exact), and one fused s * q + o for two values: ~2 instructions a value.
 * s and o are the float scale and offset rounded to fp16 (offsets of signed
 * codes, -32 s for Q6_K, exact multiples of s), so a value may differ from
 * dec8's by an fp16 rounding of the scale: within the F16 tolerance, and the
 * same decoder for every kernel and n (invariance).  The IQ4 types'
 * levels become such codes (level + 128) by byte permutes from registers.
 * The K-quants, the IQ2s, IQ3_S (wrows.cuh) and IQ4_XS (below) have
 * per-tile decoders. */
template <int TYPE> struct H2 { static constexpr bool on = false; };
#define WB_H2(T)                                                                                         \
    template <> struct H2<T> { static constexpr bool on = true; };
WB_H2(GGML_TYPE_Q4_1) WB_H2(GGML_TYPE_Q5_0) WB_H2(GGML_TYPE_Q5_1) WB_H2(GGML_TYPE_Q2_K) WB_H2(GGML_TYPE_Q3_K)
WB_H2(GGML_TYPE_Q4_K) WB_H2(GGML_TYPE_Q5_K) WB_H2(GGML_TYPE_Q6_K) WB_H2(GGML_TYPE_IQ4_NL) WB_H2(GGML_TYPE_IQ4_XS)
WB_H2(GGML_TYPE_IQ2_XXS) WB_H2(GGML_TYPE_IQ2_XS) WB_H2(GGML_TYPE_IQ2_S) WB_H2(GGML_TYPE_IQ3_S)
#undef WB_H2

/* The card's byte permute and fp16 fused multiply-add, emulated on the host
 * (make blocks-check runs these decoders there): PRMT without its
 * sign-replicate mode, which no selector here uses; an fma of fp16 values
 * is exact in double, then rounded once to fp16, as the card's HFMA2. */
__host__ __device__ __forceinline__ uint32_t bperm(uint32_t x, uint32_t y, uint32_t sel)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, sel);
#else
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= (uint32_t)((v >> (8 * ((sel >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
#endif
}
__host__ __device__ __forceinline__ __half2 hfma2(__half2 a, __half2 b, __half2 c)
{
#ifdef __CUDA_ARCH__
    return __hfma2(a, b, c);
#else
    return __halves2half2(__double2half((double)__low2float(a) * __low2float(b) + __low2float(c)),
                          __double2half((double)__high2float(a) * __high2float(b) + __high2float(c)));
#endif
}
/* a half2 as its 32 bits and back (a register move on the card) */
__host__ __device__ __forceinline__ uint32_t h2bits(__half2 h)
{
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)&h;
#else
    return (uint32_t)__half_as_ushort(__low2half(h)) | (uint32_t)__half_as_ushort(__high2half(h)) << 16;
#endif
}
__host__ __device__ __forceinline__ __half2 bits2h2(uint32_t w)
{
#ifdef __CUDA_ARCH__
    return *(const __half2 *)&w;
#else
    return __halves2half2(__ushort_as_half((unsigned short)(w & 0xffffu)), __ushort_as_half((unsigned short)(w >> 16)));
#endif
}
/* codes q0..q7 (bytes of u, each < 1024) -> fp16 pairs s * q + o */
__host__ __device__ __forceinline__ uint4 codes_h2(uint2 u, __half2 sc, __half2 of)
{
    const __half2 k1024 = __float2half2_rn(1024.f);
    uint32_t r[4];
    const uint32_t w[4] = {bperm(u.x, 0x64646464u, 0x4140), bperm(u.x, 0x64646464u, 0x4342),
                           bperm(u.y, 0x64646464u, 0x4140), bperm(u.y, 0x64646464u, 0x4342)};
WB_UNROLL
    for (int k = 0; k < 4; k++) {
        const __half2 q = __hsub2(bits2h2(w[k]), k1024);
        r[k] = h2bits(hfma2(q, sc, of));
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}
/* bits e..e+7 of a word, one per byte (bit 0 of byte i) */
__host__ __device__ __forceinline__ uint2 bits_to_bytes(uint32_t b8)
{
    return make_uint2(((b8 & 15u) * 0x00204081u) & 0x01010101u, (((b8 >> 4) & 15u) * 0x00204081u) & 0x01010101u);
}
__host__ __device__ __forceinline__ uint2 nib(uint2 w, int hi)
{
    return hi ? make_uint2((w.x >> 4) & 0x0f0f0f0fu, (w.y >> 4) & 0x0f0f0f0fu)
              : make_uint2(w.x & 0x0f0f0f0fu, w.y & 0x0f0f0f0fu);
}
__host__ __device__ __forceinline__ __half2 h2of(float v) { return __float2half2_rn(v); }

template <int TYPE> __host__ __device__ __forceinline__ uint4 dec8h(const uint8_t *c, int e0);

template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q4_1>(const uint8_t *c, int e0)
{
    const uint8_t *b = c + (e0 >> 5) * 20;
    const int e = e0 & 31;
    return codes_h2(nib(ld8b<4>(b + 4 + (e & 15)), e >> 4), h2of(h2f(b)), h2of(h2f(b + 2)));
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q5_0>(const uint8_t *c, int e0)
{
    const uint8_t *b = c + (e0 >> 5) * 22;
    const int e = e0 & 31;
    uint2 u = nib(ld8b<2>(b + 6 + (e & 15)), e >> 4);
    const uint2 hb = bits_to_bytes(u32(b + 2) >> e);
    u.x |= hb.x << 4;
    u.y |= hb.y << 4;
    const __half2 sc = h2of(h2f(b));
    return codes_h2(u, sc, __hmul2(sc, h2of(-16.f)));
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q5_1>(const uint8_t *c, int e0)
{
    const uint8_t *b = c + (e0 >> 5) * 24;
    const int e = e0 & 31;
    uint2 u = nib(ld8b<8>(b + 8 + (e & 15)), e >> 4);
    const uint2 hb = bits_to_bytes(*(const uint32_t *)(b + 4) >> e);
    u.x |= hb.x << 4;
    u.y |= hb.y << 4;
    return codes_h2(u, h2of(h2f(b)), h2of(h2f(b + 2)));
}
} /* namespace wb */

/* the per-tile rows (Q2_K..Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_S) */
#include "kernels/cuda/wrows.cuh"

namespace wb {


/* Every type of this file by id, for the launch switches:
 * X(GGML_TYPE_...) once per type. */
#define WB_FOR_EACH(X)                                                                                   \
    X(GGML_TYPE_Q4_1) X(GGML_TYPE_Q5_0) X(GGML_TYPE_Q5_1) X(GGML_TYPE_IQ4_NL) X(GGML_TYPE_Q2_K)          \
    X(GGML_TYPE_Q3_K) X(GGML_TYPE_Q4_K) X(GGML_TYPE_Q5_K) X(GGML_TYPE_Q6_K) X(GGML_TYPE_IQ2_XXS)         \
    X(GGML_TYPE_IQ2_XS) X(GGML_TYPE_IQ2_S) X(GGML_TYPE_IQ3_S) X(GGML_TYPE_IQ4_XS)

/* Decode elements e0..e0+7 of chunk c of any type above (host tests). */
__host__ __device__ inline int dec8_any(int type, const uint8_t *c, int e0, float (&v)[8])
{
    switch (type) {
#define WB_CASE(T)                                                                                       \
    case T: dec8<T>(c, e0, v); return 0;
        WB_FOR_EACH(WB_CASE)
#undef WB_CASE
    default: return -1;
    }
}

/* IQ4 levels + 128 (1..241) of four nibbles (bytes of nb): two byte
 * permutes of the level table's halves, picked per byte by the nibble's
 * bit 3 */
__host__ __device__ __forceinline__ uint32_t iq4_codes4(uint32_t nb)
{
    const uint32_t x = nb & 0x07070707u, y = x | (x >> 4); /* bytes 0, 2: n0 | n1 << 4, n2 | n3 << 4 */
    const uint32_t sel = (y & 0xffu) | ((y >> 8) & 0xff00u);
    const uint32_t lo = bperm(0x3f2d1801u, 0x766a5d4fu, sel), hi = bperm(0xa6998d81u, 0xf1d9c5b5u, sel);
    const uint32_t m = ((nb >> 3) & 0x01010101u) * 0xffu;
    return (lo & ~m) | (hi & m);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ4_NL>(const uint8_t *c, int e0)
{
    const uint8_t *b = c + (e0 >> 5) * 18;
    const int e = e0 & 31;
    const uint2 nb = nib(ld8b<2>(b + 2 + (e & 15)), e >> 4);
    const __half2 sc = h2of(h2f(b));
    return codes_h2(make_uint2(iq4_codes4(nb.x), iq4_codes4(nb.y)), sc, __hmul2(sc, h2of(-128.f)));
}
/* IQ4_XS (d, scales_h u16, scales_l[4], qs[128]; row chunks 8-byte
 * aligned) as a per-tile row (wrows.cuh): chunk ch is sub-block ch for
 * every lane, so the eight 6-bit scales (low nibble ch & 1 of scales_l[ch
 * / 2], bit pair ch of scales_h) come out byte-parallel once per tile,
 * dl = d * (ls - 32) rounded once (hmul2); dec looks up the levels and
 * takes the 128 off in the subtraction. */
template <> struct Row<GGML_TYPE_IQ4_XS> {
    static constexpr bool whole = true;
    const uint8_t *q; /* qs + 8 (t & 1): chunk ch's 8 bytes at q + 16 ch */
    uint32_t hs;      /* 4 (t >> 1): low or high nibbles */
    uint32_t dl[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
        q = b + 8 + 8 * (t & 1);
        hs = 4u * (uint32_t)(t >> 1);
        const uint32_t w = *(const uint32_t *)b, L = *(const uint32_t *)(b + 4), H = w >> 16;
        /* nibble i of x -> byte i */
        const auto spread = [](uint32_t x) { return bperm(x & 0x0f0fu, (x >> 4) & 0x0f0fu, 0x5140u); };
        const uint32_t ev = (L & 0x0f0f0f0fu) | spread(H & 0x3333u) << 4;          /* chunks 0, 2, 4, 6 */
        const uint32_t od = ((L >> 4) & 0x0f0f0f0fu) | spread((H >> 2) & 0x3333u) << 4; /* 1, 3, 5, 7 */
        const __half2 d = __low2half2(bits2h2(w)), k = h2of(1056.f);
        const uint2 s03 = scales4_h2(bperm(ev, od, 0x5140u), k, d), s47 = scales4_h2(bperm(ev, od, 0x7362u), k, d);
        dl[0] = s03.x;
        dl[1] = s03.y;
        dl[2] = s47.x;
        dl[3] = s47.y;
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint2 w = ld8b<8>(q + 16 * ch);
        const uint2 c = make_uint2(iq4_codes4((w.x >> hs) & 0x0f0f0f0fu), iq4_codes4((w.y >> hs) & 0x0f0f0f0fu));
        return codes_off_h2(c, h2of(1152.f), pick_h2(dl[ch >> 1], ch & 1));
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ4_XS>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_IQ4_XS> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}

/* The fp16 decoder of any type above that has one (host check); -1 if none. */
template <int T> __host__ __device__ inline int dec8h_try(const uint8_t *c, int e0, uint4 &h)
{
    if constexpr (H2<T>::on) {
        h = dec8h<T>(c, e0);
        return 0;
    } else {
        return -1;
    }
}
__host__ __device__ inline int dec8h_any(int type, const uint8_t *c, int e0, uint4 &h)
{
    switch (type) {
#define WB_CASE(T)                                                                                       \
    case T: return dec8h_try<T>(c, e0, h);
        WB_FOR_EACH(WB_CASE)
#undef WB_CASE
    default: return -1;
    }
}

} /* namespace wb */

#endif
