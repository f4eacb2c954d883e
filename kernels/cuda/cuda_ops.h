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

#include "base/error.h"

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
/* MoE decode, every (token, expert) pair of a matrix in one launch: pair p
 * multiplies expert experts[p] (device array) by x row p / x_div (x_div = k
 * for gate and up, whose k pairs share their token's row; 1 for down) into
 * y row p.  Each pair's output is bitwise cuda_matvec_expert's with n = 1:
 * the launch only puts the pairs side by side (grid z), so the card
 * streams all the experts at once instead of one small matrix per launch. */
int cuda_matvec_experts(int type, const void *w, int64_t rows, int64_t cols,
                        const int32_t *experts, int pairs, int x_div, const float *x, float *y,
                        cudaStream_t stream, strata_error *err);
/* Fused decode launches (doc/cuda-kernels.md, "Fewer launches per decode
 * layer"); each output is bitwise that of the unfused calls it replaces.
 * experts2: cuda_matvec_experts of w into y and of w2 (same type and shape:
 * MoE gate and up) into y2, one launch.  swiglu: y = W * swiglu(g, u), the
 * input row c being cuda_swiglu(g + c*xstride, u + c*xstride, cols) (the
 * SwiGLU computed while the activations are loaded; no launch, no buffer
 * for it): experts NULL, n = 1..8 tokens as cuda_matvec (a stacked gate|up
 * product: u = g + F, xstride = 2F); experts set, n pairs, pair p multiplying
 * expert experts[p] by row p into y row p as cuda_matvec_experts (x_div 1).
 * Twins: cpu_matmul after cpu_swiglu (kernels/ops.h). */
int cuda_matvec_experts2(int type, const void *w, const void *w2, int64_t rows, int64_t cols,
                         const int32_t *experts, int pairs, int x_div, const float *x, float *y,
                         float *y2, cudaStream_t stream, strata_error *err);
int cuda_matvec_swiglu(int type, const void *w, int64_t rows, int64_t cols, const int32_t *experts,
                       int n, const float *g, const float *u, int64_t xstride, float *y,
                       cudaStream_t stream, strata_error *err);

/* The decode kernels' k-segment fold.  A matrix whose columns are cut into
 * several segments (short, wide ones: 4096 x 4096) adds the segments'
 * partial sums through device scratch attached to the stream: one ticket
 * per row-block (CUDA_MATVEC_TICKET_BYTES at the start, zeroed here and put
 * back to zero by every launch), then the partial sums.  Attach once per
 * stream, outside a graph capture, with the device current; scratch NULL
 * detaches (wait for the stream's launches first).  A stream with none gets
 * one of CUDA_MATVEC_SCRATCH_BYTES on its first k-split launch (refused
 * while the stream is being captured).  The sums take pairs x row-blocks x
 * segments x n x 256 floats; a paired launch bigger than the scratch runs
 * as several launches (the same bits).  CUDA_MATVEC_SCRATCH_BYTES holds
 * every launch of the models strata runs. */
#define CUDA_MATVEC_TICKET_BYTES 65536u
#define CUDA_MATVEC_SCRATCH_BYTES (CUDA_MATVEC_TICKET_BYTES + (16u << 20))
int cuda_matvec_attach_scratch(cudaStream_t stream, void *scratch, size_t bytes, strata_error *err);

/* Prefill and batches: y[n x rows] = x[n x cols] * W^T for any n >= 1, on
 * the tensor cores.  scratch: device memory of at least
 * cuda_matmul_scratch_bytes(type, cols, n) (the quantized activations);
 * n <= 8 needs none and runs cuda_matvec. */
size_t cuda_matmul_scratch_bytes(int type, int64_t cols, int64_t n);
int cuda_matmul(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, int64_t n, float *y, void *scratch,
                size_t scratch_bytes, cudaStream_t stream, strata_error *err);

