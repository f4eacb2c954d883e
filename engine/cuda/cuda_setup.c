/* cuda_setup.c: the CUDA backend's setup and teardown — each stage's card,
 * streams, weights (in the kernels' device layout; types without a card
 * kernel converted to F16), activation buffers, scratch, and the KV pool's
 * device memory.  The forward pass itself is engine/cuda/backend_cuda.c. */
#ifdef STRATA_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_stage.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/quant.h"


/* ---- availability, allocation --------------------------------------------- */

int cuda_backend_available(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* Without a driver the runtime says "CUDA driver version is
         * insufficient for CUDA runtime version", which reads like a
         * version clash to someone who has no NVIDIA card at all. */
        int none = n == 0 || e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
        if (e != cudaSuccess)
            cudaGetLastError();
        if (why)
            *why = none ? "no NVIDIA driver or GPU found" : cudaGetErrorString(e);
        return 0;
    }
    return 1;
}

int cuda_dmalloc(void **p, size_t bytes, int dev, const char *what, strata_error *err)
{
    *p = NULL;
    if (!bytes)
        return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return strata_err(err, STRATA_E_NOMEM, "cuda:%d: cannot allocate %.1f MiB for %s "
                          "(%.1f MiB free of %.1f MiB): %s", dev, bytes / 1048576.0, what,
                          free_b / 1048576.0, total_b / 1048576.0, cudaGetErrorString(e));
    }
    return 0;
}

static void *kv_dev_alloc(size_t bytes, void *ctx)
{
    int dev = (int)(intptr_t)ctx;
    void *p = NULL;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    /* Pages are written before they are read; zeroing makes a stray read
     * of an unwritten page deterministic in tests and sanitizer runs. */
    cudaMemset(p, 0, bytes);
    return p;
}

static void kv_dev_free(void *p, void *ctx)
{
    cudaSetDevice((int)(intptr_t)ctx);
    cudaFree(p);
}

kv_allocator cuda_kv_allocator(strata_engine *e, stage *st)
{
    (void)e;
    kv_allocator a = {kv_dev_alloc, kv_dev_free, (void *)(intptr_t)st->device};
    return a;
}

/* Stage pool workers bind their stage's card once for their whole life. */
static int worker_init(int stage_index, void *ctx)
{
    strata_engine *e = ctx;
    int dev = e->stages[stage_index].device;
    if (cudaSetDevice(dev) != cudaSuccess)
        return strata_err(stagepool_stage_error(), STRATA_E_DEVICE, "cudaSetDevice(%d) failed", dev);
    return 0;
}

void cuda_stagepool_hooks(strata_engine *e, stagepool_hooks *h)
{
    h->worker_init = worker_init;
    h->ctx = e;
}

/* A debugging/measuring switch: set, and not "0".  Read once, at start. */
static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* ---- upload -------------------------------------------------------------- */

