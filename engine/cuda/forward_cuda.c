/* forward_cuda.c: one stage's forward pass on its card, in the same blocks
 * and under the same names as the CPU reference (engine/forward_cpu.c), so
 * the two read side by side:
 *
 *   stage_forward   embed (first stage) -> for each layer: attention_block,
 *                   then ffn_dense or ffn_moe -> head (last stage)
 *
 * Every kernel is queued on the stage's compute stream; for a decode step
 * the whole stage is captured into a graph (backend_cuda.c, stage_run).
 * Where the card differs from the CPU it is for speed, and each row still
 * computes what it computes alone (the invariance rule):
 *   - a norm is fused with the residual add before it (cuda_add_rmsnorm):
 *     the attention block ends with x += attention; xb = ffn_norm(x), and a
 *     dense FFN with x += ffn; xb = the next layer's attn_norm(x);
 *   - q|k|v and gate|up may be one stacked matrix (made at upload), also when
 *     their types differ (a mixed stack, cuda_matmul_mix);
 *   - the MoE FFN over more than one row sorts the (token, expert) pairs by
 *     expert and runs each expert matrix once for all of them (moe_grouped).
 * gemma3 (doc/engine.md, "gemma3") adds the embedding scale, the post-
 * attention and post-FFN norms (an in-place cuda_rmsnorm of the block's
 * output before the fused add+norm), GELU-tanh gating, a sliding window and
 * its own RoPE base on five layers of six, and the optional soft-cap.
 *
 * Errors: a block queues its kernels one after another; each call's status
 * goes into the run's sticky status (keep), which holds the first failure
 * and its message (later calls write into a spare record), and the next
 * block does not start after a failure. */
#ifdef STRATA_CUDA
#include <math.h>
#include <stdlib.h>

#include "engine/cuda/cuda_stage.h"
#include "engine/trace.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/quant.h"

/* One stage's run for one call. */
typedef struct srun {
    strata_engine *e;
    const stage *st;
    cuda_stage *cs;
    const fwd_call *c;
    const model_hparams *hp;
    int normed;          /* xb already holds attn_norm(x) (fused into the last add) */
    int rc;              /* the first failing call's status, 0 while all went well */
    strata_error *err;   /* where the first failure's message goes */
    strata_error spare;  /* where the messages of later failures go */
} srun;

static strata_error *err_of(srun *r) { return r->rc ? &r->spare : r->err; }

static void keep(srun *r, int rc)
{
    if (!r->rc)
        r->rc = rc;
}

/* The fused launches (doc/cuda-kernels.md, "Fewer launches per decode
 * layer"), on unless STRATA_DECODE_FUSE=0: each gives the bits of the
 * launches it replaces, so the switch is only for an A/B of their speed. */
static int fused(const srun *r) { return !((const cuda_engine *)r->e->cuda)->no_fuse; }

/* cuda_matvec's most rows (tokens) per launch: up to it the weight products
 * run the decode kernel, which can take the SwiGLU in front of down. */
#define MATVEC_MAX_ROWS 8
/* Rows up to which the rotated caches rotate q|k|v inside the store's launch
 * (a decode step's; a prompt's chunk rotates in a launch of its own). */
#define ROT_FUSED_MAX_ROWS 32
_Static_assert(MATVEC_MAX_ROWS <= CUDA_MOE_ROUTER_TICKETS, "the fused router takes a ticket per row");

/* y[n x rows] = x[n x cols] W^T on the stage's stream. */
static void matmul(srun *r, const dweight *w, const float *x, int n, float *y)
{
    cuda_stage *cs = r->cs;
    if (w->mix.n) /* a mixed stack: one decode launch over its parts' types */
        keep(r, cuda_matmul_mix(&w->mix, w->cols, x, n, y, cs->mm_scratch, cs->mm_scratch_bytes,
                                cs->compute, err_of(r)));
    else
        keep(r, cuda_matmul(w->type, w->d, w->rows, w->cols, x, n, y, cs->mm_scratch,
                            cs->mm_scratch_bytes, cs->compute, err_of(r)));
}

