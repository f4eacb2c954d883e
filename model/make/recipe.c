/* recipe.c: the recipe table and recipe_type (model/make/recipe.h).
 *
 * Each recipe is one row of `recipes` below: a type per tensor role, with
 * the conditions llama.cpp's quantizer (src/llama-quant.cpp) puts on them.
 * A field left 0 means "this rule does not apply" (F32, type 0, is never
 * a recipe's target).  doc/quant.md ("Recipes") has the same table as
 * text; a change here changes it there. */
#include "model/make/recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/quant.h"

#define NONE 0

typedef struct recipe {
    const char *name;
    int file_type;       /* llama_ftype written as general.file_type, -1 none */
    int base;            /* every matrix no rule below names */
    int embd;            /* token_embd when the model has output.weight */
    int head;            /* output (and a tied token_embd) when ne0 is a
                            multiple of the base block; Q8_0 otherwise */
    int attn_q, attn_k, attn_output;
    int attn_k_e8, attn_output_e8;   /* when the model has 8 experts */
    /* attn_v: the first rule that applies, in this order */
    int v_e8;            /* 8 experts */
    int v_gqa4;          /* n_head / n_head_kv >= 4 ... */
    bool v_gqa4_or_e4;   /* ... or 4 or more experts */
    int v_imatrix;       /* with an importance matrix */
    int v_first2;        /* the first two attn_v tensors */
    int v_more;          /* layers where more_bits(i, n) */
    int v;               /* otherwise */
    /* ffn_down (ffn_down_exps too): the first rule that applies */
    int down_imatrix;    /* with an importance matrix */
    int down_first8;     /* layers < n/8 */
    int down_first16;    /* layers < n/16 */
    int down_more;       /* layers where more_bits(i, n) */
    int down;            /* otherwise */
} recipe;

enum {
    F16 = GGML_TYPE_F16, Q4_0 = GGML_TYPE_Q4_0, Q5_0 = GGML_TYPE_Q5_0, Q5_1 = GGML_TYPE_Q5_1,
    Q8_0 = GGML_TYPE_Q8_0, Q2_K = GGML_TYPE_Q2_K, Q3_K = GGML_TYPE_Q3_K, Q4_K = GGML_TYPE_Q4_K,
    Q5_K = GGML_TYPE_Q5_K, Q6_K = GGML_TYPE_Q6_K, IQ2_XXS = GGML_TYPE_IQ2_XXS,
    IQ2_XS = GGML_TYPE_IQ2_XS, IQ3_XXS = GGML_TYPE_IQ3_XXS, IQ4_NL = GGML_TYPE_IQ4_NL,
    IQ3_S = GGML_TYPE_IQ3_S, IQ2_S = GGML_TYPE_IQ2_S, IQ4_XS = GGML_TYPE_IQ4_XS,
    Q2_0 = GGML_TYPE_Q2_0,
};

