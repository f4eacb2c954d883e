/* mkmodel.h: write a random-weight model of any supported shape.
 *
 * Tests and benchmarks need models of every architecture and size without
 * downloading any: `strata-cli mkmodel` (cli/cmd_mkmodel.c) is the front end
 * of this.  The file has the metadata keys and tensor names/shapes of
 * doc/formats.md section 4, weights drawn from a seeded Gaussian and
 * quantized to the requested type, and a small but real byte-level BPE
 * vocabulary (doc/formats.md section 5) so the tokenizer and the chat format
 * work on it.  Same parameters and seed -> identical bytes, whatever the
 * thread count.  Described in doc/mkmodel.md. */
#ifndef STRATA_MKMODEL_H
#define STRATA_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

typedef struct mkmodel_params {
    const char *arch;     /* "llama", "qwen2", "qwen3", "qwen3moe", "gemma3" */
    int n_layer;
    int n_embd;
    int n_head;
    int n_head_kv;        /* 0: = n_head */
    int head_dim;         /* 0: n_embd / n_head (written as key/value_length
                             when given, and always for qwen3/qwen3moe) */
    int n_ff;             /* dense FFN width; MoE: feed_forward_length only
                             (0: n_ff_exp * n_expert_used) */
    int n_expert;         /* qwen3moe only */
    int n_expert_used;
    int n_ff_exp;
    int n_vocab;          /* 0: MKMODEL_DEFAULT_VOCAB; >= MKMODEL_MIN_VOCAB */
    int n_ctx;            /* 0: 4096 */
    float rope_base;      /* 0: 10000 (llama) or 1e6 (qwen*, gemma3) */
    float rms_eps;        /* 0: 1e-5 (llama) or 1e-6 (qwen*, gemma3) */
    int swa_window;       /* gemma3: attention.sliding_window (0: key absent,
                             every layer global) */
    int type;             /* ggml type of the weight matrices (needs a quant
                             function in its traits row) */
    int ftype;            /* a recipe (RECIPE_*, model/make/recipe.h): each
                             tensor gets the recipe's type (without an
                             imatrix) and `type` is ignored; 0: none */
    uint64_t seed;
    int n_threads;        /* 0: the online CPUs */
    int block_pool;       /* 0: quantize every weight; N > 0: quantize N
                             Gaussian blocks per (type, scale) and fill the
                             matrices with seeded random picks from them
                             (fast; for big benchmark models) */
    bool tied;            /* omit output.weight (logits reuse token_embd) */
    const char *pre;      /* tokenizer.ggml.pre; NULL: "smollm" for llama,
                             "qwen2" for the qwen archs */
    FILE *log;            /* progress and type-fallback notes; NULL: quiet */
} mkmodel_params;

/* 3 special tokens + 256 byte tokens: the smallest vocabulary. */
#define MKMODEL_MIN_VOCAB 259
#define MKMODEL_MAX_VOCAB (1 << 20)
#define MKMODEL_DEFAULT_VOCAB 1024

/* Check the parameters (defaults applied first); STRATA_E_ARG with a
 * message naming the parameter when they do not describe a valid model. */
int mkmodel_check(const mkmodel_params *p, strata_error *err);

/* Build the model and write it to path (atomically, via the GGUF writer). */
int mkmodel_write(const mkmodel_params *p, const char *path, strata_error *err);

/* ---- the vocabulary (model/make/mkmodel_vocab.c) ---------------------------- */

/* Token ids: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control), then
 * the 256 byte symbols in byte order (GPT-2 byte->unicode mapping), then one
 * token per merge: first those a tiny BPE learns from a built-in English
 * text, then, if n_vocab asks for more, merges of existing token pairs in a
 * fixed order (valid merges that real text rarely triggers). */
typedef struct mkmodel_vocab {
    char **tokens;        /* n UTF-8 strings */
    int32_t *types;       /* n: 1 normal, 3 control */
    uint64_t n;
    char **merges;        /* n_merges "left right" strings */
    uint64_t n_merges;
    uint64_t n_learned;   /* how many merges came from the text */
} mkmodel_vocab;

#define MKMODEL_TOKEN_EOT 0
#define MKMODEL_TOKEN_BOS 1   /* <|im_start|>, as SmolLM2 */
#define MKMODEL_TOKEN_EOS 2   /* <|im_end|> */

int mkmodel_vocab_build(int n_vocab, mkmodel_vocab *v, strata_error *err);
void mkmodel_vocab_free(mkmodel_vocab *v);

#endif
