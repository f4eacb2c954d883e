/* attention_mma.cuh: the fast attention kernel's building blocks, for
 * kernels/cuda/attention.cu (see its header comment for the design): the
 * fp16 bit tricks and mma wrappers, the arguments both kernels take, the
 * per-step K/V fragments for k8v4 and f16 (att_step), the QK and PV products
 * of a warp (k8v4nl's V decode in attention_nl.cuh), the shared-memory layouts, the online-softmax folds and the
 * chunk loop (att_run_chunk), and the ticket that picks the last block.
 * Device code only; included once, by attention.cu, after ATT_WARPS. */
#ifndef STRATA_ATTENTION_MMA_CUH
#define STRATA_ATTENTION_MMA_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/rotate.cuh"

/* ---- small device helpers ------------------------------------------------ */

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

/* fp16x2 arithmetic with explicit round-to-nearest (never contracted). */
__device__ __forceinline__ uint32_t h2sub(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t h2mul(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t h2fma(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* (lo, hi) floats -> fp16x2, lo in the low half. */
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
__device__ __forceinline__ float h2f(uint32_t bits16)
{
    return __half2float(__ushort_as_half((unsigned short)(bits16 & 0xffffu)));
}

/* k8v4nl's V codes index the IQ4_NL levels (kernels/cpu/kv.c). */
__device__ __forceinline__ int att_nl_level(int c)
{
    const int8_t lv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};
    return lv[c];
}

/* D = A(16x16, row) * B(16x8, col) + D, fp16 in, fp32 accumulate. */
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Transpose an 8x8 fp16 matrix held as the standard fragment (lane g*4+c
 * has row g, columns 2c, 2c+1). */
__device__ __forceinline__ uint32_t movtrans(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

/* fp16 constants as bit patterns. */
#define H2_1152 0x64806480u /* 1152 = 1024 + 128: int8 bias */
#define H2_1032 0x64086408u /* 1032 = 1024 + 8: low nibble bias */
#define H2_1_16 0x2c002c00u /* 1/16 */
#define H2_M72 0xd480d480u  /* -72 = -(1024/16 + 8): high nibble bias */
#define H2_M1152 0xe480e480u /* -1152 */

/* ---- the arguments, shared by both kernels ------------------------------- */

typedef struct att_args {
    kv_view kv;            /* device pointers; pages: n_seq rows of page_stride */
    int page_stride;
    const int32_t *pos;    /* [n_seq] position of each sequence's first query */
    int n_seq, n_tok, n_head, group;
    const float *q;        /* [(seq * n_tok + i) * q_stride + head * head_dim] */
    int64_t q_stride;
    float *out;            /* same layout, out_stride */
    int64_t out_stride;
    int window;            /* > 0: a query at p reads p - window < t <= p only */
    float scale;           /* softmax scale (plain kernel) */
    float scale_log2;      /* scale * log2(e) (fast kernel: exp2) */
    int tpt, n_tiles;      /* query tokens per tile, tiles per sequence */
    int chunk, max_chunks; /* tokens per chunk; grid.x of a split launch */
    int max_supers;        /* super-chunks of a split launch */
    float *part;           /* split: chunk partials [n_seq][n_kv_head][max_chunks] */
    float *spart;          /* split: super-chunk partials [..][max_supers] */
    unsigned *tick1;       /* split: tickets per super-chunk, zero at rest */
    unsigned *tick2;       /* split: tickets per (sequence, kv head) */
    int unrot;             /* 1: out = R^T of the result (cuda_attention_rotated) */
    float rot_scale;       /* kv_rot_scale(head_dim) */
    rot_signs rs;          /* the rotation's sign pattern */
} att_args;

/* Row index of token `pos` of kv head h in sequence `seq`'s pages:
 * [page][head][KV_PAGE][...]. */
__device__ __forceinline__ int64_t att_slot(const att_args &a, int seq, int32_t pos, int h)
{
    int64_t page = __ldg(a.kv.pages + (int64_t)seq * a.page_stride + pos / KV_PAGE);
    return (page * a.kv.n_kv_head + h) * KV_PAGE + pos % KV_PAGE;
}

/* ---- the fast kernel's pieces ------------------------------------------ */

/* cp.async: global -> shared without passing through registers, so a warp
 * can keep several steps of K/V in flight for the price of shared memory. */
template <int BYTES> __device__ __forceinline__ void cp_async(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(gmem), "n"(BYTES)
                     : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* W words, aligned to their size: the unit of one lane's copy. */
template <int W> struct alignas(4 * W) words {
    uint32_t w[W];
};

/* One 16-token step's bytes, per lane, in the registers that feed the MMAs,
 * and the shared-memory slot they pass through (lane-major: lane l's copy of
 * item i at [i][l], so both the copies and the reads of a warp are
 * contiguous and conflict-free).
 * Lane = 4g + c.  K: tokens T+g and T+8+g, bytes 32b + 8c .. +7 of each
 * Q8_0 block b (f16: 8 halves at dims 32b + 8c).  V: tokens T+2c, T+2c+1,
 * T+2c+8, T+2c+9 (the k slots of the PV MMA), VB bytes at g*VB (f16: HD/8
 * halves at g*HD/8). */
template <int KT, int HD> struct att_step;

template <int HD> struct att_step<KV_K8V4, HD> {
    static constexpr int NB = HD / 32, VB = HD / 16, KDW = NB / 2, VW = VB / 4;
    static constexpr int PAIR_STAGES = HD == 64 ? 3 : 2; /* 32-token pairs */
    /* The scales of the step's 16 tokens are copied once (16-byte copies by
     * the first 4*NB lanes) and read by whichever lanes need them. */
    struct alignas(16) slot {
        words<2> k[2][NB][32];
        words<VW> v[4][32];
        uint16_t kd[16][NB];
        uint16_t vd[16][NB];
    };
    uint32_t k[2][NB][2];
    uint32_t kd[2][KDW];
    uint32_t v[4][VW];
    uint32_t dv[4];

    static __device__ __forceinline__ void issue(slot &sl, const kv_view &kv, int64_t si0,
                                                 int lane)
    {
        const int g = lane >> 2, c = lane & 3;
        const int8_t *kb = kv.kq + si0 * HD + g * HD + 8 * c;
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int b = 0; b < NB; b++)
                cp_async<8>(&sl.k[r][b][lane], kb + 8 * HD * r + 32 * b);
        const uint8_t *vb = kv.vq + si0 * (HD / 2) + 2 * c * (HD / 2) + g * VB;
#pragma unroll
        for (int q = 0; q < 4; q++)
            cp_async<VB>(&sl.v[q][lane], vb + ((q & 1) + 8 * (q >> 1)) * (HD / 2));
        if (lane < 2 * NB)
            cp_async<16>((char *)sl.kd + 16 * lane, kv.kd + si0 * NB + 8 * lane);
        else if (lane < 4 * NB)
            cp_async<16>((char *)sl.vd + 16 * (lane - 2 * NB),
                         kv.vd + si0 * NB + 8 * (lane - 2 * NB));
    }

    __device__ __forceinline__ void fetch(const slot &sl, int lane)
    {
        const int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; r++) {
#pragma unroll
            for (int b = 0; b < NB; b++) {
                words<2> w = sl.k[r][b][lane];
                k[r][b][0] = w.w[0];
                k[r][b][1] = w.w[1];
            }
            words<KDW> w = *reinterpret_cast<const words<KDW> *>(sl.kd[g + 8 * r]);
#pragma unroll
            for (int i = 0; i < KDW; i++)
                kd[r][i] = w.w[i];
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            words<VW> w = sl.v[q][lane];
#pragma unroll
            for (int i = 0; i < VW; i++)
                v[q][i] = w.w[i];
            dv[q] = sl.vd[2 * c + (q & 1) + 8 * (q >> 1)][(g * VB) / 16];
        }
    }
};

/* k8v4nl: the same bytes as k8v4; only the V decode (att_pv) differs. */
template <int HD> struct att_step<KV_K8V4NL, HD> : att_step<KV_K8V4, HD> {
};

template <int HD> struct att_step<KV_F16, HD> {
    static constexpr int NB = HD / 32, VW = HD / 16;
    static constexpr int PAIR_STAGES = HD == 256 ? 1 : 2;
    struct alignas(16) slot {
        words<4> k[2][NB][32];
        words<4> v[4][VW / 4][32];
    };
    uint32_t k[2][NB][4];
    uint32_t v[4][VW];

    static __device__ __forceinline__ void issue(slot &sl, const kv_view &kv, int64_t si0,
                                                 int lane)
    {
        const int g = lane >> 2, c = lane & 3;
        const uint16_t *kb = kv.kh + si0 * HD + g * HD + 8 * c;
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int b = 0; b < NB; b++)
                cp_async<16>(&sl.k[r][b][lane], kb + 8 * HD * r + 32 * b);
        const uint16_t *vb = kv.vh + si0 * HD + 2 * c * HD + g * (HD / 8);
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int j = 0; j < VW / 4; j++)
                cp_async<16>(&sl.v[q][j][lane], vb + ((q & 1) + 8 * (q >> 1)) * HD + 8 * j);
    }

    __device__ __forceinline__ void fetch(const slot &sl, int lane)
    {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int b = 0; b < NB; b++) {
                words<4> w = sl.k[r][b][lane];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    k[r][b][i] = w.w[i];
            }
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int j = 0; j < VW / 4; j++) {
                words<4> w = sl.v[q][j][lane];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[q][4 * j + i] = w.w[i];
            }
    }
};