static const recipe recipes[RECIPE_COUNT] = {
    [RECIPE_IQ3_XXS] = {.name = "IQ3_XXS", .file_type = 23, .base = IQ3_XXS, .embd = IQ3_S,
                        .head = Q5_K, .attn_q = IQ2_S, .attn_k = IQ2_S, .attn_output = IQ3_S,
                        .attn_k_e8 = Q8_0, .attn_output_e8 = Q5_K,
                        .v_e8 = Q8_0, .v_gqa4 = Q4_K, .v_imatrix = IQ3_XXS, .v = IQ3_S,
                        .down_imatrix = IQ3_XXS, .down_first8 = Q4_K, .down = Q3_K},
    [RECIPE_IQ2_XXS] = {.name = "IQ2_XXS", .file_type = 19, .base = IQ2_XXS, .embd = Q2_K,
                        .head = Q5_K, .attn_q = IQ2_XXS, .attn_k = IQ2_XXS, .attn_output = IQ2_XXS,
                        .attn_k_e8 = Q4_K, .attn_output_e8 = Q5_K,
                        .v_gqa4 = Q4_K, .v_gqa4_or_e4 = true, .v = Q2_K,
                        .down_first8 = Q2_K, .down = IQ2_XXS},
    [RECIPE_IQ2_S] = {.name = "IQ2_S", .file_type = 28, .base = IQ2_XS, .embd = IQ3_S,
                      .head = Q5_K, .attn_q = IQ2_XS, .attn_k = IQ2_XS, .attn_output = IQ3_S,
                      .attn_k_e8 = Q4_K, .attn_output_e8 = Q5_K,
                      .v_gqa4 = Q4_K, .v_gqa4_or_e4 = true, .v = IQ3_S,
                      .down_first8 = IQ3_S, .down = IQ2_XS},
    [RECIPE_Q2_0] = {.name = "Q2_0", .file_type = -1, .base = Q2_0, .embd = Q4_K,
                     .head = Q6_K, .attn_q = Q2_0, .attn_k = Q2_0, .attn_output = Q2_0,
                     .attn_k_e8 = Q8_0, .v_e8 = Q8_0, .v = Q2_0, .down = Q2_0},
    [RECIPE_Q2_K] = {.name = "Q2_K", .file_type = 10, .base = Q2_K, .embd = Q2_K,
                     .head = Q6_K, .attn_q = Q2_K, .attn_k = Q2_K, .attn_output = Q3_K,
                     .attn_k_e8 = Q8_0, .attn_output_e8 = Q5_K,
                     .v_e8 = Q8_0, .v_gqa4 = Q4_K, .v = Q3_K, .down = Q3_K},
    [RECIPE_Q3_K_M] = {.name = "Q3_K_M", .file_type = 12, .base = Q3_K, .embd = Q3_K,
                       .head = Q6_K, .attn_q = Q3_K, .attn_k = Q3_K, .attn_output = Q4_K,
                       .attn_k_e8 = Q8_0, .attn_output_e8 = Q5_K,
                       .v_e8 = Q8_0, .v_first2 = Q5_K, .v = Q4_K,
                       .down_first16 = Q5_K, .down = Q4_K},
    [RECIPE_Q4_K_M] = {.name = "Q4_K_M", .file_type = 15, .base = Q4_K, .embd = Q4_K,
                       .head = Q6_K, .attn_q = Q4_K, .attn_k = Q4_K, .attn_output = Q4_K,
                       .attn_k_e8 = Q8_0, .attn_output_e8 = Q5_K,
                       .v_e8 = Q8_0, .v_more = Q6_K, .v = Q4_K,
                       .down_more = Q6_K, .down = Q4_K},
};

int recipe_by_name(const char *name)
{
    for (int r = 1; r < RECIPE_COUNT; r++)
        if (!strcasecmp(name, recipes[r].name))
            return r;
    return RECIPE_NONE;
}

const char *recipe_name(int r)
{
    return r > 0 && r < RECIPE_COUNT ? recipes[r].name : "?";
}

int recipe_base_type(int r)
{
    return r > 0 && r < RECIPE_COUNT ? recipes[r].base : -1;
}

int recipe_file_type(int r)
{
    return r > 0 && r < RECIPE_COUNT ? recipes[r].file_type : -1;
}

