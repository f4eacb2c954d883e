/* dot_q8_tile_avx2.c: the int8-activation kernels (kernels/cpu/act_q8.h) in
 * tiles of R weight rows by C activation rows, in two twins: AVX2
 * (maddubs + madd, functions *_avx2) and AVX512-VNNI (dpbusd on 256-bit
 * registers, functions *_avx512); the same integers, the same bits.  Each
 * comes for the int8 codes (q8rows_*) and for the 16-bit codes (q16rows_*,
 * act_q16): those widen the decoded weight sub-block to int16 once
 * (Q8_WIDEN) and dot it with madd (AVX2) or dpwssd (VNNI) in int16 pairs;
 * the rest is shared.
 *
 * Inside a tile each 32-weight sub-block of a weight row is decoded once
 * (dot_q8_avx2.h) and met by the C activation rows' codes.  C is 8 (then
 * 4, 2, 1 for what is left of n); R is 1 (Q8_RPROMPT, Q8_RDECODE): more
 * weight rows saved nothing measurable (an activation block is a memory
 * operand of maddubs / dpbusd either way) and, with one activation row,
 * interleaved weight rows lost the hardware prefetch (doc/cpu.md).
 *
 * The per-block float factors are made once per weight row and sub-block
 * for all C activation rows: the transposed scales of the tile's
 * activation rows (q8_col: d and s of C rows side by side, built once per
 * tile of activation rows) are multiplied by the weight block's dw in one
 * vector, and its s terms (cw * s, Q4_1's minimum, the Q4_0 / Q5_0
 * offsets, Q4_K's minima) are added in one vector FMA; per output element
 * and sub-block the work is the integer dot, a convert and one FMA.
 *
 * Reduction order, per output element (the plain C twin in dot_q8_scalar.c
 * does exactly these operations, so the twins agree bit for bit), with
 * K = the sub-block's parity (two chains, so a single row is not bound by
 * the FMA latency):
 *     acc_K[8 lanes] = fma(float(int dot of lane k's 4 codes * mul), dw * d_x, acc_K)
 *     corr_K         = fma(cw, s_x, corr_K)
 * sub-block after sub-block in column order, then with a = acc_0 + acc_1
 * lane by lane
 *     y = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) + (corr_0 + corr_1).
 * Nothing in it depends on R, C, the position in the tile, n, the pass
 * over the columns or the thread, so a decode step and a prompt row give
 * the same bits.
 *
 * Every function here is compiled for AVX2/FMA/F16C (the *_avx512 ones
 * for AVX512F/VL/VNNI as well) and named accordingly (the ISA rule of
 * dot_kernels.h); they run only after fast_cpu_avx2_ok() /
 * fast_cpu_vnni_ok(). */
#include <math.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_q8_avx2.h"

#ifndef Q8_CMAX
#define Q8_CMAX 8     /* activation rows per tile: 8, 4, 2 or 1 */
#endif
#ifndef Q8_RPROMPT
#define Q8_RPROMPT 1  /* weight rows per tile with several activation rows */
#endif
#ifndef Q8_RDECODE
#define Q8_RDECODE 1  /* weight rows per tile with one */
#endif
#define Q8_RMAX (Q8_RPROMPT > Q8_RDECODE ? Q8_RPROMPT : Q8_RDECODE)
/* Sub-blocks whose transposed activation scales sit on the stack (16 KiB,
 * 8192 columns); longer rows are done in passes of this many (a multiple
 * of 8, so 256-weight super-blocks never straddle two passes). */
#define Q8_CHUNK 256

/* Sub-block s of the tile's activation rows: d and s of row t in lane t
 * (lanes past the tile's rows are 0). */
typedef struct q8_col {
    float d[8], s[8];
} q8_col;

/* A tile's accumulators between passes. */
typedef struct q8_acc {
    __m256 a[2][Q8_RMAX][8];
    __m256 c[2][Q8_RMAX];
    float c1[2][Q8_RMAX]; /* the s terms with one activation row */
} q8_acc;

#define DEFINE_COLS_FILL(PRE)                                                               \
    AVX2_INLINE void PRE##_cols_fill_avx2(const act_##PRE *x, int64_t nsub, int64_t nt,     \
                                          int64_t s0, int64_t s1, q8_col *xc)               \
    {                                                                                       \
        for (int64_t s = s0; s < s1; s++) {                                                 \
            q8_col *c = xc + (s - s0);                                                      \
            for (int t = 0; t < 8; t++) {                                                   \
                c->d[t] = t < nt ? x[t * nsub + s].d : 0.0f;                                \
                c->s[t] = t < nt ? x[t * nsub + s].s : 0.0f;                                \
            }                                                                               \
        }                                                                                   \
    }
DEFINE_COLS_FILL(q8)
DEFINE_COLS_FILL(q16)

/* Which kernels read 16-bit codes. */
#define Q8_LO_q8 0
#define Q8_LO_q16 1

