/* attention.cu: attention over the paged KV cache on the card.
 *
 * Twin of cpu_attention (kernels/ops.h): for each query head h at position
 * p, out = softmax(q . K[0..p] * scale) V[0..p], reading kv head
 * h / (n_head / n_kv_head).  One call serves a batch of sequences, each with
 * its own page table row and its own position; a sequence contributes n_tok
 * query tokens at positions pos[b] .. pos[b] + n_tok - 1 (decode: n_tok = 1;
 * prefill: a chunk of the prompt), and the cache already holds them.
 *
 * Two kernels:
 *
 * attn_plain_kernel — the reference to read.  One warp per (query, head);
 *   lanes own head dimensions; per cached token a dot product, an online
 *   softmax step and an axpy, all in f32.  Any head_dim (multiple of 32), any
 *   group size, k8v4 or f16.  Slow (one token at a time per warp); used by
 *   the tests and for shapes the fast kernel does not take.
 *
 * attn_mma_kernel — the fast path (head_dim 64/128/256, group <= 8, k8v4 or
 *   f16).  Decode is a pure stream: 208 bytes per token and kv head for k8v4
 *   at head_dim 128, used once.  The design follows from keeping that stream
 *   at the memory's rate while doing ~1000 multiply-adds per token-head:
 *
 *   - Tensor cores, fp16 in, fp32 accumulate (mma.m16n8k16).  In f32 FMAs
 *     the arithmetic alone would take longer than the memory (1024 FMA per
 *     208 bytes is ~44 TFLOP/s at 4.4 TB/s).  The n dimension (8 columns)
 *     holds the query heads that share the kv head (the "columns"; with
 *     prefill, (query token, head) pairs), so one pass over K and V serves
 *     the whole GQA group.
 *   - S^T = K Q^T: A = 16 cached tokens x 16 dims of K straight from the
 *     int8 quants (exact in fp16 via the 0x6400 exponent trick: two PRMT, one
 *     LOP3, one HSUB2 per 4 values), B = the query in fp16.  Each Q8_0 block
 *     (32 dims = 2 k-steps) gets its own accumulator, so the per-token fp16
 *     scale multiplies an exact integer dot product once, in f32.
 *   - O^T += V^T P^T: A = V^T (dims x tokens) from the Q4_0 nibbles by the
 *     same trick (a PRMT pairs two tokens' bytes, a LOP3 masks a nibble into
 *     an fp16 mantissa, an HSUB2/HFMA2 removes the bias, an HMUL2 applies
 *     the two tokens' scales); B = P^T, obtained from the S^T accumulator
 *     fragment with one movmatrix.trans per 8 tokens.
 *   - Loads: each lane copies exactly the bytes of its MMA fragments (8 or
 *     16 bytes per copy, every warp instruction covering whole 32-byte
 *     sectors; the step's scales once, by a few lanes) with cp.async into
 *     lane-major shared-memory slots and reads them back conflict-free.  A
 *     warp works on pairs of 16-token steps: one online-softmax update per
 *     32 tokens, two independent MMA chains, the next pair in flight.
 *     (Measured on the H200: with loads into registers one step ahead,
 *     decode was latency-bound at 24 % of the read bandwidth; deeper copy
 *     rings alone did not help: one warp's 16-token step is a ~1.4 us chain
 *     of dependent MMA, shuffle and exp latencies, so the work per softmax
 *     update and the warps per SM are what count.)
 *   - Flash-decoding: the context is cut into chunks of ATT_CHUNK tokens at
 *     fixed positions (0, C, 2C, ...), never depending on the batch or on how
 *     the prompt was chunked.  Decode runs one block per (chunk, kv head,
 *     sequence) — at 32K context and 8 kv heads, 256 blocks of 4 warps.
 *     Partials fold in a fixed two-level tree (ATT_SUPER chunks, then the
 *     super-chunks), each level done by the last block to finish it (an
 *     atomic ticket, not a reduction), the partials prefetched into shared
 *     memory together.  Prefill runs one block per (query tile, kv head,
 *     sequence) and folds the same tree in the block as it goes.
 *
 *   Invariance (issue 5): a query's result is a function of its own column
 *   only — MMA output columns are independent, the softmax state is per
 *   column, masked tokens and masked chunks change no bit of the state
 *   (alpha = 1, p = 0), warps own fixed 16-token steps (step s of a chunk
 *   goes to warp s % ATT_WARPS), warp partials and chunk partials are folded
 *   in index order with explicitly rounded arithmetic (__fmul_rn etc., so no
 *   contraction differs between template instances).  Hence decode, prefill
 *   with any chunking, and any batch give bit-identical outputs for the same
 *   query (tested).
 *
 * Accuracy against cpu_attention (doubles): q and P are rounded to fp16
 * (relative 2^-12), everything else is exact or f32: see
 * test/test_cuda_attention.c for the stated tolerances. */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"

