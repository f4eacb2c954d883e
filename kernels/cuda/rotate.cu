/* rotate.cu: the KV rotation of the k8v4r cache on the card.
 *
 * Twin of cpu_kv_rotate / cpu_kv_unrotate (kernels/cpu/rotate.c, the why
 * and the transform are there), bit for bit: the sign flips are exact, the
 * Walsh-Hadamard butterflies are the CPU's adds and subtracts on the same
 * pairs in the same stage order (an IEEE add is commutative, so a lane
 * computing mine + partner gets the CPU's a + b), and the scale is one
 * __fmul_rn by the same float (kv_rot_scale).
 *
 * Layout: one block per (token, head vector), one thread per element
 * (head_dim threads, a power of two <= 512).  The butterflies of distance
 * < 32 are warp shuffles; the longer ones go through shared memory.  Before
 * attention one launch rotates q, k and v together (grid.x covers q's heads
 * then k's then v's); after it one launch rotates the output back.  The
 * engine fuses the first with the store (cuda_kv_rotate_store, kv.cu: the
 * same block per vector, whose warps then quantize their 32-element
 * blocks); the transform itself is rotate.cuh's, shared by both.  A
 * token's q|k|v is a few KiB: the launches are latency-bound, like rope. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rotate.cuh"

/* Up to three tensors' rows: n_tok rows `stride` floats apart, each with
 * n_heads vectors of head_dim at its start (x NULL: absent). */
typedef struct rot_rows {
    float *x;
    int n_heads;
    int64_t stride;
} rot_rows;

__global__ void __launch_bounds__(KV_ROT_MAX_DIM)
rotate_kernel(rot_rows t0, rot_rows t1, rot_rows t2, int head_dim, int inverse, float scale,
              rot_signs s)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    __shared__ float sh[KV_ROT_MAX_DIM];
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
    const int i = threadIdx.x;
    float *p = r->x + (int64_t)blockIdx.y * r->stride + (int64_t)h * head_dim + i;
    *p = rot_vec(*p, i, head_dim, inverse, scale, s, sh);
}

static int rot_launch(const char *who, rot_rows t0, rot_rows t1, rot_rows t2, int n_tok,
                      int head_dim, int inverse, cudaStream_t stream, strata_error *err)
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
    rot_signs s = rot_signs_make();
    CUDA_CHECK(err, pdl_launch(rotate_kernel, dim3(heads, n_tok), dim3(head_dim), 0, stream, t0,
                               t1, t2, head_dim, inverse, kv_rot_scale(head_dim), s));
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
                      head_dim, 0, stream, err);
}

extern "C" int cuda_kv_unrotate(float *x, int n_heads, int64_t stride, int n_tok, int head_dim,
                                cudaStream_t stream, strata_error *err)
{
    return rot_launch("cuda_kv_unrotate", rows_of(x, n_heads, stride), rows_of(NULL, 0, 0),
                      rows_of(NULL, 0, 0), n_tok, head_dim, 1, stream, err);
}
