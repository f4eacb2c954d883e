/* backend_cuda.c: the forward pass on NVIDIA cards, stage by stage.
 *
 * Each stage owns its card: its layers' weights in the kernels' device
 * layout, a compute stream, a private non-blocking copy stream, activation
 * buffers for `max_rows` tokens, and its KV pool (cache/kvcache.c, allocated
 * here with cudaMalloc).  The hidden state crosses from one stage to the
 * next with a peer copy when the cards allow it, through pinned host memory
 * when they do not, and with a plain device copy when two stages share a
 * card (how the split is tested on one GPU).
 *
 * A forward call: copy the rows' tokens, positions and page tables to every
 * stage (one small pinned upload each), run the stages in order, copy the
 * logits back.  Decode steps of a given batch size replay a CUDA graph per
 * stage, captured on first use, so a step is a few graph launches instead of
 * hundreds of kernel launches; positions and page tables are read from
 * device buffers whose addresses never change, which keeps the graphs valid.
 * With --batch-groups and a split, a decode step's rows flow through the
 * stages as a pipeline of groups (see "batch groups" below).
 *
 * Weight types the card has no kernel for (Q4_1, Q5_x, IQ4_NL, K-quants,
 * BF16) are converted to F16 on upload, and the engine says so.  Setup and
 * teardown (uploads, buffers) are in engine/cuda/cuda_setup.c. */
#ifdef STRATA_CUDA
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_stage.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/quant.h"
#include "engine/sample.h"
#include "engine/trace.h"

/* ---- the forward pass ------------------------------------------------------ */

typedef struct call {
    int n, decode;     /* rows; decode: n sequences x 1 token, else 1 x n */
    int n_seq, n_tok;
    int first;         /* first row whose logits are wanted (n: none) */
} call;

static int matmul(cuda_stage *cs, const dweight *w, const float *x, int n, float *y,
                  strata_error *err)
{
    return cuda_matmul(w->type, w->d, w->rows, w->cols, x, n, y, cs->mm_scratch,
                       cs->mm_scratch_bytes, cs->compute, err);
}

/* One expert matrix product over the expert-sorted rows (moe_grouped). */
static int grouped(cuda_stage *cs, const dweight *w, int n_expert, const float *x, int n, float *y,
                   strata_error *err)
{
    return cuda_matmul_grouped(w->type, w->d, w->rows, w->cols, n_expert, cs->moe_off, x, n, y,
                               cs->mm_scratch, cs->mm_scratch_bytes, cs->compute, err);
}

/* The experts over many rows (a prompt chunk): the n*k (token, slot) pairs
 * sorted by expert, each expert's rows multiplied at once (three launches
 * for all experts instead of three per pair), then combined back in slot
 * order.  Each row's arithmetic is the matvec path's, bit for bit
 * (cuda_matmul_grouped), so a token's output does not depend on the path.
 * Buffers: xg (sorted inputs) in hb2; gate | up in hb; their SwiGLU in hb2;
 * the down products in hb. */
static int moe_grouped(strata_engine *e, cuda_stage *cs, const dlayer *d, int n,
                       strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    int64_t D = hp->n_embd, F = d->gate_exps.rows;
    int k = hp->n_expert_used, E = hp->n_expert, nk = n * k;
    int32_t *rows = cs->moe_off + E + 1, *inv = rows + (size_t)cs->max_pairs;
    float *xg = cs->hb2, *g = cs->hb, *u = cs->hb + (size_t)nk * F, *h = cs->hb2, *y = cs->hb;
    int rc = cuda_moe_group(cs->moe_sel, n, k, E, cs->moe_off, rows, inv, cs->compute, err);
    rc = rc ? rc : cuda_moe_gather(cs->xb, n, k, D, rows, xg, cs->compute, err);
    rc = rc ? rc : grouped(cs, &d->gate_exps, E, xg, nk, g, err);
    rc = rc ? rc : grouped(cs, &d->up_exps, E, xg, nk, u, err);
    rc = rc ? rc : cuda_swiglu(g, u, h, (int64_t)nk * F, cs->compute, err);
    rc = rc ? rc : grouped(cs, &d->down_exps, E, h, nk, y, err);
    rc = rc ? rc : cuda_moe_combine(y, cs->moe_w, inv, n, k, D, cs->att, cs->compute, err);
    return rc;
}

