/* model.c: build the model description from a GGUF file (doc/formats.md §4). */
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"

const char *model_arch_name(int arch)
{
    switch (arch) {
    case ARCH_LLAMA: return "llama";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_QWEN3: return "qwen3";
    case ARCH_QWEN3MOE: return "qwen3moe";
    case ARCH_GEMMA3: return "gemma3";
    default: return "?";
    }
}

/* ---- hyper-parameters ---------------------------------------------------- */

static int arch_key_u32(const model *m, const char *suffix, int *v, int required,
                        strata_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    uint32_t u;
    strata_error e2;
    int rc = gguf_get_u32(m->g, key, &u, &e2);
    if (rc == STRATA_E_NOTFOUND && !required)
        return 0;
    if (rc)
        return strata_err(err, rc, "%s: %s", gguf_path(m->g), e2.msg);
    if (u > (1u << 30))
        return strata_err(err, STRATA_E_FORMAT, "%s: %s = %u is out of range",
                          gguf_path(m->g), key, u);
    *v = (int)u;
    return 0;
}

static int arch_key_f32(const model *m, const char *suffix, float *v, strata_error *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    strata_error e2;
    int rc = gguf_get_f32(m->g, key, v, &e2);
    if (rc == STRATA_E_NOTFOUND)
        return 0;
    return rc ? strata_err(err, rc, "%s: %s", gguf_path(m->g), e2.msg) : 0;
}

/* gemma3's extras (doc/engine.md, "gemma3"), after the common keys: the
 * sliding window on five layers of every six with their own RoPE base of
 * 10000 (unscaled), the embedding scaled by sqrt(n_embd), GELU gating, the
 * optional final soft-cap.  The query scale is 1/sqrt(head_dim) except on
 * the 62-layer (27B) model, whose query_pre_attn_scalar is n_embd/n_head:
 * the GGUF carries no key for it, so the layer count tells, as in
 * llama.cpp. */