/* The factors of a sub-block for weight row r: lane t of fb[r] = dw * d_x[t]
 * and corr[r] += cw * s_x (lane t: activation row t); with one activation
 * row in scalars, the same products and the same fused multiply-add.
 * With C > 1 the products come from FT, a table made ahead of the dots
 * (Q8T_TABLE_ROW), not stored in the block and read back at once as 8
 * broadcasts: with 8 activation rows AVX2 had no register left for the
 * pointers to those lanes, and every broadcast went through a pointer
 * reloaded from the stack and a store just made (Q5_0 896 x 896, n = 128,
 * one core: 27.7 -> 32.9 GMAC/s, doc/cpu.md).  The correction's FMA stays
 * here, in its order. */
#define Q8T_FACTORS_AHEAD(C, r, DW, CW, S, K, FT)                                           \
    if (C == 1) {                                                                           \
        fb[r] = NULL;                                                                       \
        fs[r] = (DW) * x[S].d;                                                              \
        corr1[K][r] = fmaf(CW, x[S].s, corr1[K][r]);                                        \
    } else {                                                                                \
        fb[r] = (FT);                                                                       \
        corr[K][r] = _mm256_fmadd_ps(_mm256_set1_ps(CW), _mm256_loadu_ps(xc[(S) - s0].s),  \
                                     corr[K][r]);                                           \
    }

/* One entry of such a table: the vector of products dw * d_x for sub-block S. */
#define Q8T_TABLE_ROW(FT, DW, S)                                                            \
    _mm256_storeu_ps(FT, _mm256_mul_ps(_mm256_set1_ps(DW), _mm256_loadu_ps(xc[(S) - s0].d)))

/* The dots of sub-block S: every activation row of the tile against every
 * decoded weight row (wv codes, wa their magnitudes, mul the multipliers). */
#define Q8T_DOTS(SIGNED, MULQ, LO, ISA, R, C, S, K)                                         \
    _Pragma("GCC unroll 8") for (int t = 0; t < C; t++) {                                   \
        const __m256i xv = Q8_LOADX(LO, x[t * nsub + (S)], 0);                              \
        const __m256i x1 = Q8_LOADX(LO, x[t * nsub + (S)], 1);                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            const __m256i xr = SIGNED && !LO ? _mm256_sign_epi8(xv, wv[r]) : xv;            \
            const __m256i p = LO ? Q16_IDOT_##ISA(w16[r][0], w16[r][1], xv, x1)             \
                                 : Q8_IDOT_##ISA(wa[r], xr, mul[r], MULQ);                  \
            const __m256 f = C == 1 ? _mm256_set1_ps(fs[r]) : _mm256_broadcast_ss(&fb[r][t]); \
            acc[K][r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), f, acc[K][r][t]);         \
        }                                                                                   \
    }

/* An activation block's codes: the int8 ones in one register (H unused),
 * or half H of the 16-bit ones (elements 16 H .. 16 H + 15). */
#define Q8_LOADX(LO, B, H)                                                                  \
    (LO ? _mm256_loadu_si256((const __m256i *)(Q8_V16(B) + 16 * (H)))                       \
        : _mm256_loadu_si256((const __m256i *)Q8_V8(B)))

/* The decoded weight sub-block w (bytes) widened to two registers of 16
 * int16 (elements 0..15, 16..31), each half times its multiplier (Q6_K's
 * per-16 scales: mul's low and high 128 bits), for the 16-bit codes. */
#define Q8_WIDEN(SIGNED, MULQ, W, MUL, OUT)                                                 \
    {                                                                                       \
        const __m128i w0_ = _mm256_castsi256_si128(W), w1_ = _mm256_extracti128_si256(W, 1); \
        OUT[0] = SIGNED ? _mm256_cvtepi8_epi16(w0_) : _mm256_cvtepu8_epi16(w0_);            \
        OUT[1] = SIGNED ? _mm256_cvtepi8_epi16(w1_) : _mm256_cvtepu8_epi16(w1_);            \
        if (MULQ) {                                                                         \
            OUT[0] = _mm256_mullo_epi16(OUT[0], _mm256_permute4x64_epi64(MUL, 0x44));       \
            OUT[1] = _mm256_mullo_epi16(OUT[1], _mm256_permute4x64_epi64(MUL, 0xee));       \
        }                                                                                   \
    }

/* The accumulators start at 0 on the first pass, else where the last
 * pass left them in st. */
#define Q8T_LOAD(R, C)                                                                      \
    __m256 acc[2][R][C], corr[2][R];                                                        \
    float corr1[2][R];                                                                      \
    _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)                                     \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                   \
        corr[k][r] = s0 ? st->c[k][r] : _mm256_setzero_ps();                                \
        corr1[k][r] = s0 ? st->c1[k][r] : 0.0f;                                             \
        _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                                 \
            acc[k][r][t] = s0 ? st->a[k][r][t] : _mm256_setzero_ps();                       \
    }

/* After the last pass the results, else the accumulators into st:
 *     y = hsum(acc even + acc odd) + (corr even + corr odd) */
#define Q8T_STORE(R, C)                                                                     \
    if (s1 == nsub) {                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            float c[8];                                                                     \
            _mm256_storeu_ps(c, _mm256_add_ps(corr[0][r], corr[1][r]));                     \
            if (C == 1)                                                                     \
                c[0] = corr1[0][r] + corr1[1][r];                                           \
            _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                             \
                y[t * ystride + r] = hsum_avx2(_mm256_add_ps(acc[0][r][t], acc[1][r][t])) + c[t]; \
        }                                                                                   \
    } else {                                                                                \
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)                                 \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            st->c[k][r] = corr[k][r];                                                       \
            st->c1[k][r] = corr1[k][r];                                                     \
            _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                             \
                st->a[k][r][t] = acc[k][r][t];                                              \
        }                                                                                   \
    }