/* Head dimension held by accumulator element e (0..3) of PV m-tile i in
 * lane group g: rows g and g+8 of the m-tile. */
template <int KT, int HD> __device__ __forceinline__ int att_dim(int i, int g, int e)
{
    if constexpr (KT != KV_F16) { /* k8v4, k8v4nl */
        constexpr int VB = HD / 16;
        int byte = g * VB + i; /* byte of the 64-byte V row */
        int d = 32 * (byte / 16) + (byte % 16);
        return e < 2 ? d : d + 16; /* low nibble: element j, high: j + 16 */
    } else {
        return g * (HD / 8) + 2 * i + (e < 2 ? 0 : 1);
    }
}

/* The per-warp state of one chunk: for each of the lane's columns (2c, 2c+1
 * of each n-tile) the running max (log2 units), the running sum, and the
 * O^T accumulators (HD/16 m-tiles x NT n-tiles). */
template <int HD, int NT> struct att_warp_state {
    float m[NT][2], l[NT][2];
    float o[HD / 16][NT][4];
};

/* S^T = K Q^T for one 16-token step: S[nt][e], rows (tokens) g, g, g+8,
 * g+8 and columns 2c, 2c+1, 2c, 2c+1 of n-tile nt. */
template <int KT, int HD, int NT>
__device__ __forceinline__ void att_qk(float (&S)[NT][4], const att_step<KT, HD> &st,
                                       const uint32_t (&qf)[NT][HD / 32][2][2])
{
    constexpr int NB = HD / 32;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.0f;
#pragma unroll
    for (int b = 0; b < NB; b++) {
        uint32_t a0[4], a1[4]; /* k-steps: dims 8c+0..3 and 8c+4..7 of block b */
        if constexpr (KT != KV_F16) { /* k8v4, k8v4nl */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                uint32_t lo = st.k[r][b][0] ^ 0x80808080u, hi = st.k[r][b][1] ^ 0x80808080u;
                a0[r] = h2sub(prmt(lo, 0x64646464u, 0x4140u), H2_1152);
                a0[2 + r] = h2sub(prmt(lo, 0x64646464u, 0x4342u), H2_1152);
                a1[r] = h2sub(prmt(hi, 0x64646464u, 0x4140u), H2_1152);
                a1[2 + r] = h2sub(prmt(hi, 0x64646464u, 0x4342u), H2_1152);
            }
            float dk0 = h2f(st.kd[0][b / 2] >> (16 * (b & 1)));
            float dk1 = h2f(st.kd[1][b / 2] >> (16 * (b & 1)));
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                float C[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma16816(C, a0, qf[nt][b][0][0], qf[nt][b][0][1]);
                mma16816(C, a1, qf[nt][b][1][0], qf[nt][b][1][1]);
                S[nt][0] = __fmaf_rn(dk0, C[0], S[nt][0]);
                S[nt][1] = __fmaf_rn(dk0, C[1], S[nt][1]);
                S[nt][2] = __fmaf_rn(dk1, C[2], S[nt][2]);
                S[nt][3] = __fmaf_rn(dk1, C[3], S[nt][3]);
            }
        } else {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                a0[r] = st.k[r][b][0];
                a0[2 + r] = st.k[r][b][1];
                a1[r] = st.k[r][b][2];
                a1[2 + r] = st.k[r][b][3];
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                mma16816(S[nt], a0, qf[nt][b][0][0], qf[nt][b][0][1]);
                mma16816(S[nt], a1, qf[nt][b][1][0], qf[nt][b][1][1]);
            }
        }
    }
}

