/* attention_nl.cuh: the fast attention kernel's V decode for k8v4nl (the
 * k8v4r2 cache's IQ4_NL-coded V): the codes' levels looked up by byte
 * permutes, the scale applied and the mantissa's bias taken off with one
 * HFMA2 per pair of values (doc/cuda-attention.md, "The cache the kernels
 * read").
 *
 * Device code only; included once, by attention_mma.cuh, after the step
 * and warp-state types it works on. */
#ifndef STRATA_ATTENTION_NL_CUH
#define STRATA_ATTENTION_NL_CUH

/* Eight 4-bit codes packed as a V word (byte j: codes 2j, 2j+1 in its low
 * and high nibble) to their IQ4_NL levels plus 128, as bytes: lv[0] holds
 * codes 0-3, lv[1] codes 4-7, in code order.  The codes are prmt selectors
 * as they lie: a prmt looks up one of 8 bytes per selector nibble, once in
 * the table of levels 0-7 and once in 8-15 (bit 3 masked off: prmt would
 * read it as "replicate the sign"), and a LOP3 takes, per byte, the second
 * lookup where the code's bit 3 is set.  That byte mask is itself a prmt in
 * sign-replicating mode: bit 3 of an odd code is the msb of its byte of x,
 * of an even code the msb of that byte of x << 4.  11 instructions for 8
 * levels, where picking the selectors out of the nibbles one byte at a
 * time took about 24.  The bias of 128 makes the byte the mantissa of
 * 1024 + 128 + level (the int8 trick K uses, without its xor). */
__device__ __forceinline__ void att_nl_word(uint32_t x, uint32_t (&lv)[2])
{
    const uint32_t T0 = 0x3f2d1801u, T1 = 0x766a5d4fu; /* -127 -104 -83 -65 | -49 -35 -22 -10 */
    const uint32_t T2 = 0xa6998d81u, T3 = 0xf1d9c5b5u; /* 1 13 25 38 | 53 69 89 113 */
    const uint32_t m = x & 0x77777777u, x4 = x << 4;
    const uint32_t m0 = prmt(x4, x, 0xd9c8u), m1 = prmt(x4, x, 0xfbeau); /* 0xff: bit 3 set */
    lv[0] = (prmt(T0, T1, m) & ~m0) | (prmt(T2, T3, m) & m0);
    lv[1] = (prmt(T0, T1, m >> 16) & ~m1) | (prmt(T2, T3, m >> 16) & m1);
}

/* att_pv for k8v4nl.  The codes' level bytes (level + 128) become fp16
 * mantissas as K's do, y = 1152 + level, and one HFMA2 applies the token's
 * scale d and takes 1152 d off: y d - 1152 d = level d, exact before its
 * one rounding.  That needs -1152 d exact in fp16, which the store
 * guarantees for every scale it writes (kv_nl_scale in kernels/cpu/kv.c:
 * 7 significant bits, 9 times which fits fp16's 11, and |d| <= 56.5, so
 * 1152 d <= 65088), and saved files are checked for (park/persist_file.c).
 * The prefill instances decode this way only.  The decode instances still
 * vote per pair of steps (att_nl_fast) and take HSUB2 (y - 1152 = level,
 * exact) then HMUL2 on a step with any other scale, the same value under
 * the same rounding: no scale the store writes goes there, but without
 * the vote the compiler schedules the decode loop worse (at 32K +4.0 %
 * against k8v4 where it is +2.1..2.5 % with it; doc/cuda-attention.md).
 *
 * The lookup (att_nl_word) runs on the two tokens' bytes already paired
 * (a0 b0 a1 b1 | a2 b2 a3 b3): the level bytes of a pair come out in the
 * order the fp16 pairs want, so a prmt per A register puts them into the
 * mantissas (two prmts per token pair and word, where pairing the looked-up
 * levels took two per m-tile). */