/* Tiles of 8 activation rows in two passes over the sub-blocks: the even
 * ones (parity 0), then the odd ones, so only one parity's accumulators
 * are live (8 registers): with both (16), AVX2's 16 ymm registers spilled
 * and half the accumulators went through the stack at every block.  Each
 * accumulator still meets the same sub-blocks in the same order, so the
 * bits are those of the interleaved loop; the first pass's accumulators
 * wait in st.  Smaller tiles (4 x 2 = 8 accumulators) and one activation
 * row (decode: two FMA chains in flight) keep the interleaved loop, and so
 * do rows of more than Q8T_SPLIT_SUB sub-blocks: there the tile's
 * activation blocks (8 rows x 72 bytes per sub-block with the 16-bit
 * codes) outgrow L1 and the two strided passes were slower than one
 * spilling pass (Q8_0 896 x 4864: 16.5 -> 13 GMAC/s of thread time; Q4_K
 * and Q6_K, whose 4864-column rows are the only ones here, lost a
 * third).  Rows of 1536 columns (48 sub-blocks, 27 KiB) still gained. */
#define Q8T_SPLIT(C, NS) ((C) >= 8 && (NS) <= Q8T_SPLIT_SUB)
#define Q8T_SPLIT_SUB 64

/* The accumulators of parity KP: from st, or 0 on the first pass over
 * the columns (the other parity's are never read). */
#define Q8T_LOADK(R, C, KP)                                                                 \
    __m256 acc[2][R][C], corr[2][R];                                                        \
    float corr1[2][R];                                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                   \
        corr[KP][r] = s0 ? st->c[KP][r] : _mm256_setzero_ps();                              \
        corr1[KP][r] = s0 ? st->c1[KP][r] : 0.0f;                                           \
        _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                                 \
            acc[KP][r][t] = s0 ? st->a[KP][r][t] : _mm256_setzero_ps();                     \
    }

#define Q8T_SAVEK(R, C, KP)                                                                 \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                   \
        st->c[KP][r] = corr[KP][r];                                                         \
        st->c1[KP][r] = corr1[KP][r];                                                       \
        _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                                 \
            st->a[KP][r][t] = acc[KP][r][t];                                                \
    }

/* After both passes over the last columns: the results from st, by
 * Q8T_STORE's operations. */
#define Q8T_FINISH(R, C)                                                                    \
    if (s1 == nsub) {                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            float c[8];                                                                     \
            _mm256_storeu_ps(c, _mm256_add_ps(st->c[0][r], st->c[1][r]));                   \
            _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                             \
                y[t * ystride + r] =                                                        \
                    hsum_avx2(_mm256_add_ps(st->a[0][r][t], st->a[1][r][t])) + c[t];        \
        }                                                                                   \
    }

/* A tile's body over sub-blocks s0..s1, BLOCK(..., S, K) doing sub-block
 * S of parity K: two passes (Q8T_SPLIT) or the parities interleaved.  The
 * 256-weight types (DEFINE_Q8T_SB) always interleave: their rows here are
 * long, and split into passes they were slower even in spans of 32
 * sub-blocks. */
#define Q8T_BODY(R, C, BLOCK, ...)                                                          \
    if (Q8T_SPLIT(C, s1 - s0)) {                                                            \
        _Pragma("GCC unroll 2") for (int kp = 0; kp < 2; kp++) {                            \
            Q8T_LOADK(R, C, kp)                                                             \
            for (int64_t s = s0 + kp; s < s1; s += 2) {                                     \
                BLOCK(__VA_ARGS__, s, kp)                                                   \
            }                                                                               \
            Q8T_SAVEK(R, C, kp)                                                             \
        }                                                                                   \
        Q8T_FINISH(R, C)                                                                    \
    } else {                                                                                \
        Q8T_LOAD(R, C)                                                                      \
        int64_t s = s0;                                                                     \
        for (; s + 1 < s1; s += 2) {                                                        \
            BLOCK(__VA_ARGS__, s, 0)                                                        \
            BLOCK(__VA_ARGS__, s + 1, 1)                                                    \
        }                                                                                   \
        if (s < s1) {                                                                       \
            BLOCK(__VA_ARGS__, s, 0)                                                        \
        }                                                                                   \
        Q8T_STORE(R, C)                                                                     \
    }

/* One pass of an R x C tile (function q8t_NAME_TAG_C) over sub-blocks
 * s0..s1 of the 32-weight types; xc holds the activation scales of s0.. */
