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
 * IQ3_S, Q5_0, IQ4_NL chunks sit at odd multiples of 2). */
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
 * levels become such codes (level + 128) by byte permutes from registers;
 * the IQ2/IQ3_S grid magnitudes go the same way, their signs as XOR masks
 * on the scale's fp16 sign bits (mags_h2). */
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
/* ---- a lane's share of a row chunk, for a whole tile ----------------------
 * The matrix kernels decode elements 32 ch + 8 t .. + 7 of a row chunk for
 * ch = 0..7 with t = lane & 3 fixed.  For most types those eight calls read
 * the same bytes again (Q3_K: the same 8 hmask bytes, two qs words, and
 * eight sub-block scales out of the same 12 bytes), so Row<TYPE>::load
 * reads them once per tile into registers, computes the eight sub-block
 * scales together (byte-parallel, four half2 at a time) and dec(ch), with
 * ch a constant after unrolling, does only the per-value work.  Types
 * without a Row of their own (whole = false) call dec8h per chunk.  dec8h
 * of the types that have one is load + dec, so make blocks-check tests
 * the same code on the host. */
template <int TYPE> struct Row {
    static constexpr bool whole = false;
    const uint8_t *c;
    int t;
    __host__ __device__ __forceinline__ void load(const uint8_t *p, int lane_t)
    {
        c = p;
        t = lane_t;
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const { return dec8h<TYPE>(c, 32 * ch + 8 * t); }
};
/* A row chunk (2-byte aligned) read as aligned words: word(off) is the 4
 * bytes at c + off, off a multiple of 4, as one aligned load (or two) and a
 * funnel shift by the chunk's misalignment, computed once per chunk: on the
 * card three loads and two shifts for 8 bytes instead of four 2-byte loads
 * and two merges.  Reads up to 4 bytes past the last byte asked for: the
 * callers stay 12 bytes before the end of a chunk. */
struct Al {
    const uint32_t *q; /* c rounded down to 4 bytes */
    uint32_t sh;       /* 0 or 16: the misalignment in bits */
};
__host__ __device__ __forceinline__ Al al(const uint8_t *c)
{
    const uint32_t a = (uint32_t)(uintptr_t)c & 2u;
    return Al{(const uint32_t *)(c - a), 8 * a};
}
__host__ __device__ __forceinline__ uint32_t fshr(uint32_t lo, uint32_t hi, uint32_t sh)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
#endif
}
__host__ __device__ __forceinline__ uint2 ld8al(Al A, int off)
{
    const uint32_t w0 = A.q[off / 4], w1 = A.q[off / 4 + 1], w2 = A.q[off / 4 + 2];
    return make_uint2(fshr(w0, w1, A.sh), fshr(w1, w2, A.sh));
}
/* half2 of two 16-bit halves of a word: low (ch even) or high, in both */
__host__ __device__ __forceinline__ __half2 pick_h2(uint32_t w, int hi)
{
    const __half2 h = bits2h2(w);
    return hi ? __high2half2(h) : __low2half2(h);
}
/* codes (bytes of u, < 1024) minus k, times sc: the pair arithmetic of
 * codes_h2 with the offset folded into the subtraction ((1024 + q) - k is
 * exact), so the scale is the only per-sub-block operand */
__host__ __device__ __forceinline__ uint4 codes_off_h2(uint2 u, __half2 k, __half2 sc)
{
    const uint32_t w[4] = {bperm(u.x, 0x64646464u, 0x4140), bperm(u.x, 0x64646464u, 0x4342),
                           bperm(u.y, 0x64646464u, 0x4140), bperm(u.y, 0x64646464u, 0x4342)};
    uint32_t r[4];
WB_UNROLL
    for (int i = 0; i < 4; i++)
        r[i] = h2bits(__hmul2(__hsub2(bits2h2(w[i]), k), sc));
    return make_uint4(r[0], r[1], r[2], r[3]);
}
/* four byte codes (each < 1024) as two half2 of code - k, times d:
 * scales of four sub-blocks at once */
