/* model.h: the model description — hyper-parameters from the GGUF metadata
 * and every tensor the forward pass needs, checked against the shapes of
 * doc/formats.md §4.2.  Weights stay in the mapped file in their own type. */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

enum model_arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3MOE, ARCH_GEMMA3 };

/* The most experts one token may use (expert_used_count): MoE routing on the
 * CPU (kernels/cpu/moe.c's callers) and on the card (kernels/cuda/moe.cu)
 * keeps a token's choices in arrays of this size.  model_load refuses more.
 * Here, not in kernels/ops.h, because the loader sits below the kernels. */
#define MOE_MAX_USED 64

/* A weight matrix of `rows` outputs by `cols` inputs, in ggml's layout
 * {cols, rows}: rows of `cols` contiguous elements of `type`.  For a stack
 * of experts, `n_mat` matrices follow each other `mat_bytes` apart. */
typedef struct weight {
    const void *data;
    int type;
    int64_t rows, cols;
    int64_t n_mat;      /* 1, or n_expert */
    uint64_t mat_bytes; /* bytes of one matrix */
    const char *name;   /* tensor name, for messages */
} weight;

typedef struct model_hparams {
    int arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;
    float eps;
    /* RoPE */
    int n_rot, rope_neox;
    float rope_base, rope_scale;
    /* MoE (n_expert == 0: dense) */
    int n_expert, n_expert_used, n_ff_exp;
    /* gemma3 (doc/engine.md, "gemma3"); the other archs leave the defaults:
     * no window, SiLU, unscaled embeddings, no sandwich norms. */
    int swa_window;       /* keys a windowed layer sees (0: every layer global) */
    int swa_pattern;      /* layer il is global iff il % swa_pattern == swa_pattern - 1 */
    float rope_base_swa;  /* RoPE base of the windowed layers (scale 1 there) */
    float attn_scale;     /* multiplies q.k (1/sqrt(head_dim) unless the arch says) */
    float embd_scale;     /* multiplies the embedding rows (1, or sqrt(n_embd)) */
    float final_softcap;  /* logits = c * tanh(logits / c) when > 0 */
    int ffn_gelu;         /* 1: gate activation GELU (tanh form), 0: SiLU */
} model_hparams;

/* The window layer il attends over (0: all earlier positions). */
static inline int model_layer_window(const model_hparams *hp, int il)
{
    if (hp->swa_window <= 0 || hp->swa_pattern <= 0)
        return 0;
    return il % hp->swa_pattern == hp->swa_pattern - 1 ? 0 : hp->swa_window;
}

typedef struct layer_weights {
    const float *attn_norm, *ffn_norm;    /* [n_embd] */
    weight wq, wk, wv, wo;                /* q: n_head*head_dim x n_embd ... */
    const float *bq, *bk, *bv;            /* qwen2 biases, else NULL */
    const float *q_norm, *k_norm;         /* qwen3/gemma3 per-head norms [head_dim] */
    const float *post_attn_norm, *post_ffn_norm; /* gemma3 sandwich norms [n_embd], else NULL */
    weight gate, up, down;                /* dense FFN */
    weight router;                        /* MoE: n_expert x n_embd */
    weight gate_exps, up_exps, down_exps; /* MoE: n_expert matrices each */
} layer_weights;

typedef struct model {
    gguf *g;
    char arch_name[32];
    model_hparams hp;
    weight tok_embd;          /* n_vocab rows of n_embd */
    weight output;            /* n_vocab x n_embd (tok_embd when tied) */
    int tied;
    const float *output_norm;
    const float *rope_freqs;  /* n_rot/2 divisors or NULL */
    layer_weights *layers;    /* n_layer */
    float **owned;            /* f32 copies of small tensors stored as F16 */
    int n_owned;
    uint64_t weight_bytes;    /* all tensor bytes */
} model;

/* Open path, read hyper-parameters, find and check every tensor. */
int model_load(const char *path, model **out, strata_error *err);
/* Same, over an already opened reader (the model takes ownership). */
int model_from_gguf(gguf *g, model **out, strata_error *err);
void model_free(model *m);

const char *model_arch_name(int arch);
/* Bytes of the weights a stage holding layers [l0, l1) needs. */
uint64_t model_layer_bytes(const model *m, int l0, int l1);

#endif