static int moe_ffn(strata_engine *e, cuda_stage *cs, const dlayer *d, int n, strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    int64_t D = hp->n_embd, F = d->gate_exps.rows;
    int k = hp->n_expert_used, rc;
    rc = matmul(cs, &d->router, cs->xb, n, cs->att, err);
    rc = rc ? rc : cuda_moe_route(cs->att, n, hp->n_expert, k, cs->moe_sel, cs->moe_w,
                                  cs->compute, err);
    /* Past a decode step's few rows: one grouped product per expert matrix
     * (F32 experts, test models only, keep the matvecs). */
    if (!rc && n > MOE_GROUPED_MIN_ROWS && d->gate_exps.type != GGML_TYPE_F32 &&
        d->up_exps.type != GGML_TYPE_F32 && d->down_exps.type != GGML_TYPE_F32 &&
        !((cuda_engine *)e->cuda)->no_grouped) {
        rc = moe_grouped(e, cs, d, n, err);
        return rc ? rc : cuda_add(cs->x, cs->att, (int64_t)n * D, cs->compute, err);
    }
    /* Per token and slot, the three expert matvecs with the expert id read
     * on the card (graph-safe); slot (t, j) writes row t*k + j. */
    for (int t = 0; t < n && !rc; t++) {
        for (int j = 0; j < k && !rc; j++) {
            const int32_t *sel = cs->moe_sel + t * k + j;
            float *g = cs->hb + (size_t)(t * k + j) * F;
            float *u = cs->hb2 + (size_t)(t * k + j) * F;
            rc = cuda_matvec_expert(d->gate_exps.type, d->gate_exps.d, F, D, sel, cs->xb + t * D,
                                    1, g, cs->compute, err);
            rc = rc ? rc : cuda_matvec_expert(d->up_exps.type, d->up_exps.d, F, D, sel,
                                              cs->xb + t * D, 1, u, cs->compute, err);
        }
    }
    rc = rc ? rc : cuda_swiglu(cs->hb, cs->hb2, cs->hb, (int64_t)n * k * F, cs->compute, err);
    for (int t = 0; t < n && !rc; t++)
        for (int j = 0; j < k && !rc; j++)
            rc = cuda_matvec_expert(d->down_exps.type, d->down_exps.d, D, F,
                                    cs->moe_sel + t * k + j, cs->hb + (size_t)(t * k + j) * F, 1,
                                    cs->hb2 + (size_t)(t * k + j) * D, cs->compute, err);
    rc = rc ? rc : cuda_moe_combine(cs->hb2, cs->moe_w, NULL, n, k, D, cs->att, cs->compute, err);
    rc = rc ? rc : cuda_add(cs->x, cs->att, (int64_t)n * D, cs->compute, err);
    return rc;
}

/* STRATA_TRACE: copy the first row of a device vector back and print it
 * (prompt chunks only: never inside a graph capture). */
static int dtrace(cuda_stage *cs, const call *c, const char *what, int layer, const float *d,
                  long n, strata_error *err)
{
    if (!trace_on() || c->decode)
        return 0;
    float *h = malloc((size_t)n * sizeof *h);
    if (!h)
        return 0;
    CUDA_CHECK(err, cudaStreamSynchronize(cs->compute));
    CUDA_CHECK(err, cudaMemcpy(h, d, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost));
    trace_vec(what, layer, h, n);
    free(h);
    return 0;
}

/* Every kernel of one stage for one call, on the stage's compute stream
 * (captured into a graph for decode steps). */
