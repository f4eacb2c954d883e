/* quantize.h: requantize a GGUF model into strata's weight types
 * (formats: doc/formats.md §2, §3; row-length rule: §2.9).
 *
 * Every tensor is decoded to f32 with its type's decoder and re-encoded with
 * the type the mix chooses for it (quantize_choose_type).  The output is
 * written with gguf_writer_write: temp file + rename, so a failure never
 * leaves a half-written model. */
#ifndef STRATA_QUANTIZE_H
#define STRATA_QUANTIZE_H

#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "model/make/recipe.h"

/* --keep-type NAME=TYPE: tensors whose name matches the glob `pattern`
 * (fnmatch, e.g. "blk.*.ffn_down.weight") get `type`, overriding the mix. */
typedef struct quantize_override {
    const char *pattern;
    int type;
} quantize_override;

/* Importance weights for one tensor of n_mat matrices (ne[2]: experts)
 * with rows of ne0: return n_mat * ne0 floats (one per column, shared by
 * every row of a matrix, as llama.cpp's imatrix; expert e's at e * ne0)
 * or NULL for none.
 * strata-cli's --imatrix reads them from an imatrix file (model/make/imatrix.h). */
typedef const float *(*quantize_imatrix_fn)(void *ctx, const char *tensor,
                                            int64_t ne0, int64_t n_mat);

typedef struct quantize_params {
    int recipe;          /* RECIPE_* (model/make/recipe.h): the per-tensor
                            mix of that recipe; RECIPE_NONE: `type` for
                            every matrix (--pure) */
    recipe_model facts;  /* the model's facts for the recipe; quantize_file
                            fills them from the input file */
    int type;            /* target for the weight matrices (ggml id); with a
                            recipe: its base type (general.file_type) */
    int embed_type;      /* token_embd / output; -1: the mix's default */
    const quantize_override *overrides;
    int n_overrides;
    int n_threads;       /* 0: one per core */
    quantize_imatrix_fn imatrix;
    void *imatrix_ctx;
    FILE *progress;      /* one line per tensor (stderr in the CLI); NULL: quiet */
} quantize_params;

typedef struct quantize_summary {
    int n_tensors;
    int n_fallback;          /* tensors that could not take params.type */
    char fallback[512];      /* "IQ3_XXS->Q2_0 x182 (blk.0.attn_q.weight, ...)" */
    uint64_t n_params;
    uint64_t bytes_in, bytes_out;  /* tensor data, before and after */
    uint64_t params_by_type[64];   /* elements written per ggml type id */
    int tensors_by_type[64];       /* tensors written per type */
    uint64_t bytes_by_type[64];    /* bytes written per type */
    int n_weighted;                /* tensors quantized with importance weights */
    double seconds;
} quantize_summary;

/* The mix, as a pure function (tested on its own):
 *   - 1-D tensors (norms, biases) stay F32: they are tiny and every weight
 *     of a norm multiplies a whole channel;
 *   - token_embd / output (tied in the demo model: the embedding is also the
 *     output head) get embed_type, default Q8_0 (why: doc/quant.md);
 *   - everything else gets params->type, or, when ne[0] is not a multiple of
 *     its block (§2.9), the first of Q2_0, Q8_0, F16 whose block divides ne[0];
 *   - an override wins, but must itself fit ne[0].
 * With p->recipe set, the recipe (recipe_type, on p->facts) replaces the
 * rules above but the overrides and embed_type still win, and *type = -1
 * means "keep the tensor's own type" (norms, the MoE router).
 * Sets *fallback when the chosen type is not the one the rule asked for.
 * Returns 0, or STRATA_E_UNSUPPORTED naming the tensor when nothing fits. */
int quantize_choose_type(const quantize_params *p, const char *name,
                         uint32_t n_dims, const int64_t *ne, int *type,
                         int *fallback, strata_error *err);

/* Requantize in_path into out_path. */
int quantize_file(const char *in_path, const char *out_path,
                  const quantize_params *p, quantize_summary *s,
                  strata_error *err);

/* Encode n rows of ne0 f32 values into `type` with up to n_threads threads
 * (row-parallel; each row's bytes are the same as a serial run). */
int quantize_rows(int type, const float *src, int64_t ne0, int64_t nrows,
                  void *dst, const float *imatrix, int n_threads,
                  strata_error *err);

#endif
