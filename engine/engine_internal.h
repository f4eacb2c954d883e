/* engine_internal.h: what the engine's files share (not public). */
#ifndef STRATA_ENGINE_INTERNAL_H
#define STRATA_ENGINE_INTERNAL_H

#include "cache/kvcache.h"
#include "engine/strata.h"
#include "stagepool/stagepool.h"

struct tokenizer;

/* A stage: layers [l0, l1) on one device, with its KV pool.  The first
 * stage also embeds tokens, the last applies the output norm and head. */
typedef struct stage {
    int index;
    int l0, l1;
    int device;          /* CUDA device (CPU backend: unused) */
    kv_pool *kv;         /* this stage's resident KV pool */
    void *cuda;          /* CUDA backend state (engine/cuda/cuda_stage.h), NULL on CPU */
} stage;

/* One token of the rows a forward pass processes: prefill chunks carry rows
 * of one sequence, decode steps rows of several. */
typedef struct fwd_row {
    strata_seq *seq;
    int32_t token;
    int32_t pos;
    int logits;          /* index of this row's logits in the output, or -1 */
} fwd_row;

/* CPU scratch: activations for up to `rows` tokens. */
typedef struct cpu_scratch {
    int rows;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits, *router;
    /* RoPE's cos/sin per row (n_rot floats each), made once per position
     * for every layer with the same rope_params (rope_key) */
    float *rope_cs;
    int32_t *rope_pos; /* the position each row's table holds, -1: none */
    rope_params rope_key;
} cpu_scratch;

struct strata_engine {
    strata_params p;
    model *m;
    struct tokenizer *tok;
    const struct backend *be; /* the backend's operations (engine/backend.h) */
    int backend;              /* be->kind, for strata_backend() */
    int n_ctx;
    int max_rows;        /* rows one forward call may carry */
    int n_stages;
    stage *stages;
    stagepool *pool;     /* NULL with one stage */
    cpu_scratch cpu;
    float *kshift;       /* k8v4r2 on a model with K biases: per layer, n_kv_head *
                          * head_dim floats, R b_k (kv_view.kshift); else NULL */
    void *cuda;          /* engine-wide CUDA state, NULL on CPU */
    uint64_t group_runs; /* (stage, group) runs issued by grouped decode steps, so
                          * tests can see the grouped path ran */
};

struct strata_seq {
    strata_engine *e;
    int32_t *tokens;
    int n_tokens, cap;
    kv_seq *kv;          /* one per stage */
    void *cuda;          /* per-stage device page tables (CUDA backend) */
};

/* The one place the public KV type (enum strata_kv_type, resolved: never
 * DEFAULT) maps to the kernels' block format (enum kv_type in kernels/ops.h)
 * and to whether head vectors are rotated before they are stored. */
static inline int engine_kv_block(int strata_kv)
{
    return strata_kv == STRATA_KV_F16       ? KV_F16
           : strata_kv == STRATA_KV_K8V4R2 ? KV_K8V4NL
                                            : KV_K8V4;
}
/* Whether k minus the layer's (rotated) K bias is stored (kv_view.kshift). */
static inline int engine_kv_shifted(int strata_kv)
{
    return strata_kv == STRATA_KV_K8V4R2;
}
/* Layer il's kv_view.kshift (NULL when none). */
static inline const float *engine_kshift(const strata_engine *e, int il)
{
    return e->kshift ? e->kshift + (size_t)il * e->m->hp.n_head_kv * e->m->hp.head_dim : NULL;
}
static inline int engine_kv_rotated(int strata_kv)
{
    return strata_kv == STRATA_KV_K8V4R || strata_kv == STRATA_KV_K8V4R2;
}

/* The forward pass over every stage (backend.h's `forward`).  logits: one
 * n_vocab row per row with logits >= 0.  KV pages must already be reserved
 * for every row.  A call carries either one sequence's prompt chunk
 * (decode = 0) or one token of each of several sequences (decode = 1).
 * Which kernels run depends only on that role, never on the number of rows,
 * so a row's result is the same alone, in a batch, and in any chunking (the
 * invariance rule).
 *
 * The CPU reference (engine/forward_cpu.c), driven by engine/backend_cpu.c:
 * one stage's layers for n rows (x in the scratch carries the hidden state
 * from stage to stage), and the output norm and head of the last stage. */
void stage_forward_cpu(strata_engine *e, const stage *st, const fwd_row *rows, int n);
void head_cpu(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits);

/* Batch groups (doc/engine.md, "Batch groups").  The number of groups a
 * forward call's rows are pipelined in: G for a decode step of a split
 * engine with --batch-groups G > 1, else 1 (prompt chunks are one sequence's
 * rows and always run whole). */
static inline int forward_groups(const strata_engine *e, int decode)
{
    return decode && e->n_stages > 1 && e->p.batch_groups > 1 ? e->p.batch_groups : 1;
}
/* Rows [*off, *off + *len) of n rows are group g of G: contiguous groups,
 * sizes as equal as possible (the first n % G groups one row larger); with
 * n < G the last groups are empty and are skipped. */
static inline void group_rows(int n, int G, int g, int *off, int *len)
{
    int q = n / G, r = n % G;
    *off = g * q + (g < r ? g : r);
    *len = q + (g < r);
}
int cpu_scratch_init(cpu_scratch *s, const model *m, int rows, strata_error *err);
void cpu_scratch_free(cpu_scratch *s);

/* Parse "--layer-split" into stage boundaries: first layer of each stage
 * after the first.  "auto" cuts the weight bytes in proportion to shares
 * (max_stages of them; NULL: equal).  Returns the number of stages or a
 * negative error. */
int parse_layer_split(const char *spec, const model *m, int max_stages, const double *shares,
                      int *starts, strata_error *err);

#endif