#include "kernels/cuda/attention_nl.cuh" /* k8v4nl's V: att_pv_nl */

/* O^T += V^T P^T for one 16-token step.  Tokens at or past t_end (stale
 * bytes past the context, or the next chunk's) get a zero scale (f16: a
 * zero value), so a stale Inf/NaN cannot reach the MMA (0 * Inf = NaN);
 * their P is 0 anyway. */
template <int KT, int HD, int NT>
__device__ __forceinline__ void att_pv(att_warp_state<HD, NT> &ws, const att_step<KT, HD> &st,
                                       const uint32_t (&pb)[NT][2], int32_t T, int32_t t_end,
                                       int c, bool nl_fast)
{
    if constexpr (KT == KV_K8V4NL) {
        att_pv_nl<HD, NT>(ws, st, pb, T, t_end, c, nl_fast);
    } else if constexpr (KT != KV_F16) { /* k8v4 */
        uint32_t dv[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int32_t t = T + 2 * c + (q & 1) + 8 * (q >> 1);
            dv[q] = t < t_end ? st.dv[q] : 0u;
        }
        uint32_t dvab = dv[0] | (dv[1] << 16), dvcd = dv[2] | (dv[3] << 16);
#pragma unroll
        for (int i = 0; i < HD / 16; i++) {
            const int w = i / 4, bs = i % 4;
            uint32_t A[4];
            const uint32_t sel = bs | (bs << 4) | ((bs + 4) << 8) | ((bs + 4) << 12);
            uint32_t dab = prmt(st.v[0][w], st.v[1][w], sel);
            uint32_t dcd = prmt(st.v[2][w], st.v[3][w], sel);
            A[0] = h2mul(h2sub((dab & 0x000f000fu) | 0x64006400u, H2_1032), dvab);
            A[1] = h2mul(h2fma((dab & 0x00f000f0u) | 0x64006400u, H2_1_16, H2_M72), dvab);
            A[2] = h2mul(h2sub((dcd & 0x000f000fu) | 0x64006400u, H2_1032), dvcd);
            A[3] = h2mul(h2fma((dcd & 0x00f000f0u) | 0x64006400u, H2_1_16, H2_M72), dvcd);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mma16816(ws.o[i][nt], A, pb[nt][0], pb[nt][1]);
        }
    } else {
        uint32_t vm[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int32_t t = T + 2 * c + (q & 1) + 8 * (q >> 1);
            vm[q] = t < t_end ? 0xffffffffu : 0u;
        }
#pragma unroll
        for (int i = 0; i < HD / 16; i++) {
            uint32_t va = st.v[0][i] & vm[0], vb = st.v[1][i] & vm[1];
            uint32_t vc = st.v[2][i] & vm[2], vd = st.v[3][i] & vm[3];
            uint32_t A[4];
            A[0] = prmt(va, vb, 0x5410u);
            A[1] = prmt(va, vb, 0x7632u);
            A[2] = prmt(vc, vd, 0x5410u);
            A[3] = prmt(vc, vd, 0x7632u);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mma16816(ws.o[i][nt], A, pb[nt][0], pb[nt][1]);
        }
    }
}

