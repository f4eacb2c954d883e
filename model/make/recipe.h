/* recipe.h: which type each tensor of a model gets in a quantization
 * recipe (llama.cpp's file types: "IQ3_XXS", "Q4_K_M", ...).
 *
 * A recipe is a base type plus per-tensor promotions and demotions that
 * depend on the tensor's role (attn_v, ffn_down, ...), its layer, the
 * model's grouped-query ratio and expert count, whether the output head is
 * tied to the embedding, and whether an importance matrix is at hand.  The
 * whole table is in recipe.c and in doc/quant.md ("Recipes"); this header
 * is the pure function over it, used by `quantize` and `mkmodel --ftype`. */
#ifndef STRATA_RECIPE_H
#define STRATA_RECIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

enum recipe_id {
    RECIPE_NONE = 0, /* no recipe: one type for every matrix (--pure) */
    RECIPE_IQ3_XXS,
    RECIPE_IQ2_XXS,
    RECIPE_IQ2_S,    /* base type IQ2_XS, as llama.cpp's IQ2_S file type */
    RECIPE_Q2_0,
    RECIPE_Q2_K,
    RECIPE_Q3_K_M,
    RECIPE_Q4_K_M,
    RECIPE_COUNT,
};

/* The facts about a model a recipe reads. */
typedef struct recipe_model {
    int n_layer;
    int n_head, n_head_kv;  /* G = n_head / n_head_kv */
    int n_expert;           /* 0 for a dense model */
    bool tied;              /* no output.weight: token_embd is the head */
    bool imatrix;           /* an importance matrix is given */
} recipe_model;

/* "iq3_xxs", "Q4_K_M" (case-insensitive) -> RECIPE_*; RECIPE_NONE if the
 * name is not a recipe. */
int recipe_by_name(const char *name);
const char *recipe_name(int recipe);       /* "Q4_K_M"; "?" if unknown */
int recipe_base_type(int recipe);          /* ggml type id */
int recipe_file_type(int recipe);          /* llama_ftype, -1 if none */

/* The layer of a "blk.N.*" name, -1 for other names. */
int recipe_layer(const char *name);

/* The type `recipe` gives tensor `name` (n_dims dimensions, rows of ne0
 * elements) of model m, the row-length fallback applied; -1 when the
 * recipe leaves the tensor as it is (1-D tensors, norms, the MoE router).
 * *wanted (may be NULL) gets the type before the fallback.  Layer-position
 * rules take the layer from the name. */
int recipe_type(int recipe, const char *name, uint32_t n_dims, int64_t ne0,
                const recipe_model *m, int *wanted);

/* The row-length fallback alone: `type` if its block divides ne0, else the
 * 32-element type that stands in for it, else F16. */
int recipe_fallback(int type, int64_t ne0);

/* Fill m from a model file's keys (block_count, head counts, expert
 * count) and tensors (output.weight present or not); m->imatrix = false. */
int recipe_model_from_gguf(const gguf *g, recipe_model *m, strata_error *err);

#endif