/* STRATA_TRACE: copy the first row of a device vector back and print it
 * (prompt chunks only: never inside a graph capture). */
static void trace(srun *r, const char *what, int layer, const float *d, long n)
{
    if (!trace_on() || r->c->decode || r->rc)
        return;
    float *h = malloc((size_t)n * sizeof *h);
    if (!h)
        return;
    cudaError_t ce = cudaStreamSynchronize(r->cs->compute);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(h, d, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost);
    if (ce == cudaSuccess)
        trace_vec(what, layer, h, n);
    else
        keep(r, strata_cuda_fail(err_of(r), ce, "trace copy", __FILE__, __LINE__));
    free(h);
}

static void embed(srun *r)
{
    cuda_stage *cs = r->cs;
    const int32_t *tokens = cs->d_in;
    keep(r, cuda_embed(cs->tok_embd.type, cs->tok_embd.d, cs->tok_embd.rows, r->hp->n_embd, tokens,
                       r->c->n, cs->x, cs->compute, err_of(r)));
    if (r->hp->embd_scale != 1.0f) /* gemma3: sqrt(n_embd), as the CPU's float product */
        keep(r, cuda_scale(cs->x, (int64_t)r->c->n * r->hp->n_embd, r->hp->embd_scale,
                           cs->compute, err_of(r)));
    trace(r, "embed", -1, cs->x, r->hp->n_embd);
}

/* Attention block of layer il for the call's rows: x += attention, and
 * xb = ffn_norm(x) for the FFN after it. */