static int stage_kernels(strata_engine *e, const stage *st, cuda_stage *cs, const call *c,
                         strata_error *err)
{
    const model *m = e->m;
    const model_hparams *hp = &m->hp;
    cuda_engine *ce = e->cuda;
    int n = c->n, rc = 0;
    int64_t D = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim;
    int64_t dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    const int32_t *tokens = cs->d_in, *tok_pos = cs->d_in + ce->max_rows;
    const int32_t *seq_pos = cs->d_in + 2 * ce->max_rows, *pages = cs->d_in + 3 * ce->max_rows;
    rope_params rp = {hp->n_rot, hp->rope_neox, hp->rope_base, hp->rope_scale, cs->rope_freqs};
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    const int rot = engine_kv_rotated(e->p.kv_type); /* k8v4r: rotate q|k|v, unrotate att */
    if (st->index == 0)
        rc = cuda_embed(cs->tok_embd.type, cs->tok_embd.d, cs->tok_embd.rows, D, tokens, n, cs->x,
                        cs->compute, err);
    if (!rc && st->index == 0)
        rc = dtrace(cs, c, "embed", -1, cs->x, D, err);
    int normed = 0; /* xb already holds attn_norm(x) (fused into the last add) */
    for (int il = st->l0; il < st->l1 && !rc; il++) {
        const dlayer *d = &cs->layers[il - st->l0];
        kv_view kv = kv_pool_view(st->kv, il - st->l0, pages);
        if (!normed)
            rc = cuda_rmsnorm(cs->x, d->attn_norm, cs->xb, n, D, hp->eps, cs->compute, err);
        normed = 0;
        /* q, k, v: one stacked matvec (rows q|k|v per token) or three */
        float *q = cs->q, *k = cs->k, *v = cs->v;
        int64_t qs = dq, ks = dkv, vs = dkv;
        if (d->wqkv.d) {
            rc = rc ? rc : matmul(cs, &d->wqkv, cs->xb, n, cs->q, err);
            k = q + dq;
            v = k + dkv;
            qs = ks = vs = dq + 2 * dkv;
        } else {
            rc = rc ? rc : matmul(cs, &d->wq, cs->xb, n, q, err);
            rc = rc ? rc : matmul(cs, &d->wk, cs->xb, n, k, err);
            rc = rc ? rc : matmul(cs, &d->wv, cs->xb, n, v, err);
        }
        rc = rc ? rc : dtrace(cs, c, "attn_norm", il, cs->xb, D, err);
        rc = rc ? rc : dtrace(cs, c, "q", il, q, dq, err);
        rc = rc ? rc : dtrace(cs, c, "k", il, k, dkv, err);
        rc = rc ? rc : dtrace(cs, c, "v", il, v, dkv, err);
        if (!rc && d->bq) {
            rc = cuda_bias_add(q, d->bq, n, dq, qs, cs->compute, err);
            rc = rc ? rc : cuda_bias_add(k, d->bk, n, dkv, ks, cs->compute, err);
            rc = rc ? rc : cuda_bias_add(v, d->bv, n, dkv, vs, cs->compute, err);
        }
        if (!rc && d->q_norm) {
            rc = cuda_rmsnorm_heads(q, d->q_norm, n, hp->n_head, hp->head_dim, qs, hp->eps,
                                    cs->compute, err);
            rc = rc ? rc : cuda_rmsnorm_heads(k, d->k_norm, n, hp->n_head_kv, hp->head_dim, ks,
                                              hp->eps, cs->compute, err);
        }
        rc = rc ? rc : cuda_rope_qk(q, hp->n_head, qs, k, hp->n_head_kv, ks, n, hp->head_dim,
                                    tok_pos, &rp, cs->compute, err);
        rc = rc || !rot ? rc : cuda_kv_rotate(q, hp->n_head, qs, k, v, hp->n_head_kv, ks, vs, n, hp->head_dim, cs->compute, err); /* k8v4r */
        rc = rc ? rc : cuda_kv_store(&kv, ce->page_stride, c->n_seq, c->n_tok, tok_pos, k, ks, v,
                                     vs, cs->compute, err);
        rc = rc ? rc : cuda_attention(&kv, ce->page_stride, seq_pos, c->n_seq, c->n_tok, e->n_ctx,
                                      q, qs, hp->n_head, scale, cs->att, dq, cs->att_scratch,
                                      cs->att_scratch_bytes, cs->compute, err);
        rc = rc || !rot ? rc : cuda_kv_unrotate(cs->att, hp->n_head, dq, n, hp->head_dim, cs->compute, err); /* k8v4r */
        rc = rc ? rc : dtrace(cs, c, "q_rope", il, q, dq, err);
        rc = rc ? rc : dtrace(cs, c, "att", il, cs->att, dq, err);
        rc = rc ? rc : matmul(cs, &d->wo, cs->att, n, cs->xb, err);
        /* x += attention; xb = ffn_norm(x) */
        rc = rc ? rc : cuda_add_rmsnorm(cs->x, cs->xb, d->ffn_norm, cs->xb, n, D, hp->eps,
                                        cs->compute, err);
        rc = rc ? rc : dtrace(cs, c, "h", il, cs->x, D, err);
        if (rc)
            break;
        if (hp->n_expert) {
            rc = moe_ffn(e, cs, d, n, err);
        } else {
            if (d->gate_up.d) {
                int64_t F = d->gate_up.rows / 2;
                rc = matmul(cs, &d->gate_up, cs->xb, n, cs->hb, err);
                rc = rc ? rc : cuda_swiglu_fused(cs->hb, n, F, cs->hb2, cs->compute, err);
                rc = rc ? rc : matmul(cs, &d->down, cs->hb2, n, cs->xb, err);
            } else {
                int64_t F = d->gate.rows;
                rc = matmul(cs, &d->gate, cs->xb, n, cs->hb, err);
                rc = rc ? rc : matmul(cs, &d->up, cs->xb, n, cs->hb2, err);
                rc = rc ? rc : cuda_swiglu(cs->hb, cs->hb2, cs->hb, (int64_t)n * F, cs->compute,
                                           err);
                rc = rc ? rc : matmul(cs, &d->down, cs->hb, n, cs->xb, err);
            }
            /* x += FFN, and the next layer's attn_norm in the same launch */
            if (!rc && il + 1 < st->l1) {
                rc = cuda_add_rmsnorm(cs->x, cs->xb, cs->layers[il + 1 - st->l0].attn_norm, cs->xb,
                                      n, D, hp->eps, cs->compute, err);
                normed = 1;
            } else if (!rc) {
                rc = cuda_add(cs->x, cs->xb, (int64_t)n * D, cs->compute, err);
            }
        }
        rc = rc ? rc : dtrace(cs, c, "out", il, cs->x, D, err);
    }
    if (!rc && st->index == e->n_stages - 1) {
        /* A prompt chunk usually needs the logits of its last row only. */
        int first = c->first, rows = n - first;
        if (rows > 0)
            rc = cuda_rmsnorm(cs->x + (size_t)first * D, cs->output_norm, cs->xb, rows, D, hp->eps,
                          cs->compute, err);
        if (rows > 0)
            rc = rc ? rc : matmul(cs, &cs->output, cs->xb, rows, cs->logits, err);
        for (int r = 0; r < rows && !rc && trace_on(); r++)
            rc = dtrace(cs, c, "logits", first + r, cs->logits + (size_t)r * hp->n_vocab,
                        hp->n_vocab, err);
    }
    return rc;
}

