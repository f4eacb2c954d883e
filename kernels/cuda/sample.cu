/* sample.cu: choosing the next token on the card, so that only the chosen
 * token id (4 bytes per row) crosses to the host instead of the logits.
 *
 * argmax: twin of cpu_argmax: largest logit, lowest index on ties.  One
 * block of 1024 threads per row; each thread scans a strided slice, then a
 * shared-memory tree keeps (value, index) pairs.  "Larger value, or equal
 * value and lower index" is associative and commutative, so the tree's shape
 * cannot change the answer.
 *
 * sample: the chain of engine/sample.c after the repetition penalty:
 * top-k, then top-p and min-p on the temperature-1 probabilities, then the
 * temperature, then a draw with a uniform number the caller passes per row
 * (the host's generator stays the one source of randomness).  Steps:
 *   1. radix select (four 8-bit passes over the row) finds the k-th largest
 *      logit T; the candidates are every logit > T plus the lowest-index
 *      logits == T (counted by integer histograms: exact, so the shared-
 *      memory atomics that count them cannot change the result);
 *   2. a bitonic sort of the <= 256 candidates by (logit desc, index asc),
 *      the order engine/sample.c's qsort produces;
 *   3. one thread runs the CPU's arithmetic verbatim, in double, in the same
 *      order (sums, cut-offs, the draw).
 * So the card picks the token the CPU picks for the same logits and uniform
 * number (up to a 1-ulp difference between CUDA's and glibc's exp() landing
 * exactly on a cut-off; never seen in the tests).  top_k must be 1..256:
 * the CPU's top-k-off path sorts the whole vocabulary, which this kernel
 * does not attempt; cuda_sample says so with STRATA_E_UNSUPPORTED.
 *
 * Cost: ~6 passes over the row from L2 by one block (vocab 152K: ~0.6 MB
 * each), tens of microseconds, once per decode step. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/warp.cuh"

#define ARGMAX_THREADS 1024
#define SAMPLE_THREADS 1024

/* ---- argmax -------------------------------------------------------------- */

__device__ __forceinline__ void better(float &bv, int &bi, float v, int i)
{
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

__global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_kernel(const float *logits, int64_t n, int64_t stride, int32_t *out)
{
    const float *x = logits + (int64_t)blockIdx.x * stride;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int64_t i = threadIdx.x; i < n; i += ARGMAX_THREADS)
        better(bv, bi, x[i], (int)i);
    warp_argmax(bv, bi);
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = sv[lane];
        bi = si[lane];
        warp_argmax(bv, bi);
        if (lane == 0)
            out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}

extern "C" int cuda_argmax(const float *logits, int n_rows, int64_t n, int64_t stride,
                           int32_t *d_out, cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0)
        return 0;
    if (n <= 0 || n > 0x7ffffffe || stride < n)
        return strata_err(err, STRATA_E_ARG, "cuda_argmax: n %lld stride %lld", (long long)n,
                          (long long)stride);
    argmax_kernel<<<n_rows, ARGMAX_THREADS, 0, stream>>>(logits, n, stride, d_out);
    CUDA_CHECK_LAUNCH(err, "argmax");
    return 0;
}

/* ---- sampling ------------------------------------------------------------ */

/* Order-preserving map of a float to an unsigned key (larger float, larger
 * key) and back. */