static void attention_block(srun *r, int il)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    cuda_engine *ce = r->e->cuda;
    const fwd_call *c = r->c;
    const dlayer *d = &cs->layers[il - r->st->l0];
    int n = c->n;
    int64_t D = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim;
    int64_t dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    const int32_t *tok_pos = cs->d_in + ce->max_rows, *seq_pos = cs->d_in + 2 * ce->max_rows;
    const int32_t *pages = cs->d_in + 3 * ce->max_rows;
    rope_params rp = {hp->n_rot, hp->rope_neox, hp->rope_base, hp->rope_scale, cs->rope_freqs};
    const int window = model_layer_window(hp, il);
    if (window) { /* gemma3's local layers: their own base, never scaled */
        rp.freq_base = hp->rope_base_swa;
        rp.freq_scale = 1.0f;
    }
    kv_view kv = kv_pool_view(r->st->kv, il - r->st->l0, pages);
    kv.kshift = d->kshift; /* k8v4r2: k minus the rotated K bias is stored */
    const int rot = engine_kv_rotated(r->e->p.kv_type); /* k8v4r */

    if (!r->normed)
        keep(r, cuda_rmsnorm(cs->x, d->attn_norm, cs->xb, n, D, hp->eps, cs->compute, err_of(r)));
    r->normed = 0;
    /* q, k, v: one stacked product (rows q|k|v per token) or three */
    float *q = cs->q, *k = cs->k, *v = cs->v;
    int64_t qs = dq, ks = dkv, vs = dkv;
    if (d->wqkv.d) {
        matmul(r, &d->wqkv, cs->xb, n, cs->q);
        k = q + dq;
        v = k + dkv;
        qs = ks = vs = dq + 2 * dkv;
    } else {
        matmul(r, &d->wq, cs->xb, n, q);
        matmul(r, &d->wk, cs->xb, n, k);
        matmul(r, &d->wv, cs->xb, n, v);
    }
    trace(r, "attn_norm", il, cs->xb, D);
    trace(r, "q", il, q, dq);
    trace(r, "k", il, k, dkv);
    trace(r, "v", il, v, dkv);
    if (d->bq) {
        keep(r, cuda_bias_add(q, d->bq, n, dq, qs, cs->compute, err_of(r)));
        keep(r, cuda_bias_add(k, d->bk, n, dkv, ks, cs->compute, err_of(r)));
        keep(r, cuda_bias_add(v, d->bv, n, dkv, vs, cs->compute, err_of(r)));
    }
    if (d->q_norm && fused(r)) { /* qwen3: both head norms and RoPE in one launch */
        keep(r, cuda_qk_norm_rope(q, d->q_norm, hp->n_head, qs, k, d->k_norm, hp->n_head_kv, ks, n,
                                  hp->head_dim, hp->eps, tok_pos, &rp, cs->compute, err_of(r)));
    } else {
        if (d->q_norm) {
            keep(r, cuda_rmsnorm_heads(q, d->q_norm, n, hp->n_head, hp->head_dim, qs, hp->eps,
                                       cs->compute, err_of(r)));
            keep(r, cuda_rmsnorm_heads(k, d->k_norm, n, hp->n_head_kv, hp->head_dim, ks, hp->eps,
                                       cs->compute, err_of(r)));
        }
        keep(r, cuda_rope_qk(q, hp->n_head, qs, k, hp->n_head_kv, ks, n, hp->head_dim, tok_pos,
                             &rp, cs->compute, err_of(r)));
    }
    /* Every row's K/V is stored first; a row at position p then reads
     * positions 0..p, which is the causal mask within a chunk.  k8v4r: q, k
     * and v rotated head by head before K and V are quantized (the
     * attention's output is rotated back below), as cpu_kv_rotate, in the
     * store's launch (STRATA_ROT_SPLIT=store: a launch before it).  A
     * prompt's chunk takes the launch before it anyway: the fused store's
     * one-warp blocks, one per q head and per 32-block of k and v, each
     * rotating its whole head vector, took 60 us for a 512-token chunk on
     * the H200 where the store alone takes 16 (doc/cuda-attention.md); the
     * same bits either way. */
    const int split_store = rot && ((ce->rot_split & ROT_SPLIT_STORE) || n > ROT_FUSED_MAX_ROWS);
    const int split_unrot = rot && (ce->rot_split & ROT_SPLIT_UNROT);
    if (split_store)
        keep(r, cuda_kv_rotate(q, hp->n_head, qs, k, v, hp->n_head_kv, ks, vs, n, hp->head_dim,
                               cs->compute, err_of(r)));
    if (rot && !split_store)
        keep(r, cuda_kv_rotate_store(&kv, ce->page_stride, c->n_seq, c->n_tok, tok_pos, q,
                                     hp->n_head, qs, k, ks, v, vs, cs->compute, err_of(r)));
    else
        keep(r, cuda_kv_store(&kv, ce->page_stride, c->n_seq, c->n_tok, tok_pos, k, ks, v, vs,
                              cs->compute, err_of(r)));
    /* k8v4r: the attention writes its output rotated back (cpu_kv_unrotate),
     * without a launch of its own (STRATA_ROT_SPLIT=unrot: a launch after it) */
    keep(r, (rot && !split_unrot ? cuda_attention_rotated : cuda_attention_window)(
                &kv, ce->page_stride, seq_pos, c->n_seq, c->n_tok, r->e->n_ctx, window, q, qs,
                hp->n_head, hp->attn_scale, cs->att, dq, cs->att_scratch,
                cs->att_scratch_bytes, cs->compute, err_of(r)));
    if (split_unrot)
        keep(r, cuda_kv_unrotate(cs->att, hp->n_head, dq, n, hp->head_dim, cs->compute,
                                 err_of(r)));
    trace(r, "q_rope", il, q, dq);
    trace(r, "att", il, cs->att, dq);
    matmul(r, &d->wo, cs->att, n, cs->xb);
    if (d->post_attn_norm) /* gemma3: the block's output is normed before the add */
        keep(r, cuda_rmsnorm(cs->xb, d->post_attn_norm, cs->xb, n, D, hp->eps, cs->compute,
                             err_of(r)));
    /* x += attention; xb = ffn_norm(x) */
    keep(r, cuda_add_rmsnorm(cs->x, cs->xb, d->ffn_norm, cs->xb, n, D, hp->eps, cs->compute,
                             err_of(r)));
    trace(r, "h", il, cs->x, D);
}