/* Capture one stage's kernels for call c into an executable graph. */
static int capture(strata_engine *e, const stage *st, cuda_stage *cs, const call *c,
                   cudaGraphExec_t *out, strata_error *err)
{
    cudaGraph_t g;
    CUDA_CHECK(err, cudaStreamBeginCapture(cs->compute, cudaStreamCaptureModeThreadLocal));
    int rc = stage_kernels(e, st, cs, c, err);
    cudaError_t ce = cudaStreamEndCapture(cs->compute, &g);
    if (rc) {
        if (ce == cudaSuccess)
            cudaGraphDestroy(g);
        return rc;
    }
    if (ce != cudaSuccess)
        return strata_cuda_fail(err, ce, "cudaStreamEndCapture", __FILE__, __LINE__);
    ce = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (ce != cudaSuccess)
        return strata_cuda_fail(err, ce, "cudaGraphInstantiate", __FILE__, __LINE__);
    return 0;
}

/* Run one stage's kernels, through a captured graph for decode steps. */
static int stage_run(strata_engine *e, const stage *st, cuda_stage *cs, const call *c,
                     strata_error *err)
{
    if (!c->decode || c->n > MAX_GRAPH_ROWS || ((cuda_engine *)e->cuda)->no_graphs)
        return stage_kernels(e, st, cs, c, err);
    if (!cs->graph[c->n]) {
        int rc = capture(e, st, cs, c, &cs->graph[c->n], err);
        if (rc)
            return rc;
    }
    CUDA_CHECK(err, cudaGraphLaunch(cs->graph[c->n], cs->compute));
    return 0;
}