/* A mixed stack (kernels/cuda/matvec_mix.cu): matrices of one width and
 * different block-tile types (wblocks.cuh: the K-quants, the IQ2s, IQ3_S,
 * ...) that read the same input, their rows stacked (part 0's first), each
 * part in its own device layout at w[i] (cuda_weight_bytes).  y[n x R] with
 * R the parts' rows together.  Decode (n <= 8) is one launch in which each
 * 16-row m-tile decodes its own part's type; prefill one launch per part.
 * Both use the segment plan of the stacked shape (R x cols), so a row's
 * result is bitwise the same at any n and path.  cuda_mix_supported: 1 when
 * these parts can stack (2..CUDA_MIX_MAX parts, every type a block tile,
 * every part but the last a multiple of 16 rows). */
#define CUDA_MIX_MAX 4
typedef struct cuda_mix {
    int n;
    int type[CUDA_MIX_MAX];
    int64_t rows[CUDA_MIX_MAX];
    const void *w[CUDA_MIX_MAX];
} cuda_mix;
int cuda_mix_supported(const int *types, const int64_t *rows, int n, int64_t cols);
int cuda_matmul_mix(const cuda_mix *m, int64_t cols, const float *x, int64_t n, float *y,
                    void *scratch, size_t scratch_bytes, cudaStream_t stream, strata_error *err);

/* MoE prefill: n tokens sorted by expert (cuda_moe_group/gather), expert e
 * owning tokens [d_offsets[e], d_offsets[e + 1]), each multiplied by its
 * expert's rows x cols slab of w (slab e at e * cuda_weight_bytes(type,
 * rows, cols)), in one launch whose grid does not depend on the offsets
 * (graph-safe).  Every token's outputs are bitwise cuda_matvec_expert's.
 * Not F32 (STRATA_E_UNSUPPORTED: the caller runs matvecs).  scratch: at
 * least cuda_matmul_grouped_scratch_bytes(type, cols, n). */
size_t cuda_matmul_grouped_scratch_bytes(int type, int64_t cols, int64_t n);
int cuda_matmul_grouped(int type, const void *w, int64_t rows, int64_t cols, int n_expert,
                        const int32_t *d_offsets, const float *x, int64_t n, float *y,
                        void *scratch, size_t scratch_bytes, cudaStream_t stream,
                        strata_error *err);

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

#include "kernels/ops.h" /* kv_view, KV_PAGE, rope_params */

/* Device pointers in, a stream, no allocation, no host synchronisation;
 * values that change per step (positions) are read from device arrays, so
 * a captured CUDA graph stays valid.  Each returns 0 or a STRATA_E_* code
 * with err filled (STRATA_E_DEVICE for a CUDA failure).  Every kernel has a
 * CPU twin in kernels/ops.h; tolerances in test/test_cuda_ops.c and
 * test/test_cuda_attention.c.  Invariance: each row's / token's result is
 * independent of how many rows share the launch. */

/* y[r] = rmsnorm(x[r]) * w for n_rows rows of n (contiguous); y may alias
 * x.  Twin: cpu_rmsnorm. */
int cuda_rmsnorm(const float *x, const float *w, float *y, int n_rows, int64_t n, float eps,
                 cudaStream_t stream, strata_error *err);
/* In place: n_rows rows `stride` floats apart, each with n_heads vectors of
 * head_dim at its start, normalised with the shared w[head_dim].  Twin:
 * cpu_rmsnorm_heads. */
/* The residual add and the next RMSNorm in one launch: x += d, then
 * y = rmsnorm(x) * w, bit-exact with cuda_add followed by cuda_rmsnorm.
 * y may alias d (each element is read and written by the same thread). */
int cuda_add_rmsnorm(float *x, const float *d, const float *w, float *y, int n_rows, int64_t n,
                     float eps, cudaStream_t stream, strata_error *err);
int cuda_rmsnorm_heads(float *x, const float *w, int n_rows, int n_heads, int head_dim,
                       int64_t stride, float eps, cudaStream_t stream, strata_error *err);

/* RoPE in place on n_tok rows (`stride` floats apart) of n_heads vectors of
 * head_dim; token i at position d_pos[i].  rp is read on the host at the
 * call (its values are baked into a captured graph); rp->freq_factors, when
 * not NULL, is a DEVICE pointer (n_rot/2 floats).  Twin: cpu_rope. */