__host__ __device__ __forceinline__ uint2 scales4_h2(uint32_t codes, __half2 k, __half2 d)
{
    return make_uint2(h2bits(__hmul2(__hsub2(bits2h2(bperm(codes, 0x64646464u, 0x4140)), k), d)),
                      h2bits(__hmul2(__hsub2(bits2h2(bperm(codes, 0x64646464u, 0x4342)), k), d)));
}

/* Q2_K: chunk ch is sub-block s = 2 ch + (t >> 1): scale byte s (low
 * nibble times d, high nibble times dmin), bit pair ch & 3 of qs word
 * ch >> 2.  A 2-bit code's fp16 value has a zero low byte (0, 1, 2, 3 are
 * 0x0000, 0x3c00, 0x4000, 0x4200), so one byte permute of those four high
 * bytes, with the codes as its selector nibbles, gives a pair of exact
 * fp16 codes; then one hfma2 (dl * code - ml, the float path's dl and ml
 * rounded once each, as before). */
template <> struct Row<GGML_TYPE_Q2_K> {
    static constexpr bool whole = true;
    uint2 q0, q1;
    uint32_t dl[4], ml[4]; /* half2: chunks 2i, 2i + 1 */
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
        const Al A = al(b);
        q0 = ld8al(A, 16 + 8 * t);
        q1 = ld8al(A, 48 + 8 * t);
        const uint32_t x0 = A.q[0], x1 = A.q[1], x2 = A.q[2], x3 = A.q[3], x4 = A.q[4];
        const uint32_t sel = t >> 1 ? 0x7531u : 0x6420u; /* bytes p, p + 2 of two words */
        const uint32_t L0 = bperm(fshr(x0, x1, A.sh), fshr(x1, x2, A.sh), sel);
        const uint32_t L1 = bperm(fshr(x2, x3, A.sh), fshr(x3, x4, A.sh), sel);
        const __half2 d = __half2half2(__ushort_as_half((unsigned short)u16(b + 80)));
        const __half2 m = __hneg2(__half2half2(__ushort_as_half((unsigned short)u16(b + 82))));
        const __half2 k = h2of(1024.f);
        const uint2 d03 = scales4_h2(L0 & 0x0f0f0f0fu, k, d), d47 = scales4_h2(L1 & 0x0f0f0f0fu, k, d);
        const uint2 m03 = scales4_h2((L0 >> 4) & 0x0f0f0f0fu, k, m), m47 = scales4_h2((L1 >> 4) & 0x0f0f0f0fu, k, m);
        dl[0] = d03.x;
        dl[1] = d03.y;
        dl[2] = d47.x;
        dl[3] = d47.y;
        ml[0] = m03.x;
        ml[1] = m03.y;
        ml[2] = m47.x;
        ml[3] = m47.y;
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint2 w = ch < 4 ? q0 : q1;
        const int sh = 4 - 2 * (ch & 3); /* pair to bits 4, 5 of each byte: selector nibbles 1 and 3 */
        /* selector nibbles 1, 3: 4 + code (the table is the second
         * operand), 0 and 2: 0 (a zero byte of the first) */
        const uint32_t sx = ((sh >= 0 ? w.x << sh : w.x >> -sh) & 0x30303030u) | 0x40404040u;
        const uint32_t sy = ((sh >= 0 ? w.y << sh : w.y >> -sh) & 0x30303030u) | 0x40404040u;
        const uint32_t T = 0x42403c00u;
        const __half2 sc = pick_h2(dl[ch >> 1], ch & 1), of = pick_h2(ml[ch >> 1], ch & 1);
        return make_uint4(h2bits(hfma2(bits2h2(bperm(0u, T, sx)), sc, of)),
                          h2bits(hfma2(bits2h2(bperm(0u, T, sx >> 16)), sc, of)),
                          h2bits(hfma2(bits2h2(bperm(0u, T, sy)), sc, of)),
                          h2bits(hfma2(bits2h2(bperm(0u, T, sy >> 16)), sc, of)));
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q2_K>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_Q2_K> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
/* Q3_K: chunk ch is sub-block s = 2 ch + (t >> 1), bit pair ch & 3 of qs
 * word ch >> 2, bit ch of the hmask bytes.  The 6-bit scale of s: low
 * nibble of sc[s] (s < 8) or high nibble of sc[s - 8], high pair (ch >> 1)
 * of sc[8 + 2 (ch & 1) + (t >> 1)]; dl = d * (scale - 32) is the float
 * path's value rounded once (the product of an fp16 and a 6-bit integer is
 * exact in float, and hmul2 rounds it once). */
template <> struct Row<GGML_TYPE_Q3_K> {
    static constexpr bool whole = true;
    uint2 hm, q0, q1;
    uint32_t dl[4]; /* half2: scales of chunks 2i, 2i + 1 */
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
        const uint32_t p = (uint32_t)t >> 1;
        const Al A = al(b);
        hm = ld8al(A, 8 * t);
        q0 = ld8al(A, 32 + 8 * t);
        q1 = ld8al(A, 64 + 8 * t);
        /* sc = b + 96 .. 107; the fourth word only where the chunk is
         * misaligned (it ends 2 bytes before the chunk does), else word 2 again */
        const uint32_t x0 = A.q[24], x1 = A.q[25], x2 = A.q[26], x3 = A.q[26 + A.sh / 16];
        const uint32_t w0 = fshr(x0, x1, A.sh), w1 = fshr(x1, x2, A.sh), w2 = fshr(x2, x3, A.sh);
        /* bytes sc[p], sc[p + 2], sc[p + 4], sc[p + 6]: low nibbles chunks
         * 0..3, high nibbles 4..7 */
        const uint32_t L = bperm(w0, w1, p ? 0x7531u : 0x6420u);
        /* bytes sc[8 + p], sc[10 + p], twice: high pairs of chunks (0, 1), then (2, 3) two bits up */
        const uint32_t H = bperm(w2, 0u, p ? 0x3131u : 0x2020u);
        const uint32_t h03 = ((H & 0xffffu) | ((H >> 2) & 0xffff0000u)) & 0x03030303u;
        const uint32_t h47 = (((H >> 4) & 0xffffu) | ((H >> 6) & 0xffff0000u)) & 0x03030303u;
        const __half2 d = __half2half2(__ushort_as_half((unsigned short)u16(b + 108))), k = h2of(1056.f);
        const uint2 s03 = scales4_h2((L & 0x0f0f0f0fu) | h03 << 4, k, d);
        const uint2 s47 = scales4_h2(((L >> 4) & 0x0f0f0f0fu) | h47 << 4, k, d);
        dl[0] = s03.x;
        dl[1] = s03.y;
        dl[2] = s47.x;
        dl[3] = s47.y;
    }
    /* code = low pair + 4 * high bit, value dl * (code - 4).  The code is
     * assembled at bits P..P + 2 of each byte, P chosen per chunk so that
     * the hmask bit (bit ch) or the pair (bits 2 (ch & 3)) is already in
     * place: one shift a word instead of two.  (1024 + code 2^P) 2^-P -
     * (1024 2^-P + 4) = code - 4 is exact in one hfma2. */
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint2 w = ch < 4 ? q0 : q1;
        const int P = ch == 0 ? 0 : ch == 1 ? 2 : ch - 2, sq = 2 * (ch & 3) - P, sh = ch - 2 - P;
        const uint32_t mq = 0x03030303u << P, mh = 0x04040404u << P;
        const uint2 qs = sq >= 0 ? make_uint2(w.x >> sq, w.y >> sq) : make_uint2(w.x << -sq, w.y << -sq);
        const uint2 hb = sh >= 0 ? make_uint2(hm.x >> sh, hm.y >> sh) : make_uint2(hm.x << -sh, hm.y << -sh);
        const uint2 u = make_uint2((qs.x & mq) | (hb.x & mh), (qs.y & mq) | (hb.y & mh));
        const __half2 sc = pick_h2(dl[ch >> 1], ch & 1);
        const float f = (float)(1 << P);
        const __half2 m = h2of(1.f / f), k = h2of(-(1024.f / f + 4.f));
        const uint32_t v[4] = {bperm(u.x, 0x64646464u, 0x4140), bperm(u.x, 0x64646464u, 0x4342),
                               bperm(u.y, 0x64646464u, 0x4140), bperm(u.y, 0x64646464u, 0x4342)};
        uint32_t r[4];
WB_UNROLL
        for (int i = 0; i < 4; i++)
            r[i] = h2bits(__hmul2(P ? hfma2(bits2h2(v[i]), m, k) : __hadd2(bits2h2(v[i]), k), sc));
        return make_uint4(r[0], r[1], r[2], r[3]);
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q3_K>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_Q3_K> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q4_K>(const uint8_t *b, int e0)
{
    const int p = e0 >> 6, half = (e0 >> 5) & 1, l = e0 & 31;
    int sc, mn;
    k_scale_min(2 * p + half, b + 4, &sc, &mn);
    const float d1 = fmul(h2f(b), i2f(sc)), m1 = fmul(h2f(b + 2), i2f(mn));
    return codes_h2(nib(ld8b<8>(b + 16 + 32 * p + l), half), h2of(d1), h2of(-m1));
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q5_K>(const uint8_t *b, int e0)
{
    const int p = e0 >> 6, half = (e0 >> 5) & 1, l = e0 & 31, s = 2 * p + half;
    int sc, mn;
    k_scale_min(s, b + 4, &sc, &mn);
    const float d1 = fmul(h2f(b), i2f(sc)), m1 = fmul(h2f(b + 2), i2f(mn));
    uint2 u = nib(ld8b<8>(b + 48 + 32 * p + l), half);
    const uint2 qh = ld8b<8>(b + 16 + l);
    u.x |= ((qh.x >> s) & 0x01010101u) << 4;
    u.y |= ((qh.y >> s) & 0x01010101u) << 4;
    return codes_h2(u, h2of(d1), h2of(-m1));
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q6_K>(const uint8_t *b, int e0)
{
    const int h = e0 >> 7, k = (e0 >> 5) & 3, l = e0 & 31;
    const __half2 dl = h2of(fmul(h2f(b + 208), i2f((int8_t)b[192 + 8 * h + (l >> 4) + 2 * k])));
    uint2 u = nib(ld8b<2>(b + 64 * h + l + 32 * (k & 1)), k >= 2);
    const uint2 H = ld8b<2>(b + 128 + 32 * h + l);
    u.x |= ((H.x >> (2 * k)) & 0x03030303u) << 4;
    u.y |= ((H.y >> (2 * k)) & 0x03030303u) << 4;
    return codes_h2(u, dl, __hmul2(dl, h2of(-32.f)));
}

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

/* ---- fp16 decoders of the IQ types ---------------------------------------- */

/* magnitudes (bytes of m, each < 1024) with signs (byte i 0x80: element i
 * negative) -> fp16 pairs sc * (+-m): the sign goes onto the scale's sign
 * bits, one byte permute per pair puts two sign bytes under bits 15, 31 */
__host__ __device__ __forceinline__ uint4 mags_h2(uint2 m, uint2 sb, __half2 sc)
{
    const __half2 k1024 = __float2half2_rn(1024.f);
    const uint32_t scb = h2bits(sc);
    const uint32_t w[4] = {bperm(m.x, 0x64646464u, 0x4140), bperm(m.x, 0x64646464u, 0x4342),
                           bperm(m.y, 0x64646464u, 0x4140), bperm(m.y, 0x64646464u, 0x4342)};
    const uint32_t sg[4] = {bperm(sb.x, 0u, 0x1404), bperm(sb.x, 0u, 0x3424), bperm(sb.y, 0u, 0x1404),
                            bperm(sb.y, 0u, 0x3424)};
    uint32_t r[4];
    WB_UNROLL
    for (int k = 0; k < 4; k++)
        r[k] = h2bits(__hmul2(__hsub2(bits2h2(w[k]), k1024), bits2h2(scb ^ sg[k])));
    return make_uint4(r[0], r[1], r[2], r[3]);
}
/* eight sign bits -> bytes 0x80 / 0 */
__host__ __device__ __forceinline__ uint2 sign_bytes8(uint32_t s8)
{
    const uint2 b = bits_to_bytes(s8);
    return make_uint2(b.x << 7, b.y << 7);
}
__host__ __device__ __forceinline__ uint2 u64_2(uint64_t g) { return make_uint2((uint32_t)g, (uint32_t)(g >> 32)); }

/* The IQ grids' magnitudes as fp16 (exact: small integers), for Row: a
 * lookup then gives the half2 pairs directly, where mags_h2 spends a byte
 * permute and a subtraction per pair.  Built at compile time from the same
 * .inc tables; 4 KiB (IQ3_S, 4 halves an entry), 16 KiB (IQ2_S, 8), 8 KiB
 * (IQ2_XS) and 4 KiB (IQ2_XXS). */
__host__ __device__ constexpr uint32_t hbits(uint32_t m) /* fp16 bits of m, 1 <= m < 2048 */
{
    int e = 0;
    while (m >> (e + 1))
        e++;
    return (uint32_t)(15 + e) << 10 | ((m << (10 - e)) & 0x3ffu);
}
template <int N, int W> struct HTab {
    alignas(16) uint32_t v[N * W / 2]; /* entry i: halves W i .. W i + W - 1, two a word */
};
static constexpr uint32_t k_iq3s_grid[512] = {
#include "model/iq3s_grid.inc"
};
static constexpr uint64_t k_iq2s_grid[1024] = {
#include "model/iq2s_grid.inc"
};
template <int N, int W, typename G> constexpr HTab<N, W> htab(const G (&g)[N])
{
    HTab<N, W> t{};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < W / 2; k++)
            t.v[W / 2 * i + k] = hbits((uint32_t)(g[i] >> (16 * k)) & 0xffu) |
                                 hbits((uint32_t)(g[i] >> (16 * k + 8)) & 0xffu) << 16;
    return t;
}
static constexpr uint64_t k_iq2xxs_grid[256] = {
#include "model/iq2xxs_grid.inc"
};
static constexpr uint64_t k_iq2xs_grid[512] = {
#include "model/iq2xs_grid.inc"
};
static constexpr HTab<512, 4> iq3s_h = htab<512, 4>(k_iq3s_grid);
static constexpr HTab<256, 8> iq2xxs_h = htab<256, 8>(k_iq2xxs_grid);
static constexpr HTab<512, 8> iq2xs_h = htab<512, 8>(k_iq2xs_grid);
static constexpr HTab<1024, 8> iq2s_h = htab<1024, 8>(k_iq2s_grid);
static __device__ const HTab<512, 4> d_iq3s_h = htab<512, 4>(k_iq3s_grid);
static __device__ const HTab<1024, 8> d_iq2s_h = htab<1024, 8>(k_iq2s_grid);
static __device__ const HTab<256, 8> d_iq2xxs_h = htab<256, 8>(k_iq2xxs_grid);
static __device__ const HTab<512, 8> d_iq2xs_h = htab<512, 8>(k_iq2xs_grid);

/* fp16 pair k (elements 2k, 2k + 1) of a group of eight with signs s8 (bit
 * i: element i negative): the two sign bits under bits 15 and 31 by one
 * multiply (bit 2k -> 15, 2k + 1 -> 31; no other bit reaches those), one
 * XOR, one multiply by the scale */
__host__ __device__ __forceinline__ uint32_t signed_h2(uint32_t mags, uint32_t s8, int k, __half2 sc)
{
    const uint32_t m = (s8 * (0x40008000u >> (2 * k))) & 0x80008000u;
    return h2bits(__hmul2(bits2h2(mags ^ m), sc));
}
/* (1024 + v) / 8 - 128 = v / 8, exact */
__host__ __device__ __forceinline__ __half2 eighth_h2(uint32_t w)
{
    return hfma2(bits2h2(w), h2of(0.125f), h2of(-128.f));
}
/* The 2-bit IQ types' db = d * (0.5 + ls) / 4 = d * ((2 ls + 1) / 8) of
 * chunks 0..7 (nibble t >> 1 of scale byte ch, bytes of S): hmul2 of d and
 * the exact fp16 (2 ls + 1) / 8 rounds once, as the float path */
__host__ __device__ __forceinline__ void iq2_scales(uint2 S, int t, uint32_t dbits, uint32_t (&db)[4])
{
    const int n = 4 * (t >> 1);
    const uint32_t v03 = (((S.x >> n) & 0x0f0f0f0fu) << 1) | 0x01010101u;
    const uint32_t v47 = (((S.y >> n) & 0x0f0f0f0fu) << 1) | 0x01010101u;
    const __half2 d = __half2half2(__ushort_as_half((unsigned short)dbits));
    db[0] = h2bits(__hmul2(eighth_h2(bperm(v03, 0x64646464u, 0x4140)), d));
    db[1] = h2bits(__hmul2(eighth_h2(bperm(v03, 0x64646464u, 0x4342)), d));
    db[2] = h2bits(__hmul2(eighth_h2(bperm(v47, 0x64646464u, 0x4140)), d));
    db[3] = h2bits(__hmul2(eighth_h2(bperm(v47, 0x64646464u, 0x4342)), d));
}
/* eight signed fp16 values of one IQ2 grid entry g: signs s8, scale sc */
__host__ __device__ __forceinline__ uint4 iq2_signed8(uint4 g, uint32_t s8, __half2 sc)
{
    return make_uint4(signed_h2(g.x, s8, 0, sc), signed_h2(g.y, s8, 1, sc), signed_h2(g.z, s8, 2, sc),
                      signed_h2(g.w, s8, 3, sc));
}
/* Eight bytes at c + off for any even off (off + 12 within the chunk) */
__host__ __device__ __forceinline__ uint2 ld8at(Al A, int off)
{
    const int pos = off + (int)(A.sh / 8);
    const uint32_t s = (uint32_t)(pos & 2) * 8;
    const uint32_t w0 = A.q[pos / 4], w1 = A.q[pos / 4 + 1], w2 = A.q[pos / 4 + 2];
    return make_uint2(fshr(w0, w1, s), fshr(w1, w2, s));
}

/* IQ3_S: chunk ch is sub-block ch (scale nibble ch & 1 of byte 106 + ch / 2,
 * db = d * (1 + 2 ls)), its 4-groups 2t and 2t + 1: index bytes qs[8 ch +
 * 2t], qs[8 ch + 2t + 1], ninth bits 2t, 2t + 1 of qh[ch], signs byte
 * 4 ch + t.  load computes the eight db (hmul2 rounds d * (1 + 2 ls)
 * once, as the float path) and the ninth bits as bytes; dec looks up two
 * fp16 entries. */
template <> struct Row<GGML_TYPE_IQ3_S> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    uint2 h0, h1; /* byte c of word w: ninth bit of group 2t (h0) / 2t + 1 (h1) of chunk 4w + c */
    uint32_t db[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        const uint2 qh = ld8at(al(c), 66);
        h0 = make_uint2((qh.x >> (2 * t)) & 0x01010101u, (qh.y >> (2 * t)) & 0x01010101u);
        h1 = make_uint2((qh.x >> (2 * t + 1)) & 0x01010101u, (qh.y >> (2 * t + 1)) & 0x01010101u);
        const uint32_t S = u32(c + 106);
        const uint32_t ev = ((S & 0x0f0f0f0fu) << 1) | 0x01010101u, od = ((S >> 3) & 0x1e1e1e1eu) | 0x01010101u;
        const __half2 d = __half2half2(__ushort_as_half((unsigned short)u16(c))), k = h2of(1024.f);
        const uint2 s03 = scales4_h2(bperm(ev, od, 0x5140u), k, d), s47 = scales4_h2(bperm(ev, od, 0x7362u), k, d);
        db[0] = s03.x;
        db[1] = s03.y;
        db[2] = s47.x;
        db[3] = s47.y;
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        /* index = qs byte | ninth bit << 8: one byte permute (bytes 2, 3 of q are 0) */
        const uint32_t q = u16(b + 2 + 8 * ch + 2 * t), s8 = b[74 + 4 * ch + t];
        const uint32_t sel = 0x2200u | (uint32_t)(4 + (ch & 3)) << 4;
        const uint32_t i0 = bperm(q, ch < 4 ? h0.x : h0.y, sel), i1 = bperm(q, ch < 4 ? h1.x : h1.y, sel | 1u);
        const uint2 *tab = (const uint2 *)WB_TAB(iq3s_h).v;
        const uint2 g0 = tab[i0], g1 = tab[i1];
        const __half2 sc = pick_h2(db[ch >> 1], ch & 1);
        return make_uint4(signed_h2(g0.x, s8, 0, sc), signed_h2(g0.y, s8, 1, sc), signed_h2(g1.x, s8, 2, sc),
                          signed_h2(g1.y, s8, 3, sc));
    }
};
/* IQ2_S: chunk ch is sub-block ch, scale nibble t >> 1 of byte 74 + ch
 * (db = d * (0.5 + ls) / 4 = d * ((2 ls + 1) / 8): hmul2 of d and the exact
 * fp16 (2 ls + 1) / 8 rounds once, as the float path); group 4 ch + t:
 * index byte qs[4 ch + t] with bits 2t, 2t + 1 of qh[ch] above it, signs
 * byte 32 + 4 ch + t; one 16-byte fp16 entry. */
template <> struct Row<GGML_TYPE_IQ2_S> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    uint2 hi;     /* byte c of word w: index bits 8, 9 of chunk 4w + c */
    uint32_t db[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        const uint2 qh = ld8at(al(c), 66);
        hi = make_uint2((qh.x >> (2 * t)) & 0x03030303u, (qh.y >> (2 * t)) & 0x03030303u);
        iq2_scales(ld8b<2>(c + 74), t, u16(c), db);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint32_t q = b[2 + 4 * ch + t], s8 = b[34 + 4 * ch + t];
        const uint32_t i = bperm(q, ch < 4 ? hi.x : hi.y, 0x1100u | (uint32_t)(4 + (ch & 3)) << 4);
        return iq2_signed8(((const uint4 *)WB_TAB(iq2s_h).v)[i], s8, pick_h2(db[ch >> 1], ch & 1));
    }
};
/* IQ2_XS: group 4 ch + t is the u16 qs[4 ch + t]: 9-bit index, 7 signs
 * (the 8th makes their count even); scales as IQ2_S's (bytes 66..73) */