/* Fill one block of input words (tokens | tok_pos | seq_pos | pages) for
 * the rows of call c. */
static int fill_inputs(strata_engine *e, const stage *st, int32_t *in, const fwd_row *rows,
                       const call *c, strata_error *err)
{
    cuda_engine *ce = e->cuda;
    int R = ce->max_rows, P = ce->page_stride;
    int32_t *tokens = in, *tok_pos = in + R, *seq_pos = in + 2 * R;
    int32_t *pages = in + 3 * R;
    for (int r = 0; r < c->n; r++) {
        tokens[r] = rows[r].token;
        tok_pos[r] = rows[r].pos;
    }
    for (int s = 0; s < c->n_seq; s++) {
        const fwd_row *row = &rows[c->decode ? s : 0];
        const kv_seq *kq = &row->seq->kv[st->index];
        seq_pos[s] = row->pos;
        if (kq->n_pages > P)
            return strata_err(err, STRATA_E_LIMIT, "sequence holds %d pages > %d", kq->n_pages, P);
        memcpy(pages + (size_t)s * P, kq->pages, (size_t)kq->n_pages * sizeof(int32_t));
    }
    return 0;
}

/* Fill a stage's input words and queue their upload. */
static int stage_inputs(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_row *rows,
                        const call *c, strata_error *err)
{
    /* A pinned copy reads host memory when the stream reaches it, and a
     * call that wants no logits (a prompt chunk before the last) returns
     * without waiting for the card: the previous call's upload may not have
     * run yet, so wait for it before writing the words again. */
    CUDA_CHECK(err, cudaEventSynchronize(cs->in_free));
    int rc = fill_inputs(e, st, cs->h_in, rows, c, err);
    if (rc)
        return rc;
    /* The stream is ordered: this upload lands before the kernels that read
     * it, and after the previous call's kernels finished with the buffer. */
    CUDA_CHECK(err, cudaMemcpyAsync(cs->d_in, cs->h_in, cs->in_words * 4, cudaMemcpyHostToDevice,
                                    cs->compute));
    CUDA_CHECK(err, cudaEventRecord(cs->in_free, cs->compute));
    return 0;
}

long long cuda_test_cross_lag = 0;

/* Move rows [off, off + n) of hidden state from stage a's card to the same
 * rows of stage b's, once a's stream has done the work queued on it so far
 * (event ev, recorded here). */
static int cross(strata_engine *e, cuda_stage *a, cuda_stage *b, cudaEvent_t ev, int off, int n,
                 strata_error *err)
{
    cuda_engine *ce = e->cuda;
    size_t at = (size_t)off * e->m->hp.n_embd;
    size_t bytes = (size_t)n * e->m->hp.n_embd * sizeof(float);
    float *src = a->x + at, *dst = b->x + at, *bounce = a->h_x + at;
    CUDA_CHECK(err, cudaEventRecord(ev, a->compute));
    CUDA_CHECK(err, cudaSetDevice(b->dev));
    CUDA_CHECK(err, cudaStreamWaitEvent(b->compute, ev, 0));
    if (cuda_test_cross_lag > 0) {
        int rc = cuda_spin(cuda_test_cross_lag, b->compute, err);
        if (rc)
            return rc;
    }
    if (a->dev == b->dev && !ce->force_bounce) {
        CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->compute));
    } else if (ce->peer_ok && !ce->force_bounce) {
        CUDA_CHECK(err, cudaMemcpyPeerAsync(dst, b->dev, src, a->dev, bytes, b->compute));
    } else {
        /* The host waits for a's stream here, which also holds back the
         * batch groups after this one (peer copies do not).  And before it
         * refills the bounce, for b's previous upload from it: a call that
         * does not synchronise (a prompt chunk before the last) returns
         * with that upload possibly still queued on b's stream. */
        CUDA_CHECK(err, cudaEventSynchronize(b->bounce_free));
        CUDA_CHECK(err, cudaSetDevice(a->dev));
        CUDA_CHECK(err, cudaMemcpyAsync(bounce, src, bytes, cudaMemcpyDeviceToHost, a->compute));
        CUDA_CHECK(err, cudaStreamSynchronize(a->compute));
        CUDA_CHECK(err, cudaSetDevice(b->dev));
        CUDA_CHECK(err, cudaMemcpyAsync(dst, bounce, bytes, cudaMemcpyHostToDevice, b->compute));
        CUDA_CHECK(err, cudaEventRecord(b->bounce_free, b->compute));
    }
    CUDA_CHECK(err, cudaEventRecord(b->x_taken, b->compute));
    return 0;
}