static int upload_vec(const float *src, int64_t n, float **dst, int dev, strata_error *err)
{
    *dst = NULL;
    if (!src)
        return 0;
    int rc = cuda_dmalloc((void **)dst, (size_t)n * sizeof(float), dev, "a norm vector", err);
    if (rc)
        return rc;
    CUDA_CHECK(err, cudaMemcpy(*dst, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

/* Decode a matrix the card has no kernel for into F16 rows (host). */
static uint16_t *to_f16(const weight *w, const void *mat, strata_error *err)
{
    const type_traits *tt = type_traits_get(w->type);
    uint16_t *h = malloc((size_t)w->rows * w->cols * sizeof *h);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!h || !row) {
        free(h);
        free(row);
        strata_err(err, STRATA_E_NOMEM, "out of memory converting '%s' to F16", w->name);
        return NULL;
    }
    size_t rb = type_row_bytes(w->type, w->cols);
    for (int64_t r = 0; r < w->rows; r++) {
        tt->dequant((const char *)mat + (size_t)r * rb, row, w->cols);
        for (int64_t c = 0; c < w->cols; c++)
            h[(size_t)r * w->cols + c] = f32_to_fp16(row[c]);
    }
    free(row);
    return h;
}

static int upload_weight(strata_engine *e, cuda_stage *cs, const weight *w, dweight *dw,
                         strata_error *err)
{
    cuda_engine *ce = e->cuda;
    memset(dw, 0, sizeof *dw);
    if (!w->data)
        return 0;
    /* a type with no kernel goes to the card as F16 (every type strata
     * decodes has one now; the path stays for any type added later) */
    int type = cuda_weight_supported(w->type) ? w->type : GGML_TYPE_F16;
    size_t mb = cuda_weight_bytes(type, w->rows, w->cols);
    if (!mb)
        return strata_err(err, STRATA_E_UNSUPPORTED, "tensor '%s' (%s, %lld x %lld) has no CUDA "
                          "layout", w->name, type_name(w->type), (long long)w->rows,
                          (long long)w->cols);
    int rc = cuda_dmalloc(&dw->d, mb * (size_t)w->n_mat, cs->dev, w->name, err);
    if (rc)
        return rc;
    dw->type = type;
    dw->rows = w->rows;
    dw->cols = w->cols;
    dw->n_mat = w->n_mat;
    if (type != w->type)
        upload_note_add(&ce->converted, w->name, w->type, w->mat_bytes * (uint64_t)w->n_mat,
                        (uint64_t)mb * (uint64_t)w->n_mat);
    for (int64_t m = 0; m < w->n_mat && !rc; m++) {
        const void *src = (const char *)w->data + (uint64_t)m * w->mat_bytes;
        void *dst = (char *)dw->d + (size_t)m * mb;
        if (type == w->type) {
            rc = cuda_weight_upload(type, w->rows, w->cols, src, dst, cs->compute, err);
        } else {
            uint16_t *h = to_f16(w, src, err);
            rc = h ? cuda_weight_upload(type, w->rows, w->cols, h, dst, cs->compute, err)
                   : STRATA_E_NOMEM;
            free(h);
        }
    }
    cs->weight_bytes += mb * (size_t)w->n_mat;
    return rc;
}

/* Matrices that read the same input (q, k, v; gate, up) uploaded as one,
 * their rows stacked: one matvec launch instead of three or two, over a
 * taller matrix, which the decode kernel streams closer to the bandwidth
 * (doc/cuda-kernels.md).  GGUF rows are contiguous, so stacking is a copy
 * of each part's bytes.  When every part has the same type and width the
 * stack is one matrix of that type; when the types differ but are all
 * block-tile types (the llama.cpp recipe mixes: q, k IQ2_S and v Q4_K) it
 * is a mixed stack (upload_mixed); otherwise dw stays empty and the parts
 * are uploaded one by one.  STRATA_NO_FUSE=1 turns both off (for measuring
 * them), STRATA_NO_MIX=1 only the mixed stacks. */
static int upload_mixed(strata_engine *e, cuda_stage *cs, const weight *const *parts, int np,
                        int64_t rows, dweight *dw, strata_error *err);

static int upload_stacked(strata_engine *e, cuda_stage *cs, const weight *const *parts, int np,
                          const char *name, dweight *dw, strata_error *err)
{
    memset(dw, 0, sizeof *dw);
    if (env_on("STRATA_NO_FUSE"))
        return 0;
    int64_t rows = 0;
    int same = 1;
    for (int i = 0; i < np; i++) {
        const weight *w = parts[i];
        if (!w->data || w->n_mat != 1 || w->cols != parts[0]->cols)
            return 0;
        same &= w->type == parts[0]->type;
        rows += w->rows;
    }
    if (!same)
        return env_on("STRATA_NO_MIX") ? 0 : upload_mixed(e, cs, parts, np, rows, dw, err);
    size_t rb = type_row_bytes(parts[0]->type, parts[0]->cols);
    char *h = malloc((size_t)rows * rb);
    if (!h)
        return strata_err(err, STRATA_E_NOMEM, "out of memory stacking '%s'", name);
    size_t at = 0;
    for (int i = 0; i < np; i++) {
        memcpy(h + at, parts[i]->data, (size_t)parts[i]->rows * rb);
        at += (size_t)parts[i]->rows * rb;
    }
    /* named after its first part, for messages and the conversion note */
    char sname[96];
    snprintf(sname, sizeof sname, "%s (%s)", parts[0]->name ? parts[0]->name : "?", name);
    weight st = {h, parts[0]->type, rows, parts[0]->cols, 1, (uint64_t)at, sname};
    int rc = upload_weight(e, cs, &st, dw, err);
    free(h);
    return rc;
}

/* A mixed stack: each part packed in its own type's layout, the parts one
 * after another in one allocation (cuda_matmul_mix).  Only when the card
 * runs it (cuda_mix_supported: block-tile types, parts of whole 16-row
 * m-tiles); else dw stays empty. */
static int upload_mixed(strata_engine *e, cuda_stage *cs, const weight *const *parts, int np,
                        int64_t rows, dweight *dw, strata_error *err)
{
    (void)e;
    int types[CUDA_MIX_MAX];
    int64_t prow[CUDA_MIX_MAX];
    size_t off[CUDA_MIX_MAX + 1];
    if (np > CUDA_MIX_MAX)
        return 0;
    off[0] = 0;
    for (int i = 0; i < np; i++) {
        types[i] = parts[i]->type;
        prow[i] = parts[i]->rows;
        if (!cuda_weight_supported(types[i]))
            return 0;
        size_t b = cuda_weight_bytes(types[i], prow[i], parts[i]->cols);
        off[i + 1] = off[i] + (b + 255) / 256 * 256; /* each part 256-byte aligned */
    }
    if (!cuda_mix_candidate(types, prow, np) || !cuda_mix_supported(types, prow, np, parts[0]->cols))
        return 0;
    int rc = cuda_dmalloc(&dw->d, off[np], cs->dev, parts[0]->name ? parts[0]->name : "a mixed stack", err);
    if (rc)
        return rc;
    dw->type = types[0];
    dw->rows = rows;
    dw->cols = parts[0]->cols;
    dw->n_mat = 1;
    dw->mix.n = np;
    for (int i = 0; i < np && !rc; i++) {
        dw->mix.type[i] = types[i];
        dw->mix.rows[i] = prow[i];
        dw->mix.w[i] = (char *)dw->d + off[i];
        rc = cuda_weight_upload(types[i], prow[i], parts[i]->cols, parts[i]->data,
                                (void *)dw->mix.w[i], cs->compute, err);
    }
    cs->weight_bytes += off[np];
    return rc;
}

static int upload_layer(strata_engine *e, cuda_stage *cs, const layer_weights *L, dlayer *d,
                        strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    int64_t dq = (int64_t)hp->n_head * hp->head_dim, dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc = 0;
    rc = rc ? rc : upload_vec(L->attn_norm, hp->n_embd, &d->attn_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->ffn_norm, hp->n_embd, &d->ffn_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->bq, dq, &d->bq, cs->dev, err);
    rc = rc ? rc : upload_vec(L->bk, dkv, &d->bk, cs->dev, err);
    rc = rc ? rc : upload_vec(engine_kshift(e, (int)(L - e->m->layers)), dkv, &d->kshift, cs->dev,
                              err);
    rc = rc ? rc : upload_vec(L->bv, dkv, &d->bv, cs->dev, err);
    rc = rc ? rc : upload_vec(L->q_norm, hp->head_dim, &d->q_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->k_norm, hp->head_dim, &d->k_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->post_attn_norm, hp->n_embd, &d->post_attn_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->post_ffn_norm, hp->n_embd, &d->post_ffn_norm, cs->dev, err);
    const weight *qkv[] = {&L->wq, &L->wk, &L->wv}, *gu[] = {&L->gate, &L->up};
    rc = rc ? rc : upload_stacked(e, cs, qkv, 3, "stacked q|k|v", &d->wqkv, err);
    rc = rc ? rc : upload_stacked(e, cs, gu, 2, "stacked gate|up", &d->gate_up, err);
    const weight *src[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down,
                           &L->router, &L->gate_exps, &L->up_exps, &L->down_exps};
    dweight *dst[] = {&d->wq, &d->wk, &d->wv, &d->wo, &d->gate, &d->up, &d->down,
                      &d->router, &d->gate_exps, &d->up_exps, &d->down_exps};
    for (size_t i = 0; i < sizeof src / sizeof src[0] && !rc; i++) {
        int stacked = (i < 3 && d->wqkv.d) || ((i == 4 || i == 5) && d->gate_up.d);
        if (!stacked)
            rc = upload_weight(e, cs, src[i], dst[i], err);
    }
    return rc;
}

/* ---- activations ----------------------------------------------------------- */

static int alloc_activations(strata_engine *e, cuda_stage *cs, int is_last, strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    cuda_engine *ce = e->cuda;
    size_t R = (size_t)ce->max_rows, D = (size_t)hp->n_embd;
    size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    size_t k = hp->n_expert ? (size_t)hp->n_expert_used : 1;
    size_t ff = (size_t)hp->n_ff;
    if (hp->n_expert && k * (size_t)hp->n_ff_exp > ff)
        ff = k * (size_t)hp->n_ff_exp;
    if (hp->n_expert && k * D > ff)
        ff = k * D;
    size_t wide = dq > D ? dq : D;
    if ((size_t)hp->n_expert > wide)
        wide = (size_t)hp->n_expert;
    struct { void **p; size_t bytes; const char *what; } a[] = {
        {(void **)&cs->x, R * D * 4, "activations"},
        {(void **)&cs->xb, R * wide * 4, "activations"},
        {(void **)&cs->q, R * (dq + 2 * dkv) * 4, "queries (q|k|v when stacked)"},
        {(void **)&cs->k, R * dkv * 4, "keys"},
        {(void **)&cs->v, R * dkv * 4, "values"},
        {(void **)&cs->att, R * (dq > D ? dq : D) * 4, "attention output"},
        {(void **)&cs->hb, R * 2 * ff * 4, "FFN activations (gate|up when stacked)"},
        {(void **)&cs->hb2, R * ff * 4, "FFN activations"},
        {(void **)&cs->logits, is_last ? R * (size_t)hp->n_vocab * 4 : 0, "logits"},
        {(void **)&cs->moe_w, hp->n_expert ? R * k * 4 : 0, "router weights"},
        {(void **)&cs->moe_sel, hp->n_expert ? R * k * 4 : 0, "router choices"},
        {(void **)&cs->moe_off, hp->n_expert ? ((size_t)hp->n_expert + 1 + 2 * R * k) * 4 : 0,
         "expert groups"},
    };
    cs->max_pairs = (int)(R * k);
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        int rc = cuda_dmalloc(a[i].p, a[i].bytes, cs->dev, a[i].what, err);
        if (rc)
            return rc;
    }
    /* inputs: tokens[R], tok_pos[R], seq_pos[R], pages[R][page_stride],
     * one such block per batch group */
    cs->in_words = R * 3 + R * (size_t)ce->page_stride;
    size_t in_bytes = cs->in_words * 4 * (size_t)ce->n_groups;
    int rc = cuda_dmalloc((void **)&cs->d_in, in_bytes, cs->dev, "inputs", err);
    if (rc)
        return rc;
    CUDA_CHECK(err, cudaMallocHost((void **)&cs->h_in, in_bytes));
    CUDA_CHECK(err, cudaEventCreateWithFlags(&cs->in_free, cudaEventDisableTiming));
    CUDA_CHECK(err, cudaEventCreateWithFlags(&cs->bounce_free, cudaEventDisableTiming));
    CUDA_CHECK(err, cudaEventCreateWithFlags(&cs->x_taken, cudaEventDisableTiming));
    CUDA_CHECK(err, cudaMallocHost((void **)&cs->h_x, R * D * 4));
    /* scratch: the largest matmul input is max(n_ff, dq, D) wide */
    size_t widest = ff > wide ? ff : wide;
    /* the most any weight type the kernels run needs (the block types and
     * BF16 need F16's: fp16 activations) */
    size_t mm = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!cuda_weight_supported(t))
            continue;
        size_t b = cuda_matmul_scratch_bytes(t, (int64_t)((widest + 255) / 256 * 256), (int64_t)R);
        mm = b > mm ? b : mm;
        if (hp->n_expert && t != GGML_TYPE_F32) { /* moe_grouped: R * k pairs */
            size_t ecols = hp->n_ff_exp > hp->n_embd ? hp->n_ff_exp : hp->n_embd;
            b = cuda_matmul_grouped_scratch_bytes(t, (int64_t)((ecols + 255) / 256 * 256), (int64_t)(R * k));
            mm = b > mm ? b : mm;
        }
    }
    cs->mm_scratch_bytes = mm;
    rc = cuda_dmalloc(&cs->mm_scratch, mm, cs->dev, "matmul scratch", err);
    if (rc)
        return rc;
    kv_view kv;
    memset(&kv, 0, sizeof kv);
    kv.type = engine_kv_block(e->p.kv_type);
    kv.n_kv_head = hp->n_head_kv;
    kv.head_dim = hp->head_dim;
    cs->att_scratch_bytes = cuda_attention_scratch_bytes(&kv, hp->n_head, (int)R, e->n_ctx);
    rc = cuda_dmalloc(&cs->att_scratch, cs->att_scratch_bytes, cs->dev, "attention scratch", err);
    if (rc)
        return rc;
    /* the split-attention tickets must start at zero */
    CUDA_CHECK(err, cudaMemset(cs->att_scratch, 0, cs->att_scratch_bytes));
    if (hp->n_expert) { /* and the fused router's */
        const size_t tb = CUDA_MOE_ROUTER_TICKETS * sizeof *cs->moe_ticket; /* one per token */
        rc = cuda_dmalloc((void **)&cs->moe_ticket, tb, cs->dev, "router tickets", err);
        if (rc)
            return rc;
        CUDA_CHECK(err, cudaMemset(cs->moe_ticket, 0, tb));
    }
    /* the matvecs' segment fold (cuda_ops.h): tickets and partial sums */
    rc = cuda_dmalloc(&cs->mv_scratch, CUDA_MATVEC_SCRATCH_BYTES, cs->dev, "matvec fold scratch", err);
    if (rc)
        return rc;
    return cuda_matvec_attach_scratch(cs->compute, cs->mv_scratch, CUDA_MATVEC_SCRATCH_BYTES, err);
}