#define ATT_WARPS 4
#define ATT_CHUNK_DEFAULT 1024
/* Tokens per flash-decoding chunk.  A constant of the build in the engine;
 * the lab entry cuda_attention_set_chunk changes it for measurements. */
static int att_chunk_tokens = ATT_CHUNK_DEFAULT;

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
    float scale;           /* softmax scale (plain kernel) */
    float scale_log2;      /* scale * log2(e) (fast kernel: exp2) */
    int tpt, n_tiles;      /* query tokens per tile, tiles per sequence */
    int chunk, max_chunks; /* tokens per chunk; grid.x of a split launch */
    int max_supers;        /* super-chunks of a split launch */
    float *part;           /* split: chunk partials [n_seq][n_kv_head][max_chunks] */
    float *spart;          /* split: super-chunk partials [..][max_supers] */
    unsigned *tick1;       /* split: tickets per super-chunk, zero at rest */
    unsigned *tick2;       /* split: tickets per (sequence, kv head) */
} att_args;

/* Row index of token `pos` of kv head h in sequence `seq`'s pages:
 * [page][head][KV_PAGE][...]. */
__device__ __forceinline__ int64_t att_slot(const att_args &a, int seq, int32_t pos, int h)
{
    int64_t page = __ldg(a.kv.pages + (int64_t)seq * a.page_stride + pos / KV_PAGE);
    return (page * a.kv.n_kv_head + h) * KV_PAGE + pos % KV_PAGE;
}

/* ==== the plain kernel ===================================================== */

#define PLAIN_WARPS 4
#define PLAIN_MAX_DPL 16 /* dims per lane: head_dim <= 512 */

__global__ void __launch_bounds__(PLAIN_WARPS * 32) attn_plain_kernel(att_args a)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * PLAIN_WARPS + (threadIdx.x >> 5);
    if (w >= (int64_t)a.n_seq * a.n_tok * a.n_head)
        return;
    const int head = (int)(w % a.n_head);
    const int64_t row = w / a.n_head; /* seq * n_tok + i */
    const int seq = (int)(row / a.n_tok), i = (int)(row % a.n_tok);
    const int32_t pos = a.pos[seq] + i;
    const int kvh = head / a.group, hd = a.kv.head_dim, dpl = hd / 32, nb = hd / 32;

    float qv[PLAIN_MAX_DPL], acc[PLAIN_MAX_DPL];
    const float *qr = a.q + row * a.q_stride + (int64_t)head * hd;
    for (int j = 0; j < dpl; j++) {
        qv[j] = qr[lane + 32 * j];
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int32_t t = 0; t <= pos; t++) {
        int64_t si = att_slot(a, seq, t, kvh);
        float s = 0.0f, vv[PLAIN_MAX_DPL];
        for (int j = 0; j < dpl; j++) {
            int d = lane + 32 * j;
            float k, v;
            if (a.kv.type == KV_F16) {
                k = __half2float(__ushort_as_half(a.kv.kh[si * hd + d]));
                v = __half2float(__ushort_as_half(a.kv.vh[si * hd + d]));
            } else {
                int b = d / 32, e = d % 32;
                k = h2f(a.kv.kd[si * nb + b]) * (float)a.kv.kq[si * hd + d];
                uint8_t byte = a.kv.vq[si * (hd / 2) + 16 * b + (e & 15)];
                int nib = e < 16 ? (byte & 15) : (byte >> 4);
                v = h2f(a.kv.vd[si * nb + b]) * (float)(nib - 8);
            }
            s += qv[j] * k;
            vv[j] = v;
        }
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= a.scale;
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        for (int j = 0; j < dpl; j++)
            acc[j] = acc[j] * corr + p * vv[j];
        m = mn;
    }
    float *orow = a.out + row * a.out_stride + (int64_t)head * hd;
    for (int j = 0; j < dpl; j++)
        orow[lane + 32 * j] = acc[j] / l;
}