/* Before stage si's stream writes its hidden state x again (the crossing
 * from stage si-1 into it, then the stage's kernels): the next stage's
 * stream must have copied it (cross() records x_taken after the copy).
 * A prompt chunk before the last returns without synchronising, so with a
 * split stage si can start the next chunk, and overwrite x, while the next
 * stage's stream is still busy with the previous one and has not yet made
 * its copy (found by bench --conversations: a 100K-token prompt read twice
 * gave two different first tokens).  A middle stage writes x first with
 * its own crossing, so the wait goes before that.  A wait on the card,
 * across cards too; a no-op before the first crossing. */
static int x_free(strata_engine *e, int si, strata_error *err)
{
    if (si + 1 >= e->n_stages)
        return 0;
    cuda_stage *cs = e->stages[si].cuda, *next = e->stages[si + 1].cuda;
    CUDA_CHECK(err, cudaStreamWaitEvent(cs->compute, next->x_taken, 0));
    return 0;
}

/* ---- batch groups ---------------------------------------------------------- *
 *
 * With --batch-groups G and a layer split, a decode step's rows are cut into
 * G contiguous groups and issued in wavefront order: for each group, each
 * stage runs it.  Every stage has its own stream, so while stage k+1 runs
 * group g (its stream waited on stage k's event for g), stage k's stream
 * already runs group g+1: the stages overlap, on one card or several.
 *
 * No group may overwrite what a stage is still to read for another, so a
 * group owns rows [off, off + len) of every stage's x and of the last
 * stage's logits, and input block g (tokens, positions, page tables) of
 * every stage; scratch (xb, q, ..., matmul and attention scratch) is only
 * used inside one stream, which runs the groups one after another.
 * stage_kernels works on rows [0, n) of the buffers it is given, so a group
 * runs through it unchanged on a view of the stage whose pointers start at
 * the group's rows and block (group_view).  Each row's arithmetic is the
 * same as in the whole step (the invariance rule), so the logits are bit
 * for bit those of G = 1; the logits of the step sit at the same rows as
 * without groups, which is what the copy back and on-card sampling read. */

/* The stage as group g (rows from off, input block blk) sees it. */
static cuda_stage group_view(const cuda_stage *cs, int64_t D, int64_t V, int off, int blk)
{
    cuda_stage v = *cs;
    v.x = cs->x + (size_t)off * D;
    v.logits = cs->logits ? cs->logits + (size_t)off * V : NULL;
    v.d_in = cs->d_in + (size_t)blk * cs->in_words;
    v.h_in = cs->h_in + (size_t)blk * cs->in_words;
    return v;
}

/* Run a group on a stage (view v of cs), through a graph captured per
 * (rows, row offset, input block); the least recently used of
 * GROUP_GRAPHS is replaced when none fits. */