/* Batch groups: an event per group (the hidden state of group g crosses
 * to the next stage once this stage's work on g is done) and the group
 * graph cache.  Nothing with groups off. */
static int alloc_groups(strata_engine *e, cuda_stage *cs, strata_error *err)
{
    cuda_engine *ce = e->cuda;
    if (ce->n_groups <= 1)
        return 0;
    cs->group_done = calloc((size_t)ce->n_groups, sizeof *cs->group_done);
    cs->group_graphs = calloc(GROUP_GRAPHS, sizeof *cs->group_graphs);
    if (!cs->group_done || !cs->group_graphs)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    CUDA_CHECK(err, cudaSetDevice(cs->dev));
    for (int g = 0; g < ce->n_groups; g++)
        CUDA_CHECK(err, cudaEventCreateWithFlags(&cs->group_done[g], cudaEventDisableTiming));
    return 0;
}

static void free_groups(const cuda_engine *ce, cuda_stage *cs)
{
    for (int i = 0; cs->group_graphs && i < GROUP_GRAPHS; i++)
        if (cs->group_graphs[i].exec)
            cudaGraphExecDestroy(cs->group_graphs[i].exec);
    for (int g = 0; cs->group_done && ce && g < ce->n_groups; g++)
        if (cs->group_done[g])
            cudaEventDestroy(cs->group_done[g]);
    free(cs->group_graphs);
    free(cs->group_done);
    cs->group_graphs = NULL;
    cs->group_done = NULL;
}