/* ==== the fast kernel ====================================================== */

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
    if constexpr (KT == KV_K8V4) {
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
        if constexpr (KT == KV_K8V4) {
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

/* O^T += V^T P^T for one 16-token step.  Tokens at or past t_end (stale
 * bytes past the context, or the next chunk's) get a zero scale (f16: a
 * zero value), so a stale Inf/NaN cannot reach the MMA (0 * Inf = NaN);
 * their P is 0 anyway. */
template <int KT, int HD, int NT>
__device__ __forceinline__ void att_pv(att_warp_state<HD, NT> &ws, const att_step<KT, HD> &st,
                                       const uint32_t (&pb)[NT][2], int32_t T, int32_t t_end,
                                       int c)
{
    if constexpr (KT == KV_K8V4) {
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
            const uint32_t sel = bs | (bs << 4) | ((bs + 4) << 8) | ((bs + 4) << 12);
            uint32_t dab = prmt(st.v[0][w], st.v[1][w], sel);
            uint32_t dcd = prmt(st.v[2][w], st.v[3][w], sel);
            uint32_t A[4];
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
template <int KT, int HD, int NT>
__device__ __forceinline__ void att_pair_compute(att_warp_state<HD, NT> &ws,
                                                 const att_step<KT, HD> &s0,
                                                 const att_step<KT, HD> &s1,
                                                 const uint32_t (&qf)[NT][HD / 32][2][2],
                                                 const int32_t (&cpos)[NT][2], int32_t T,
                                                 int32_t t_end, float scale_log2, int g, int c)
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
            float x0 = T + g <= lim ? __fmul_rn(S0[nt][j], scale_log2) : -INFINITY;
            float x1 = T + 8 + g <= lim ? __fmul_rn(S0[nt][2 + j], scale_log2) : -INFINITY;
            float x2 = T + 16 + g <= lim ? __fmul_rn(S1[nt][j], scale_log2) : -INFINITY;
            float x3 = T + 24 + g <= lim ? __fmul_rn(S1[nt][2 + j], scale_log2) : -INFINITY;
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
    att_pv<KT, HD, NT>(ws, s0, pb0, T, t_end, c);
    att_pv<KT, HD, NT>(ws, s1, pb1, T + 16, t_end, c);
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
 * its slots of the ring. */
template <int KT, int HD, int NT>
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
        att_pair_compute<KT, HD, NT>(ws, s0, s1, qf, cpos, T0 + j * stride, t_end, a.scale_log2,
                                     g, c);
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

template <int KT, int HD, int NT, bool SPLIT>
__global__ void __launch_bounds__(ATT_WARPS * 32, 3) attn_mma_kernel(att_args a)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    using L = att_layout<KT, HD, NT, SPLIT>;
    using slot = typename L::slot;
    constexpr int NC = 8 * NT;
    extern __shared__ __align__(16) unsigned char att_dyn[];
    att_smem<HD, NT> &sm = *reinterpret_cast<att_smem<HD, NT> *>(att_dyn);
    slot *ring_all = reinterpret_cast<slot *>(att_dyn + L::ring_offset);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    slot *ring = ring_all + warp * L::SLOTS;
    /* chunk partial, super-chunk and total fold arrays [NC][HD]; decode:
     * in the idle ring, followed by the staging of the partials it folds */
    float *co = reinterpret_cast<float *>(att_dyn + L::ring_offset + (SPLIT ? 0 : L::ring_bytes));
    float *so = co + NC * HD, *to = so + NC * HD, *stage = to + NC * HD;
    const int seq = blockIdx.z;
    const int kvh = blockIdx.y / a.n_tiles, tile = blockIdx.y % a.n_tiles;
    const int32_t p0 = a.pos[seq];
    const int G = a.group;

    /* Columns: col = qi * G + gh for query token tile*tpt + qi and head
     * kvh*G + gh; positions of the lane's score columns (2c, 2c+1). */
    const int n_q = min(a.tpt, a.n_tok - tile * a.tpt);
    const int32_t ctx = p0 + tile * a.tpt + n_q; /* tokens any column sees */
    const int n_chunks = (ctx + a.chunk - 1) / a.chunk;
    const int n_supers = (n_chunks + ATT_SUPER - 1) / ATT_SUPER;
    int32_t cpos[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int col = nt * 8 + 2 * c + j, qi = col / G;
            cpos[nt][j] = (col < n_q * G) ? p0 + tile * a.tpt + qi : -1;
        }
    }

    /* Query fragments (B of S^T = K Q^T): column nt*8 + g, dims
     * 32b + 8c + 4h + {0,1} and {2,3}. */
    uint32_t qf[NT][HD / 32][2][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int col = nt * 8 + g, qi = col / G, gh = col % G;
        bool valid = col < n_q * G;
        const float *qr = a.q + ((int64_t)seq * a.n_tok + tile * a.tpt + qi) * a.q_stride +
                          (int64_t)(kvh * G + gh) * HD;
#pragma unroll
        for (int b = 0; b < HD / 32; b++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float4 v = valid ? *(const float4 *)(qr + 32 * b + 8 * c + 4 * h)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
                qf[nt][b][h][0] = pack_h2(v.x, v.y);
                qf[nt][b][h][1] = pack_h2(v.z, v.w);
            }
        }
    }

    if (SPLIT && (int)blockIdx.x >= n_chunks)
        return;

    if (SPLIT && n_chunks > 1) {
        /* Decode: this block's chunk -> partial; the last block of the
         * super-chunk folds it, the last super-chunk folds the total. */
        if (n_chunks > (int)gridDim.x) {
            /* More context than the launch was sized for: make it loud. */
            if (blockIdx.x == 0)
                for (int e = tid; e < NC * HD; e += ATT_WARPS * 32) {
                    int col = e / HD;
                    if (col < n_q * G) {
                        int qi = col / G, gh = col % G;
                        a.out[((int64_t)seq * a.n_tok + tile * a.tpt + qi) * a.out_stride +
                              (int64_t)(kvh * G + gh) * HD + e % HD] = NAN;
                    }
                }
            return;
        }
        const int k = blockIdx.x, s = k / ATT_SUPER;
        att_run_chunk<KT, HD, NT>(a, sm, ring, co, seq, kvh, k, ctx, qf, cpos);
        const int64_t tix = (int64_t)seq * a.kv.n_kv_head + kvh; /* n_tiles is 1 */
        float *parts = a.part + tix * a.max_chunks * L::per;
        float *mine = parts + (int64_t)k * L::per;
        if (tid < NC) {
            mine[tid] = sm.cm[tid];
            mine[NC + tid] = sm.cl[tid];
        }
        for (int e = tid; e < NC * HD; e += ATT_WARPS * 32)
            mine[2 * NC + e] = co[e];
        int in_super = min(ATT_SUPER, n_chunks - s * ATT_SUPER);
        if (!att_ticket(a.tick1 + tix * a.max_supers + s, in_super, &sm.last))
            return;
        att_state_init<HD, NT>(sm, sm.sup_m, sm.sup_l, so);
        att_fold_global<HD, NT>(sm, stage, L::batch, sm.sup_m, sm.sup_l, so,
                                parts + (int64_t)s * ATT_SUPER * L::per, in_super);
        att_state_init<HD, NT>(sm, sm.tot_m, sm.tot_l, to);
        if (n_supers == 1) {
            att_fold<HD, NT>(sm, sm.tot_m, sm.tot_l, to, sm.sup_m, sm.sup_l, so);
        } else {
            float *supers = a.spart + tix * a.max_supers * L::per;
            float *smine = supers + (int64_t)s * L::per;
            if (tid < NC) {
                smine[tid] = sm.sup_m[tid];
                smine[NC + tid] = sm.sup_l[tid];
            }
            for (int e = tid; e < NC * HD; e += ATT_WARPS * 32)
                smine[2 * NC + e] = so[e];
            if (!att_ticket(a.tick2 + tix, n_supers, &sm.last))
                return;
            att_fold_global<HD, NT>(sm, stage, L::batch, sm.tot_m, sm.tot_l, to, supers,
                                    n_supers);
        }
    } else if (SPLIT) {
        /* Decode of a single chunk: the same folds; the states live in the
         * ring, so they start once the chunk is done with it. */
        att_run_chunk<KT, HD, NT>(a, sm, ring, co, seq, kvh, 0, ctx, qf, cpos);
        att_state_init<HD, NT>(sm, sm.sup_m, sm.sup_l, so);
        att_fold<HD, NT>(sm, sm.sup_m, sm.sup_l, so, sm.cm, sm.cl, co);
        att_state_init<HD, NT>(sm, sm.tot_m, sm.tot_l, to);
        att_fold<HD, NT>(sm, sm.tot_m, sm.tot_l, to, sm.sup_m, sm.sup_l, so);
    } else {
        /* Prefill: the same tree, here, in order. */
        att_state_init<HD, NT>(sm, sm.tot_m, sm.tot_l, to);
        for (int s = 0; s < n_supers; s++) {
            att_state_init<HD, NT>(sm, sm.sup_m, sm.sup_l, so);
            for (int k = s * ATT_SUPER; k < min(n_chunks, (s + 1) * ATT_SUPER); k++) {
                att_run_chunk<KT, HD, NT>(a, sm, ring, co, seq, kvh, k, ctx, qf, cpos);
                att_fold<HD, NT>(sm, sm.sup_m, sm.sup_l, so, sm.cm, sm.cl, co);
            }
            att_fold<HD, NT>(sm, sm.tot_m, sm.tot_l, to, sm.sup_m, sm.sup_l, so);
        }
    }

    /* out = O / l for the valid columns. */
    for (int e = tid; e < NC * HD; e += ATT_WARPS * 32) {
        int col = e / HD;
        if (col < n_q * G) {
            int qi = col / G, gh = col % G;
            a.out[((int64_t)seq * a.n_tok + tile * a.tpt + qi) * a.out_stride +
                  (int64_t)(kvh * G + gh) * HD + e % HD] =
                __fdiv_rn(to[e], sm.tot_l[col]);
        }
    }
}

/* ==== host side ============================================================ */

static int att_fast_ok(const kv_view *kv, int group)
{
    int hd = kv->head_dim;
    return (hd == 64 || hd == 128 || hd == 256) && group >= 1 && group <= 8 &&
           (kv->type == KV_K8V4 || kv->type == KV_F16);
}

static int att_nt(int hd, int n_tok)
{
    return (n_tok > 1 && hd <= 128) ? 2 : 1;
}

static int att_max_chunks(int max_ctx)
{
    return (max_ctx + att_chunk_tokens - 1) / att_chunk_tokens;
}

/* Scratch of a split (decode) launch: tickets, then chunk partials, then
 * super-chunk partials, each partial 8 columns x (head_dim + 2) floats. */
typedef struct att_scratch {
    size_t tick1, tick2, part, spart, total; /* byte offsets, total size */
} att_scratch;

static att_scratch att_scratch_layout(const kv_view *kv, int n_seq, int max_ctx)
{
    att_scratch l;
    size_t pairs = (size_t)n_seq * kv->n_kv_head;
    size_t chunks = (size_t)att_max_chunks(max_ctx);
    size_t supers = (chunks + ATT_SUPER - 1) / ATT_SUPER;
    size_t per = (size_t)8 * (kv->head_dim + 2) * sizeof(float);
    l.tick1 = 0;
    l.tick2 = (pairs * supers * sizeof(unsigned) + 255) & ~(size_t)255;
    l.part = l.tick2 + ((pairs * sizeof(unsigned) + 255) & ~(size_t)255);
    l.spart = l.part + pairs * chunks * per;
    l.total = l.spart + pairs * supers * per;
    return l;
}

extern "C" size_t cuda_attention_scratch_bytes(const kv_view *kv, int n_head, int n_seq,
                                               int max_ctx)
{
    int group = kv->n_kv_head > 0 ? n_head / kv->n_kv_head : 0;
    if (!att_fast_ok(kv, group) || max_ctx <= att_chunk_tokens)
        return 256;
    return att_scratch_layout(kv, n_seq, max_ctx).total;
}

extern "C" void cuda_attention_set_chunk(int tokens)
{
    att_chunk_tokens = tokens >= 64 && tokens % 64 == 0 ? tokens : ATT_CHUNK_DEFAULT;
}

/* Launch one instance, with its dynamic shared memory (above 48 KiB a
 * kernel must opt in, once). */
template <int KT, int HD, int NT, bool SPLIT>
static cudaError_t att_launch_one(const att_args &a, dim3 grid, cudaStream_t s)
{
    using L = att_layout<KT, HD, NT, SPLIT>;
    static bool opted_in = false;
    if (!opted_in && L::bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_mma_kernel<KT, HD, NT, SPLIT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)L::bytes);
        if (e != cudaSuccess)
            return e;
    }
    opted_in = true;
    return pdl_launch(attn_mma_kernel<KT, HD, NT, SPLIT>, grid, dim3(ATT_WARPS * 32), L::bytes, s, a);
}

