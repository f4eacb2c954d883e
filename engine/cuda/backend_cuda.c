/* backend_cuda.c: the forward pass on NVIDIA cards, stage by stage, and the
 * CUDA backend's table (engine/backend.h).  What one stage computes is in
 * engine/cuda/forward_cuda.c, block for block beside the CPU's; this file
 * drives the stages: inputs, graphs, crossings, batch groups, logits.
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

/* Capture one stage's kernels for call c into an executable graph. */
static int capture(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_call *c,
                   cudaGraphExec_t *out, strata_error *err)
{
    cudaGraph_t g;
    CUDA_CHECK(err, cudaStreamBeginCapture(cs->compute, cudaStreamCaptureModeThreadLocal));
    int rc = stage_forward_cuda(e, st, cs, c, err);
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
static int stage_run(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_call *c,
                     strata_error *err)
{
    if (!c->decode || c->n > MAX_GRAPH_ROWS || ((cuda_engine *)e->cuda)->no_graphs)
        return stage_forward_cuda(e, st, cs, c, err);
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
                       const fwd_call *c, strata_error *err)
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
                        const fwd_call *c, strata_error *err)
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
 * stage_forward_cuda works on rows [0, n) of the buffers it is given, so a group
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
                     const fwd_call *c, int off, int blk, strata_error *err)
{
    if (c->n > MAX_GRAPH_ROWS || ((cuda_engine *)e->cuda)->no_graphs)
        return stage_forward_cuda(e, st, v, c, err);
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
            fwd_call cg = {len, 1, len, 1, 0};
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
        fwd_call cg = {len, 1, len, 1, 0};
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
static int run_stages(strata_engine *e, const fwd_row *rows, int n, int decode, fwd_call *c,
                      strata_error *err)
{
    cuda_engine *ce = e->cuda;
    if (n > ce->max_rows)
        return strata_err(err, STRATA_E_ARG, "forward: %d rows > %d", n, ce->max_rows);
    *c = (fwd_call){n, decode, decode ? n : 1, decode ? 1 : n, n};
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
    fwd_call c;
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
    fwd_call c;
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

const backend backend_cuda = {
    .kind = STRATA_BACKEND_CUDA,
    .name = "cuda",
    .pins_host = 1, /* pageable memory copies at a fraction of the link's rate */
    .available = cuda_backend_available,
    .device_free = cuda_device_free,
    .init = cuda_engine_init,
    .free = cuda_engine_free,
    .kv_allocator = cuda_kv_allocator,
    .stagepool_hooks = cuda_stagepool_hooks,
    .forward = forward_cuda,
    .can_sample = cuda_can_sample,
    .forward_sample = forward_cuda_sample,
    .seq_sync = cuda_seq_sync_pages,
    .seq_free = cuda_seq_free,
    .host_block = cuda_host_block,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copier = cuda_copier,
    .thread_fini = cuda_copy_thread_fini,
};
#else
typedef int backend_cuda_is_empty_without_cuda;
#endif