/* ---- init / free ----------------------------------------------------------- */

static int init_stage(strata_engine *e, stage *st, strata_error *err)
{
    const model *m = e->m;
    cuda_stage *cs = calloc(1, sizeof *cs);
    if (!cs)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    st->cuda = cs;
    cs->dev = st->device;
    int n_dev = 0;
    CUDA_CHECK(err, cudaGetDeviceCount(&n_dev));
    if (cs->dev >= n_dev)
        return strata_err(err, STRATA_E_ARG, "stage %d: cuda:%d does not exist (%d device%s)",
                          st->index, cs->dev, n_dev, n_dev == 1 ? "" : "s");
    CUDA_CHECK(err, cudaSetDevice(cs->dev));
    CUDA_CHECK(err, cudaStreamCreateWithFlags(&cs->compute, cudaStreamNonBlocking));
    CUDA_CHECK(err, cudaStreamCreateWithFlags(&cs->copy, cudaStreamNonBlocking));
    CUDA_CHECK(err, cudaEventCreateWithFlags(&cs->done, cudaEventDisableTiming));
    cs->layers = calloc((size_t)(st->l1 - st->l0), sizeof *cs->layers);
    if (!cs->layers)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    int rc = 0;
    int last = st->index == e->n_stages - 1;
    if (st->index == 0)
        rc = upload_weight(e, cs, &m->tok_embd, &cs->tok_embd, err);
    if (!rc && last) {
        rc = upload_weight(e, cs, &m->output, &cs->output, err);
        if (!rc)
            rc = upload_vec(m->output_norm, m->hp.n_embd, &cs->output_norm, cs->dev, err);
    }
    if (!rc)
        rc = upload_vec(m->rope_freqs, m->hp.n_rot / 2, &cs->rope_freqs, cs->dev, err);
    for (int il = st->l0; il < st->l1 && !rc; il++) {
        if (e->p.load_cancel && e->p.load_cancel(e->p.load_cancel_user)) {
            rc = strata_err(err, STRATA_E_CANCELLED, "%s: loading stopped (interrupted)",
                            e->p.model_path);
            break;
        }
        rc = upload_layer(e, cs, &m->layers[il], &cs->layers[il - st->l0], err);
        if (e->p.progress && !rc)
            e->p.progress((uint64_t)(il + 1), (uint64_t)m->hp.n_layer, e->p.progress_user);
    }
    if (!rc)
        rc = alloc_activations(e, cs, last, err);
    return rc;
}