/* One 32-token pair of steps (T .. T+31): both S^T tiles, one masked online
 * softmax update per column over the 32 tokens (so the shuffles, the
 * rescale and the exponentials of the max are paid once per 32 tokens, and
 * the two tiles' MMA chains interleave), then both O^T updates.  A token t
 * counts for column col iff t <= its position and t < t_end (the chunk's
 * end). */
template <int KT, int HD, int NT, bool VOTE>
__device__ __forceinline__ void att_pair_compute(att_warp_state<HD, NT> &ws,
                                                 const att_step<KT, HD> &s0,
                                                 const att_step<KT, HD> &s1,
                                                 const uint32_t (&qf)[NT][HD / 32][2][2],
                                                 const int32_t (&cpos)[NT][2], int32_t T,
                                                 int32_t t_end, float scale_log2, int32_t window,
                                                 int g, int c)
{
    float S0[NT][4], S1[NT][4];
    att_qk<KT, HD, NT>(S0, s0, qf);
    att_qk<KT, HD, NT>(S1, s1, qf);

    uint32_t pb0[NT][2], pb1[NT][2];
    float al[NT][2];
    bool grew = false;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        float p0[4], p1[4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            /* column 2c+j; tokens T+g, T+8+g (S0) and T+16+g, T+24+g (S1) */
            const int32_t lim = min(cpos[nt][j], t_end - 1);
            /* sliding window: keys before lo are masked like keys past lim */
            const int32_t lo = window > 0 ? cpos[nt][j] - window + 1 : 0;
            float x0 = T + g <= lim && T + g >= lo ? __fmul_rn(S0[nt][j], scale_log2)
                                                   : -INFINITY;
            float x1 = T + 8 + g <= lim && T + 8 + g >= lo
                           ? __fmul_rn(S0[nt][2 + j], scale_log2) : -INFINITY;
            float x2 = T + 16 + g <= lim && T + 16 + g >= lo
                           ? __fmul_rn(S1[nt][j], scale_log2) : -INFINITY;
            float x3 = T + 24 + g <= lim && T + 24 + g >= lo
                           ? __fmul_rn(S1[nt][2 + j], scale_log2) : -INFINITY;
            float mx = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            float mnew = fmaxf(ws.m[nt][j], mx);
            float base = mnew == -INFINITY ? 0.0f : mnew;
            float alpha = exp2f(__fsub_rn(ws.m[nt][j], base));
            p0[j] = exp2f(__fsub_rn(x0, base));
            p0[2 + j] = exp2f(__fsub_rn(x1, base));
            p1[j] = exp2f(__fsub_rn(x2, base));
            p1[2 + j] = exp2f(__fsub_rn(x3, base));
            float ls = __fadd_rn(__fadd_rn(p0[j], p0[2 + j]), __fadd_rn(p1[j], p1[2 + j]));
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 4));
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 8));
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 16));
            ws.l[nt][j] = __fadd_rn(__fmul_rn(ws.l[nt][j], alpha), ls);
            ws.m[nt][j] = mnew;
            al[nt][j] = alpha;
            grew |= alpha != 1.0f;
        }
        /* rows = tokens (g, g+8), columns (2c, 2c+1) -> transposed: lane
         * (g, c) gets column g at tokens 2c, 2c+1 (and +8): B of PV. */
        pb0[nt][0] = movtrans(pack_h2(p0[0], p0[1]));
        pb0[nt][1] = movtrans(pack_h2(p0[2], p0[3]));
        pb1[nt][0] = movtrans(pack_h2(p1[0], p1[1]));
        pb1[nt][1] = movtrans(pack_h2(p1[2], p1[3]));
    }
    /* Rescale O only when some column's max grew: multiplying by exactly
     * 1 changes no bit, so skipping it is exact (and the common case once
     * the max has settled). */
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < HD / 16; i++) {
                ws.o[i][nt][0] = __fmul_rn(ws.o[i][nt][0], al[nt][0]);
                ws.o[i][nt][1] = __fmul_rn(ws.o[i][nt][1], al[nt][1]);
                ws.o[i][nt][2] = __fmul_rn(ws.o[i][nt][2], al[nt][0]);
                ws.o[i][nt][3] = __fmul_rn(ws.o[i][nt][3], al[nt][1]);
            }
    }
    /* k8v4nl, decode (VOTE): one vote for both steps on which V decode
     * they take (att_pv_nl says why only there) */
    bool nl_fast = true;
    if constexpr (KT == KV_K8V4NL && VOTE)
        nl_fast = att_nl_fast<KT, HD>(s0, s1);
    att_pv<KT, HD, NT>(ws, s0, pb0, T, t_end, c, nl_fast);
    att_pv<KT, HD, NT>(ws, s1, pb1, T + 16, t_end, c, nl_fast);
}