/* y = down * swiglu(g, u) for n <= MATVEC_MAX_ROWS rows `stride` apart,
 * the SwiGLU computed as the down kernel loads its input (no launch of its
 * own): the bits of cuda_swiglu then the matvec. */
static void down_swiglu(srun *r, const dweight *w, const float *g, const float *u, int64_t stride,
                        int n, float *y)
{
    keep(r, cuda_matvec_swiglu(w->type, w->d, w->rows, w->cols, NULL, n, g, u, stride, y,
                               r->cs->compute, err_of(r)));
}

/* Dense SwiGLU FFN on the normed rows in xb: x += FFN, and xb = the next
 * layer's attn_norm(x) in the same launch when there is a next layer on this
 * stage. */
static void ffn_dense(srun *r, int il)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    const dlayer *d = &cs->layers[il - r->st->l0];
    int n = r->c->n;
    int64_t D = hp->n_embd;
    const int gelu = hp->ffn_gelu; /* gemma3: GELU-tanh gating instead of SiLU */
    /* one row only: every block of the down matvec recomputes the SwiGLU of
     * its whole input, which at 4 rows cost more than the launch it saves
     * (H200, 8B llama IQ3_XXS: batch 1 302.5 -> 310.8 tok/s, batch 4 1106.4
     * -> 1063.0); the MoE pairs keep it at every batch (their own rows) */
    const int fuse_down = !gelu && n == 1 && fused(r);
    if (d->gate_up.d) {
        int64_t F = d->gate_up.rows / 2;
        matmul(r, &d->gate_up, cs->xb, n, cs->hb);
        if (fuse_down) {
            down_swiglu(r, &d->down, cs->hb, cs->hb + F, 2 * F, n, cs->xb);
        } else {
            keep(r, gelu ? cuda_geglu_fused(cs->hb, n, F, cs->hb2, cs->compute, err_of(r))
                         : cuda_swiglu_fused(cs->hb, n, F, cs->hb2, cs->compute, err_of(r)));
            matmul(r, &d->down, cs->hb2, n, cs->xb);
        }
    } else {
        int64_t F = d->gate.rows;
        matmul(r, &d->gate, cs->xb, n, cs->hb);
        matmul(r, &d->up, cs->xb, n, cs->hb2);
        if (fuse_down) {
            down_swiglu(r, &d->down, cs->hb, cs->hb2, F, n, cs->xb);
        } else {
            keep(r, gelu ? cuda_geglu(cs->hb, cs->hb2, cs->hb, (int64_t)n * F, cs->compute,
                                      err_of(r))
                         : cuda_swiglu(cs->hb, cs->hb2, cs->hb, (int64_t)n * F, cs->compute,
                                       err_of(r)));
            matmul(r, &d->down, cs->hb, n, cs->xb);
        }
    }
    if (d->post_ffn_norm)
        keep(r, cuda_rmsnorm(cs->xb, d->post_ffn_norm, cs->xb, n, D, hp->eps, cs->compute,
                             err_of(r)));
    if (il + 1 < r->st->l1) {
        keep(r, cuda_add_rmsnorm(cs->x, cs->xb, cs->layers[il + 1 - r->st->l0].attn_norm, cs->xb,
                                 n, D, hp->eps, cs->compute, err_of(r)));
        r->normed = 1;
    } else {
        keep(r, cuda_add(cs->x, cs->xb, (int64_t)n * D, cs->compute, err_of(r)));
    }
}

/* One expert matrix product over the expert-sorted rows (moe_grouped). */
static void grouped(srun *r, const dweight *w, const float *x, int n, float *y)
{
    cuda_stage *cs = r->cs;
    keep(r, cuda_matmul_grouped(w->type, w->d, w->rows, w->cols, r->hp->n_expert, cs->moe_off, x,
                                n, y, cs->mm_scratch, cs->mm_scratch_bytes, cs->compute,
                                err_of(r)));
}