static int group_run(strata_engine *e, const stage *st, cuda_stage *cs, cuda_stage *v,
                     const call *c, int off, int blk, strata_error *err)
{
    if (c->n > MAX_GRAPH_ROWS || ((cuda_engine *)e->cuda)->no_graphs)
        return stage_kernels(e, st, v, c, err);
    if (off == 0 && blk == 0)
        return stage_run(e, st, cs, c, err); /* the same pointers as a whole step of c->n rows */
    group_graph *gg = cs->group_graphs, *slot = NULL;
    cs->group_clock++;
    for (int i = 0; i < GROUP_GRAPHS && !slot; i++)
        if (gg[i].used && gg[i].n == c->n && gg[i].off == off && gg[i].blk == blk)
            slot = &gg[i];
    if (!slot) {
        slot = &gg[0];
        for (int i = 1; i < GROUP_GRAPHS; i++)
            if (gg[i].used < slot->used)
                slot = &gg[i];
        if (slot->exec) {
            /* it may still be queued from an earlier group of this step */
            CUDA_CHECK(err, cudaStreamSynchronize(cs->compute));
            CUDA_CHECK(err, cudaGraphExecDestroy(slot->exec));
            slot->exec = NULL;
        }
        slot->used = 0;
        int rc = capture(e, st, v, c, &slot->exec, err);
        if (rc) {
            slot->exec = NULL;
            return rc;
        }
        slot->n = c->n;
        slot->off = off;
        slot->blk = blk;
    }
    slot->used = cs->group_clock;
    CUDA_CHECK(err, cudaGraphLaunch(slot->exec, cs->compute));
    return 0;
}

/* A decode step's n rows through every stage in G pipelined groups. */
static int run_groups(strata_engine *e, const fwd_row *rows, int n, int G, strata_error *err)
{
    cuda_engine *ce = e->cuda;
    int64_t D = e->m->hp.n_embd, V = e->m->hp.n_vocab;
    size_t head = 3 * (size_t)ce->max_rows; /* tokens | tok_pos | seq_pos; pages follow */
    int rc = 0;
    /* Every group's inputs first, each into its own block: queued ahead of
     * the groups' kernels, they leave no copies between the group graphs. */
    for (int si = 0; si < e->n_stages && !rc; si++) {
        stage *st = &e->stages[si];
        cuda_stage *cs = st->cuda;
        CUDA_CHECK(err, cudaSetDevice(cs->dev));
        CUDA_CHECK(err, cudaEventSynchronize(cs->in_free)); /* as in stage_inputs */
        for (int g = 0; g < G && !rc; g++) {
            int off, len;
            group_rows(n, G, g, &off, &len);
            if (!len)
                continue;
            call cg = {len, 1, len, 1, 0};
            cuda_stage v = group_view(cs, D, V, off, g);
            rc = fill_inputs(e, st, v.h_in, rows + off, &cg, err);
            if (rc)
                break;
            size_t words = head + (size_t)len * ce->page_stride;
            CUDA_CHECK(err, cudaMemcpyAsync(v.d_in, v.h_in, words * 4, cudaMemcpyHostToDevice,
                                            cs->compute));
        }
        CUDA_CHECK(err, cudaEventRecord(cs->in_free, cs->compute));
    }
    /* The wavefront. */
    for (int g = 0; g < G && !rc; g++) {
        int off, len;
        group_rows(n, G, g, &off, &len);
        if (!len)
            continue;
        call cg = {len, 1, len, 1, 0};
        for (int si = 0; si < e->n_stages && !rc; si++) {
            stage *st = &e->stages[si];
            cuda_stage *cs = st->cuda;
            cuda_stage v = group_view(cs, D, V, off, g);
            CUDA_CHECK(err, cudaSetDevice(cs->dev));
            if (g == 0)
                rc = x_free(e, si, err); /* before the crossing writes x too */
            if (!rc && si > 0) {
                cuda_stage *a = e->stages[si - 1].cuda;
                rc = cross(e, a, cs, a->group_done[g], off, len, err);
            }
            rc = rc ? rc : group_run(e, st, cs, &v, &cg, off, g, err);
            e->group_runs++;
        }
    }
    return rc;
}