/* Chunk partials fold in a fixed two-level tree: the chunks of a super-chunk
 * (ATT_SUPER consecutive chunks, at fixed positions) in order, then the
 * super-chunks in order.  Decode folds each super-chunk in the last of its
 * blocks to finish and the super-chunks in the last of those, so the work
 * at the tail is ~ATT_SUPER + n/ATT_SUPER folds, not n; prefill folds the
 * same tree as it goes.  Same tree, same arithmetic: same bits. */
#define ATT_SUPER 8

/* Shared memory of a block: this small part, then the cp.async ring, then
 * (prefill only) the chunk partial and the two fold states.  Decode keeps
 * those three in the ring, which is idle by the time they are written (a
 * chunk's steps are all consumed), and stages the partials it folds in the
 * rest of the ring. */
template <int HD, int NT> struct att_smem {
    static constexpr int NC = 8 * NT;
    float wm[ATT_WARPS][NC], wl[ATT_WARPS][NC];
    float cm[NC], cl[NC];       /* chunk partial: max (log2 units), sum */
    float sup_m[NC], sup_l[NC]; /* super-chunk fold */
    float tot_m[NC], tot_l[NC]; /* total fold */
    float fr[NC], fc[NC];       /* fold coefficients of the current step */
    int last;
};

template <int KT, int HD, int NT, bool SPLIT> struct att_layout {
    using slot = typename att_step<KT, HD>::slot;
    static constexpr int NC = 8 * NT;
    static constexpr int SLOTS = 2 * att_step<KT, HD>::PAIR_STAGES; /* per warp */
    static constexpr size_t ring_offset = (sizeof(att_smem<HD, NT>) + 15) & ~(size_t)15;
    static constexpr size_t ring_bytes = (size_t)ATT_WARPS * SLOTS * sizeof(slot);
    static constexpr size_t arrays = (size_t)3 * NC * HD * sizeof(float); /* co, so, to */
    static constexpr size_t bytes = ring_offset + ring_bytes + (SPLIT ? 0 : arrays);
    /* floats of one partial (m, l, o) and how many fit in what the ring has
     * left beside the three arrays (decode) */
    static constexpr int per = NC * (HD + 2);
    static constexpr int batch = SPLIT ? (int)((ring_bytes - arrays) / (per * sizeof(float))) : 1;
    static_assert(!SPLIT || ring_bytes >= arrays + per * sizeof(float),
                  "the idle ring holds the fold arrays and at least one partial");
};