template <bool FUSED, int HD, int NT>
__device__ __forceinline__ void att_pv_nl_tiles(att_warp_state<HD, NT> &ws,
                                                const att_step<KV_K8V4NL, HD> &st,
                                                const uint32_t (&pb)[NT][2], uint32_t dvab,
                                                uint32_t dvcd)
{
    const uint32_t nab = h2mul(dvab, H2_M1152), ncd = h2mul(dvcd, H2_M1152);
#pragma unroll
    for (int w = 0; w < HD / 64; w++) {
        uint32_t lab[2][2], lcd[2][2]; /* level bytes: [half of the word][..] */
        att_nl_word(prmt(st.v[0][w], st.v[1][w], 0x5140u), lab[0]);
        att_nl_word(prmt(st.v[0][w], st.v[1][w], 0x7362u), lab[1]);
        att_nl_word(prmt(st.v[2][w], st.v[3][w], 0x5140u), lcd[0]);
        att_nl_word(prmt(st.v[2][w], st.v[3][w], 0x7362u), lcd[1]);
#pragma unroll
        for (int bs = 0; bs < 4; bs++) {
            /* byte bs of the word: codes 2bs (row g, low nibble) and 2bs+1
             * (row g+8): [a lo, a hi, b lo, b hi] in word lab[bs/2][bs%2] */
            const uint32_t ab = lab[bs >> 1][bs & 1], cd = lcd[bs >> 1][bs & 1];
            uint32_t A[4];
            A[0] = prmt(ab, 0x64646464u, 0x4240u);
            A[1] = prmt(ab, 0x64646464u, 0x4341u);
            A[2] = prmt(cd, 0x64646464u, 0x4240u);
            A[3] = prmt(cd, 0x64646464u, 0x4341u);
            if constexpr (FUSED) {
                A[0] = h2fma(A[0], dvab, nab);
                A[1] = h2fma(A[1], dvab, nab);
                A[2] = h2fma(A[2], dvcd, ncd);
                A[3] = h2fma(A[3], dvcd, ncd);
            } else { /* y - 1152 = level exactly: the same one rounding */
                A[0] = h2mul(h2sub(A[0], H2_1152), dvab);
                A[1] = h2mul(h2sub(A[1], H2_1152), dvab);
                A[2] = h2mul(h2sub(A[2], H2_1152), dvcd);
                A[3] = h2mul(h2sub(A[3], H2_1152), dvcd);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mma16816(ws.o[4 * w + bs][nt], A, pb[nt][0], pb[nt][1]);
        }
    }
}

/* Whether every V scale of two steps, as the lane holds them, allows the
 * one-FMA decode, voted over the warp: |d| < 57 (0x5320; 1152 x 56.5 still
 * fits fp16) with the low 4 mantissa bits clear.  The OR of the magnitudes
 * is at least their max and has a low bit set where any scale does; scales
 * past the context (stale bytes) count too.  A false alarm only takes the
 * slower path, to the same bits. */
template <int KT, int HD>
__device__ __forceinline__ bool att_nl_fast(const att_step<KT, HD> &s0,
                                            const att_step<KT, HD> &s1)
{
    uint32_t any = 0;
#pragma unroll
    for (int q = 0; q < 4; q++)
        any |= s0.dv[q] | s1.dv[q];
    const bool slow = (any & 0x7fffu) >= 0x5320u || (any & 0xfu) != 0u;
    return !__any_sync(0xffffffffu, slow);
}

template <int HD, int NT>
__device__ __forceinline__ void att_pv_nl(att_warp_state<HD, NT> &ws,
                                          const att_step<KV_K8V4NL, HD> &st,
                                          const uint32_t (&pb)[NT][2], int32_t T, int32_t t_end,
                                          int c, bool fast)
{
    uint32_t dv[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int32_t t = T + 2 * c + (q & 1) + 8 * (q >> 1);
        dv[q] = t < t_end ? st.dv[q] : 0u;
    }
    const uint32_t dvab = dv[0] | (dv[1] << 16), dvcd = dv[2] | (dv[3] << 16);
    if (fast)
        att_pv_nl_tiles<true, HD, NT>(ws, st, pb, dvab, dvcd);
    else
        att_pv_nl_tiles<false, HD, NT>(ws, st, pb, dvab, dvcd);
}

#endif