int cuda_device_free(int dev, uint64_t *bytes, strata_error *err)
{
    size_t free_b = 0, total = 0;
    CUDA_CHECK(err, cudaSetDevice(dev));
    CUDA_CHECK(err, cudaMemGetInfo(&free_b, &total));
    *bytes = free_b;
    return 0;
}

int cuda_engine_init(strata_engine *e, strata_error *err)
{
    cuda_engine *ce = calloc(1, sizeof *ce);
    if (!ce)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    e->cuda = ce;
    ce->max_rows = e->p.n_chunk > e->p.n_slots ? e->p.n_chunk : e->p.n_slots;
    ce->page_stride = (e->n_ctx + KV_PAGE - 1) / KV_PAGE;
    ce->n_groups = forward_groups(e, 1);
    ce->peer_ok = 1;
    for (int i = 0; i < e->n_stages; i++) {
        int rc = init_stage(e, &e->stages[i], err);
        rc = rc ? rc : alloc_groups(e, e->stages[i].cuda, err);
        if (rc)
            return rc;
        ce->total_bytes += ((cuda_stage *)e->stages[i].cuda)->weight_bytes;
    }
    ce->force_bounce = env_on("STRATA_FORCE_BOUNCE");
    ce->no_grouped = env_on("STRATA_MOE_MATVEC");
    {
        const char *f = getenv("STRATA_DECODE_FUSE"); /* on unless "0": an A/B switch */
        ce->no_fuse = f && strcmp(f, "0") == 0;
    }
    {
        const char *f = getenv("STRATA_ROT_SPLIT"); /* store, unrot or all: an A/B switch */
        int all = f && !strcmp(f, "all");
        ce->rot_split = (all || (f && !strcmp(f, "store")) ? ROT_SPLIT_STORE : 0) |
                        (all || (f && !strcmp(f, "unrot")) ? ROT_SPLIT_UNROT : 0);
    }
    {
        const char *f = getenv("STRATA_KV_CARVE"); /* on unless "0": an A/B switch */
        if (f && strcmp(f, "0") == 0)
            strata_kv_carve_off = 1;
    }
    if (env_on("STRATA_NO_PDL"))
        strata_pdl_off = 1;   /* only ever set here: a test may set it too */
    ce->no_graphs = getenv("STRATA_NO_GRAPHS") != NULL; /* set at all, as before */
    /* Peer access between consecutive stages on different cards. */
    for (int i = 0; i + 1 < e->n_stages; i++) {
        int a = e->stages[i].device, b = e->stages[i + 1].device, can = 0;
        if (a == b)
            continue;
        cudaDeviceCanAccessPeer(&can, b, a);
        if (can) {
            cudaSetDevice(b);
            cudaError_t pe = cudaDeviceEnablePeerAccess(a, 0);
            if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled)
                can = 0;
            cudaGetLastError();
        }
        ce->peer_ok &= can;
    }
    CUDA_CHECK(err, cudaMallocHost((void **)&ce->h_logits,
                                   (size_t)ce->max_rows * e->m->hp.n_vocab * sizeof(float)));
    CUDA_CHECK(err, cudaMallocHost((void **)&ce->h_uniform, (size_t)ce->max_rows * 4));
    CUDA_CHECK(err, cudaMallocHost((void **)&ce->h_next, (size_t)ce->max_rows * 4));
    int last_dev = e->stages[e->n_stages - 1].device;
    CUDA_CHECK(err, cudaSetDevice(last_dev));
    int rc = cuda_dmalloc((void **)&ce->d_uniform, (size_t)ce->max_rows * 4, last_dev, "sampling", err);
    rc = rc ? rc : cuda_dmalloc((void **)&ce->d_next, (size_t)ce->max_rows * 4, last_dev, "sampling", err);
    if (rc)
        return rc;
    if (!e->p.quiet) {
        fprintf(stderr, "strata: %.1f MiB of weights on the card%s", ce->total_bytes / 1048576.0,
                e->n_stages > 1 ? "s" : "");
        const int nconv = upload_note_count(&ce->converted);
        if (nconv)
            fprintf(stderr, " (%d tensors converted to F16: the card has no kernel for their type)",
                    nconv);
        fprintf(stderr, "\n");
        upload_note_print(&ce->converted, stderr);
        int multi = 0;
        for (int i = 0; i + 1 < e->n_stages; i++)
            multi |= e->stages[i].device != e->stages[i + 1].device;
        if (ce->force_bounce && e->n_stages > 1)
            fprintf(stderr, "strata: hidden state crosses stages by pinned host memory "
                            "(STRATA_FORCE_BOUNCE)\n");
        else if (multi)
            fprintf(stderr, "strata: hidden state crosses cards by %s\n",
                    ce->peer_ok ? "peer copies" : "pinned host memory");
    }
    return 0;
}