static int read_gemma3(model *m, strata_error *err)
{
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    hp->rope_neox = 1;
    hp->ffn_gelu = 1;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->swa_pattern = 6;
    hp->rope_base_swa = 10000.0f;
    int rc = arch_key_u32(m, "attention.sliding_window", &hp->swa_window, 0, err);
    rc = rc ? rc : arch_key_f32(m, "final_logit_softcapping", &hp->final_softcap, err);
    if (rc)
        return rc;
    if (hp->swa_window < 0)
        return strata_err(err, STRATA_E_FORMAT, "%s: gemma3.attention.sliding_window = %d",
                          path, hp->swa_window);
    if (!(hp->final_softcap >= 0.0f && isfinite(hp->final_softcap)))
        return strata_err(err, STRATA_E_FORMAT, "%s: gemma3.final_logit_softcapping = %g (must "
                          "be a finite number >= 0)", path, hp->final_softcap);
    if (hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return 0;
}

static int read_hparams(model *m, strata_error *err)
{
    model_hparams *hp = &m->hp;
    const char *path = gguf_path(m->g);
    gguf_str arch;
    strata_error e2;
    if (gguf_get_str(m->g, "general.architecture", &arch, &e2))
        return strata_err(err, STRATA_E_FORMAT, "%s: %s", path, e2.msg);
    if (arch.len >= sizeof m->arch_name)
        arch.len = sizeof m->arch_name - 1;
    memcpy(m->arch_name, arch.p, arch.len);
    m->arch_name[arch.len] = '\0';
    static const char *names[] = {"llama", "qwen2", "qwen3", "qwen3moe", "gemma3"};
    hp->arch = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(m->arch_name, names[i]))
            hp->arch = i;
    if (hp->arch < 0)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "%s: general.architecture = '%s' is not supported "
                          "(strata runs llama, qwen2, qwen3, qwen3moe, gemma3)", path, m->arch_name);

    int rc = 0;
    rc = rc ? rc : arch_key_u32(m, "block_count", &hp->n_layer, 1, err);
    rc = rc ? rc : arch_key_u32(m, "embedding_length", &hp->n_embd, 1, err);
    rc = rc ? rc : arch_key_u32(m, "attention.head_count", &hp->n_head, 1, err);
    hp->n_head_kv = hp->n_head;
    rc = rc ? rc : arch_key_u32(m, "attention.head_count_kv", &hp->n_head_kv, 0, err);
    rc = rc ? rc : arch_key_u32(m, "feed_forward_length", &hp->n_ff, hp->arch != ARCH_QWEN3MOE, err);
    hp->n_ctx_train = 4096;
    rc = rc ? rc : arch_key_u32(m, "context_length", &hp->n_ctx_train, 0, err);
    rc = rc ? rc : arch_key_u32(m, "expert_count", &hp->n_expert, 0, err);
    rc = rc ? rc : arch_key_u32(m, "expert_used_count", &hp->n_expert_used, 0, err);
    rc = rc ? rc : arch_key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, 0, err);
    if (rc)
        return rc;
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv)
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: bad attention shape: block_count %d, embedding_length %d, "
                          "head_count %d, head_count_kv %d", path, hp->n_layer, hp->n_embd,
                          hp->n_head, hp->n_head_kv);
    /* Qwen3 sets key_length explicitly and it differs from n_embd/n_head on
     * several sizes: never derive head_dim when the key exists (§4.1). */
    hp->head_dim = hp->n_embd / hp->n_head;
    rc = arch_key_u32(m, "attention.key_length", &hp->head_dim, 0, err);
    if (rc)
        return rc;
    if (hp->head_dim <= 0 || hp->head_dim % 32 || hp->head_dim > 512)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "%s: head_dim = %d (strata needs a multiple of 32, at most 512)",
                          path, hp->head_dim);
    hp->n_rot = hp->head_dim;
    rc = arch_key_u32(m, "rope.dimension_count", &hp->n_rot, 0, err);
    if (rc)
        return rc;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return strata_err(err, STRATA_E_FORMAT, "%s: rope.dimension_count = %d (head_dim %d)",
                          path, hp->n_rot, hp->head_dim);
    hp->rope_neox = hp->arch != ARCH_LLAMA; /* llama.cpp's rope type table */
    hp->rope_base = 10000.0f;
    hp->rope_scale = 1.0f;
    hp->eps = 1e-5f;
    rc = arch_key_f32(m, "rope.freq_base", &hp->rope_base, err);
    rc = rc ? rc : arch_key_f32(m, "attention.layer_norm_rms_epsilon", &hp->eps, err);
    if (rc)
        return rc;
    /* A NaN, zero or negative epsilon or RoPE base gives NaN activations
     * from the first layer on, and the sampler then answers nothing: say
     * which value is wrong instead.  The epsilon only guards the division
     * of RMS norm; 1 is already far beyond any real model's 1e-5..1e-6. */
    if (!(hp->eps > 0.0f && hp->eps <= 1.0f))
        return strata_err(err, STRATA_E_FORMAT, "%s: %s.attention.layer_norm_rms_epsilon = %g "
                          "(must be > 0 and at most 1)", path, m->arch_name, hp->eps);
    if (!(hp->rope_base > 0.0f && isfinite(hp->rope_base)))
        return strata_err(err, STRATA_E_FORMAT, "%s: %s.rope.freq_base = %g (must be a finite "
                          "number > 0)", path, m->arch_name, hp->rope_base);
    if (hp->arch != ARCH_QWEN3MOE && hp->n_ff <= 0)
        return strata_err(err, STRATA_E_FORMAT, "%s: %s.feed_forward_length = %d (must be > 0)",
                          path, m->arch_name, hp->n_ff);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    gguf_str st;
    if (gguf_get_str(m->g, key, &st, NULL) == 0 && st.len > 0 &&
        !(st.len == 4 && !memcmp(st.p, "none", 4))) {
        if (st.len == 6 && !memcmp(st.p, "linear", 6)) {
            float f = 1.0f;
            rc = arch_key_f32(m, "rope.scaling.factor", &f, err);
            if (rc)
                return rc;
            if (!(f > 0.0f && isfinite(f)))
                return strata_err(err, STRATA_E_FORMAT, "%s: %s.rope.scaling.factor = %g (must "
                                  "be a finite number > 0)", path, m->arch_name, f);
            hp->rope_scale = 1.0f / f;
        } else {
            return strata_err(err, STRATA_E_UNSUPPORTED, "%s: %s = '%.*s' is not supported "
                              "(strata implements linear scaling only)", path, key, (int)st.len, st.p);
        }
    }
    if (hp->n_expert > 0 && (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert))
        return strata_err(err, STRATA_E_FORMAT, "%s: expert_used_count = %d with expert_count = %d",
                          path, hp->n_expert_used, hp->n_expert);
    if (hp->n_expert_used > MOE_MAX_USED)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: expert_used_count = %d: strata "
                          "routes at most %d experts per token", path, hp->n_expert_used,
                          MOE_MAX_USED);
    if (hp->arch == ARCH_QWEN3MOE && hp->n_expert == 0)
        return strata_err(err, STRATA_E_FORMAT, "%s: qwen3moe without %s.expert_count", path,
                          m->arch_name);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    return hp->arch == ARCH_GEMMA3 ? read_gemma3(m, err) : 0;
}

