/* ops.h: the operations of a forward pass, backend-neutral, with their CPU
 * reference implementations (kernels/cpu/).  The CUDA kernels
 * (kernels/cuda/cuda_ops.h) implement the same list on device pointers and a
 * stream; every one of them is tested against its cpu_ twin here.
 *
 * Conventions: a weight matrix W of `rows` x `cols` is stored as ggml stores
 * {cols, rows}: `rows` rows of `cols` contiguous elements in the type's
 * blocks; y[r] = sum_c W[r][c] * x[c].  Activations are f32.
 *
 * Invariance rule: every reduction has a fixed order per output element, so
 * a row's result does not depend on how many rows or tokens share a call. */
#ifndef STRATA_OPS_H
#define STRATA_OPS_H

#include <stdint.h>

/* ---- weights ---------------------------------------------------------- */

/* y[rows] = W[rows x cols] * x[cols].  The plain reference: dequantize a row,
 * dot it in f32 accumulating in double.  cols must be a multiple of the
 * type's block. */
void cpu_matvec(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, float *y);
/* Y[n x rows] = X[n x cols] * W^T: n independent matvecs, same arithmetic. */
void cpu_matmul(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, int64_t n, float *y);
/* A chain of matvecs, one token (the persistent decode kernel's twin,
 * kernels/cpu/mvchain.c; the card's is cuda_mvchain, doc/cuda-kernels.md,
 * "The persistent kernel").  Step i: y = W * a (+ res), a = x, or
 * swiglu(x, xu) element by element when xu is set; res NULL: no add.  The
 * steps run in order, so a step may read what an earlier one wrote; y must
 * not alias x, xu or res. */
typedef struct mv_chain_op {
    int type;
    const void *w; /* ggml layout here; the card's layout for cuda_mvchain */
    int64_t rows, cols;
    const float *x, *xu, *res; /* cols, cols, rows floats */
    float *y;                  /* rows floats */
} mv_chain_op;
/* The steps with cpu_matvec, cpu_swiglu and cpu_add; -1 if a step's input
 * cannot be held (out of memory), else 0. */
int cpu_mv_chain(const mv_chain_op *ops, int n_ops);
/* The fast CPU path (threads, AVX2 when the CPU has it); same results as
 * cpu_matmul within the tolerance stated in test/test_matvec.c. */
void cpu_matmul_fast(int type, const void *w, int64_t rows, int64_t cols,
                     const float *x, int64_t n, float *y);
/* Several products of one X in one hand-off to the thread pool: the
 * activation rows are quantized once for every matrix that takes the same
 * codes, and the tasks cover the matrices' rows one after another (Q, K and
 * V of a layer).  Each output element gets cpu_matmul_fast's bits. */
typedef struct cpu_mm {
    int type;
    const void *w;
    int64_t rows;
    float *y; /* n x rows */
} cpu_mm;
void cpu_matmul_fast_multi(const cpu_mm *mats, int n_mats, int64_t cols, const float *x,
                           int64_t n);
/* gate and up (the same rows) in one hand-off, then gate.y = act(gate.y) *
 * up.y element by element (act: SiLU, or GELU's tanh form when gelu), each
 * task on the rows it made: cpu_matmul_fast twice and cpu_swiglu /
 * cpu_geglu, the same bits. */
void cpu_matmul_fast_glu(const cpu_mm *gate, const cpu_mm *up, int64_t cols, const float *x,
                         int64_t n, int gelu);
/* Non-zero if cpu_matmul_fast quantizes activations for the types that
 * have such kernels (the default on a CPU with AVX2; STRATA_MATMUL_F32=1
 * turns it off): 1 int8 codes, 2 16-bit codes (kernels/cpu/act_q8.h). */
int cpu_matmul_int8_activations(void);

/* out[cols] = row `token` of an embedding table stored like a weight. */
void cpu_embed(int type, const void *table, int64_t cols, int32_t token,
               float *out);

/* ---- element-wise and normalisation ----------------------------------- */

/* y = x / sqrt(mean(x^2) + eps) * w ; y may alias x. */
void cpu_rmsnorm(const float *x, const float *w, int64_t n, float eps,
                 float *y);
/* In place, each of n_heads head vectors normalised separately with the
 * shared weight w[head_dim] (qwen3 Q/K norm). */
void cpu_rmsnorm_heads(float *x, const float *w, int n_heads, int head_dim,
                       float eps);

typedef struct rope_params {
    int n_rot;            /* rotated dims per head (<= head_dim) */
    int neox;             /* 0: adjacent pairs (llama), 1: half split */
    float freq_base;      /* theta base */
    float freq_scale;     /* linear scaling: position multiplied by this */
    const float *freq_factors; /* n_rot/2 divisors, or NULL */
} rope_params;

/* Rotate n_heads head vectors of head_dim at position pos, in place. */
void cpu_rope(float *x, int n_heads, int head_dim, int32_t pos,
              const rope_params *rp);