#define DEFINE_Q8T(NAME, SIGNED, MULQ, PRE, ISA, TAG, R, C)                                 \
    Q8_INLINE_##ISA void q8t_##NAME##_##PRE##_##TAG##_##C##_##ISA(const uint8_t *w, size_t rb, int64_t s0, \
                                                     int64_t s1, int64_t nsub,              \
                                                     const act_##PRE *x, const q8_col *xc,  \
                                                     q8_acc *st, float *y, int64_t ystride) \
    {                                                                                       \
        float ft[R][C == 1 ? 1 : Q8_CHUNK][8];                                              \
        if (C > 1)                                                                          \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                             \
                for (int64_t s = s0; s < s1; s++) {                                         \
                    __m256i wv_, mul_;                                                      \
                    float dw_, cw_;                                                         \
                    dq8_##NAME##_avx2(w + r * rb, s, &wv_, &mul_, &dw_, &cw_);              \
                    Q8T_TABLE_ROW(ft[r][s - s0], dw_, s);                                   \
                }                                                                           \
        Q8T_BODY(R, C, Q8T_BLOCK, NAME, SIGNED, MULQ, Q8_LO_##PRE, ISA, R, C)               \
    }

/* Sub-block S (of parity K) of a 32-weight type. */
#define Q8T_BLOCK(NAME, SIGNED, MULQ, LO, ISA, R, C, S, K)                                               \
    {                                                                                       \
        __m256i wv[R], wa[R], mul[R], w16[R][2];                                            \
        float fs[R];                                                                        \
        const float *fb[R];                                                                 \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            float dw, cw;                                                                   \
            dq8_##NAME##_avx2(w + r * rb, S, &wv[r], &mul[r], &dw, &cw);                    \
            wa[r] = SIGNED ? _mm256_sign_epi8(wv[r], wv[r]) : wv[r];                        \
            if (LO)                                                                         \
                Q8_WIDEN(SIGNED, MULQ, wv[r], mul[r], w16[r])                               \
            Q8T_FACTORS_AHEAD(C, r, dw, cw, S, K, ft[r][C == 1 ? 0 : (S) - s0])             \
        }                                                                                   \
        Q8T_DOTS(SIGNED, MULQ, LO, ISA, R, C, S, K)                                         \
    }

/* The same for the 256-weight types: each row's super-block scales are
 * unpacked once (prep), then its 8 sub-blocks decoded with ib a constant. */
#define DEFINE_Q8T_SB(NAME, BYTES, SIGNED, MULQ, PRE, ISA, TAG, R, C)                       \
    Q8_INLINE_##ISA void q8t_##NAME##_##PRE##_##TAG##_##C##_##ISA(const uint8_t *w, size_t rb, int64_t s0, \
                                                     int64_t s1, int64_t nsub,              \
                                                     const act_##PRE *x, const q8_col *xc,  \
                                                     q8_acc *st, float *y, int64_t ystride) \
    {                                                                                       \
        Q8T_LOAD(R, C)                                                                      \
        for (int64_t sb = s0 / 8; sb < s1 / 8; sb++) {                                      \
            q8_prep pp[R];                                                                  \
            float ft[R][8][8];                                                              \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                           \
                prep_##NAME##_avx2(w + r * rb + sb * (BYTES), &pp[r]);                      \
                if (C > 1)                                                                  \
                    _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++)                  \
                        Q8T_TABLE_ROW(ft[r][ib], pp[r].dw[ib], 8 * sb + ib);                \
            }                                                                               \
            _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {                        \
                const int64_t s = 8 * sb + ib;                                              \
                __m256i wv[R], wa[R], mul[R], w16[R][2];                                    \
                float fs[R];                                                                \
                const float *fb[R];                                                         \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                       \
                    wv[r] = sub_##NAME##_avx2(w + r * rb + sb * (BYTES), ib);               \
                    wa[r] = SIGNED ? _mm256_sign_epi8(wv[r], wv[r]) : wv[r];                \
                    mul[r] = pp[r].mul[ib];                                                 \
                    if (Q8_LO_##PRE)                                                        \
                        Q8_WIDEN(SIGNED, MULQ, wv[r], mul[r], w16[r])                       \
                    Q8T_FACTORS_AHEAD(C, r, pp[r].dw[ib], pp[r].cw[ib], s, ib & 1, ft[r][ib]) \
                }                                                                           \
                Q8T_DOTS(SIGNED, MULQ, Q8_LO_##PRE, ISA, R, C, s, ib & 1)                   \
            }                                                                               \
        }                                                                                   \
        Q8T_STORE(R, C)                                                                     \
    }

/* The tiles a rows kernel uses: "full" ones (Q8_RDECODE x 1, Q8_RPROMPT x
 * C) and one weight row by C for the rows left over. */
#define DEFINE_Q8T_SET(DEF, ...)                                                            \
    Q8T_DEF(DEF, full, Q8_RDECODE, 1, __VA_ARGS__)                                          \
    Q8T_DEF(DEF, full, Q8_RPROMPT, 2, __VA_ARGS__)                                          \
    Q8T_DEF(DEF, full, Q8_RPROMPT, 4, __VA_ARGS__)                                          \
    Q8T_DEF(DEF, full, Q8_RPROMPT, 8, __VA_ARGS__)                                          \
    Q8T_DEF(DEF, one, 1, 1, __VA_ARGS__)                                                    \
    Q8T_DEF(DEF, one, 1, 2, __VA_ARGS__)                                                    \
    Q8T_DEF(DEF, one, 1, 4, __VA_ARGS__)                                                    \
    Q8T_DEF(DEF, one, 1, 8, __VA_ARGS__)