int recipe_layer(const char *name)
{
    int il, n = 0;
    if (sscanf(name, "blk.%d.%n", &il, &n) == 1 && n > 0 && il >= 0)
        return il;
    return -1;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one in between get the larger type. */
static bool more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool has(const char *name, const char *part)
{
    return strstr(name, part) != NULL;
}

int recipe_fallback(int type, int64_t ne0)
{
    const type_traits *t = type_traits_get(type);
    if (t && ne0 % t->blck == 0)
        return type;
    int fb;
    switch (type) {
    case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS:
    case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ1_S: case 29 /* IQ1_M */:
        fb = IQ4_NL;
        break;
    case GGML_TYPE_Q2_0: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K:
        fb = Q4_0;
        break;
    case GGML_TYPE_Q4_K: fb = Q5_0; break;
    case GGML_TYPE_Q5_K: fb = Q5_1; break;
    case GGML_TYPE_Q6_K: fb = Q8_0; break;
    default: fb = F16; break;
    }
    return ne0 % type_traits_get(fb)->blck == 0 ? fb : F16;
}

/* The type before the row-length fallback, -1 to leave the tensor alone. */
static int wanted_type(const recipe *r, const char *name, uint32_t n_dims, int64_t ne0,
                       const recipe_model *m)
{
    const size_t len = strlen(name);
    if (n_dims < 2 || len < 6 || strcmp(name + len - 6, "weight") != 0 ||
        has(name, "_norm.weight") || has(name, "ffn_gate_inp"))
        return -1;
    const int il = recipe_layer(name), n = m->n_layer;
    const bool e8 = m->n_expert == 8;
    const int G = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 1;
    const bool is_output = !strcmp(name, "output.weight");
    const bool is_embd = !strcmp(name, "token_embd.weight");

    if (is_output || (is_embd && m->tied)) {
        if (ne0 % type_traits_get(r->base)->blck != 0)
            return Q8_0;
        return r->head;
    }
    if (is_embd)
        return r->embd;
    if (has(name, "attn_v.weight")) {
        if (e8 && r->v_e8)
            return r->v_e8;
        if (r->v_gqa4 && (G >= 4 || (r->v_gqa4_or_e4 && m->n_expert >= 4)))
            return r->v_gqa4;
        if (m->imatrix && r->v_imatrix)
            return r->v_imatrix;
        if (r->v_first2 && il < 2)
            return r->v_first2;
        if (r->v_more && more_bits(il, n))
            return r->v_more;
        return r->v;
    }
    if (has(name, "attn_k.weight"))
        return e8 && r->attn_k_e8 ? r->attn_k_e8 : r->attn_k;
    if (has(name, "attn_q.weight"))
        return r->attn_q;
    if (has(name, "attn_output.weight"))
        return e8 && r->attn_output_e8 ? r->attn_output_e8 : r->attn_output;
    if (has(name, "ffn_down")) {
        if (m->imatrix && r->down_imatrix)
            return r->down_imatrix;
        if (r->down_first8 && il < n / 8)
            return r->down_first8;
        if (r->down_first16 && il < n / 16)
            return r->down_first16;
        if (r->down_more && more_bits(il, n))
            return r->down_more;
        return r->down;
    }
    return r->base; /* ffn_gate, ffn_up (and their _exps) and the rest */
}

int recipe_type(int recipe_id, const char *name, uint32_t n_dims, int64_t ne0,
                const recipe_model *m, int *wanted)
{
    if (recipe_id <= 0 || recipe_id >= RECIPE_COUNT)
        return -1;
    const int w = wanted_type(&recipes[recipe_id], name, n_dims, ne0, m);
    if (wanted)
        *wanted = w;
    return w < 0 ? -1 : recipe_fallback(w, ne0);
}

/* A head count: u32, or a per-layer array whose first entry is taken. */
static int head_count(const gguf *g, const char *key, int *v, strata_error *err)
{
    uint32_t u;
    if (gguf_get_u32(g, key, &u, NULL) == 0) {
        *v = (int)u;
        return 0;
    }
    uint32_t et;
    uint64_t n;
    const void *data;
    if (gguf_get_array(g, key, &et, &n, &data, NULL) == 0 && n > 0 &&
        (et == GGUF_U32 || et == GGUF_I32)) {
        memcpy(&u, data, 4);
        *v = (int)u;
        return 0;
    }
    return strata_err(err, STRATA_E_FORMAT, "%s: key %s is missing or not a head count",
                      gguf_path(g), key);
}

int recipe_model_from_gguf(const gguf *g, recipe_model *m, strata_error *err)
{
    memset(m, 0, sizeof *m);
    gguf_str arch;
    int rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc)
        return rc;
    char a[64], key[128];
    snprintf(a, sizeof a, "%.*s", (int)(arch.len < 63 ? arch.len : 63), arch.p);
    uint32_t u;
    snprintf(key, sizeof key, "%s.block_count", a);
    if ((rc = gguf_get_u32(g, key, &u, err)))
        return rc;
    m->n_layer = (int)u;
    snprintf(key, sizeof key, "%s.attention.head_count", a);
    if ((rc = head_count(g, key, &m->n_head, err)))
        return rc;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
    if (head_count(g, key, &m->n_head_kv, NULL))
        m->n_head_kv = m->n_head; /* absent: no grouping */
    snprintf(key, sizeof key, "%s.expert_count", a);
    m->n_expert = gguf_get_u32(g, key, &u, NULL) == 0 ? (int)u : 0;
    m->tied = gguf_find_tensor(g, "output.weight") == NULL;
    return 0;
}