/* Run every stage for the rows; the last stage's logits stay on its card. */
static int run_stages(strata_engine *e, const fwd_row *rows, int n, int decode, call *c,
                      strata_error *err)
{
    cuda_engine *ce = e->cuda;
    if (n > ce->max_rows)
        return strata_err(err, STRATA_E_ARG, "forward: %d rows > %d", n, ce->max_rows);
    *c = (call){n, decode, decode ? n : 1, decode ? 1 : n, n};
    int all = 1; /* every row wants logits (every decode step the engine makes) */
    for (int r = n - 1; r >= 0; r--) {
        if (rows[r].logits >= 0)
            c->first = r;
        all &= rows[r].logits >= 0;
    }
    int G = forward_groups(e, decode);
    if (G > 1 && all)
        return run_groups(e, rows, n, G, err);
    int rc = 0;
    for (int si = 0; si < e->n_stages && !rc; si++) {
        stage *st = &e->stages[si];
        cuda_stage *cs = st->cuda;
        CUDA_CHECK(err, cudaSetDevice(cs->dev));
        rc = stage_inputs(e, st, cs, rows, c, err);
        rc = rc ? rc : x_free(e, si, err); /* before the crossing writes x too */
        if (!rc && si > 0) {
            cuda_stage *a = e->stages[si - 1].cuda;
            rc = cross(e, a, cs, a->done, 0, n, err);
        }
        rc = rc ? rc : stage_run(e, st, cs, c, err);
    }
    return rc;
}

int forward_cuda(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                 strata_error *err)
{
    cuda_engine *ce = e->cuda;
    call c;
    int rc = run_stages(e, rows, n, decode, &c, err);
    if (rc)
        return rc;
    cuda_stage *last = e->stages[e->n_stages - 1].cuda;
    int V = e->m->hp.n_vocab, first = c.first;
    if (first >= n)
        return 0;
    CUDA_CHECK(err, cudaSetDevice(last->dev));
    CUDA_CHECK(err, cudaMemcpyAsync(ce->h_logits, last->logits, (size_t)(n - first) * V * 4,
                                    cudaMemcpyDeviceToHost, last->compute));
    CUDA_CHECK(err, cudaStreamSynchronize(last->compute));
    for (int r = first; r < n; r++)
        if (rows[r].logits >= 0)
            memcpy(logits + (size_t)rows[r].logits * V, ce->h_logits + (size_t)(r - first) * V,
                   (size_t)V * 4);
    return 0;
}

int cuda_can_sample(const sampler_params *p)
{
    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0)
        return 0; /* the penalty needs the history: host path */
    return p->temp <= 0.0f || (p->top_k >= 1 && p->top_k <= CUDA_SAMPLE_MAX_K);
}

static int same_params(const sampler_params *a, const sampler_params *b)
{
    return a->temp == b->temp && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->min_p == b->min_p;
}

int forward_cuda_sample(strata_engine *e, const fwd_row *rows, int n,
                        const sampler_params *const *params, const float *uniform, int32_t *next,
                        strata_error *err)
{
    cuda_engine *ce = e->cuda;
    call c;
    int rc = run_stages(e, rows, n, 1, &c, err);
    if (rc)
        return rc;
    cuda_stage *last = e->stages[e->n_stages - 1].cuda;
    int64_t V = e->m->hp.n_vocab;
    CUDA_CHECK(err, cudaSetDevice(last->dev));
    memcpy(ce->h_uniform, uniform, (size_t)n * sizeof(float));
    CUDA_CHECK(err, cudaMemcpyAsync(ce->d_uniform, ce->h_uniform, (size_t)n * 4,
                                    cudaMemcpyHostToDevice, last->compute));
    /* Rows sharing their parameters are sampled in one launch. */
    for (int r0 = 0; r0 < n && !rc;) {
        int r1 = r0 + 1;
        while (r1 < n && same_params(params[r1], params[r0]))
            r1++;
        cuda_sample_params sp = {params[r0]->temp, params[r0]->top_k, params[r0]->top_p,
                                 params[r0]->min_p};
        rc = cuda_sample(last->logits + (size_t)r0 * V, r1 - r0, V, V, &sp, ce->d_uniform + r0,
                         ce->d_next + r0, last->compute, err);
        r0 = r1;
    }
    if (rc)
        return rc;
    CUDA_CHECK(err, cudaMemcpyAsync(ce->h_next, ce->d_next, (size_t)n * 4, cudaMemcpyDeviceToHost,
                                    last->compute));
    CUDA_CHECK(err, cudaStreamSynchronize(last->compute));
    memcpy(next, ce->h_next, (size_t)n * sizeof(int32_t));
    return 0;
}
#else
typedef int backend_cuda_is_empty_without_cuda;
#endif
