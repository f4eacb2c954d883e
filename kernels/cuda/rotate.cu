/* rotate.cu: the k8v4r rotation as launches of its own — a lab switch only.
 *
 * The engine rotates inside other launches: q, k, v in the store's
 * (cuda_kv_rotate_store, kv.cu) and the output back in the attention's
 * output write (cuda_attention_rotated).  These two launches do the same
 * transform (rotate.cuh, bit-exact with kernels/cpu/rotate.c) alone, so
 * that the fused and the separate forms can be timed against each other in
 * the whole model (STRATA_ROT_SPLIT, engine/cuda/forward_cuda.c).
 *
 * Layout: a one-warp block per (row, head vector), grid.x covering the
 * first tensor's heads, then the second's, then the third's: what a warp
 * does derives from blockIdx, so the compiler sees it uniform. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rotate.cuh"

/* Up to three tensors' rows: row r's n_heads vectors start at x + r *
 * stride (x NULL: absent, no heads). */
typedef struct rot_rows {
    float *x;
    int n_heads;
    int64_t stride;
} rot_rows;

template <int N>
__global__ void __launch_bounds__(32)
rotate_kernel(rot_rows t0, rot_rows t1, rot_rows t2, bool inverse, float scale, rot_signs s)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    int h = blockIdx.x;
    const rot_rows *r = &t0;
    if (h >= t0.n_heads) {
        h -= t0.n_heads;
        r = &t1;
        if (h >= t1.n_heads) {
            h -= t1.n_heads;
            r = &t2;
        }
    }
    float *p = r->x + (int64_t)blockIdx.y * r->stride + (int64_t)h * 32 * N + threadIdx.x;
    float x[N];
#pragma unroll
    for (int i = 0; i < N; i++)
        x[i] = p[32 * i];
    rot_warp<N>(x, N, threadIdx.x, inverse, scale, s);
#pragma unroll
    for (int i = 0; i < N; i++)
        p[32 * i] = x[i];
}

template <int N>
static cudaError_t rot_launch_n(rot_rows t0, rot_rows t1, rot_rows t2, int heads, int n_tok,
                                bool inverse, cudaStream_t stream)
{
    return pdl_launch(rotate_kernel<N>, dim3(heads, n_tok), dim3(32), 0, stream, t0, t1, t2,
                      inverse, kv_rot_scale(32 * N), rot_signs_make());
}

static int rot_launch(const char *who, rot_rows t0, rot_rows t1, rot_rows t2, int n_tok,
                      int head_dim, bool inverse, cudaStream_t stream, strata_error *err)
{
    if (!kv_rot_supported(head_dim))
        return strata_err(err, STRATA_E_ARG, "%s: head_dim %d is not a power of two in 32..%d",
                          who, head_dim, KV_ROT_MAX_DIM);
    const rot_rows *all[3] = {&t0, &t1, &t2};
    int heads = 0;
    for (int k = 0; k < 3; k++) {
        if (!all[k]->x)
            continue;
        if (all[k]->stride < (int64_t)all[k]->n_heads * head_dim)
            return strata_err(err, STRATA_E_ARG, "%s: stride %lld < %d heads x %d", who,
                              (long long)all[k]->stride, all[k]->n_heads, head_dim);
        heads += all[k]->n_heads;
    }
    if (n_tok <= 0 || heads <= 0)
        return 0;
    cudaError_t (*launch)(rot_rows, rot_rows, rot_rows, int, int, bool, cudaStream_t) =
        head_dim == 32    ? rot_launch_n<1>
        : head_dim == 64  ? rot_launch_n<2>
        : head_dim == 128 ? rot_launch_n<4>
        : head_dim == 256 ? rot_launch_n<8>
                          : rot_launch_n<16>;
    CUDA_CHECK(err, launch(t0, t1, t2, heads, n_tok, inverse, stream));
    return 0;
}

/* An absent tensor: no heads, so the kernel's head search passes it. */
static rot_rows rows_of(float *x, int n_heads, int64_t stride)
{
    rot_rows r = {x, x ? n_heads : 0, stride};
    return r;
}

extern "C" int cuda_kv_rotate(float *q, int n_q_heads, int64_t q_stride, float *k, float *v,
                              int n_kv_heads, int64_t k_stride, int64_t v_stride, int n_tok,
                              int head_dim, cudaStream_t stream, strata_error *err)
{
    return rot_launch("cuda_kv_rotate", rows_of(q, n_q_heads, q_stride),
                      rows_of(k, n_kv_heads, k_stride), rows_of(v, n_kv_heads, v_stride), n_tok,
                      head_dim, false, stream, err);
}

extern "C" int cuda_kv_unrotate(float *x, int n_heads, int64_t stride, int n_tok, int head_dim,
                                cudaStream_t stream, strata_error *err)
{
    return rot_launch("cuda_kv_unrotate", rows_of(x, n_heads, stride), rows_of(NULL, 0, 0),
                      rows_of(NULL, 0, 0), n_tok, head_dim, true, stream, err);
}