/* Blocks of attn_mma_kernel an SM can hold for the shared memory each asks
 * (sm_90: 228 KiB an SM, 1 KiB of it reserved per block), at most 3: its
 * __launch_bounds__ minimum, which caps its registers (3 blocks of 128
 * threads: 168).  Where shared memory holds fewer (the prefill kernels at
 * head_dim 128 with two n-tiles take ~77 KiB: 2), asking for 3 only made
 * the loop spill for an occupancy it cannot have. */
#define ATT_SMEM_PER_SM (228 * 1024)
template <int KT, int HD, int NT, bool SPLIT> constexpr int att_min_blocks()
{
    constexpr int n = (int)(ATT_SMEM_PER_SM / (att_layout<KT, HD, NT, SPLIT>::bytes + 1024));
    return n < 1 ? 1 : n > 3 ? 3 : n;
}

/* fold(R, X): R <- R * e^(Mr - Mn) + X * e^(m - Mn), Mn = max(Mr, m); the
 * empty state (-inf, 0, 0) is the identity and a fully masked partial
 * changes nothing. */
__device__ __forceinline__ void att_fold_coef(float Mr, float m, float &Mn, float &ar, float &ac)
{
    Mn = fmaxf(Mr, m);
    float base = Mn == -INFINITY ? 0.0f : Mn;
    ar = exp2f(__fsub_rn(Mr, base));
    ac = exp2f(__fsub_rn(m, base));
}

