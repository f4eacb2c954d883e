/* cuda_stage.h: the CUDA backend's state, shared by engine/cuda/cuda_setup.c
 * (upload, allocation, teardown) and engine/cuda/backend_cuda.c (the forward
 * pass).  Internal to engine/; built only with CUDA. */
#ifndef STRATA_CUDA_STAGE_H
#define STRATA_CUDA_STAGE_H

#include <cuda_runtime_api.h>

#include "engine/cuda/backend_cuda.h"
#include "engine/cuda/weight_types.h"
#include "kernels/cuda/cuda_ops.h"

#define MAX_GRAPH_ROWS 64
/* Decode graphs of batch groups kept per stage (least recently used
 * replaced): a step of n rows in G groups uses up to G (rows, offset)
 * pairs, so 128 holds every pair of a few batch sizes at once. */
#define GROUP_GRAPHS 128
/* MoE: calls of more rows than this run the experts as grouped matrix
 * products (forward_cuda.c, moe_grouped), up to this many as one launch of
 * all (token, expert) pairs per matrix (moe_matvecs).  Measured on the H200,
 * 48-layer 30B-A3B-shaped IQ3_XXS decode, grouped vs pairs: batch 2 244.7 vs
 * 346.8 tok/s, batch 4 336.3 vs 485.1, batch 8 485.1 vs 627.9; a 512-token
 * prompt needs the grouped products (doc/BENCHMARKS.md). */
#define MOE_GROUPED_MIN_ROWS 8

typedef struct dweight {
    void *d;
    int type;
    int64_t rows, cols, n_mat;
    /* a mixed stack (cuda_setup.c, upload_stacked): mix.n parts of
     * different block-tile types, one after another in d (mix.w[i] points
     * at part i); mix.n == 0 for every other weight.  type is then part 0's
     * and rows the parts' together. */
    cuda_mix mix;
} dweight;

typedef struct dlayer {
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm;
    float *kshift; /* k8v4r2: kv_view.kshift (engine_kshift), else NULL */
    float *post_attn_norm, *post_ffn_norm; /* gemma3, else NULL */
    dweight wq, wk, wv, wo, gate, up, down, router, gate_exps, up_exps, down_exps;
    /* stacked rows (cuda_setup.c, upload_stacked): when set, the parts
     * above are empty and one matvec computes q|k|v or gate|up per token */
    dweight wqkv, gate_up;
} dlayer;

/* A captured decode graph of one batch group: its rows [off, off + n) of
 * the activations and input block blk are baked into the kernels'
 * arguments, so all three are the key. */
typedef struct group_graph {
    int n, off, blk;
    uint64_t used;               /* stage's step clock at last use; 0: empty */
    cudaGraphExec_t exec;
} group_graph;

/* One forward call, as the stages see it. */
typedef struct fwd_call {
    int n, decode;     /* rows; decode: n sequences x 1 token, else 1 x n */
    int n_seq, n_tok;
    int first;         /* first row whose logits are wanted (n: none) */
} fwd_call;

/* One stage's card-side state. */
typedef struct cuda_stage {
    int dev;
    cudaStream_t compute, copy;
    dlayer *layers;              /* l1 - l0 */
    dweight tok_embd, output;    /* first / last stage */
    float *output_norm, *rope_freqs;
    /* activations, max_rows tokens each */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits;
    float *moe_w;                /* [rows * k] */
    int32_t *moe_sel;            /* [rows * k] */
    int32_t *moe_off;            /* grouped MoE: offsets [n_expert + 1] | sorted
                                  * pairs [max_pairs] | their inverse [max_pairs] */
    int max_pairs;               /* max_rows * k */
    /* per-call inputs, uploaded from `in`: one block of in_words per batch
     * group (cuda_engine.n_groups; block 0 is the whole call's when groups
     * are off), so a group's upload never overwrites words a stage is
     * still to read for another group */
    int32_t *d_in;               /* [n_groups][tokens | tok_pos | seq_pos | pages] */
    int32_t *h_in;               /* pinned mirror */
    size_t in_words;             /* words of one block */
    cudaEvent_t in_free;         /* recorded after the uploads from h_in: the host
                                  * waits on it before writing h_in again */
    void *mm_scratch, *att_scratch;
    void *mv_scratch;            /* CUDA_MATVEC_SCRATCH_BYTES, attached to compute */
    unsigned *moe_ticket;        /* cuda_moe_router_route's CUDA_MOE_ROUTER_TICKETS
                                  * tickets (MoE only; zeroed once, each launch
                                  * leaves them at 0) */
    size_t mm_scratch_bytes, att_scratch_bytes;
    float *h_x;                  /* pinned bounce for stage crossings */
    cudaEvent_t bounce_free;     /* on this (receiving) stage's card: recorded after
                                  * its upload from the previous stage's h_x, which
                                  * the host waits on before refilling that h_x */
    cudaEvent_t x_taken;         /* on this (receiving) stage's card: recorded after
                                  * it copied the previous stage's x, which that
                                  * stage's stream waits for before writing x again
                                  * (backend_cuda.c, x_free) */
    cudaEvent_t done;            /* recorded when the stage's work is queued */
    cudaGraphExec_t graph[MAX_GRAPH_ROWS + 1]; /* decode steps by row count */
    /* batch groups (n_groups > 1 only): */
    cudaEvent_t *group_done;     /* [n_groups] recorded after group g's work */
    group_graph *group_graphs;   /* [GROUP_GRAPHS] */
    uint64_t group_clock;        /* group runs so far (LRU clock) */
    uint64_t weight_bytes;
} cuda_stage;

/* STRATA_ROT_SPLIT=store: q|k|v rotated by a launch before the plain store;
 * =unrot: the output rotated back by a launch after the attention; =all:
 * both. */
enum { ROT_SPLIT_STORE = 1, ROT_SPLIT_UNROT = 2 };

/* What the stages share. */
typedef struct cuda_engine {
    int max_rows, page_stride;
    upload_note converted;       /* tensors converted to F16 at upload */
    int n_groups;                /* input blocks and events per stage: batch groups
                                  * with a split, else 1 */
    uint64_t total_bytes;
    int peer_ok;                 /* all consecutive cross-card pairs have peer access */
    int no_graphs;               /* STRATA_NO_GRAPHS set: decode steps launch kernels */
    int force_bounce;            /* STRATA_FORCE_BOUNCE=1: every crossing through pinned
                                  * host memory, also on one card (to test that path) */
    int no_grouped;              /* STRATA_MOE_MATVEC=1: MoE prompts run one matvec
                                  * per (token, expert) pair, as before grouping */
    int no_fuse;                 /* STRATA_DECODE_FUSE=0: the layer's launches unfused
                                  * (forward_cuda.c; bitwise the same results) */
    int rot_split;               /* STRATA_ROT_SPLIT (ROT_SPLIT_*): the rotated caches'
                                  * rotations as launches of their own (forward_cuda.c;
                                  * bitwise the same results), to time them */
    float *h_logits;             /* pinned, max_rows x n_vocab */
    float *h_uniform, *d_uniform; /* [max_rows] draws for sampling on the card */
    int32_t *h_next, *d_next;    /* [max_rows] sampled ids */
} cuda_engine;

/* cudaMalloc with an error that says how much was asked and is free. */
int cuda_dmalloc(void **p, size_t bytes, int dev, const char *what, strata_error *err);


/* Queue every kernel of one stage for call c on the stage's compute stream
 * (engine/cuda/forward_cuda.c; captured into a graph for decode steps). */
int stage_forward_cuda(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_call *c,
                       strata_error *err);

#endif