/* (R passes through one macro more so that Q8_RDECODE and Q8_RPROMPT are
 * numbers when the body uses them) */
#define Q8T_DEF(DEF, TAG, R, C, ...) DEF(__VA_ARGS__, TAG, R, C)

#define Q8T_CALL(NAME, PRE, ISA, TAG, C)                                                    \
    q8t_##NAME##_##PRE##_##TAG##_##C##_##ISA(wr, rb, s0, s1, nsub, xt, xc, &st, yt + r0, ystride)

/* Activation rows in tiles of 8, 4, 2, 1 (at most Q8_CMAX), the weight
 * rows in tiles of R within each, the columns in passes of Q8_CHUNK
 * sub-blocks. */
#define DEFINE_Q8_ROWS_LOOP(NAME, PRE, ISA)                                                 \
    Q8_FN_##ISA void PRE##rows_##NAME##_##ISA(const uint8_t *w, size_t rb, int64_t nrows,      \
                                             int64_t cols, const act_##PRE *x, int64_t n,   \
                                             float *y, int64_t ystride)                     \
    {                                                                                       \
        const int64_t nsub = cols / 32;                                                     \
        const int one_pass = nsub <= Q8_CHUNK;                                              \
        q8_col xc[Q8_CHUNK];                                                                \
        q8_acc st;                                                                          \
        memset(&st, 0, sizeof st); /* read only after a pass wrote it */                    \
        for (int64_t i0 = 0, nt; i0 < n; i0 += nt) {                                        \
            const int64_t left = n - i0;                                                    \
            nt = left >= 8 && Q8_CMAX >= 8 ? 8 : left >= 4 && Q8_CMAX >= 4 ? 4             \
                 : left >= 2 ? 2 : 1;                                                       \
            const act_##PRE *xt = x + i0 * nsub;                                            \
            float *yt = y + i0 * ystride;                                                   \
            if (one_pass && nt > 1)                                                         \
                PRE##_cols_fill_avx2(xt, nsub, nt, 0, nsub, xc);                            \
            const int64_t R = nt == 1 ? Q8_RDECODE : Q8_RPROMPT;                            \
            for (int64_t r0 = 0; r0 < nrows;) {                                             \
                const int64_t nr = nrows - r0 >= R ? R : 1;                                 \
                const uint8_t *wr = w + r0 * rb;                                            \
                for (int64_t s0 = 0; s0 < nsub; s0 += Q8_CHUNK) {                           \
                    const int64_t s1 = nsub - s0 < Q8_CHUNK ? nsub : s0 + Q8_CHUNK;         \
                    if (!one_pass && nt > 1)                                                \
                        PRE##_cols_fill_avx2(xt, nsub, nt, s0, s1, xc);                     \
                    if (nr == R) {                                                          \
                        switch (nt) {                                                       \
                        case 8: Q8T_CALL(NAME, PRE, ISA, full, 8); break;                             \
                        case 4: Q8T_CALL(NAME, PRE, ISA, full, 4); break;                             \
                        case 2: Q8T_CALL(NAME, PRE, ISA, full, 2); break;                             \
                        default: Q8T_CALL(NAME, PRE, ISA, full, 1); break;                            \
                        }                                                                   \
                    } else {                                                                \
                        switch (nt) {                                                       \
                        case 8: Q8T_CALL(NAME, PRE, ISA, one, 8); break;                              \
                        case 4: Q8T_CALL(NAME, PRE, ISA, one, 4); break;                              \
                        case 2: Q8T_CALL(NAME, PRE, ISA, one, 2); break;                              \
                        default: Q8T_CALL(NAME, PRE, ISA, one, 1); break;                             \
                        }                                                                   \
                    }                                                                       \
                }                                                                           \
                r0 += nr;                                                                   \
            }                                                                               \
        }                                                                                   \
    }

#define DEFINE_Q8_ROWS(NAME, SIGNED, PRE, ISA)                                              \
    DEFINE_Q8T_SET(DEFINE_Q8T, NAME, SIGNED, 0, PRE, ISA)                                   \
    DEFINE_Q8_ROWS_LOOP(NAME, PRE, ISA)

#define DEFINE_Q8_ROWS_SB(NAME, BYTES, SIGNED, MULQ, PRE, ISA)                              \
    DEFINE_Q8T_SET(DEFINE_Q8T_SB, NAME, BYTES, SIGNED, MULQ, PRE, ISA)                      \
    DEFINE_Q8_ROWS_LOOP(NAME, PRE, ISA)