template <int KT, int HD>
static cudaError_t att_launch_hd(const att_args &a, dim3 grid, bool split, int nt, cudaStream_t s)
{
    if (split)
        return att_launch_one<KT, HD, 1, true>(a, grid, s);
    if constexpr (HD <= 128)
        if (nt == 2)
            return att_launch_one<KT, HD, 2, false>(a, grid, s);
    return att_launch_one<KT, HD, 1, false>(a, grid, s);
}

template <int KT>
static cudaError_t att_launch_kt(const att_args &a, dim3 grid, bool split, int nt, cudaStream_t s)
{
    switch (a.kv.head_dim) {
    case 64: return att_launch_hd<KT, 64>(a, grid, split, nt, s);
    case 128: return att_launch_hd<KT, 128>(a, grid, split, nt, s);
    default: return att_launch_hd<KT, 256>(a, grid, split, nt, s);
    }
}

static int att_check(const kv_view *kv, int n_head, const char *who, strata_error *err)
{
    if (kv->n_kv_head <= 0 || n_head % kv->n_kv_head)
        return strata_err(err, STRATA_E_ARG, "%s: %d heads over %d kv heads", who, n_head,
                          kv->n_kv_head);
    if (kv->head_dim <= 0 || kv->head_dim % 32 || kv->head_dim > 32 * PLAIN_MAX_DPL)
        return strata_err(err, STRATA_E_ARG, "%s: head_dim %d", who, kv->head_dim);
    if (kv->type != KV_K8V4 && kv->type != KV_F16)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: kv type %d", who, kv->type);
    return 0;
}

