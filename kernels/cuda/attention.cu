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
 *   Invariance (doc/engine.md): a query's result is a function of its own column
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
 * test/test_cuda_attention.c for the stated tolerances.
 *
 * Files: this one holds both kernels and their launch; the fast kernel's
 * pieces (fragments, products, folds, the chunk loop) are in
 * attention_mma.cuh. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"

#define ATT_WARPS 4
#define ATT_CHUNK_DEFAULT 1024
/* Tokens per flash-decoding chunk.  A constant of the build in the engine;
 * the lab entry cuda_attention_set_chunk changes it for measurements. */
static int att_chunk_tokens = ATT_CHUNK_DEFAULT;

#include "kernels/cuda/attention_mma.cuh"

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
    const int32_t t0 = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    for (int32_t t = t0; t <= pos; t++) {
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
                v = h2f(a.kv.vd[si * nb + b]) *
                    (float)(a.kv.type == KV_K8V4NL ? att_nl_level(nib) : nib - 8);
            }
            s += qv[j] * k;
            vv[j] = v;
        }
        s = warp_sum(s);
        s *= a.scale;
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        for (int j = 0; j < dpl; j++)
            acc[j] = acc[j] * corr + p * vv[j];
        m = mn;
    }
    for (int j = 0; j < dpl; j++)
        acc[j] = acc[j] / l;
    if (a.unrot) /* k8v4r, k8v4r2: R^T of the output, the lanes' layout is rot_warp's */
        rot_warp<PLAIN_MAX_DPL>(acc, dpl, lane, true, a.rot_scale, a.rs);
    float *orow = a.out + row * a.out_stride + (int64_t)head * hd;
    for (int j = 0; j < dpl; j++)
        orow[lane + 32 * j] = acc[j];
}

/* The rotated caches' output, R^T (O / l) per valid column, as
 * cpu_kv_unrotate computes it from the plain output, bit for bit (the same
 * division, then rot_warp's transform: rotate.cuh).  Warp w takes columns
 * w, w + ATT_WARPS, ...; lane l holds dims l + 32 r of its column, read
 * from `to` (complete: the last fold ended with a barrier) without bank
 * conflicts, rotated back in registers by shuffles, written coalesced.  No
 * barrier and no shared-memory stage: the tail of the last block is a few
 * shuffles longer than the plain write. */
template <int HD, int NT>
__device__ void att_unrotate_out(const att_args &a, const att_smem<HD, NT> &sm, const float *to,
                                 int seq, int tile, int kvh, int n_q)
{
    constexpr int N = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = a.group;
    for (int col = warp; col < n_q * G; col += ATT_WARPS) {
        float x[N];
#pragma unroll
        for (int r = 0; r < N; r++)
            x[r] = __fdiv_rn(to[col * HD + lane + 32 * r], sm.tot_l[col]);
        rot_warp<N>(x, N, lane, true, a.rot_scale, a.rs);
        const int qi = col / G, gh = col % G;
        float *o = a.out + ((int64_t)seq * a.n_tok + tile * a.tpt + qi) * a.out_stride +
                   (int64_t)(kvh * G + gh) * HD + lane;
#pragma unroll
        for (int r = 0; r < N; r++)
            o[32 * r] = x[r];
    }
}

/* ==== the fast kernel ====================================================== */

template <int KT, int HD, int NT, bool SPLIT>
__global__ void __launch_bounds__(ATT_WARPS * 32, (att_min_blocks<KT, HD, NT, SPLIT>()))
    attn_mma_kernel(att_args a)
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
        att_run_chunk<KT, HD, NT, SPLIT>(a, sm, ring, co, seq, kvh, k, ctx, qf, cpos);
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
        att_run_chunk<KT, HD, NT, SPLIT>(a, sm, ring, co, seq, kvh, 0, ctx, qf, cpos);
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
                att_run_chunk<KT, HD, NT, SPLIT>(a, sm, ring, co, seq, kvh, k, ctx, qf, cpos);
                att_fold<HD, NT>(sm, sm.sup_m, sm.sup_l, so, sm.cm, sm.cl, co);
            }
            att_fold<HD, NT>(sm, sm.tot_m, sm.tot_l, to, sm.sup_m, sm.sup_l, so);
        }
    }

    if (a.unrot) { /* k8v4r, k8v4r2: out = R^T (O / l), without a launch of its own */
        att_unrotate_out<HD, NT>(a, sm, to, seq, tile, kvh, n_q);
        return;
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
           (kv->type == KV_K8V4 || kv->type == KV_K8V4NL || kv->type == KV_F16);
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
    if (kv->type != KV_K8V4 && kv->type != KV_K8V4NL && kv->type != KV_F16)
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
    a.window = 0;
    a.scale = scale;
    a.scale_log2 = scale * 1.4426950408889634f;
    a.tpt = 1;
    a.n_tiles = n_tok;
    a.chunk = att_chunk_tokens;
    a.max_chunks = 1;
    a.max_supers = 1;
    a.part = a.spart = NULL;
    a.tick1 = a.tick2 = NULL;
    a.unrot = 0;
    a.rot_scale = 1.0f;
    memset(&a.rs, 0, sizeof a.rs);
    return a;
}

