/* cuda_ops.h: the C-callable API of every CUDA operation in strata.
 *
 * C code includes this header (it needs only cuda_runtime_api.h); the
 * kernels live in kernels/cuda/ (one .cu per family) behind extern "C" functions.  Every
 * function here takes device pointers and a stream, allocates nothing, does
 * no host synchronisation (so it can be captured in a CUDA graph), and
 * returns 0 or STRATA_E_* with a message in err (launch errors come from
 * cudaGetLastError; faults inside a kernel surface at the caller's next
 * synchronising call).  The CPU twin of each operation is in kernels/ops.h.
 *
 * Two sections: weights (matvec, matmul, embedding: owner "cuw") and the
 * rest of a forward pass (norm, rope, attention, ...: owner "cuo"). */
#ifndef STRATA_CUDA_OPS_H
#define STRATA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "model/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Weights (cuw): kernels/cuda/weights.cu, matvec.cu, matmul.cu, embed.cu
 * ======================================================================
 *
 * Types: F32, F16, Q8_0, Q4_0, Q2_0, IQ3_XXS (enum ggml_type ids).  A matrix
 * W of rows x cols (ggml ne = {cols, rows}) lives on the card in a *device
 * layout*: for the block types its blocks are regrouped into tiles of 16
 * rows so that each lane of a warp fetches exactly the bytes of its tensor-
 * core fragment with 16-byte loads (doc/cuda-kernels.md); F32 and F16 stay
 * row-major.  The bytes are the GGUF bytes rearranged (plus zero padding to
 * whole tiles), nothing re-quantized.  Every weight tensor on the card,
 * token embeddings included, is uploaded through cuda_weight_upload (or
 * cuda_weight_pack + a copy).  A 3-D tensor (MoE experts) is n_expert
 * matrices of cuda_weight_bytes each, packed one after another.
 *
 * Numerics (tolerances are relative, ||gpu - cpu|| / ||cpu||, against
 * cpu_matmul's double-accumulated reference; test/test_cuda_matvec.c):
 *   IQ3_XXS, Q2_0, Q4_0, Q8_0: activations quantized to int8 on the card
 *     (one f32 scale per 256 elements for IQ3_XXS, per 64 for Q2_0, per 32
 *     for Q4_0/Q8_0, round-to-nearest), integer tensor-core products, f32
 *     accumulation of the scaled block sums: < 1e-2 (typically 4-7e-3).
 *   F16: activations rounded to fp16, fp16 tensor-core products with f32
 *     accumulation: < 2e-3.
 *   F32: f32 FMA, fixed order: < 1e-5.
 * Invariance: a row's result depends only on (type, rows, cols, W, x of
 * that token): not on n, on which of cuda_matvec / cuda_matmul ran it, or
 * on the other tokens of the call.  The two are bitwise identical (tested). */

/* 1 if the CUDA weight kernels handle this type. */
int cuda_weight_supported(int type);

/* Bytes of the device layout of a rows x cols matrix; 0 if the type is not
 * supported or cols is not a multiple of its block (F32/F16: of 8). */
size_t cuda_weight_bytes(int type, int64_t rows, int64_t cols);

/* Rearrange a matrix in ggml layout (src, host memory, rows * row bytes)
 * into the device layout (dst, host memory, cuda_weight_bytes). */
int cuda_weight_pack(int type, int64_t rows, int64_t cols, const void *src,
                     void *dst, strata_error *err);

/* Pack src (host, ggml layout) and copy it to dst (device, cuda_weight_bytes).
 * For load time: uses a host bounce buffer and waits for the copy. */
int cuda_weight_upload(int type, int64_t rows, int64_t cols, const void *src,
                       void *dst, cudaStream_t stream, strata_error *err);

/* Decode: y[n x rows] = x[n x cols] * W^T for n = 1..8 tokens (x and y are
 * token-major f32: token i's vector at x + i*cols, its output at y + i*rows).
 * The weights are read once for all n tokens, so n = 8 costs about n = 1.
 * expert: NULL, or a device int32 e selecting the matrix at
 * w + e * cuda_weight_bytes(type, rows, cols) (MoE decode keeps the expert
 * choice on the card, so a captured graph stays valid). */
int cuda_matvec(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, int n, float *y, cudaStream_t stream,
                strata_error *err);
int cuda_matvec_expert(int type, const void *w, int64_t rows, int64_t cols,
                       const int32_t *expert, const float *x, int n, float *y,
                       cudaStream_t stream, strata_error *err);

/* Prefill and batches: y[n x rows] = x[n x cols] * W^T for any n >= 1, on
 * the tensor cores.  scratch: device memory of at least
 * cuda_matmul_scratch_bytes(type, cols, n) (the quantized activations);
 * n <= 8 needs none and runs cuda_matvec. */
size_t cuda_matmul_scratch_bytes(int type, int64_t cols, int64_t n);
int cuda_matmul(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, int64_t n, float *y, void *scratch,
                size_t scratch_bytes, cudaStream_t stream, strata_error *err);

/* Embedding rows: out[i x cols] = row tokens[i] of a rows x cols table in the
 * device layout, as f32, bit-identical to cpu_embed.  tokens is a device
 * array of n_tok ids; an id outside [0, rows) yields a row of NaN. */
int cuda_embed(int type, const void *table, int64_t rows, int64_t cols,
               const int32_t *tokens, int n_tok, float *out,
               cudaStream_t stream, strata_error *err);

/* Bench support: read `bytes` (a multiple of 16) of device memory with
 * 16-byte loads and nothing else (the card's read bandwidth); the XOR of what
 * was read goes to *sink so the loads are not optimised away. */
int cuda_read_probe(const void *buf, size_t bytes, uint32_t *sink,
                    cudaStream_t stream, strata_error *err);

/* ======================================================================
 * Forward-pass operations (cuo): norm, rope, attention, kv, moe, sampling
 * ====================================================================== */

#ifdef __cplusplus
}
#endif

#endif