int cuda_rope(float *x, int n_tok, int n_heads, int head_dim, int64_t stride,
              const int32_t *d_pos, const rope_params *rp, cudaStream_t stream,
              strata_error *err);
/* cuda_rope on q (n_q_heads per row) and k (n_k_heads; k may be NULL) in
 * one launch: each token's (cos, sin) computed once for both.  Bit-exact
 * with two cuda_rope calls. */
int cuda_rope_qk(float *q, int n_q_heads, int64_t q_stride, float *k, int n_k_heads,
                 int64_t k_stride, int n_tok, int head_dim, const int32_t *d_pos,
                 const rope_params *rp, cudaStream_t stream, strata_error *err);
/* qwen3: cuda_rmsnorm_heads of q (with q_w) and of k (with k_w), then
 * cuda_rope_qk, in one launch, bit-exact with those three calls.  Twins:
 * cpu_rmsnorm_heads, cpu_rope. */
int cuda_qk_norm_rope(float *q, const float *q_w, int n_q_heads, int64_t q_stride, float *k,
                      const float *k_w, int n_k_heads, int64_t k_stride, int n_tok, int head_dim,
                      float eps, const int32_t *d_pos, const rope_params *rp, cudaStream_t stream,
                      strata_error *err);

/* y[i] = silu(gate[i]) * up[i]; y may alias gate.  Twin: cpu_swiglu. */
int cuda_swiglu(const float *gate, const float *up, float *y, int64_t n, cudaStream_t stream,
                strata_error *err);
/* The output of a fused gate|up matvec: row r holds gate (F floats) then up
 * (F floats); y[r * F + i] = silu(gate) * up, exactly as cuda_swiglu.  y must
 * not alias gu. */
int cuda_swiglu_fused(const float *gu, int n_rows, int64_t F, float *y, cudaStream_t stream,
                      strata_error *err);
/* gemma3 (kernels/cuda/gemma3.cu).  y[i] = gelu_tanh(gate[i]) * up[i]; y
 * may alias gate.  Twin: cpu_geglu (tanhf within a few ulp of glibc's). */
int cuda_geglu(const float *gate, const float *up, float *y, int64_t n, cudaStream_t stream,
               strata_error *err);
/* cuda_geglu over the rows of a stacked gate|up product (as
 * cuda_swiglu_fused); y must not alias gu. */
int cuda_geglu_fused(const float *gu, int n_rows, int64_t F, float *y, cudaStream_t stream,
                     strata_error *err);
/* x[i] *= s (the embedding's sqrt(n_embd)); bit-exact with the float
 * product. */
int cuda_scale(float *x, int64_t n, float s, cudaStream_t stream, strata_error *err);
/* x = cap * tanh(x / cap) on n_rows rows of n, `stride` apart; cap > 0.
 * Twin: cpu_softcap. */
int cuda_softcap(float *x, int n_rows, int64_t n, int64_t stride, float cap,
                 cudaStream_t stream, strata_error *err);
/* y[i] += x[i].  Twin: cpu_add (bit-exact). */
int cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream, strata_error *err);
/* y[r * stride + i] += b[i] for r < n_rows, i < n (qwen2 q/k/v biases). */
int cuda_bias_add(float *y, const float *b, int n_rows, int64_t n, int64_t stride,
                  cudaStream_t stream, strata_error *err);

/* Append K and V rows to the paged cache, bit-exact with cpu_kv_store
 * (k8v4, k8v4nl, f16; kv->kshift, a device vector, subtracted from k).
 * kv: device pointers; kv->pages holds n_seq page-table rows page_stride
 * apart.  Token i (0 <= i < n_seq * n_tok) belongs to sequence i / n_tok,
 * sits at position d_pos[i], and its k (v) row of n_kv_head * head_dim
 * floats starts at k + i * k_stride (v + i * v_stride).  Decode: n_tok = 1,
 * one token per sequence; prefill: n_seq = 1. */
int cuda_kv_store(const kv_view *kv, int page_stride, int n_seq, int n_tok,
                  const int32_t *d_pos, const float *k, int64_t k_stride, const float *v,
                  int64_t v_stride, cudaStream_t stream, strata_error *err);