static void free_dweight(dweight *w)
{
    if (w->d)
        cudaFree(w->d);
}

void cuda_engine_free(strata_engine *e)
{
    for (int i = 0; e->stages && i < e->n_stages; i++) {
        cuda_stage *cs = e->stages[i].cuda;
        if (!cs)
            continue;
        cudaSetDevice(cs->dev);
        for (int r = 0; r <= MAX_GRAPH_ROWS; r++)
            if (cs->graph[r])
                cudaGraphExecDestroy(cs->graph[r]);
        free_groups(e->cuda, cs);
        for (int l = 0; cs->layers && l < e->stages[i].l1 - e->stages[i].l0; l++) {
            dlayer *d = &cs->layers[l];
            float *v[] = {d->attn_norm, d->ffn_norm, d->bq, d->bk, d->bv, d->q_norm, d->k_norm,
                          d->post_attn_norm, d->post_ffn_norm, d->kshift};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++)
                cudaFree(v[j]);
            dweight *w[] = {&d->wq,   &d->wk,   &d->wv,        &d->wo,      &d->gate,
                            &d->up,   &d->down, &d->router,    &d->gate_exps, &d->up_exps,
                            &d->down_exps, &d->wqkv, &d->gate_up};
            for (size_t j = 0; j < sizeof w / sizeof w[0]; j++)
                free_dweight(w[j]);
        }
        free(cs->layers);
        free_dweight(&cs->tok_embd);
        free_dweight(&cs->output);
        void *bufs[] = {cs->output_norm, cs->rope_freqs, cs->x, cs->xb, cs->q, cs->k, cs->v,
                        cs->att, cs->hb, cs->hb2, cs->logits, cs->moe_w, cs->moe_sel, cs->moe_off, cs->d_in,
                        cs->mm_scratch, cs->att_scratch, cs->moe_ticket, cs->mv_scratch};
        if (cs->mv_scratch) /* before the stream goes: a new one may get its handle */
            cuda_matvec_attach_scratch(cs->compute, NULL, 0, NULL);
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            if (bufs[j])
                cudaFree(bufs[j]);
        if (cs->h_in)
            cudaFreeHost(cs->h_in);
        if (cs->h_x)
            cudaFreeHost(cs->h_x);
        if (cs->done)
            cudaEventDestroy(cs->done);
        if (cs->in_free)
            cudaEventDestroy(cs->in_free);
        if (cs->bounce_free)
            cudaEventDestroy(cs->bounce_free);
        if (cs->x_taken)
            cudaEventDestroy(cs->x_taken);
        if (cs->compute)
            cudaStreamDestroy(cs->compute);
        if (cs->copy)
            cudaStreamDestroy(cs->copy);
        free(cs);
        e->stages[i].cuda = NULL;
    }
    cuda_engine *ce = e->cuda;
    if (ce) {
        if (ce->h_logits)
            cudaFreeHost(ce->h_logits);
        if (ce->h_uniform)
            cudaFreeHost(ce->h_uniform);
        if (ce->h_next)
            cudaFreeHost(ce->h_next);
        if (ce->d_uniform)
            cudaFree(ce->d_uniform);
        if (ce->d_next)
            cudaFree(ce->d_next);
    }
    free(ce);
    e->cuda = NULL;
}

int cuda_seq_sync_pages(strata_engine *e, strata_seq *s, strata_error *err)
{
    /* Page tables travel with each forward call (stage inputs). */
    (void)e;
    (void)s;
    (void)err;
    return 0;
}

void cuda_seq_free(strata_engine *e, strata_seq *s)
{
    (void)e;
    (void)s;
}

#else
typedef int cuda_setup_is_empty_without_cuda;
#endif