/* ---- tensors ------------------------------------------------------------- */

static const gguf_tensor *find(const model *m, const char *name, int required, strata_error *err)
{
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    if (!t && required)
        strata_err(err, STRATA_E_NOTFOUND, "%s: tensor '%s' is missing (required by arch %s)",
                   gguf_path(m->g), name, m->arch_name);
    return t;
}

/* Every fp16 scale of a block-quantized tensor must be finite: one pass
 * over the scale fields (2 bytes per block) at load, so a damaged file is
 * refused with its tensor, type and block named instead of producing NaN
 * logits later. */
static int check_scales(const model *m, const gguf_tensor *t, strata_error *err)
{
    uint64_t blk;
    int field;
    uint16_t bits;
    if (!type_find_bad_scale((int)t->type, t->data, t->nbytes, &blk, &field, &bits))
        return 0;
    int offs[2];
    type_fp16_scales((int)t->type, offs);
    const int paired = t->type == GGML_TYPE_Q4_1 || t->type == GGML_TYPE_Q5_1;
    return strata_err(err, STRATA_E_FORMAT,
                      "%s: tensor '%s' (%s): block %" PRIu64 " has a non-finite scale: %s = "
                      "0x%04x (%s, fp16 at byte %d of the block)", gguf_path(m->g), t->name,
                      type_name((int)t->type), blk, field ? (paired ? "m" : "dmin") : "d", bits,
                      bits & 0x3ff ? "NaN" : bits & 0x8000 ? "-inf" : "+inf", offs[field]);
}

/* A matrix {cols, rows[, n_mat]} in a type strata can decode. */
static int get_weight(model *m, const char *name, int64_t rows, int64_t cols, int64_t n_mat,
                      int required, weight *w, strata_error *err)
{
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = find(m, name, required, err);
    if (!t)
        return required ? STRATA_E_NOTFOUND : 0;
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n_mat || t->ne[3] != 1)
        return strata_err(err, STRATA_E_FORMAT,
                          "%s: tensor '%s' has shape {%lld, %lld, %lld}, expected {%lld, %lld, %lld}",
                          gguf_path(m->g), name, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)t->ne[2], (long long)cols, (long long)rows, (long long)n_mat);
    const type_traits *tt = type_traits_get((int)t->type);
    if (!tt || !tt->dequant)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: tensor '%s' has type %s (id %u), "
                          "which strata cannot decode", gguf_path(m->g), name,
                          type_name((int)t->type), t->type);
    int rc = check_scales(m, t, err);
    if (rc)
        return rc;
    w->data = t->data;
    w->type = (int)t->type;
    w->rows = rows;
    w->cols = cols;
    w->n_mat = n_mat;
    w->mat_bytes = t->nbytes / (uint64_t)n_mat;
    w->name = t->name;
    return 0;
}

/* A vector of n floats; F32 is used in place, other types are decoded once
 * into memory the model owns. */
static int get_vec(model *m, const char *name, int64_t n, int required, const float **out,
                   strata_error *err)
{
    *out = NULL;
    const gguf_tensor *t = find(m, name, required, err);
    if (!t)
        return required ? STRATA_E_NOTFOUND : 0;
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return strata_err(err, STRATA_E_FORMAT, "%s: tensor '%s' has shape {%lld, %lld}, expected {%lld}",
                          gguf_path(m->g), name, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)n);
    if (t->type == GGML_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    const type_traits *tt = type_traits_get((int)t->type);
    if (!tt || !tt->dequant)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: tensor '%s' has type %s",
                          gguf_path(m->g), name, type_name((int)t->type));
    int rc = check_scales(m, t, err);
    if (rc)
        return rc;
    float *f = malloc((size_t)n * sizeof *f);
    float **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!f || !o) {
        free(f);
        if (o)
            m->owned = o;
        return strata_err(err, STRATA_E_NOMEM, "out of memory decoding '%s'", name);
    }
    m->owned = o;
    m->owned[m->n_owned++] = f;
    tt->dequant(t->data, f, n);
    *out = f;
    return 0;
}