/* The experts over many rows: the n*k (token, slot) pairs sorted by
 * expert, each expert's rows multiplied at once (three launches for all
 * experts instead of three per pair); the down products are left in
 * expert-sorted rows (returned; *inv their inverse permutation) for the
 * combine.  Each row's arithmetic is the matvec path's, bit for bit
 * (cuda_matmul_grouped), so a token's output does not depend on the path.
 * Buffers: xg (sorted inputs) in hb2; gate | up in hb; their SwiGLU in hb2;
 * the down products in hb. */
static const float *moe_grouped(srun *r, const dlayer *d, int n, const int32_t **inv_out)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    int64_t D = hp->n_embd, F = d->gate_exps.rows;
    int k = hp->n_expert_used, E = hp->n_expert, nk = n * k;
    int32_t *rows = cs->moe_off + E + 1, *inv = rows + (size_t)cs->max_pairs;
    float *xg = cs->hb2, *g = cs->hb, *u = cs->hb + (size_t)nk * F, *h = cs->hb2, *y = cs->hb;
    keep(r, cuda_moe_group(cs->moe_sel, n, k, E, cs->moe_off, rows, inv, cs->compute, err_of(r)));
    keep(r, cuda_moe_gather(cs->xb, n, k, D, rows, xg, cs->compute, err_of(r)));
    grouped(r, &d->gate_exps, xg, nk, g);
    grouped(r, &d->up_exps, xg, nk, u);
    keep(r, cuda_swiglu(g, u, h, (int64_t)nk * F, cs->compute, err_of(r)));
    grouped(r, &d->down_exps, h, nk, y);
    *inv_out = inv;
    return y;
}

/* The experts of a few rows (a batch-1 decode step): every (token, slot)
 * pair of a matrix in one launch, the expert ids read on the card
 * (graph-safe); pair (t, j) writes row t*k + j of the returned down
 * products, for the combine.  Three launches a layer instead of three per
 * pair: at batch 1 the 24 small matvecs of a top-8 layer were launch
 * latency, not bytes.  Fused (gate and up of one type): gate and up in one
 * launch into hb | hb + pairs*F, the SwiGLU inside the down launch: two. */
static const float *moe_matvecs(srun *r, const dlayer *d, int n)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    int64_t D = hp->n_embd, F = d->gate_exps.rows;
    int k = hp->n_expert_used, pairs = n * k;
    if (fused(r) && d->gate_exps.type == d->up_exps.type) {
        float *g = cs->hb, *u = cs->hb + (size_t)pairs * F; /* hb holds 2 x max_pairs x F */
        keep(r, cuda_matvec_experts2(d->gate_exps.type, d->gate_exps.d, d->up_exps.d, F, D,
                                     cs->moe_sel, pairs, k, cs->xb, g, u, cs->compute, err_of(r)));
        keep(r, cuda_matvec_swiglu(d->down_exps.type, d->down_exps.d, D, F, cs->moe_sel, pairs, g,
                                   u, F, cs->hb2, cs->compute, err_of(r)));
        return cs->hb2;
    }
    keep(r, cuda_matvec_experts(d->gate_exps.type, d->gate_exps.d, F, D, cs->moe_sel, pairs, k,
                                cs->xb, cs->hb, cs->compute, err_of(r)));
    keep(r, cuda_matvec_experts(d->up_exps.type, d->up_exps.d, F, D, cs->moe_sel, pairs, k,
                                cs->xb, cs->hb2, cs->compute, err_of(r)));
    keep(r, cuda_swiglu(cs->hb, cs->hb2, cs->hb, (int64_t)pairs * F, cs->compute, err_of(r)));
    keep(r, cuda_matvec_experts(d->down_exps.type, d->down_exps.d, D, F, cs->moe_sel, pairs, 1,
                                cs->hb, cs->hb2, cs->compute, err_of(r)));
    return cs->hb2;
}

/* MoE FFN on the normed rows in xb: route (softmax over the experts, top-k,
 * renormalised weights, on the card), the chosen experts' SwiGLU outputs
 * weighted (combined) and added to x.  Fused: combine, add and the next
 * layer's attn_norm into xb in one launch, as ffn_dense's last add. */