/* cpu_rope in two halves, so a position's cos/sin (n_rot floats, pairs
 * (cos, sin); n_rot <= ROPE_MAX_DIM) are made once for every layer and
 * for q and k: cpu_rope is table then apply, the same bits. */
#define ROPE_MAX_DIM 512
void cpu_rope_table(int32_t pos, const rope_params *rp, float *cs);
void cpu_rope_apply(float *x, int n_heads, int head_dim, const rope_params *rp,
                    const float *cs);

/* y[i] = silu(gate[i]) * up[i]; y may alias gate. */
void cpu_swiglu(const float *gate, const float *up, int64_t n, float *y);
/* y[i] = gelu(gate[i]) * up[i] with GELU's tanh form (gemma3's FFN),
 * gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); y may alias gate. */
float cpu_gelu_tanh(float x);
void cpu_geglu(const float *gate, const float *up, int64_t n, float *y);
/* x[i] = cap * tanh(x[i] / cap) (final logit soft-capping), cap > 0. */
void cpu_softcap(float *x, int64_t n, float cap);
/* y[i] += x[i] */
void cpu_add(float *y, const float *x, int64_t n);
/* In-place numerically stable softmax. */
void cpu_softmax(float *x, int64_t n);
/* Index of the largest element; lowest index on ties. */
int32_t cpu_argmax(const float *x, int64_t n);

/* ---- mixture of experts (doc/formats.md §4.5) --------------------------
 * The twins of kernels/cuda/moe.cu's cuda_moe_* (same names, same order of
 * arithmetic).  k is at most MOE_MAX_USED (model/model.h: the model loader
 * refuses more, and the callers' per-token arrays have that size). */

/* Per token t: softmax over logits[t][0..n_expert) (in place: the logits
 * become the probabilities), the k largest (lowest index on ties) into
 * sel[t][0..k), their probabilities renormalised to sum 1 into w[t][0..k). */
void cpu_moe_route(float *logits, int n_tok, int n_expert, int k, int32_t *sel, float *w);
/* The flat indices t*k+j of sel sorted by expert, ascending within one:
 * rows[n_tok*k], its inverse inv (inv[rows[r]] = r), and offsets[n_expert+1]
 * (expert e's rows are [offsets[e], offsets[e+1])). */
void cpu_moe_group(const int32_t *sel, int n_tok, int k, int n_expert, int32_t *offsets,
                   int32_t *rows, int32_t *inv);
/* xg[r] = x[rows[r] / k] for r < n_tok*k, rows of D floats. */
void cpu_moe_gather(const float *x, int n_tok, int k, int64_t D, const int32_t *rows, float *xg);
/* out[t] = sum_j w[t][j] * y[src], j ascending from 0, where src = inv[t*k+j]
 * (expert-sorted rows) or t*k+j when inv is NULL. */
void cpu_moe_combine(const float *y, const float *w, const int32_t *inv, int n_tok, int k,
                     int64_t D, float *out);

/* ---- KV cache rows ------------------------------------------------------
 * k8v4: K as Q8_0 and V as Q4_0 (ggml's recipes, doc/formats.md §3.1/§3.2), with
 * the scales kept apart from the quants so the card reads both with 16-byte
 * loads.  A head vector of head_dim (a multiple of 32) becomes
 *   K: head_dim int8 + head_dim/32 fp16 scales
 *   V: head_dim/2 bytes (split-half nibbles per 32-block) + head_dim/32 fp16 */
void cpu_quant_k8(const float *x, int n, int8_t *q, uint16_t *d);
void cpu_quant_v4(const float *x, int n, uint8_t *q, uint16_t *d);
void cpu_dequant_k8(const int8_t *q, const uint16_t *d, int n, float *x);
void cpu_dequant_v4(const uint8_t *q, const uint16_t *d, int n, float *x);
/* V as 4-bit codes into the IQ4_NL levels (iq4nl_values) with a searched
 * scale (kernels/cpu/kv.c says how); the same bytes and layout as Q4_0. */
void cpu_quant_v4nl(const float *x, int n, uint8_t *q, uint16_t *d);
void cpu_dequant_v4nl(const uint8_t *q, const uint16_t *d, int n, float *x);
int kv_nl_code(float r); /* nearest IQ4_NL level index of r (NaN -> 8) */
uint16_t fp16_keep7(uint16_t h); /* fp16 bits rounded to 7 significant bits */
/* The largest k8v4nl V scale magnitude (fp16 bits of 56.5): with |d| at most
 * this and 7 significant bits, -1152 d is an fp16 value, so the card's
 * attention decodes every stored V element with one exact FMA and keeps no
 * other path.  A V element beyond 127 x 56.5 = 7175.5 in magnitude is
 * stored as that bound (doc/engine.md, "V in IQ4_NL levels"). */
#define KV_NL_DMAX 0x5310u
/* fp16_keep7(h) with its magnitude clamped to KV_NL_DMAX: the scale the
 * k8v4nl store writes. */