static int load_layer(model *m, int il, strata_error *err)
{
    const model_hparams *hp = &m->hp;
    layer_weights *L = &m->layers[il];
    int64_t dq = (int64_t)hp->n_head * hp->head_dim, dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    char n[96];
    int rc = 0;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    rc = rc ? rc : get_vec(m, NAME("attn_norm.weight"), hp->n_embd, 1, &L->attn_norm, err);
    rc = rc ? rc : get_vec(m, NAME("ffn_norm.weight"), hp->n_embd, 1, &L->ffn_norm, err);
    rc = rc ? rc : get_weight(m, NAME("attn_q.weight"), dq, hp->n_embd, 1, 1, &L->wq, err);
    rc = rc ? rc : get_weight(m, NAME("attn_k.weight"), dkv, hp->n_embd, 1, 1, &L->wk, err);
    rc = rc ? rc : get_weight(m, NAME("attn_v.weight"), dkv, hp->n_embd, 1, 1, &L->wv, err);
    rc = rc ? rc : get_weight(m, NAME("attn_output.weight"), hp->n_embd, dq, 1, 1, &L->wo, err);
    int biases = hp->arch == ARCH_QWEN2;
    rc = rc ? rc : get_vec(m, NAME("attn_q.bias"), dq, biases, &L->bq, err);
    rc = rc ? rc : get_vec(m, NAME("attn_k.bias"), dkv, biases, &L->bk, err);
    rc = rc ? rc : get_vec(m, NAME("attn_v.bias"), dkv, biases, &L->bv, err);
    int gemma = hp->arch == ARCH_GEMMA3;
    int qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE || gemma;
    rc = rc ? rc : get_vec(m, NAME("attn_q_norm.weight"), hp->head_dim, qk_norm, &L->q_norm, err);
    rc = rc ? rc : get_vec(m, NAME("attn_k_norm.weight"), hp->head_dim, qk_norm, &L->k_norm, err);
    /* Only gemma3 reads the sandwich norms: another arch's file carrying
     * them would otherwise change its forward pass silently. */
    if (gemma) {
        rc = rc ? rc : get_vec(m, NAME("post_attention_norm.weight"), hp->n_embd, 1,
                               &L->post_attn_norm, err);
        rc = rc ? rc : get_vec(m, NAME("post_ffw_norm.weight"), hp->n_embd, 1,
                               &L->post_ffn_norm, err);
    }
    if (hp->n_expert > 0) {
        int64_t ffe = hp->n_ff_exp > 0 ? hp->n_ff_exp : hp->n_ff;
        rc = rc ? rc : get_weight(m, NAME("ffn_gate_inp.weight"), hp->n_expert, hp->n_embd, 1, 1, &L->router, err);
        rc = rc ? rc : get_weight(m, NAME("ffn_gate_exps.weight"), ffe, hp->n_embd, hp->n_expert, 1, &L->gate_exps, err);
        rc = rc ? rc : get_weight(m, NAME("ffn_up_exps.weight"), ffe, hp->n_embd, hp->n_expert, 1, &L->up_exps, err);
        rc = rc ? rc : get_weight(m, NAME("ffn_down_exps.weight"), hp->n_embd, ffe, hp->n_expert, 1, &L->down_exps, err);
    } else {
        rc = rc ? rc : get_weight(m, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, 1, 1, &L->gate, err);
        rc = rc ? rc : get_weight(m, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, 1, 1, &L->up, err);
        rc = rc ? rc : get_weight(m, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, 1, 1, &L->down, err);
    }
#undef NAME
    return rc;
}

/* The tokenizer's vocabulary and the embedding rows must agree: with more
 * tokens than rows an id past the last row reads outside token_embd; with
 * fewer, the model can produce ids that have no text (printed as U+FFFD, or
 * an error only when sampled).  output.weight's rows are checked against
 * the same n_vocab by its shape. */