/* ---- weights decoded ahead (16-bit codes, a prompt) ---------------------
 * In a prompt every 32-weight sub-block is met by n / 8 tiles of
 * activation rows, and the tiles above decode it again for each (the
 * nibble and high-bit unpacking, the widening to int16: a third of a
 * tile's instructions).  With at least Q16_PRE_MIN_N activation rows, a
 * rows call of Q5_0 first decodes its weight rows, up to
 * Q16_PRE_ROWS at a time, into q16_wpre records (the widened int16 codes
 * and the two float factors, made by the same decoder and Q8_WIDEN), and
 * the tiles then read them (Q8T_BLOCK_PRE).  The integers, factors and
 * operations are those of the tiles that decode, so the bits are too
 * (matvec_q8, tiles_match_the_c_twin_bitwise, n up to 27).  Measured
 * (one core, Q5_0 896 x 896, n = 128): 29.8 -> 32.0 GMAC/s; not more,
 * because the tile is bound by its multiplies (two madd / dpwssd and an
 * FMA per 32 products and activation row), not by the decode.  Q5_0 (the
 * costliest decode: its fifth bits) takes this path; Q8_0, whose decode
 * is a load, gained nothing (31.7 -> 31.5), and Q4_1 first lost (the demo
 * model's prompt 191 -> 174 tok/s: 72 stored bytes per 32 weights read
 * back cost more than unpacking 20).  Since the tiles take their factors
 * from a table (Q8T_FACTORS_AHEAD), Q4_1 rows of up to 1024 columns gain
 * (1536 x 576, n = 128: 28.0 -> 31.5-32.1 GMAC/s) and longer ones still
 * lose (576 x 1536: 28.2 -> 26.7-27.8), so Q4_1 takes it up to 32
 * sub-blocks. */
typedef struct q16_wpre {
    int16_t v[32];
    float dw, cw;
} q16_wpre;
#define Q16_PRE_MIN_N 16    /* at least two tiles of 8 activation rows */
#define Q16_PRE_ROWS 16     /* weight rows decoded at a time */
#define Q16_PRE_MAX_SUB 64  /* longer rows (over 2048 columns) decode in the tiles */
#define Q16_PRE_Q4_1_MAX_SUB 32 /* Q4_1: rows of up to 1024 columns (see above) */

#define Q8T_BLOCK_PRE(ISA, R, C, S, K)                                                      \
    {                                                                                       \
        __m256i wv[R], wa[R], mul[R], w16[R][2];                                            \
        float fs[R];                                                                        \
        const float *fb[R];                                                                 \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                               \
            const q16_wpre *p_ = (const q16_wpre *)(w + r * rb) + (S);                      \
            wv[r] = wa[r] = mul[r] = _mm256_setzero_si256(); /* (the int8 branch's) */       \
            w16[r][0] = _mm256_loadu_si256((const __m256i *)p_->v);                         \
            w16[r][1] = _mm256_loadu_si256((const __m256i *)(p_->v + 16));                  \
            Q8T_FACTORS_AHEAD(C, r, p_->dw, p_->cw, S, K, ft[r][C == 1 ? 0 : (S) - s0])    \
        }                                                                                   \
        Q8T_DOTS(0, 0, 1, ISA, R, C, S, K)                                                  \
    }

/* ft[r][s - s0] = dw(r, s) * d_x(s): Q8T_FACTORS' products, ahead */
#define Q8T_PRE_TABLE(R, C)                                                                 \
    float ft[R][C == 1 ? 1 : Q16_PRE_MAX_SUB][8];                                           \
    if (C > 1)                                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                 \
            for (int64_t s = s0; s < s1; s++) {                                             \
                Q8T_TABLE_ROW(ft[r][s - s0], ((const q16_wpre *)(w + r * rb) + s)->dw, s);  \
            }

#define DEFINE_Q8T_PRE(PRE, ISA, TAG, R, C)                                                 \
    Q8_INLINE_##ISA void q8t_pre_##PRE##_##TAG##_##C##_##ISA(const uint8_t *w, size_t rb, int64_t s0, \
                                                     int64_t s1, int64_t nsub,              \
                                                     const act_##PRE *x, const q8_col *xc,  \
                                                     q8_acc *st, float *y, int64_t ystride) \
    {                                                                                       \
        Q8T_PRE_TABLE(R, C)                                                                 \
        Q8T_BODY(R, C, Q8T_BLOCK_PRE, ISA, R, C)                                            \
    }

/* The decode (the tiles' decoder and widening, stored) and the rows entry
 * of a 32-weight type on the 16-bit codes. */
#define DEFINE_Q16_ROWS_PRE(NAME, SIGNED, ISA, MAX_SUB)                                     \
    Q8_FN_##ISA void q16rowsp_##NAME##_##ISA(const uint8_t *w, size_t rb, int64_t nrows,    \
                                             int64_t cols, const act_q16 *x, int64_t n,     \
                                             float *y, int64_t ystride)                     \
    {                                                                                       \
        const int64_t nsub = cols / 32;                                                     \
        if (n < Q16_PRE_MIN_N || nsub > (MAX_SUB)) {                                        \
            q16rows_##NAME##_##ISA(w, rb, nrows, cols, x, n, y, ystride);                   \
            return;                                                                         \
        }                                                                                   \
        q16_wpre pre[Q16_PRE_ROWS * Q16_PRE_MAX_SUB];                                       \
        for (int64_t r0 = 0; r0 < nrows; r0 += Q16_PRE_ROWS) {                              \
            const int64_t nr = nrows - r0 < Q16_PRE_ROWS ? nrows - r0 : Q16_PRE_ROWS;       \
            for (int64_t r = 0; r < nr; r++)                                                \
                for (int64_t s = 0; s < nsub; s++) {                                        \
                    __m256i wv, mul, w16[2];                                                \
                    float dw, cw;                                                           \
                    dq8_##NAME##_avx2(w + (r0 + r) * rb, s, &wv, &mul, &dw, &cw);           \
                    Q8_WIDEN(SIGNED, 0, wv, mul, w16)                                       \
                    q16_wpre *p_ = pre + r * nsub + s;                                      \
                    _mm256_storeu_si256((__m256i *)p_->v, w16[0]);                          \
                    _mm256_storeu_si256((__m256i *)(p_->v + 16), w16[1]);                   \
                    p_->dw = dw;                                                            \
                    p_->cw = cw;                                                            \
                }                                                                           \
            q16rows_pre_##ISA((const uint8_t *)pre, (size_t)nsub * sizeof *pre, nr, cols,   \
                              x, n, y + r0, ystride);                                       \
        }                                                                                   \
    }