template <int HD, int NT>
__device__ void att_state_init(att_smem<HD, NT> &sm, float *Rm, float *Rl, float *Ro)
{
    constexpr int NC = 8 * NT;
    if (threadIdx.x < NC) {
        Rm[threadIdx.x] = -INFINITY;
        Rl[threadIdx.x] = 0.0f;
    }
    for (int e = threadIdx.x; e < NC * HD; e += ATT_WARPS * 32)
        Ro[e] = 0.0f;
    (void)sm;
    __syncthreads();
}

/* Fold the partial (m[NC], l[NC], o[NC][HD]) (shared memory) into the state
 * (Rm, Rl, Ro) (shared memory). */
template <int HD, int NT>
__device__ void att_fold(att_smem<HD, NT> &sm, float *Rm, float *Rl, float *Ro, const float *m,
                         const float *l, const float *o)
{
    constexpr int NC = 8 * NT;
    const int tid = threadIdx.x;
    if (tid < NC) {
        float Mn, ar, ac;
        att_fold_coef(Rm[tid], m[tid], Mn, ar, ac);
        Rl[tid] = __fadd_rn(__fmul_rn(Rl[tid], ar), __fmul_rn(l[tid], ac));
        Rm[tid] = Mn;
        sm.fr[tid] = ar;
        sm.fc[tid] = ac;
    }
    __syncthreads();
    for (int e = tid; e < NC * HD; e += ATT_WARPS * 32) {
        int col = e / HD;
        Ro[e] = __fadd_rn(__fmul_rn(Ro[e], sm.fr[col]), __fmul_rn(o[e], sm.fc[col]));
    }
    __syncthreads();
}

/* Fold `count` partials stored one after another in global memory (each
 * `per` floats: m, l, o) into a state, in order: copied `batch` at a time
 * into shared memory (`stage`), so the loads go out together. */
template <int HD, int NT>
__device__ void att_fold_global(att_smem<HD, NT> &sm, float *stage, int batch, float *Rm,
                                float *Rl, float *Ro, const float *src, int count)
{
    constexpr int NC = 8 * NT, per = NC * (HD + 2);
    for (int b0 = 0; b0 < count; b0 += batch) {
        int nb = min(batch, count - b0);
        const float4 *g = (const float4 *)(src + (size_t)b0 * per);
        float4 *d = (float4 *)stage;
        for (int i = threadIdx.x; i < nb * per / 4; i += ATT_WARPS * 32)
            d[i] = __ldcg(g + i);
        __syncthreads();
        for (int i = 0; i < nb; i++) {
            const float *p = stage + (size_t)i * per;
            att_fold<HD, NT>(sm, Rm, Rl, Ro, p, p + NC, p + 2 * NC);
        }
    }
}

/* Run chunk `k` of the tile with all warps and leave its partial in
 * sm.cm / sm.cl / co.  Warp w takes the 32-token pairs of steps w, w + 4,
 * ... of the chunk; each warp keeps PAIR_STAGES - 1 pairs in flight through
 * its slots of the ring.  VOTE: k8v4nl's per-pair choice of V decode (the
 * decode instances; att_pv_nl). */