static int check_vocab(const model *m, strata_error *err)
{
    uint32_t et;
    uint64_t n;
    const void *data;
    if (gguf_get_array(m->g, "tokenizer.ggml.tokens", &et, &n, &data, NULL) != 0)
        return 0; /* no vocabulary: the tokenizer reports that */
    if (n != (uint64_t)m->hp.n_vocab)
        return strata_err(err, STRATA_E_FORMAT, "%s: tokenizer.ggml.tokens has %llu tokens but "
                          "token_embd.weight has %d rows (the vocabulary and the embedding "
                          "must be the same size)", gguf_path(m->g), (unsigned long long)n,
                          m->hp.n_vocab);
    return 0;
}

/* Tensors of layers past block_count mean a file whose metadata does not
 * describe it (a wrong key, a botched merge): they would be silently
 * ignored, so refuse the file and name the first one. */
static int check_extra_layers(const model *m, strata_error *err)
{
    for (uint64_t i = 0; i < gguf_n_tensors(m->g); i++) {
        const char *name = gguf_tensor_at(m->g, i)->name;
        long il;
        int used = 0;
        if (sscanf(name, "blk.%ld.%n", &il, &used) == 1 && used > 0 && il >= m->hp.n_layer)
            return strata_err(err, STRATA_E_FORMAT, "%s: tensor '%s' belongs to layer %ld but "
                              "%s.block_count = %d (the file has more layers than its metadata "
                              "says)", gguf_path(m->g), name, il, m->arch_name, m->hp.n_layer);
    }
    return 0;
}

int model_from_gguf(gguf *g, model **out, strata_error *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    }
    m->g = g;
    int rc = read_hparams(m, err);
    model_hparams *hp = &m->hp;
    if (!rc) {
        const gguf_tensor *te = find(m, "token_embd.weight", 1, err);
        if (!te)
            rc = STRATA_E_NOTFOUND;
        else if (te->ne[1] <= 0 || te->ne[1] > (1 << 30))
            rc = strata_err(err, STRATA_E_FORMAT, "%s: token_embd.weight has %lld rows (the "
                            "vocabulary size; must be 1..2^30)", gguf_path(g), (long long)te->ne[1]);
        else
            hp->n_vocab = (int)te->ne[1];
    }
    rc = rc ? rc : check_vocab(m, err);
    rc = rc ? rc : get_weight(m, "token_embd.weight", hp->n_vocab, hp->n_embd, 1, 1, &m->tok_embd, err);
    rc = rc ? rc : get_weight(m, "output.weight", hp->n_vocab, hp->n_embd, 1, 0, &m->output, err);
    if (!rc && !m->output.data) {
        m->output = m->tok_embd; /* tied embeddings */
        m->tied = 1;
    }
    rc = rc ? rc : get_vec(m, "output_norm.weight", hp->n_embd, 1, &m->output_norm, err);
    rc = rc ? rc : get_vec(m, "rope_freqs.weight", hp->n_rot / 2, 0, &m->rope_freqs, err);
    if (!rc) {
        m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
        if (!m->layers)
            rc = strata_err(err, STRATA_E_NOMEM, "out of memory");
    }
    for (int il = 0; !rc && il < hp->n_layer; il++)
        rc = load_layer(m, il, err);
    rc = rc ? rc : check_extra_layers(m, err);
    if (rc) {
        model_free(m);
        return rc;
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++)
        m->weight_bytes += gguf_tensor_at(g, i)->nbytes;
    *out = m;
    return 0;
}

int model_load(const char *path, model **out, strata_error *err)
{
    gguf *g = NULL;
    *out = NULL;
    int rc = gguf_open(path, &g, err);
    if (rc)
        return rc;
    return model_from_gguf(g, out, err);
}

void model_free(model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    gguf_close(m->g);
    free(m);
}

static uint64_t weight_bytes(const weight *w)
{
    return w->data ? w->mat_bytes * (uint64_t)w->n_mat : 0;
}

uint64_t model_layer_bytes(const model *m, int l0, int l1)
{
    uint64_t b = 0;
    for (int il = l0; il < l1; il++) {
        const layer_weights *L = &m->layers[il];
        const weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down,
                              &L->router, &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            b += weight_bytes(ws[i]);
    }
    return b;
}