/* The k8v4r / k8v4r2 rotation (kernels/ops.h, "KV rotation") as launches
 * of its own, in place, bit-exact with the CPU twins — a lab switch's
 * (STRATA_ROT_SPLIT): the engine runs both inside other launches.
 * cuda_kv_rotate: x <- R x for the n_q_heads head vectors at the start of
 * each of n_tok rows of q (q_stride floats apart) and the n_kv_heads of k
 * and v (either may be NULL); twin: cpu_kv_rotate.  cuda_kv_unrotate:
 * x <- R^T x on n_heads per row; twin: cpu_kv_unrotate.  head_dim: a power
 * of two in 32..KV_ROT_MAX_DIM. */
int cuda_kv_rotate(float *q, int n_q_heads, int64_t q_stride, float *k, float *v,
                   int n_kv_heads, int64_t k_stride, int64_t v_stride, int n_tok, int head_dim,
                   cudaStream_t stream, strata_error *err);
int cuda_kv_unrotate(float *x, int n_heads, int64_t stride, int n_tok, int head_dim,
                     cudaStream_t stream, strata_error *err);
/* STRATA_KV_CARVE=0 (set by the engine, engine/cuda/cuda_setup.c): the
 * rotated store's one-warp blocks keep the driver's shared-memory carveout
 * instead of asking for the largest (kv.cu says why), to compare. */
extern int strata_kv_carve_off;
/* k8v4r, k8v4r2: the rotation (kernels/ops.h, "KV rotation") and the store
 * in one launch, bit-exact with the CPU twins: q <- R q in place for the
 * n_q_heads head vectors at the start of each row (cpu_kv_rotate), and
 * cpu_kv_store of R k and R v (n_kv_head vectors each; k and v are only
 * read), for a decode step or chunk (n_seq sequences of n_tok rows, d_pos
 * per row, as cuda_kv_store).  head_dim: a power of two in
 * 32..KV_ROT_MAX_DIM. */
int cuda_kv_rotate_store(const kv_view *kv, int page_stride, int n_seq, int n_tok,
                         const int32_t *d_pos, float *q, int n_q_heads, int64_t q_stride,
                         const float *k, int64_t k_stride, const float *v, int64_t v_stride,
                         cudaStream_t stream, strata_error *err);

/* Attention over the paged cache (k8v4, k8v4nl or f16), twin of cpu_attention.
 * Sequence b (< n_seq) has n_tok query tokens at positions d_pos[b] + i
 * (the cache already holds them); query row (b * n_tok + i) starts at
 * q + (b * n_tok + i) * q_stride with n_head * head_dim floats (16-byte
 * aligned, q_stride a multiple of 4); out likewise with out_stride.
 * Decode (n_tok = 1) splits the context into fixed chunks (flash-decoding)
 * and needs `scratch` of cuda_attention_scratch_bytes(kv, n_head, n_seq,
 * max_ctx) bytes, ZEROED ONCE after allocation (it holds tickets that the
 * kernel leaves at zero); every position + 1 must be <= max_ctx.  Prefill
 * needs no scratch.  A query's output is bit-identical whether it is
 * computed by decode or by prefill with any chunking or batch.  Head dims
 * 64/128/256 with n_head / n_kv_head <= 8 take the tensor-core kernel,
 * other shapes the plain one. */
size_t cuda_attention_scratch_bytes(const kv_view *kv, int n_head, int n_seq, int max_ctx);
int cuda_attention(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                   int n_tok, int max_ctx, const float *q, int64_t q_stride, int n_head,
                   float scale, float *out, int64_t out_stride, void *scratch,
                   size_t scratch_bytes, cudaStream_t stream, strata_error *err);
/* The plain reference kernel (one warp per query head, f32), same contract
 * without scratch. */
int cuda_attention_plain(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                         int n_tok, const float *q, int64_t q_stride, int n_head, float scale,
                         float *out, int64_t out_stride, cudaStream_t stream,
                         strata_error *err);
/* The same two with a sliding window (gemma3's local layers; twin:
 * cpu_attention_window): a query at position p reads positions
 * p - window < t <= p only; window 0 is the calls above, bit for bit.  The
 * masked keys are skipped as masked tokens past p are (they change no bit
 * of the softmax state), so decode, prefill and batches still agree bit for
 * bit. */