static att_args att_make(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                         int n_tok, const float *q, int64_t q_stride, int n_head, float scale,
                         float *out, int64_t out_stride)
{
    att_args a;
    a.kv = *kv;
    a.page_stride = page_stride;
    a.pos = d_pos;
    a.n_seq = n_seq;
    a.n_tok = n_tok;
    a.n_head = n_head;
    a.group = n_head / kv->n_kv_head;
    a.q = q;
    a.q_stride = q_stride;
    a.out = out;
    a.out_stride = out_stride;
    a.scale = scale;
    a.scale_log2 = scale * 1.4426950408889634f;
    a.tpt = 1;
    a.n_tiles = n_tok;
    a.chunk = att_chunk_tokens;
    a.max_chunks = 1;
    a.max_supers = 1;
    a.part = a.spart = NULL;
    a.tick1 = a.tick2 = NULL;
    return a;
}

extern "C" int cuda_attention_plain(const kv_view *kv, int page_stride, const int32_t *d_pos,
                                    int n_seq, int n_tok, const float *q, int64_t q_stride,
                                    int n_head, float scale, float *out, int64_t out_stride,
                                    cudaStream_t stream, strata_error *err)
{
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    int rc = att_check(kv, n_head, "cuda_attention_plain", err);
    if (rc)
        return rc;
    att_args a = att_make(kv, page_stride, d_pos, n_seq, n_tok, q, q_stride, n_head, scale, out,
                          out_stride);
    int64_t warps = (int64_t)n_seq * n_tok * n_head;
    CUDA_CHECK(err, pdl_launch(attn_plain_kernel, dim3((unsigned)((warps + PLAIN_WARPS - 1) / PLAIN_WARPS)),
                               dim3(PLAIN_WARPS * 32), 0, stream, a));
    return 0;
}