uint16_t kv_nl_scale(uint16_t h);
/* Whether fp16 bits h could have been written by the k8v4nl store (7
 * significant bits, |d| <= 56.5): images read from disk are checked. */
static inline int kv_nl_scale_ok(uint16_t h)
{
    return (h & 0xfu) == 0 && (h & 0x7fffu) <= KV_NL_DMAX;
}


/* ---- KV rotation (kernels/cpu/rotate.c) ---------------------------------
 * The rotated k8v4 cache (engine kv type k8v4r) stores R k and R v instead
 * of k and v, with R = (1/sqrt(d)) H_d diag(s) over a head vector of d =
 * head_dim (a power of two, 32..KV_ROT_MAX_DIM): s flips element i's sign
 * where bit i % 64 of kv_rot_sign_word(i / 64) is set, H_d is the
 * Walsh-Hadamard matrix (Sylvester order).  The query is rotated the same
 * way (R is orthogonal, so the scores are unchanged) and the attention
 * output is rotated back with R^T.  Each head vector is rotated on its own:
 * a row's result depends on nothing else (the invariance rule holds). */
#define KV_ROT_MAX_DIM 512
#define KV_ROT_SEED 0x5354524154415231ull /* "STRATAR1" */
int kv_rot_supported(int head_dim);       /* 1: a power of two in 32..512 */
uint64_t kv_rot_sign_word(int k);         /* splitmix64 output k of KV_ROT_SEED */
float kv_rot_scale(int head_dim);         /* the float nearest 1/sqrt(head_dim) */
/* In place, n_heads contiguous head vectors: x <- R x. */
void cpu_kv_rotate(float *x, int n_heads, int head_dim);
/* In place: x <- R^T x. */
void cpu_kv_unrotate(float *x, int n_heads, int head_dim);

/* ---- attention over the KV cache ----------------------------------------
 * The cache is paged: a page holds KV_PAGE tokens of one layer, all kv heads.
 * Within a page, head h's token t sits at ((h * KV_PAGE) + t) * row, so one
 * head's keys are contiguous for a whole page (long coalesced reads) and a
 * page is one contiguous span per buffer (one copy per page on capture). */
#define KV_PAGE 256

/* KV_K8V4NL: K as KV_K8V4's, V in the same bytes but coded into the IQ4_NL
 * levels with a searched scale (cpu_quant_v4nl). */
enum kv_type { KV_K8V4 = 0, KV_F16 = 1, KV_K8V4NL = 2 };

typedef struct kv_view {
    int type;             /* enum kv_type */
    int n_kv_head, head_dim;
    const int32_t *pages; /* logical page i -> physical page in the pool */
    /* k8v4 and k8v4nl pools, indexed [page][head][KV_PAGE][...] */
    int8_t *kq;           /* head_dim int8 per token */
    uint16_t *kd;         /* head_dim/32 fp16 per token */
    uint8_t *vq;          /* head_dim/2 bytes per token */
    uint16_t *vd;         /* head_dim/32 fp16 per token */
    /* f16 pools, indexed the same way, head_dim fp16 per token */
    uint16_t *kh, *vh;
    /* NULL, or n_kv_head * head_dim floats subtracted from k before it is
     * stored (k8v4r2: the layer's rotated K bias).  A fixed vector moves
     * every score of a query by the same amount, so the softmax does not
     * see it; what it removes is the large constant part of K that would
     * otherwise set the Q8_0 scale (doc/engine.md, "The KV cache"). */
    const float *kshift;
} kv_view;

/* Quantize and store k - kv->kshift (k when NULL) and v (n_kv_head *
 * head_dim each) at position pos. */
void cpu_kv_store(const kv_view *kv, int32_t pos, const float *k,
                  const float *v);
/* out[n_head * head_dim] = softmax(q K^T * scale) V over positions 0..n_ctx-1,
 * query head h reading kv head h / (n_head / n_kv_head). */
void cpu_attention(const float *q, int n_head, const kv_view *kv,
                   int32_t n_ctx, float scale, float *out);
/* The same over positions t0..n_ctx-1 only (t0 <= 0: from 0): a sliding
 * window of n_ctx - t0 keys (gemma3's local layers).  cpu_attention is
 * this with t0 = 0, so both sum in the same order. */
void cpu_attention_window(const float *q, int n_head, const kv_view *kv, int32_t t0,
                          int32_t n_ctx, float scale, float *out);
/* The same, fast (kernels/cpu/attention_fast.c): straight from the cache's
 * codes, in float, heads over the thread pool; within the tolerance of
 * test/test_attention_fast.c of cpu_attention. */
void cpu_attention_fast(const float *q, int n_head, const kv_view *kv,
                        int32_t n_ctx, float scale, float *out);
/* cpu_attention_fast over positions t0..n_ctx-1 only (cpu_attention_window's
 * fast twin; cpu_attention_fast is this with t0 = 0). */
void cpu_attention_fast_window(const float *q, int n_head, const kv_view *kv, int32_t t0,
                               int32_t n_ctx, float scale, float *out);

#endif