int cuda_attention_window(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                          int n_tok, int max_ctx, int window, const float *q, int64_t q_stride,
                          int n_head, float scale, float *out, int64_t out_stride,
                          void *scratch, size_t scratch_bytes, cudaStream_t stream,
                          strata_error *err);
int cuda_attention_plain_window(const kv_view *kv, int page_stride, const int32_t *d_pos,
                                int n_seq, int n_tok, int window, const float *q,
                                int64_t q_stride, int n_head, float scale, float *out,
                                int64_t out_stride, cudaStream_t stream, strata_error *err);
/* k8v4r, k8v4r2: cuda_attention_window over the rotated cache (q rotated
 * by cuda_kv_rotate_store), its output rotated back, out = R^T (the
 * attention's result) per head (twin: cpu_kv_unrotate of it, bit for bit),
 * by the attention kernel as it writes the output: no launch of its own.
 * head_dim: a power of two in 32..KV_ROT_MAX_DIM. */
int cuda_attention_rotated(const kv_view *kv, int page_stride, const int32_t *d_pos, int n_seq,
                           int n_tok, int max_ctx, int window, const float *q, int64_t q_stride,
                           int n_head, float scale, float *out, int64_t out_stride,
                           void *scratch, size_t scratch_bytes, cudaStream_t stream,
                           strata_error *err);
/* Lab only (bench_attention): tokens per decode chunk (multiple of 64;
 * anything else restores the default 1024).  Changes result bits; the
 * engine never calls it. */
void cuda_attention_set_chunk(int tokens);
/* Index of the largest of n logits per row (rows `stride` apart), lowest
 * index on ties.  Twin: cpu_argmax. */
int cuda_argmax(const float *logits, int n_rows, int64_t n, int64_t stride, int32_t *d_out,
                cudaStream_t stream, strata_error *err);

#define CUDA_SAMPLE_MAX_K 256
typedef struct cuda_sample_params {
    float temp;  /* <= 0: greedy (argmax) */
    int top_k;   /* 1..CUDA_SAMPLE_MAX_K (else STRATA_E_UNSUPPORTED) */
    float top_p; /* >= 1: off */
    float min_p; /* <= 0: off */
} cuda_sample_params;
/* One token per row by engine/sample.c's chain after the penalty (top-k,
 * top-p, min-p, temperature, draw with d_uniform[row] in [0,1)). */
int cuda_sample(const float *logits, int n_rows, int64_t n_vocab, int64_t stride,
                const cuda_sample_params *p, const float *d_uniform, int32_t *d_out,
                cudaStream_t stream, strata_error *err);

/* MoE (doc/formats.md §4.5; see kernels/cuda/moe.cu for the whole flow).
 * route: per token, softmax over n_expert logits, top-k, renormalised:
 * d_sel[n_tok][k] expert ids, d_w[n_tok][k] weights (n_expert <= 256,
 * k <= MOE_MAX_USED).  Twins: cpu_moe_* (kernels/ops.h).  group: the flat indices t*k+j sorted by expert (d_rows), their
 * inverse (d_inv) and d_offsets[n_expert + 1].  gather: xg[r] =
 * x[d_rows[r] / k].  combine: out[t] = sum_j w[t][j] * y[row] with row =
 * d_inv[t*k+j] (or t*k+j when d_inv is NULL), j ascending. */
int cuda_moe_route(const float *logits, int n_tok, int n_expert, int k, int32_t *d_sel,
                   float *d_w, cudaStream_t stream, strata_error *err);
/* The router's product and cuda_moe_route in one launch, for an F32 router
 * wr (n_expert x cols, row-major) and n_tok rows of x: logits[n_tok][n_expert]
 * as cuda_matvec writes them, then d_sel and d_w as cuda_moe_route; the bits
 * of those two calls.  d_tickets: CUDA_MOE_ROUTER_TICKETS device unsigned
 * (one per token; n_tok <= CUDA_MOE_ROUTER_TICKETS), zeroed once after
 * allocation; the kernel leaves them at 0 (launches that share them must be
 * ordered, as a stream orders them). */