extern "C" int cuda_attention(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                              int n_tok, int max_ctx, const float *q, int64_t q_stride,
                              int n_head, float scale, float *out, int64_t out_stride,
                              void *scratch, size_t scratch_bytes, cudaStream_t stream,
                              strata_error *err)
{
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    int rc = att_check(kv, n_head, "cuda_attention", err);
    if (rc)
        return rc;
    int group = n_head / kv->n_kv_head;
    if (!att_fast_ok(kv, group))
        return cuda_attention_plain(kv, page_stride, d_pos, n_seq, n_tok, q, q_stride, n_head,
                                    scale, out, out_stride, stream, err);
    att_args a = att_make(kv, page_stride, d_pos, n_seq, n_tok, q, q_stride, n_head, scale, out,
                          out_stride);
    int nt = att_nt(kv->head_dim, n_tok);
    bool split = n_tok == 1 && max_ctx > att_chunk_tokens;
    dim3 grid;
    if (split) {
        size_t need = cuda_attention_scratch_bytes(kv, n_head, n_seq, max_ctx);
        if (!scratch || scratch_bytes < need)
            return strata_err(err, STRATA_E_ARG,
                              "cuda_attention: scratch %zu bytes, need %zu (max_ctx %d)",
                              scratch_bytes, need, max_ctx);
        att_scratch l = att_scratch_layout(kv, n_seq, max_ctx);
        a.tick1 = (unsigned *)((char *)scratch + l.tick1);
        a.tick2 = (unsigned *)((char *)scratch + l.tick2);
        a.part = (float *)((char *)scratch + l.part);
        a.spart = (float *)((char *)scratch + l.spart);
        a.max_chunks = att_max_chunks(max_ctx);
        a.max_supers = (a.max_chunks + ATT_SUPER - 1) / ATT_SUPER;
        a.tpt = 1;
        a.n_tiles = 1;
        grid = dim3((unsigned)a.max_chunks, (unsigned)kv->n_kv_head, (unsigned)n_seq);
    } else {
        a.tpt = nt * 8 / group;
        a.n_tiles = (n_tok + a.tpt - 1) / a.tpt;
        grid = dim3(1, (unsigned)(kv->n_kv_head * a.n_tiles), (unsigned)n_seq);
    }
    CUDA_CHECK(err, kv->type == KV_K8V4 ? att_launch_kt<KV_K8V4>(a, grid, split, nt, stream)
                                        : att_launch_kt<KV_F16>(a, grid, split, nt, stream));
    CUDA_CHECK_LAUNCH(err, "attn_mma");
    return 0;
}