template <int KT, int HD, int NT, bool VOTE>
__device__ void att_run_chunk(const att_args &a, att_smem<HD, NT> &sm,
                              typename att_step<KT, HD>::slot *ring, float *co, int seq, int kvh,
                              int k, int32_t ctx, const uint32_t (&qf)[NT][HD / 32][2][2],
                              const int32_t (&cpos)[NT][2])
{
    using step = att_step<KT, HD>;
    constexpr int NC = 8 * NT, S = step::PAIR_STAGES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int32_t t_begin = k * a.chunk;
    const int32_t t_end = min(t_begin + a.chunk, ctx);
    const int32_t stride = 32 * ATT_WARPS;
    const int32_t T0 = t_begin + 32 * warp;
    const int npairs = T0 < t_end ? (t_end - T0 + stride - 1) / stride : 0;

    att_warp_state<HD, NT> ws;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            ws.m[nt][j] = -INFINITY;
            ws.l[nt][j] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < HD / 16; i++)
            ws.o[i][nt][0] = ws.o[i][nt][1] = ws.o[i][nt][2] = ws.o[i][nt][3] = 0.0f;
    }

    /* Pair i (tokens T0 + i*stride .. +31) goes through slots 2*(i % S) and
     * 2*(i % S) + 1; a second step wholly past t_end is not copied (its
     * tokens are masked, whatever the slot holds). */
    auto issue_pair = [&](int i) {
        int32_t T = T0 + i * stride;
        step::issue(ring[2 * (i % S)], a.kv, att_slot(a, seq, T, kvh), lane);
        if (T + 16 < t_end)
            step::issue(ring[2 * (i % S) + 1], a.kv, att_slot(a, seq, T + 16, kvh), lane);
    };
#pragma unroll
    for (int i = 0; i < S - 1; i++) {
        if (i < npairs)
            issue_pair(i);
        cp_async_commit();
    }
    for (int j = 0; j < npairs; j++) {
        /* refill the slots pair j - 1 used: every lane has read them */
        __syncwarp();
        if (j + S - 1 < npairs)
            issue_pair(j + S - 1);
        cp_async_commit();
        cp_async_wait<S - 1>();
        __syncwarp(); /* the steps' scales were copied by other lanes */
        step s0, s1;
        s0.fetch(ring[2 * (j % S)], lane);
        s1.fetch(ring[2 * (j % S) + 1], lane);
        att_pair_compute<KT, HD, NT, VOTE>(ws, s0, s1, qf, cpos, T0 + j * stride, t_end,
                                           a.scale_log2, a.window, g, c);
    }
    cp_async_wait<0>();

    /* Warp states -> the block's chunk partial, warps in index order. */
    if (g == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                sm.wm[warp][nt * 8 + 2 * c + j] = ws.m[nt][j];
                sm.wl[warp][nt * 8 + 2 * c + j] = ws.l[nt][j];
            }
        }
    }
    __syncthreads();
    float aw[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int col = nt * 8 + 2 * c + j;
            float M = sm.wm[0][col];
            for (int w = 1; w < ATT_WARPS; w++)
                M = fmaxf(M, sm.wm[w][col]);
            float base = M == -INFINITY ? 0.0f : M;
            aw[nt][j] = exp2f(__fsub_rn(sm.wm[warp][col], base));
        }
    }
    if (threadIdx.x < NC) {
        int col = threadIdx.x;
        float M = sm.wm[0][col];
        for (int w = 1; w < ATT_WARPS; w++)
            M = fmaxf(M, sm.wm[w][col]);
        float base = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            L = __fadd_rn(L, __fmul_rn(sm.wl[w][col], exp2f(__fsub_rn(sm.wm[w][col], base))));
        sm.cm[col] = M;
        sm.cl[col] = L;
    }
    for (int w = 0; w < ATT_WARPS; w++) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < HD / 16; i++) {
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int col = nt * 8 + 2 * c + (e & 1);
                        float v = __fmul_rn(aw[nt][e & 1], ws.o[i][nt][e]);
                        float *dst = co + col * HD + att_dim<KT, HD>(i, g, e);
                        *dst = w == 0 ? v : __fadd_rn(*dst, v);
                    }
                }
            }
        }
        __syncthreads();
    }
}

/* A ticket: the block that takes the last of `count` returns true (and
 * puts the counter back to zero for the next launch).  Every block first
 * makes its writes visible device-wide. */
__device__ __forceinline__ bool att_ticket(unsigned *counter, int count, int *flag)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned prev = atomicAdd(counter, 1u);
        bool last = prev == (unsigned)(count - 1);
        if (last)
            *counter = 0;
        *flag = last;
    }
    __syncthreads();
    bool last = *flag;
    if (last)
        __threadfence();
    return last;
}

#endif