#define DEFINE_Q16_PRE_ALL(ISA)                                                             \
    DEFINE_Q8T_SET(DEFINE_Q8T_PRE, q16, ISA)                                                \
    DEFINE_Q8_ROWS_LOOP(pre, q16, ISA)                                                      \
    DEFINE_Q16_ROWS_PRE(q5_0, 0, ISA, Q16_PRE_MAX_SUB)                                      \
    DEFINE_Q16_ROWS_PRE(q4_1, 0, ISA, Q16_PRE_Q4_1_MAX_SUB)

/* The integer dot of 32 codes in 8 int32 lanes (lane k: codes 4k..4k+3,
 * times the multiplier of their half of 16 when the type has one, MULQ):
 * AVX2 sums pairs into int16 (maddubs; no pair can saturate, see
 * dot_q8_avx2.h) and widens with madd; AVX512-VNNI sums the four products
 * straight into int32 (dpbusd) and multiplies the multiplier in apart.
 * The same integers either way, so the two give the same bits. */
#define Q8_IDOT_avx2(WA, XR, MUL, MULQ) _mm256_madd_epi16(_mm256_maddubs_epi16(WA, XR), MUL)
#define Q8_IDOT_avx512(WA, XR, MUL, MULQ)                                                   \
    (MULQ ? _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), WA, XR),         \
                               _mm256_madd_epi16(MUL, _mm256_set1_epi32(1)))                \
          : _mm256_dpbusd_epi32(_mm256_setzero_si256(), WA, XR))
/* The 16-bit codes: the widened weights (W0: elements 0..15, W1: 16..31)
 * times the codes in int16 pairs, lane k = elements 2k, 2k+1, 16 + 2k,
 * 17 + 2k; exact in int32 (a lane is at most 4 * 4096 * 32639 < 2^29:
 * Q6_K's code times its scale is at most 32 * 128).  AVX2 adds two madds;
 * VNNI lets the second dpwssd add into the first. */
#define Q16_IDOT_avx2(W0, W1, X0, X1)                                                       \
    _mm256_add_epi32(_mm256_madd_epi16(W0, X0), _mm256_madd_epi16(W1, X1))
#define Q16_IDOT_avx512(W0, W1, X0, X1)                                                     \
    _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(_mm256_setzero_si256(), W0, X0), W1, X1)

/* (the field a block type's codes sit in, for Q8_LOADX: the branch not
 * taken must still compile) */
#define Q8_V16(B) Q8_V16_(&(B))
#define Q8_V8(B) Q8_V8_(&(B))
static inline const int16_t *Q8_V16_(const void *b) { return ((const act_q16 *)b)->v; }
static inline const int8_t *Q8_V8_(const void *b) { return ((const act_q8 *)b)->q; }

#define Q8_INLINE_avx2 AVX2_INLINE
#define Q8_FN_avx2 AVX2_FN static
#define Q8_TARGET_avx512 "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
#define Q8_INLINE_avx512 static inline __attribute__((always_inline, target(Q8_TARGET_avx512)))
#define Q8_FN_avx512 __attribute__((target(Q8_TARGET_avx512))) static

#define DEFINE_Q8_ALL(PRE, ISA)                                                             \
    DEFINE_Q8_ROWS(q4_0, 0, PRE, ISA)                                                       \
    DEFINE_Q8_ROWS(q4_1, 0, PRE, ISA)                                                       \
    DEFINE_Q8_ROWS(q5_0, 0, PRE, ISA)                                                       \
    DEFINE_Q8_ROWS(q8_0, 1, PRE, ISA)                                                       \
    DEFINE_Q8_ROWS_SB(q4_k, sizeof(block_q4_k), 0, 0, PRE, ISA)                             \
    DEFINE_Q8_ROWS_SB(q6_k, sizeof(block_q6_k), 1, 1, PRE, ISA)

DEFINE_Q8_ALL(q8, avx2)
DEFINE_Q8_ALL(q8, avx512)
DEFINE_Q8_ALL(q16, avx2)
DEFINE_Q8_ALL(q16, avx512)
DEFINE_Q16_PRE_ALL(avx2)
DEFINE_Q16_PRE_ALL(avx512)