__device__ __forceinline__ uint32_t fkey(float x)
{
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float unkey(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* A candidate as one sortable word: key in the high half, (~index) in the
 * low half, so "descending" means larger logit first, then lower index. */
__device__ __forceinline__ uint64_t cand_word(uint32_t key, int64_t i)
{
    return ((uint64_t)key << 32) | (uint64_t)(0xffffffffu - (uint32_t)i);
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *logits, int64_t n, int64_t stride, cuda_sample_params p,
              const float *uniform, int32_t *out)
{
    const float *x = logits + (int64_t)blockIdx.x * stride;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = (int64_t)p.top_k < n ? p.top_k : (int)n;

    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix;
    __shared__ int s_krem, s_ngt;
    __shared__ int wcount[SAMPLE_THREADS / 32];
    __shared__ uint64_t cand[CUDA_SAMPLE_MAX_K];

    /* 1. radix select of the K-th largest key, 8 bits at a time. */
    uint32_t prefix = 0, pmask = 0;
    int krem = K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += SAMPLE_THREADS)
            hist[i] = 0;
        __syncthreads();
        for (int64_t i = tid; i < n; i += SAMPLE_THREADS) {
            uint32_t k = fkey(x[i]);
            if ((k & pmask) == prefix)
                atomicAdd(&hist[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int cum = 0;
            for (int b = 255; b >= 0; b--) {
                if (cum + (int)hist[b] >= krem) {
                    s_prefix = prefix | ((uint32_t)b << shift);
                    s_krem = krem - cum;
                    break;
                }
                cum += (int)hist[b];
            }
        }
        __syncthreads();
        prefix = s_prefix;
        krem = s_krem;
        pmask |= 255u << shift;
        __syncthreads();
    }
    const uint32_t T = prefix;
    const int ngt = K - krem; /* keys > T; then krem keys == T, lowest index first */

    /* Candidates above the threshold: any slot order (sorted below). */
    if (tid == 0)
        s_ngt = 0;
    for (int i = tid; i < CUDA_SAMPLE_MAX_K; i += SAMPLE_THREADS)
        cand[i] = 0; /* below every real candidate */
    __syncthreads();
    for (int64_t i = tid; i < n; i += SAMPLE_THREADS) {
        uint32_t k = fkey(x[i]);
        if (k > T)
            cand[atomicAdd(&s_ngt, 1)] = cand_word(k, i);
    }
    /* Ties at the threshold in index order: a block-wide rank per tile. */
    int taken = 0;
    for (int64_t t0 = 0; t0 < n && taken < krem; t0 += SAMPLE_THREADS) {
        int64_t i = t0 + tid;
        bool eq = i < n && fkey(x[i]) == T;
        unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0)
            wcount[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < SAMPLE_THREADS / 32; w++) {
            before += w < warp ? wcount[w] : 0;
            total += wcount[w];
        }
        int rank = taken + before + __popc(bal & ((1u << lane) - 1u));
        if (eq && rank < krem)
            cand[ngt + rank] = cand_word(T, i);
        taken += total;
        __syncthreads();
    }
    __syncthreads();

    /* 2. bitonic sort, descending, of the 256 slots. */
    for (int size = 2; size <= CUDA_SAMPLE_MAX_K; size <<= 1) {
        for (int stride2 = size >> 1; stride2 > 0; stride2 >>= 1) {
            if (tid < CUDA_SAMPLE_MAX_K / 2) {
                int lo = 2 * tid - (tid & (stride2 - 1));
                int hi = lo + stride2;
                bool desc = (lo & size) == 0;
                uint64_t a = cand[lo], b = cand[hi];
                if ((a < b) == desc) {
                    cand[lo] = b;
                    cand[hi] = a;
                }
            }
            __syncthreads();
        }
    }

    /* 3. engine/sample.c's arithmetic, verbatim, in double. */
    if (tid == 0) {
        int nk = K;
        double mx = (double)unkey((uint32_t)(cand[0] >> 32)), sum = 0.0;
        for (int i = 0; i < nk; i++)
            sum += exp((double)unkey((uint32_t)(cand[i] >> 32)) - mx);
        if (p.top_p < 1.0f) {
            double acc = 0.0;
            for (int i = 0; i < nk; i++) {
                acc += exp((double)unkey((uint32_t)(cand[i] >> 32)) - mx) / sum;
                if (acc >= p.top_p) {
                    nk = i + 1;
                    break;
                }
            }
        }
        if (p.min_p > 0.0f) {
            int k = 1;
            while (k < nk && exp((double)unkey((uint32_t)(cand[k] >> 32)) - mx) >= p.min_p)
                k++;
            nk = k;
        }
        double tot = 0.0;
        for (int i = 0; i < nk; i++)
            tot += exp(((double)unkey((uint32_t)(cand[i] >> 32)) - mx) / p.temp);
        double r = uniform[blockIdx.x] * tot, acc = 0.0;
        int32_t pick = (int32_t)(0xffffffffu - (uint32_t)cand[nk - 1]);
        for (int i = 0; i < nk; i++) {
            acc += exp(((double)unkey((uint32_t)(cand[i] >> 32)) - mx) / p.temp);
            if (r < acc) {
                pick = (int32_t)(0xffffffffu - (uint32_t)cand[i]);
                break;
            }
        }
        out[blockIdx.x] = pick;
    }
}

extern "C" int cuda_sample(const float *logits, int n_rows, int64_t n_vocab, int64_t stride,
                           const cuda_sample_params *p, const float *d_uniform, int32_t *d_out,
                           cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0)
        return 0;
    if (p->temp <= 0.0f)
        return cuda_argmax(logits, n_rows, n_vocab, stride, d_out, stream, err);
    if (p->top_k < 1 || p->top_k > CUDA_SAMPLE_MAX_K)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "cuda_sample: top_k %d (the card samples with top-k 1..%d; sample "
                          "on the host otherwise)",
                          p->top_k, CUDA_SAMPLE_MAX_K);
    if (n_vocab <= 0 || n_vocab > 0x7ffffffe || stride < n_vocab)
        return strata_err(err, STRATA_E_ARG, "cuda_sample: n_vocab %lld stride %lld",
                          (long long)n_vocab, (long long)stride);
    sample_kernel<<<n_rows, SAMPLE_THREADS, 0, stream>>>(logits, n_vocab, stride, *p, d_uniform,
                                                         d_out);
    CUDA_CHECK_LAUNCH(err, "sample");
    return 0;
}