template <> struct Row<GGML_TYPE_IQ2_XS> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    uint32_t db[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        iq2_scales(ld8b<2>(c + 66), t, u16(c), db);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint32_t q = u16(b + 2 + 8 * ch + 2 * t);
        return iq2_signed8(((const uint4 *)WB_TAB(iq2xs_h).v)[q & 511], sign7(q >> 9), pick_h2(db[ch >> 1], ch & 1));
    }
};
/* IQ2_XXS: chunk ch is the record at 2 + 8 ch: index byte t, then a u32
 * of four 7-bit sign fields and the scale nibble (bits 28..31), so the
 * scale is read per chunk with the signs */
template <> struct Row<GGML_TYPE_IQ2_XXS> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    __half2 d;
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        d = __half2half2(__ushort_as_half((unsigned short)u16(c)));
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint8_t *rec = b + 2 + 8 * ch;
        const uint32_t w = u32(rec + 4), v = ((w >> 27) & 0x1eu) | 1u; /* 2 ls + 1 */
        const __half2 sc = __hmul2(eighth_h2((v | 0x6400u) * 0x00010001u), d);
        return iq2_signed8(((const uint4 *)WB_TAB(iq2xxs_h).v)[rec[t]], sign7((w >> (7 * t)) & 127), sc);
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ2_XXS>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_IQ2_XXS> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ2_XS>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_IQ2_XS> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ2_S>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_IQ2_S> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ3_S>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_IQ3_S> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
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
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_IQ4_XS>(const uint8_t *b, int e0)
{
    const int ib = e0 >> 5, e = e0 & 31;
    const int ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | ((u16(b + 2) >> (2 * ib)) & 3) << 4;
    const __half2 sc = h2of(fmul(h2f(b), i2f(ls - 32)));
    const uint2 nb = nib(ld8b<8>(b + 8 + 16 * ib + (e & 15)), e >> 4);
    return codes_h2(make_uint2(iq4_codes4(nb.x), iq4_codes4(nb.y)), sc, __hmul2(sc, h2of(-128.f)));
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