#define CUDA_MOE_ROUTER_TICKETS 64
int cuda_moe_router_route(const float *wr, int n_expert, int64_t cols, const float *x, int n_tok,
                          int k, float *logits, int32_t *d_sel, float *d_w, unsigned *d_tickets,
                          cudaStream_t stream, strata_error *err);
int cuda_moe_group(const int32_t *d_sel, int n_tok, int k, int n_expert, int32_t *d_offsets,
                   int32_t *d_rows, int32_t *d_inv, cudaStream_t stream, strata_error *err);
int cuda_moe_gather(const float *x, int n_tok, int k, int64_t D, const int32_t *d_rows,
                    float *xg, cudaStream_t stream, strata_error *err);
int cuda_moe_combine(const float *y, const float *d_w, const int32_t *d_inv, int n_tok, int k,
                     int64_t D, float *out, cudaStream_t stream, strata_error *err);
/* The end of a MoE FFN in one launch (kernels/cuda/norm.cu): x[t] +=
 * cuda_moe_combine's out[t] (no buffer for it) and, when nw is set, xb[t] =
 * rmsnorm(x[t]) * nw (the next layer's attn_norm), bit-exact with
 * cuda_moe_combine, cuda_add and cuda_rmsnorm in sequence.  nw NULL: the add
 * only.  Twins: cpu_moe_combine, cpu_add, cpu_rmsnorm. */
int cuda_moe_combine_add_rmsnorm(const float *y, const float *d_w, const int32_t *d_inv, int n_tok,
                                 int k, int64_t D, float *x, const float *nw, float *xb, float eps,
                                 cudaStream_t stream, strata_error *err);
/* 1: kernels launch without programmatic dependent launch (pdl.cuh; the
 * engine sets it from STRATA_NO_PDL=1 at start). */
extern int strata_pdl_off;
/* The persistent decode experiment (kernels/cuda/mvchain.cu;
 * doc/cuda-kernels.md, "The persistent kernel"): the steps of a one-token
 * matvec chain (mv_chain_op, kernels/ops.h: w in the card's layout, every
 * pointer on the card, one type for all steps, IQ3_XXS or Q2_0) as ONE
 * launch, each CTA pulling (step, row-block, segment) items in order and
 * waiting only for the rows its item reads.  Every step's y is bitwise what
 * cuda_matvec writes (cuda_matvec_swiglu with xu; then cuda_add(y, res)
 * with res).  No step may write what an earlier one reads or writes; a step
 * reading an earlier step's output must read within it.  make: the work
 * list, flags and partial sums on the card (allocates; synchronises); run:
 * one launch, graph-capturable, any number of times, one run at a time per
 * chain.  depth: each warp's ring of tile copies, in tiles (0: the decode
 * kernel's, IQ3_XXS 4, Q2_0 12; or IQ3_XXS 5, Q2_0 16: more bytes in
 * flight, the same bits).  ahead: 0, or each warp asks L2 for its tiles
 * of the CTA's item that many items ahead (1..8) when it starts an item.
 * l2_tiles: 0, or each warp asks L2 for the tile that many tiles past its
 * ring's copies (1..64) as it takes each tile.  Twin: cpu_mv_chain. */
typedef struct cuda_mvchain cuda_mvchain;
int cuda_mvchain_make(const mv_chain_op *ops, int n_ops, int depth, int ahead, int l2_tiles,
                      cuda_mvchain **out, strata_error *err);
int cuda_mvchain_run(const cuda_mvchain *c, cudaStream_t stream, strata_error *err);
/* CTAs of a run, work items, GGUF weight bytes the chain reads */
void cuda_mvchain_info(const cuda_mvchain *c, int *grid, long long *items, long long *weight_bytes);
void cuda_mvchain_free(cuda_mvchain *c);
/* A test aid: one thread spinning for `cycles` SM clocks on the stream, to
 * make that stream lag (kernels/cuda/elementwise.cu). */
int cuda_spin(long long cycles, cudaStream_t stream, strata_error *err);
/* ==== end of cuo's section ================================================ */

#ifdef __cplusplus
}
#endif

#endif
