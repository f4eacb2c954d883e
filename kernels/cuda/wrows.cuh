/* wrows.cuh: the card's per-tile row decoders of Q2_K..Q6_K, IQ2_XXS,
 * IQ2_XS, IQ2_S and IQ3_S (wb::Row), and the fp16 grid tables they use.
 * Part of wblocks.cuh, which includes it after its helpers (bperm, hfma2,
 * the load helpers) and before the launch switches; not included alone.
 * doc/cuda-kernels.md ("Per-tile rows") has the arithmetic and the
 * instruction counts. */
#ifndef STRATA_WROWS_CUH
#define STRATA_WROWS_CUH

#ifndef STRATA_WBLOCKS_CUH
#error "wrows.cuh is part of wblocks.cuh"
#endif

namespace wb {

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
/* codes (bytes of u, < 1024) minus k, times sc: (1024 + q) - k exact, so
 * a signed code's offset costs nothing and the scale is the only
 * per-sub-block operand */
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
/* Q4_K / Q5_K: chunk ch is sub-block ch for every lane (low nibbles of
 * qs word ch >> 2 for even ch, high for odd); the eight 6-bit scales and
 * mins (model/quant.h's q4_k_scale_min) of the 12 bytes at 4, byte-parallel:
 * sub-blocks 0..3 are the low 6 bits of bytes 0..3 and 4..7, 4..7 take
 * nibbles of bytes 8..11 and the top 2 bits of bytes 0..7.  dl = d * sc
 * and ml = dmin * mn rounded once (hmul2), as the float path. */
__host__ __device__ __forceinline__ void k_scales8(const uint8_t *b, uint32_t (&dl)[4], uint32_t (&ml)[4])
{
    const uint32_t dd = *(const uint32_t *)b, W0 = *(const uint32_t *)(b + 4), W1 = *(const uint32_t *)(b + 8),
                   W2 = *(const uint32_t *)(b + 12);
    const __half2 d = __low2half2(bits2h2(dd)), m = __hneg2(__high2half2(bits2h2(dd))), k = h2of(1024.f);
    const uint2 s03 = scales4_h2(W0 & 0x3f3f3f3fu, k, d), m03 = scales4_h2(W1 & 0x3f3f3f3fu, k, m);
    const uint2 s47 = scales4_h2((W2 & 0x0f0f0f0fu) | ((W0 >> 2) & 0x30303030u), k, d);
    const uint2 m47 = scales4_h2(((W2 >> 4) & 0x0f0f0f0fu) | ((W1 >> 2) & 0x30303030u), k, m);
    dl[0] = s03.x;
    dl[1] = s03.y;
    dl[2] = s47.x;
    dl[3] = s47.y;
    ml[0] = m03.x;
    ml[1] = m03.y;
    ml[2] = m47.x;
    ml[3] = m47.y;
}
/* Q4_K (d dmin scales[12] qs[128]; row chunks are 16-byte aligned) */
template <> struct Row<GGML_TYPE_Q4_K> {
    static constexpr bool whole = true;
    uint2 q[4]; /* qs bytes 32 p + 8 t .. + 7, p = 0..3 */
    uint32_t dl[4], ml[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
WB_UNROLL
        for (int p = 0; p < 4; p++)
            q[p] = ld8b<8>(b + 16 + 32 * p + 8 * t);
        k_scales8(b, dl, ml);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        return codes_h2(nib(q[ch >> 1], ch & 1), pick_h2(dl[ch >> 1], ch & 1), pick_h2(ml[ch >> 1], ch & 1));
    }
};
/* Q5_K (d dmin scales[12] qh[32] qs[128]): Q4_K plus bit ch of qh[8 t + i] */
template <> struct Row<GGML_TYPE_Q5_K> {
    static constexpr bool whole = true;
    uint2 q[4], qh;
    uint32_t dl[4], ml[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
WB_UNROLL
        for (int p = 0; p < 4; p++)
            q[p] = ld8b<8>(b + 48 + 32 * p + 8 * t);
        qh = ld8b<8>(b + 16 + 8 * t);
        k_scales8(b, dl, ml);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        uint2 u = nib(q[ch >> 1], ch & 1);
        u.x |= ((qh.x >> ch) & 0x01010101u) << 4;
        u.y |= ((qh.y >> ch) & 0x01010101u) << 4;
        return codes_h2(u, pick_h2(dl[ch >> 1], ch & 1), pick_h2(ml[ch >> 1], ch & 1));
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q4_K>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_Q4_K> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q5_K>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_Q5_K> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
/* Q6_K (ql[128] qh[64] scales[16] d): chunk ch is half h = ch >> 2,
 * quarter k = ch & 3: nibble k >= 2 of ql word 2 h + (k & 1), bit pair k of
 * qh word h, int8 scale 8 h + 2 k + (t >> 1).  The lane's eight scales once
 * per tile (bytes p, p + 2, .. of the 16, sign flipped to codes sc + 128,
 * hmul2 with d: the float path's d * sc rounded once); value dl * (q - 32)
 * with the 32 taken off in the subtraction, as Q3_K. */
template <> struct Row<GGML_TYPE_Q6_K> {
    static constexpr bool whole = true;
    uint2 ql[4], qh[2];
    uint32_t dl[4];
    __host__ __device__ __forceinline__ void load(const uint8_t *b, int t)
    {
        const Al A = al(b);
WB_UNROLL
        for (int i = 0; i < 4; i++)
            ql[i] = ld8al(A, 32 * i + 8 * t);
        qh[0] = ld8al(A, 128 + 8 * t);
        qh[1] = ld8al(A, 160 + 8 * t);
        /* scales = b + 192 .. 207; the fifth word only where the chunk is
         * misaligned (it ends 2 bytes before the chunk does) */
        const uint32_t x0 = A.q[48], x1 = A.q[49], x2 = A.q[50], x3 = A.q[51], x4 = A.q[51 + A.sh / 16];
        const uint32_t sel = t >> 1 ? 0x7531u : 0x6420u;
        const uint32_t L0 = bperm(fshr(x0, x1, A.sh), fshr(x1, x2, A.sh), sel) ^ 0x80808080u;
        const uint32_t L1 = bperm(fshr(x2, x3, A.sh), fshr(x3, x4, A.sh), sel) ^ 0x80808080u;
        const __half2 d = __half2half2(__ushort_as_half((unsigned short)u16(b + 208))), k = h2of(1152.f);
        const uint2 s03 = scales4_h2(L0, k, d), s47 = scales4_h2(L1, k, d);
        dl[0] = s03.x;
        dl[1] = s03.y;
        dl[2] = s47.x;
        dl[3] = s47.y;
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const int k = ch & 3;
        const uint2 H = qh[ch >> 2];
        uint2 u = nib(ql[2 * (ch >> 2) + (k & 1)], k >= 2);
        u.x |= ((H.x >> (2 * k)) & 0x03030303u) << 4;
        u.y |= ((H.y >> (2 * k)) & 0x03030303u) << 4;
        return codes_off_h2(u, h2of(1056.f), pick_h2(dl[ch >> 1], ch & 1));
    }
};
template <> __host__ __device__ __forceinline__ uint4 dec8h<GGML_TYPE_Q6_K>(const uint8_t *b, int e0)
{
    Row<GGML_TYPE_Q6_K> r;
    r.load(b, (e0 >> 3) & 3);
    return r.dec(e0 >> 5);
}
/* The IQ grids' magnitudes as fp16 (exact: small integers), for Row: a
 * lookup then gives the half2 pairs directly, where mags_h2 spends a byte
 * permute and a subtraction per pair.  Built at compile time from the same
 * .inc tables; 8 KiB (IQ2_XS) and 4 KiB (IQ2_XXS).  IQ3_S and IQ2_S look
 * up their byte grids instead (Grid<IQ3_S>, Grid<IQ2_S>, below):
 * replicated so their lookups collide less in the banks; the fp16 tables
 * would not fit replicated. */
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
static constexpr HTab<256, 8> iq2xxs_h = htab<256, 8>(k_iq2xxs_grid);
static constexpr HTab<512, 8> iq2xs_h = htab<512, 8>(k_iq2xs_grid);
static __device__ const HTab<256, 8> d_iq2xxs_h = htab<256, 8>(k_iq2xxs_grid);
static __device__ const HTab<512, 8> d_iq2xs_h = htab<512, 8>(k_iq2xs_grid);

/* The grids in shared memory.  A warp's 32 lookups of a tile chunk hit
 * random entries: read from the global table (through L1) they cost about
 * one L1 wavefront per distinct 128-byte line, ~8 per quarter-warp of
 * 16-byte IQ2 entries, and that, not the instruction count (IQ2_S 406
 * SASS per tile and lane, fewer than Q2_K's 439), held IQ2_S and IQ3_S at
 * half the bytes per second of the K-quants.  From shared memory the same
 * lookups cost the bank conflicts of 8 (16 for IQ3_S's 8-byte entries)
 * random entries, a few wavefronts.  So the matrix kernels copy the grid
 * of their type into their shared memory (grid_init, once per block, at
 * offset 0 of the dynamic shared memory unless said otherwise: GRID_BYTES
 * ahead of the rest) and give it to the rows (set_grid); the host, and a
 * caller that passes no copy, read the global tables. */
template <int TYPE> struct Grid {
    static constexpr int bytes = 0;
};
#define WB_GRID(T, tab)                                                                                  \
    template <> struct Grid<T> {                                                                         \
        static constexpr int bytes = (int)sizeof(tab);                                                   \
        __device__ static const uint4 *src() { return (const uint4 *)d_##tab.v; }                      \
    };
/* IQ3_S: its 512 four-byte entries (the byte grid, 2 KiB) in 16 copies,
 * entry i of copy r at word 16 i + r, lane l reading copy l % 16: a
 * warp's LDS.32 is then at most two lanes to a bank (lanes l and l + 16
 * when their entries have the same parity), ~2 wavefronts, where the fp16
 * table's random LDS.64 took ~6; 32 KiB. */
template <> struct Grid<GGML_TYPE_IQ3_S> {
    static constexpr int bytes = 16 * 512 * 4;
};
/* IQ2_S: its 1024 eight-byte entries (the byte grid, 8 KiB) in 8 copies,
 * entry i of copy r at 64 i + 8 r, lane l reading copy l % 8: a warp's
 * LDS.64 (two phases of 16 lanes) has two lanes per copy in a phase, ~4
 * wavefronts where the single fp16 table's random LDS.128 took ~10 (a
 * simulation of uniform random indices); 64 KiB, so the rings of IQ2_S
 * give up a tile (blk_depth). */
template <> struct Grid<GGML_TYPE_IQ2_S> {
    static constexpr int copies = 8;
    static constexpr int bytes = copies * 1024 * 8;
};
WB_GRID(GGML_TYPE_IQ2_XS, iq2xs_h)
WB_GRID(GGML_TYPE_IQ2_XXS, iq2xxs_h)
#undef WB_GRID
/* Shared-memory bytes of a type's grid (0: none). */
__host__ __device__ constexpr int grid_bytes(int type)
{
    return type == GGML_TYPE_IQ3_S     ? Grid<GGML_TYPE_IQ3_S>::bytes
           : type == GGML_TYPE_IQ2_S   ? Grid<GGML_TYPE_IQ2_S>::bytes
           : type == GGML_TYPE_IQ2_XS  ? Grid<GGML_TYPE_IQ2_XS>::bytes
           : type == GGML_TYPE_IQ2_XXS ? Grid<GGML_TYPE_IQ2_XXS>::bytes
                                       : 0;
}
#ifdef __CUDACC__
/* Copy TYPE's grid to dst (shared memory, 16-byte aligned) with the whole
 * block; the caller syncs before the first lookup. */
template <int TYPE> __device__ __forceinline__ void grid_init(uint8_t *dst)
{
    if constexpr (TYPE == GGML_TYPE_IQ3_S) {
        /* the 16 copies of an entry are 4 adjacent 16-byte words: one load
         * and one 16-byte store each, and the loads of a thread in flight
         * together (a word at a time took 16 dependent rounds at 512 threads) */
#pragma unroll 4
        for (int i = threadIdx.x; i < 4 * 512; i += blockDim.x) {
            const uint32_t v = d_iq3s_grid[i >> 2];
            ((uint4 *)dst)[i] = make_uint4(v, v, v, v);
        }
    } else if constexpr (TYPE == GGML_TYPE_IQ2_S) {
        /* entry e's copies r, r + 1 as one 16-byte word */
        constexpr int W = Grid<TYPE>::copies / 2;
#pragma unroll 8
        for (int i = threadIdx.x; i < W * 1024; i += blockDim.x) {
            const uint64_t v = d_iq2s_grid[i / W];
            ((uint4 *)dst)[i] = make_uint4((uint32_t)v, (uint32_t)(v >> 32), (uint32_t)v, (uint32_t)(v >> 32));
        }
    } else if constexpr (Grid<TYPE>::bytes > 0) {
        const uint4 *src = Grid<TYPE>::src();
        for (int i = threadIdx.x; i < Grid<TYPE>::bytes / 16; i += blockDim.x)
            ((uint4 *)dst)[i] = src[i];
    }
}
#endif

/* fp16 pair k (elements 2k, 2k + 1) of a group of eight with signs s8 (bit
 * i: element i negative): the two sign bits under bits 15 and 31 by one
 * multiply (bit 2k -> 15, 2k + 1 -> 31; no other bit reaches those), one
 * XOR, one multiply by the scale */
__host__ __device__ __forceinline__ uint32_t signed_h2(uint32_t mags, uint32_t s8, int k, __half2 sc)
{
    const uint32_t m = (s8 * (0x40008000u >> (2 * k))) & 0x80008000u;
    return h2bits(__hmul2(bits2h2(mags ^ m), sc));
}
/* The same pair from the magnitudes' magic halves x = 1024 + m (a byte
 * permute of the byte grid): one hfma2 x * sc + nk with nk = -1024 sc
 * (exact: a power of two times sc) is m * sc rounded once, as hmul2 of the
 * exact m would round it, and the sign goes on after the rounding (which
 * is symmetric): 4 instructions a pair where the subtraction of 1024, the
 * sign and the hmul2 took 5.  Exact while 1024 sc is finite (|sc| < 64,
 * weights under 960 in magnitude; past that inf or NaN, never a wrong
 * finite value). */
__host__ __device__ __forceinline__ uint32_t signed_mag_h2(uint32_t x, uint32_t s8, int k, __half2 sc, __half2 nk)
{
    const uint32_t m = (s8 * (0x40008000u >> (2 * k))) & 0x80008000u;
    return h2bits(hfma2(bits2h2(x), sc, nk)) ^ m;
}
/* Eight values of a group: magnitude bytes 0..3 in lo, 4..7 in hi, signs
 * s8, scale sc2 (a half2 word of two chunks' scales, half hi_half of it).
 * -1024 sc is taken of the whole word, so the chunks 2i and 2i + 1 that
 * share it share the hmul2. */
__host__ __device__ __forceinline__ uint4 signed_mags8(uint32_t lo, uint32_t hi, uint32_t s8, uint32_t sc2, int hi_half)
{
    const __half2 sc = pick_h2(sc2, hi_half), nk = pick_h2(h2bits(__hmul2(bits2h2(sc2), h2of(-1024.f))), hi_half);
    return make_uint4(signed_mag_h2(bperm(lo, 0x64646464u, 0x4140), s8, 0, sc, nk),
                      signed_mag_h2(bperm(lo, 0x64646464u, 0x4342), s8, 1, sc, nk),
                      signed_mag_h2(bperm(hi, 0x64646464u, 0x4140), s8, 2, sc, nk),
                      signed_mag_h2(bperm(hi, 0x64646464u, 0x4342), s8, 3, sc, nk));
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
    const uint8_t *gt; /* on the card: this lane's copy of the byte grid in shared memory (set_grid) */
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        gt = nullptr;
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
        /* four magnitude bytes per index from the replicated byte grid
         * (Grid<IQ3_S>: entry i of copy r at word 16 i + r, so a warp's 32
         * lookups are at most two to a bank), then as fp16 pairs: 1024 + m
         * by a byte permute, scaled and signed by signed_mag_h2 (the bits
         * of the fp16 table's m times sc) */
#ifdef __CUDA_ARCH__
        const uint32_t m0 = *(const uint32_t *)(gt + (i0 << 6)), m1 = *(const uint32_t *)(gt + (i1 << 6));
#else
        const uint32_t m0 = k_iq3s_grid[i0], m1 = k_iq3s_grid[i1];
#endif
        return signed_mags8(m0, m1, s8, db[ch >> 1], ch & 1);
    }
};
/* IQ2_S: chunk ch is sub-block ch, scale nibble t >> 1 of byte 74 + ch
 * (db = d * (0.5 + ls) / 4 = d * ((2 ls + 1) / 8): hmul2 of d and the exact
 * fp16 (2 ls + 1) / 8 rounds once, as the float path); group 4 ch + t:
 * index byte qs[4 ch + t] with bits 2t, 2t + 1 of qh[ch] above it, signs
 * byte 32 + 4 ch + t; one 8-byte entry of the byte grid (Grid<IQ2_S>),
 * made fp16, scaled and signed by signed_mag_h2: the bits of the fp16
 * table's m times db. */
template <> struct Row<GGML_TYPE_IQ2_S> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    uint2 hi;     /* byte c of word w: index bits 8, 9 of chunk 4w + c */
    uint32_t db[4];
    const uint8_t *gt; /* on the card: this lane's copy of the byte grid in shared memory (set_grid) */
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        gt = nullptr;
        const uint2 qh = ld8at(al(c), 66);
        hi = make_uint2((qh.x >> (2 * t)) & 0x03030303u, (qh.y >> (2 * t)) & 0x03030303u);
        iq2_scales(ld8b<2>(c + 74), t, u16(c), db);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint32_t q = b[2 + 4 * ch + t], s8 = b[34 + 4 * ch + t];
        const uint32_t i = bperm(q, ch < 4 ? hi.x : hi.y, 0x1100u | (uint32_t)(4 + (ch & 3)) << 4);
#ifdef __CUDA_ARCH__
        const uint2 m = *(const uint2 *)(gt + i * (8 * Grid<GGML_TYPE_IQ2_S>::copies));
#else
        const uint2 m = make_uint2((uint32_t)k_iq2s_grid[i], (uint32_t)(k_iq2s_grid[i] >> 32));
#endif
        return signed_mags8(m.x, m.y, s8, db[ch >> 1], ch & 1);
    }
};
/* IQ2_XS: group 4 ch + t is the u16 qs[4 ch + t]: 9-bit index, 7 signs
 * (the 8th makes their count even); scales as IQ2_S's (bytes 66..73) */
template <> struct Row<GGML_TYPE_IQ2_XS> {
    static constexpr bool whole = true;
    const uint8_t *b;
    int t;
    uint32_t db[4];
    const uint4 *gt;
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        gt = (const uint4 *)WB_TAB(iq2xs_h).v;
        iq2_scales(ld8b<2>(c + 66), t, u16(c), db);
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint32_t q = u16(b + 2 + 8 * ch + 2 * t);
        return iq2_signed8(gt[q & 511], sign7(q >> 9), pick_h2(db[ch >> 1], ch & 1));
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
    const uint4 *gt;
    __host__ __device__ __forceinline__ void load(const uint8_t *c, int lane_t)
    {
        b = c;
        t = lane_t;
        gt = (const uint4 *)WB_TAB(iq2xxs_h).v;
        d = __half2half2(__ushort_as_half((unsigned short)u16(c)));
    }
    __host__ __device__ __forceinline__ uint4 dec(int ch) const
    {
        const uint8_t *rec = b + 2 + 8 * ch;
        const uint32_t w = u32(rec + 4), v = ((w >> 27) & 0x1eu) | 1u; /* 2 ls + 1 */
        const __half2 sc = __hmul2(eighth_h2((v | 0x6400u) * 0x00010001u), d);
        return iq2_signed8(gt[rec[t]], sign7((w >> (7 * t)) & 127), sc);
    }
};
/* Point a row's lookups at a grid copy (grid_init); no-op for types
 * without a grid. */
template <int TYPE> __host__ __device__ __forceinline__ void set_grid(Row<TYPE> &r, const uint8_t *tab, int lane)
{
    if constexpr (TYPE == GGML_TYPE_IQ3_S)
        r.gt = tab + 4 * (lane & 15); /* this lane's copy */
    else if constexpr (TYPE == GGML_TYPE_IQ2_S)
        r.gt = tab + 8 * (lane % Grid<TYPE>::copies);
    else if constexpr (Grid<TYPE>::bytes > 0)
        r.gt = (decltype(r.gt))tab;
}
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

} /* namespace wb */

#endif