/* One activation row of Q5_0, Q8_0, Q4_1, Q4_K or Q6_K on AVX2: the decode
 * kernels of dot_q16_dec_avx2.c and dot_q16k_dec_avx2.c (the same bits,
 * fewer instructions per sub-block:
 * Q5_0 4864 x 896 9.8 -> 13.0 GMAC/s of thread time, doc/cpu.md); more rows,
 * or a row the decode kernel declines (it returns 0): the tiles. */
typedef int (*q16_dec_fn)(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                          const act_q16 *x, float *y);

/* Always inlined, so each entry below calls its two kernels directly. */
AVX2_INLINE void q16rowsd_avx2(q16_dec_fn dec, q16_rows_fn tiles, const uint8_t *w, size_t rb,
                               int64_t nrows, int64_t cols, const act_q16 *x, int64_t n, float *y,
                               int64_t ystride)
{
    if (n != 1 || !dec(w, rb, nrows, cols, x, y))
        tiles(w, rb, nrows, cols, x, n, y, ystride);
}

/* The entries q16_rows_avx2 hands out: a type's decode kernel and tiles. */
Q8_FN_avx2 void q16rowsd_q5_0_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                   const act_q16 *x, int64_t n, float *y, int64_t ys)
{
    q16rowsd_avx2(q16dec_q5_0_avx2, q16rowsp_q5_0_avx2, w, rb, nrows, cols, x, n, y, ys);
}

Q8_FN_avx2 void q16rowsd_q8_0_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                   const act_q16 *x, int64_t n, float *y, int64_t ys)
{
    q16rowsd_avx2(q16dec_q8_0_avx2, q16rows_q8_0_avx2, w, rb, nrows, cols, x, n, y, ys);
}

Q8_FN_avx2 void q16rowsd_q4_1_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                   const act_q16 *x, int64_t n, float *y, int64_t ys)
{
    q16rowsd_avx2(q16dec_q4_1_avx2, q16rowsp_q4_1_avx2, w, rb, nrows, cols, x, n, y, ys);
}

Q8_FN_avx2 void q16rowsd_q4_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                   const act_q16 *x, int64_t n, float *y, int64_t ys)
{
    q16rowsd_avx2(q16dec_q4_k_avx2, q16rows_q4_k_avx2, w, rb, nrows, cols, x, n, y, ys);
}

Q8_FN_avx2 void q16rowsd_q6_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                   const act_q16 *x, int64_t n, float *y, int64_t ys)
{
    q16rowsd_avx2(q16dec_q6_k_avx2, q16rows_q6_k_avx2, w, rb, nrows, cols, x, n, y, ys);
}

int fast_cpu_vnni_ok(void)
{
    __builtin_cpu_init();
    return fast_cpu_avx2_ok() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

q8_rows_fn q8_rows_avx512(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q8rows_q4_0_avx512;
    case GGML_TYPE_Q4_1: return q8rows_q4_1_avx512;
    case GGML_TYPE_Q5_0: return q8rows_q5_0_avx512;
    case GGML_TYPE_Q8_0: return q8rows_q8_0_avx512;
    case GGML_TYPE_Q4_K: return q8rows_q4_k_avx512;
    case GGML_TYPE_Q6_K: return q8rows_q6_k_avx512;
    default: return NULL;
    }
}

q16_rows_fn q16_rows_avx512(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q16rows_q4_0_avx512;
    case GGML_TYPE_Q4_1: return q16rowsp_q4_1_avx512;
    case GGML_TYPE_Q5_0: return q16rowsp_q5_0_avx512;
    case GGML_TYPE_Q8_0: return q16rows_q8_0_avx512;
    case GGML_TYPE_Q4_K: return q16rows_q4_k_avx512;
    case GGML_TYPE_Q6_K: return q16rows_q6_k_avx512;
    default: return NULL;
    }
}

q8_rows_fn q8_rows_avx2(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q8rows_q4_0_avx2;
    case GGML_TYPE_Q4_1: return q8rows_q4_1_avx2;
    case GGML_TYPE_Q5_0: return q8rows_q5_0_avx2;
    case GGML_TYPE_Q8_0: return q8rows_q8_0_avx2;
    case GGML_TYPE_Q4_K: return q8rows_q4_k_avx2;
    case GGML_TYPE_Q6_K: return q8rows_q6_k_avx2;
    default: return NULL;
    }
}

q16_rows_fn q16_rows_avx2(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q16rows_q4_0_avx2;
    case GGML_TYPE_Q4_1: return q16rowsd_q4_1_avx2;
    case GGML_TYPE_Q5_0: return q16rowsd_q5_0_avx2;
    case GGML_TYPE_Q8_0: return q16rowsd_q8_0_avx2;
    case GGML_TYPE_Q4_K: return q16rowsd_q4_k_avx2;
    case GGML_TYPE_Q6_K: return q16rowsd_q6_k_avx2;
    default: return NULL;
    }
}

#else /* not x86-64 */

q8_rows_fn q8_rows_avx2(int type)
{
    (void)type;
    return NULL;
}

q8_rows_fn q8_rows_avx512(int type)
{
    (void)type;
    return NULL;
}

q16_rows_fn q16_rows_avx2(int type)
{
    (void)type;
    return NULL;
}

q16_rows_fn q16_rows_avx512(int type)
{
    (void)type;
    return NULL;
}

int fast_cpu_vnni_ok(void) { return 0; }

#endif