extern "C" int cuda_attention_plain(const kv_view *kv, int page_stride, const int32_t *d_pos,
                                    int n_seq, int n_tok, const float *q, int64_t q_stride,
                                    int n_head, float scale, float *out, int64_t out_stride,
                                    cudaStream_t stream, strata_error *err)
{
    return cuda_attention_plain_window(kv, page_stride, d_pos, n_seq, n_tok, 0, q, q_stride,
                                       n_head, scale, out, out_stride, stream, err);
}

/* The plain kernel over the arguments `a` (window, unrotation) describe. */
static int att_plain_launch(const att_args &a, cudaStream_t stream, strata_error *err)
{
    int64_t warps = (int64_t)a.n_seq * a.n_tok * a.n_head;
    CUDA_CHECK(err, pdl_launch(attn_plain_kernel, dim3((unsigned)((warps + PLAIN_WARPS - 1) / PLAIN_WARPS)),
                               dim3(PLAIN_WARPS * 32), 0, stream, a));
    return 0;
}

extern "C" int cuda_attention_plain_window(const kv_view *kv, int page_stride,
                                           const int32_t *d_pos, int n_seq, int n_tok,
                                           int window, const float *q, int64_t q_stride,
                                           int n_head, float scale, float *out,
                                           int64_t out_stride, cudaStream_t stream,
                                           strata_error *err)
{
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    int rc = att_check(kv, n_head, "cuda_attention_plain", err);
    if (rc)
        return rc;
    att_args a = att_make(kv, page_stride, d_pos, n_seq, n_tok, q, q_stride, n_head, scale, out,
                          out_stride);
    a.window = window > 0 ? window : 0;
    return att_plain_launch(a, stream, err);
}

extern "C" int cuda_attention(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                              int n_tok, int max_ctx, const float *q, int64_t q_stride,
                              int n_head, float scale, float *out, int64_t out_stride,
                              void *scratch, size_t scratch_bytes, cudaStream_t stream,
                              strata_error *err)
{
    return cuda_attention_window(kv, page_stride, d_pos, n_seq, n_tok, max_ctx, 0, q, q_stride,
                                 n_head, scale, out, out_stride, scratch, scratch_bytes, stream,
                                 err);
}

/* The window masks keys inside the chunks as the causal limit does; chunks
 * wholly before every column's window still run (all masked), which costs
 * time at long contexts but keeps the chunk grid and the fold tree, hence
 * the invariance, exactly as without a window. */
static int att_window(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                      int n_tok, int max_ctx, int window, const float *q, int64_t q_stride,
                      int n_head, float scale, float *out, int64_t out_stride, void *scratch,
                      size_t scratch_bytes, int unrot, cudaStream_t stream, strata_error *err)
{
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    int rc = att_check(kv, n_head, "cuda_attention", err);
    if (rc)
        return rc;
    if (unrot && !kv_rot_supported(kv->head_dim))
        return strata_err(err, STRATA_E_ARG,
                          "cuda_attention_rotated: head_dim %d is not a power of two in 32..%d",
                          kv->head_dim, KV_ROT_MAX_DIM);
    att_args a = att_make(kv, page_stride, d_pos, n_seq, n_tok, q, q_stride, n_head, scale, out,
                          out_stride);
    a.window = window > 0 ? window : 0;
    if (unrot) {
        a.unrot = 1;
        a.rot_scale = kv_rot_scale(kv->head_dim);
        a.rs = rot_signs_make();
    }
    int group = n_head / kv->n_kv_head;
    if (!att_fast_ok(kv, group))
        return att_plain_launch(a, stream, err);
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
    CUDA_CHECK(err, kv->type == KV_K8V4     ? att_launch_kt<KV_K8V4>(a, grid, split, nt, stream)
                    : kv->type == KV_K8V4NL ? att_launch_kt<KV_K8V4NL>(a, grid, split, nt, stream)
                                            : att_launch_kt<KV_F16>(a, grid, split, nt, stream));
    CUDA_CHECK_LAUNCH(err, "attn_mma");
    return 0;
}

extern "C" int cuda_attention_window(const kv_view *kv, int page_stride, const int32_t *d_pos,
                                     int n_seq, int n_tok, int max_ctx, int window,
                                     const float *q, int64_t q_stride, int n_head, float scale,
                                     float *out, int64_t out_stride, void *scratch,
                                     size_t scratch_bytes, cudaStream_t stream,
                                     strata_error *err)
{
    return att_window(kv, page_stride, d_pos, n_seq, n_tok, max_ctx, window, q, q_stride, n_head,
                      scale, out, out_stride, scratch, scratch_bytes, 0, stream, err);
}

extern "C" int cuda_attention_rotated(const kv_view *kv, int page_stride, const int32_t *d_pos,
                                      int n_seq, int n_tok, int max_ctx, int window,
                                      const float *q, int64_t q_stride, int n_head, float scale,
                                      float *out, int64_t out_stride, void *scratch,
                                      size_t scratch_bytes, cudaStream_t stream,
                                      strata_error *err)
{
    return att_window(kv, page_stride, d_pos, n_seq, n_tok, max_ctx, window, q, q_stride, n_head,
                      scale, out, out_stride, scratch, scratch_bytes, 1, stream, err);
}