static void ffn_moe(srun *r, int il)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    const dlayer *d = &cs->layers[il - r->st->l0];
    int n = r->c->n, k = hp->n_expert_used;
    int64_t D = hp->n_embd;
    if (fused(r) && n <= MATVEC_MAX_ROWS && d->router.type == GGML_TYPE_F32 && cs->moe_ticket) {
        /* the router's product and the routing in one launch */
        keep(r, cuda_moe_router_route(d->router.d, hp->n_expert, D, cs->xb, n, k, cs->att,
                                      cs->moe_sel, cs->moe_w, cs->moe_ticket, cs->compute,
                                      err_of(r)));
    } else {
        matmul(r, &d->router, cs->xb, n, cs->att);
        keep(r, cuda_moe_route(cs->att, n, hp->n_expert, k, cs->moe_sel, cs->moe_w, cs->compute,
                               err_of(r)));
    }
    /* Past a decode batch's rows (a prompt chunk): one grouped product per
     * expert matrix (F32 experts, test models only, keep the pairs). */
    const int32_t *inv = NULL; /* the down products in (token, slot) order */
    const float *y;
    if (n > MOE_GROUPED_MIN_ROWS && d->gate_exps.type != GGML_TYPE_F32 &&
        d->up_exps.type != GGML_TYPE_F32 && d->down_exps.type != GGML_TYPE_F32 &&
        !((cuda_engine *)r->e->cuda)->no_grouped)
        y = moe_grouped(r, d, n, &inv);
    else
        y = moe_matvecs(r, d, n);
    if (fused(r)) {
        const int next = il + 1 < r->st->l1;
        keep(r, cuda_moe_combine_add_rmsnorm(y, cs->moe_w, inv, n, k, D, cs->x,
                                             next ? cs->layers[il + 1 - r->st->l0].attn_norm : NULL,
                                             cs->xb, hp->eps, cs->compute, err_of(r)));
        r->normed = next;
    } else {
        keep(r, cuda_moe_combine(y, cs->moe_w, inv, n, k, D, cs->att, cs->compute, err_of(r)));
        keep(r, cuda_add(cs->x, cs->att, (int64_t)n * D, cs->compute, err_of(r)));
    }
}

/* The output norm and head for the rows that want logits: a prompt chunk
 * usually needs its last row's only (rows from c->first on). */
static void head(srun *r)
{
    const model_hparams *hp = r->hp;
    cuda_stage *cs = r->cs;
    int64_t D = hp->n_embd;
    int first = r->c->first, rows = r->c->n - first;
    if (rows <= 0)
        return;
    keep(r, cuda_rmsnorm(cs->x + (size_t)first * D, cs->output_norm, cs->xb, rows, D, hp->eps,
                         cs->compute, err_of(r)));
    matmul(r, &cs->output, cs->xb, rows, cs->logits);
    if (hp->final_softcap > 0.0f)
        keep(r, cuda_softcap(cs->logits, rows, hp->n_vocab, hp->n_vocab, hp->final_softcap,
                             cs->compute, err_of(r)));
    for (int i = 0; i < rows && trace_on(); i++)
        trace(r, "logits", first + i, cs->logits + (size_t)i * hp->n_vocab, hp->n_vocab);
}

int stage_forward_cuda(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_call *c,
                       strata_error *err)
{
    srun r = {.e = e, .st = st, .cs = cs, .c = c, .hp = &e->m->hp, .err = err};
    if (st->index == 0)
        embed(&r);
    for (int il = st->l0; il < st->l1 && !r.rc; il++) {
        attention_block(&r, il);
        if (r.rc)
            break;
        if (r.hp->n_expert)
            ffn_moe(&r, il);
        else
            ffn_dense(&r, il);
        trace(&r, "out", il, cs->x, r.hp->n_embd);
    }
    if (!r.rc && st->index == e->n_stages - 1)
        head(&r);
    return r.rc;
}
#else
typedef int forward_cuda_is_empty_without_cuda;
#endif
