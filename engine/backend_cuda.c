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
 *
 * Weight types the card has no kernel for (Q4_1, Q5_x, IQ4_NL, K-quants,
 * BF16) are converted to F16 on upload, and the engine says so. */
#ifdef STRATA_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend_cuda.h"
#include "park.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/quant.h"
#include "sample.h"
#include "trace.h"

#define MAX_GRAPH_ROWS 64

typedef struct dweight {
    void *d;
    int type;
    int64_t rows, cols, n_mat;
} dweight;

typedef struct dlayer {
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm;
    dweight wq, wk, wv, wo, gate, up, down, router, gate_exps, up_exps, down_exps;
} dlayer;

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
    /* per-call inputs, uploaded from `in` */
    int32_t *d_in;               /* tokens | tok_pos | seq_pos | pages */
    int32_t *h_in;               /* pinned mirror */
    size_t in_words;
    void *mm_scratch, *att_scratch;
    size_t mm_scratch_bytes, att_scratch_bytes;
    float *h_x;                  /* pinned bounce for stage crossings */
    cudaEvent_t done;            /* recorded when the stage's work is queued */
    cudaGraphExec_t graph[MAX_GRAPH_ROWS + 1]; /* decode steps by row count */
    uint64_t weight_bytes;
} cuda_stage;

typedef struct cuda_engine {
    int max_rows, page_stride, n_converted;
    uint64_t total_bytes;
    int peer_ok;                 /* all consecutive cross-card pairs have peer access */
    float *h_logits;             /* pinned, max_rows x n_vocab */
    float *h_uniform, *d_uniform; /* [max_rows] draws for sampling on the card */
    int32_t *h_next, *d_next;    /* [max_rows] sampled ids */
} cuda_engine;

/* ---- availability, allocation --------------------------------------------- */

int cuda_backend_available(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why)
            *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
        return 0;
    }
    return 1;
}

static int dmalloc(void **p, size_t bytes, int dev, const char *what, strata_error *err)
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
    /* The worker's thread-local copy stream, made once for its whole life. */
    return park_cuda_worker_init(dev, stagepool_stage_error());
}

void cuda_stagepool_hooks(strata_engine *e, stagepool_hooks *h)
{
    h->worker_init = worker_init;
    h->ctx = e;
}

/* ---- upload -------------------------------------------------------------- */

static int upload_vec(const float *src, int64_t n, float **dst, int dev, strata_error *err)
{
    *dst = NULL;
    if (!src)
        return 0;
    int rc = dmalloc((void **)dst, (size_t)n * sizeof(float), dev, "a norm vector", err);
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
    int type = cuda_weight_supported(w->type) ? w->type : GGML_TYPE_F16;
    size_t mb = cuda_weight_bytes(type, w->rows, w->cols);
    if (!mb)
        return strata_err(err, STRATA_E_UNSUPPORTED, "tensor '%s' (%s, %lld x %lld) has no CUDA "
                          "layout", w->name, type_name(w->type), (long long)w->rows,
                          (long long)w->cols);
    int rc = dmalloc(&dw->d, mb * (size_t)w->n_mat, cs->dev, w->name, err);
    if (rc)
        return rc;
    dw->type = type;
    dw->rows = w->rows;
    dw->cols = w->cols;
    dw->n_mat = w->n_mat;
    if (type != w->type)
        ce->n_converted++;
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
    rc = rc ? rc : upload_vec(L->bv, dkv, &d->bv, cs->dev, err);
    rc = rc ? rc : upload_vec(L->q_norm, hp->head_dim, &d->q_norm, cs->dev, err);
    rc = rc ? rc : upload_vec(L->k_norm, hp->head_dim, &d->k_norm, cs->dev, err);
    const weight *src[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down,
                           &L->router, &L->gate_exps, &L->up_exps, &L->down_exps};
    dweight *dst[] = {&d->wq, &d->wk, &d->wv, &d->wo, &d->gate, &d->up, &d->down,
                      &d->router, &d->gate_exps, &d->up_exps, &d->down_exps};
    for (size_t i = 0; i < sizeof src / sizeof src[0] && !rc; i++)
        rc = upload_weight(e, cs, src[i], dst[i], err);
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
        {(void **)&cs->q, R * dq * 4, "queries"},
        {(void **)&cs->k, R * dkv * 4, "keys"},
        {(void **)&cs->v, R * dkv * 4, "values"},
        {(void **)&cs->att, R * (dq > D ? dq : D) * 4, "attention output"},
        {(void **)&cs->hb, R * ff * 4, "FFN activations"},
        {(void **)&cs->hb2, R * ff * 4, "FFN activations"},
        {(void **)&cs->logits, is_last ? R * (size_t)hp->n_vocab * 4 : 0, "logits"},
        {(void **)&cs->moe_w, hp->n_expert ? R * k * 4 : 0, "router weights"},
        {(void **)&cs->moe_sel, hp->n_expert ? R * k * 4 : 0, "router choices"},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        int rc = dmalloc(a[i].p, a[i].bytes, cs->dev, a[i].what, err);
        if (rc)
            return rc;
    }
    /* inputs: tokens[R], tok_pos[R], seq_pos[R], pages[R][page_stride] */
    cs->in_words = R * 3 + R * (size_t)ce->page_stride;
    int rc = dmalloc((void **)&cs->d_in, cs->in_words * 4, cs->dev, "inputs", err);
    if (rc)
        return rc;
    CUDA_CHECK(err, cudaMallocHost((void **)&cs->h_in, cs->in_words * 4));
    CUDA_CHECK(err, cudaMallocHost((void **)&cs->h_x, R * D * 4));
    /* scratch: the largest matmul input is max(n_ff, dq, D) wide */
    size_t widest = ff > wide ? ff : wide;
    int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q2_0,
                   GGML_TYPE_IQ3_XXS};
    size_t mm = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        size_t b = cuda_matmul_scratch_bytes(types[t], (int64_t)((widest + 255) / 256 * 256), (int64_t)R);
        mm = b > mm ? b : mm;
    }
    cs->mm_scratch_bytes = mm;
    rc = dmalloc(&cs->mm_scratch, mm, cs->dev, "matmul scratch", err);
    if (rc)
        return rc;
    kv_view kv;
    memset(&kv, 0, sizeof kv);
    kv.type = e->p.kv_type;
    kv.n_kv_head = hp->n_head_kv;
    kv.head_dim = hp->head_dim;
    cs->att_scratch_bytes = cuda_attention_scratch_bytes(&kv, hp->n_head, (int)R, e->n_ctx);
    rc = dmalloc(&cs->att_scratch, cs->att_scratch_bytes, cs->dev, "attention scratch", err);
    if (rc)
        return rc;
    /* the split-attention tickets must start at zero */
    CUDA_CHECK(err, cudaMemset(cs->att_scratch, 0, cs->att_scratch_bytes));
    return 0;
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
        rc = upload_layer(e, cs, &m->layers[il], &cs->layers[il - st->l0], err);
        if (e->p.progress && !rc)
            e->p.progress((uint64_t)(il + 1), (uint64_t)m->hp.n_layer, e->p.progress_user);
    }
    if (!rc)
        rc = alloc_activations(e, cs, last, err);
    return rc;
}

int cuda_engine_init(strata_engine *e, strata_error *err)
{
    cuda_engine *ce = calloc(1, sizeof *ce);
    if (!ce)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    e->cuda = ce;
    ce->max_rows = e->p.n_chunk > e->p.n_slots ? e->p.n_chunk : e->p.n_slots;
    ce->page_stride = (e->n_ctx + KV_PAGE - 1) / KV_PAGE;
    ce->peer_ok = 1;
    for (int i = 0; i < e->n_stages; i++) {
        int rc = init_stage(e, &e->stages[i], err);
        if (rc)
            return rc;
        ce->total_bytes += ((cuda_stage *)e->stages[i].cuda)->weight_bytes;
    }
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
    int rc = dmalloc((void **)&ce->d_uniform, (size_t)ce->max_rows * 4, last_dev, "sampling", err);
    rc = rc ? rc : dmalloc((void **)&ce->d_next, (size_t)ce->max_rows * 4, last_dev, "sampling", err);
    if (rc)
        return rc;
    if (!e->p.quiet) {
        fprintf(stderr, "strata: %.1f MiB of weights on the card%s", ce->total_bytes / 1048576.0,
                e->n_stages > 1 ? "s" : "");
        if (ce->n_converted)
            fprintf(stderr, " (%d tensors converted to F16: the card has no kernel for their type)",
                    ce->n_converted);
        fprintf(stderr, "\n");
        int multi = 0;
        for (int i = 0; i + 1 < e->n_stages; i++)
            multi |= e->stages[i].device != e->stages[i + 1].device;
        if (multi)
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
        for (int l = 0; cs->layers && l < e->stages[i].l1 - e->stages[i].l0; l++) {
            dlayer *d = &cs->layers[l];
            float *v[] = {d->attn_norm, d->ffn_norm, d->bq, d->bk, d->bv, d->q_norm, d->k_norm};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++)
                cudaFree(v[j]);
            dweight *w[] = {&d->wq, &d->wk, &d->wv, &d->wo, &d->gate, &d->up, &d->down,
                            &d->router, &d->gate_exps, &d->up_exps, &d->down_exps};
            for (size_t j = 0; j < sizeof w / sizeof w[0]; j++)
                free_dweight(w[j]);
        }
        free(cs->layers);
        free_dweight(&cs->tok_embd);
        free_dweight(&cs->output);
        void *bufs[] = {cs->output_norm, cs->rope_freqs, cs->x, cs->xb, cs->q, cs->k, cs->v,
                        cs->att, cs->hb, cs->hb2, cs->logits, cs->moe_w, cs->moe_sel, cs->d_in,
                        cs->mm_scratch, cs->att_scratch};
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            if (bufs[j])
                cudaFree(bufs[j]);
        if (cs->h_in)
            cudaFreeHost(cs->h_in);
        if (cs->h_x)
            cudaFreeHost(cs->h_x);
        if (cs->done)
            cudaEventDestroy(cs->done);
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

static int moe_ffn(strata_engine *e, cuda_stage *cs, const dlayer *d, int n, strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    int64_t D = hp->n_embd, F = d->gate_exps.rows;
    int k = hp->n_expert_used, rc;
    rc = matmul(cs, &d->router, cs->xb, n, cs->att, err);
    rc = rc ? rc : cuda_moe_route(cs->att, n, hp->n_expert, k, cs->moe_sel, cs->moe_w,
                                  cs->compute, err);
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
    if (st->index == 0)
        rc = cuda_embed(cs->tok_embd.type, cs->tok_embd.d, cs->tok_embd.rows, D, tokens, n, cs->x,
                        cs->compute, err);
    if (!rc && st->index == 0)
        rc = dtrace(cs, c, "embed", -1, cs->x, D, err);
    for (int il = st->l0; il < st->l1 && !rc; il++) {
        const dlayer *d = &cs->layers[il - st->l0];
        kv_view kv = kv_pool_view(st->kv, il - st->l0, pages);
        rc = cuda_rmsnorm(cs->x, d->attn_norm, cs->xb, n, D, hp->eps, cs->compute, err);
        rc = rc ? rc : matmul(cs, &d->wq, cs->xb, n, cs->q, err);
        rc = rc ? rc : matmul(cs, &d->wk, cs->xb, n, cs->k, err);
        rc = rc ? rc : matmul(cs, &d->wv, cs->xb, n, cs->v, err);
        rc = rc ? rc : dtrace(cs, c, "attn_norm", il, cs->xb, D, err);
        rc = rc ? rc : dtrace(cs, c, "q", il, cs->q, dq, err);
        rc = rc ? rc : dtrace(cs, c, "k", il, cs->k, dkv, err);
        rc = rc ? rc : dtrace(cs, c, "v", il, cs->v, dkv, err);
        if (!rc && d->bq) {
            rc = cuda_bias_add(cs->q, d->bq, n, dq, dq, cs->compute, err);
            rc = rc ? rc : cuda_bias_add(cs->k, d->bk, n, dkv, dkv, cs->compute, err);
            rc = rc ? rc : cuda_bias_add(cs->v, d->bv, n, dkv, dkv, cs->compute, err);
        }
        if (!rc && d->q_norm) {
            rc = cuda_rmsnorm_heads(cs->q, d->q_norm, n, hp->n_head, hp->head_dim, dq, hp->eps,
                                    cs->compute, err);
            rc = rc ? rc : cuda_rmsnorm_heads(cs->k, d->k_norm, n, hp->n_head_kv, hp->head_dim,
                                              dkv, hp->eps, cs->compute, err);
        }
        rc = rc ? rc : cuda_rope(cs->q, n, hp->n_head, hp->head_dim, dq, tok_pos, &rp,
                                 cs->compute, err);
        rc = rc ? rc : cuda_rope(cs->k, n, hp->n_head_kv, hp->head_dim, dkv, tok_pos, &rp,
                                 cs->compute, err);
        rc = rc ? rc : cuda_kv_store(&kv, ce->page_stride, c->n_seq, c->n_tok, tok_pos, cs->k,
                                     dkv, cs->v, dkv, cs->compute, err);
        rc = rc ? rc : cuda_attention(&kv, ce->page_stride, seq_pos, c->n_seq, c->n_tok, e->n_ctx,
                                      cs->q, dq, hp->n_head, scale, cs->att, dq, cs->att_scratch,
                                      cs->att_scratch_bytes, cs->compute, err);
        rc = rc ? rc : dtrace(cs, c, "q_rope", il, cs->q, dq, err);
        rc = rc ? rc : dtrace(cs, c, "att", il, cs->att, dq, err);
        rc = rc ? rc : matmul(cs, &d->wo, cs->att, n, cs->xb, err);
        rc = rc ? rc : cuda_add(cs->x, cs->xb, (int64_t)n * D, cs->compute, err);
        rc = rc ? rc : cuda_rmsnorm(cs->x, d->ffn_norm, cs->xb, n, D, hp->eps, cs->compute, err);
        rc = rc ? rc : dtrace(cs, c, "h", il, cs->x, D, err);
        if (rc)
            break;
        if (hp->n_expert) {
            rc = moe_ffn(e, cs, d, n, err);
        } else {
            int64_t F = d->gate.rows;
            rc = matmul(cs, &d->gate, cs->xb, n, cs->hb, err);
            rc = rc ? rc : matmul(cs, &d->up, cs->xb, n, cs->hb2, err);
            rc = rc ? rc : cuda_swiglu(cs->hb, cs->hb2, cs->hb, (int64_t)n * F, cs->compute, err);
            rc = rc ? rc : matmul(cs, &d->down, cs->hb, n, cs->xb, err);
            rc = rc ? rc : cuda_add(cs->x, cs->xb, (int64_t)n * D, cs->compute, err);
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

/* Run one stage's kernels, through a captured graph for decode steps. */
static int stage_run(strata_engine *e, const stage *st, cuda_stage *cs, const call *c,
                     strata_error *err)
{
    if (!c->decode || c->n > MAX_GRAPH_ROWS || getenv("STRATA_NO_GRAPHS"))
        return stage_kernels(e, st, cs, c, err);
    if (!cs->graph[c->n]) {
        cudaGraph_t g;
        CUDA_CHECK(err, cudaStreamBeginCapture(cs->compute, cudaStreamCaptureModeThreadLocal));
        int rc = stage_kernels(e, st, cs, c, err);
        cudaError_t ce = cudaStreamEndCapture(cs->compute, &g);
        if (rc)
            return rc;
        if (ce != cudaSuccess)
            return strata_cuda_fail(err, ce, "cudaStreamEndCapture", __FILE__, __LINE__);
        ce = cudaGraphInstantiate(&cs->graph[c->n], g, 0);
        cudaGraphDestroy(g);
        if (ce != cudaSuccess)
            return strata_cuda_fail(err, ce, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    CUDA_CHECK(err, cudaGraphLaunch(cs->graph[c->n], cs->compute));
    return 0;
}

/* Fill a stage's input words and queue their upload. */
static int stage_inputs(strata_engine *e, const stage *st, cuda_stage *cs, const fwd_row *rows,
                        const call *c, strata_error *err)
{
    cuda_engine *ce = e->cuda;
    int R = ce->max_rows, P = ce->page_stride;
    int32_t *tokens = cs->h_in, *tok_pos = cs->h_in + R, *seq_pos = cs->h_in + 2 * R;
    int32_t *pages = cs->h_in + 3 * R;
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
    /* The stream is ordered: this upload lands before the kernels that read
     * it, and after the previous call's kernels finished with the buffer. */
    CUDA_CHECK(err, cudaMemcpyAsync(cs->d_in, cs->h_in, cs->in_words * 4, cudaMemcpyHostToDevice,
                                    cs->compute));
    return 0;
}

/* Move n rows of hidden state from stage a's card to stage b's. */
static int cross(strata_engine *e, cuda_stage *a, cuda_stage *b, int n, strata_error *err)
{
    cuda_engine *ce = e->cuda;
    size_t bytes = (size_t)n * e->m->hp.n_embd * sizeof(float);
    CUDA_CHECK(err, cudaEventRecord(a->done, a->compute));
    CUDA_CHECK(err, cudaSetDevice(b->dev));
    CUDA_CHECK(err, cudaStreamWaitEvent(b->compute, a->done, 0));
    if (a->dev == b->dev) {
        CUDA_CHECK(err, cudaMemcpyAsync(b->x, a->x, bytes, cudaMemcpyDeviceToDevice, b->compute));
    } else if (ce->peer_ok) {
        CUDA_CHECK(err, cudaMemcpyPeerAsync(b->x, b->dev, a->x, a->dev, bytes, b->compute));
    } else {
        CUDA_CHECK(err, cudaSetDevice(a->dev));
        CUDA_CHECK(err, cudaMemcpyAsync(a->h_x, a->x, bytes, cudaMemcpyDeviceToHost, a->compute));
        CUDA_CHECK(err, cudaStreamSynchronize(a->compute));
        CUDA_CHECK(err, cudaSetDevice(b->dev));
        CUDA_CHECK(err, cudaMemcpyAsync(b->x, a->h_x, bytes, cudaMemcpyHostToDevice, b->compute));
    }
    return 0;
}

/* Run every stage for the rows; the last stage's logits stay on its card. */
static int run_stages(strata_engine *e, const fwd_row *rows, int n, int decode, call *c,
                      strata_error *err)
{
    cuda_engine *ce = e->cuda;
    if (n > ce->max_rows)
        return strata_err(err, STRATA_E_ARG, "forward: %d rows > %d", n, ce->max_rows);
    *c = (call){n, decode, decode ? n : 1, decode ? 1 : n, n};
    for (int r = n - 1; r >= 0; r--)
        if (rows[r].logits >= 0)
            c->first = r;
    int rc = 0;
    for (int si = 0; si < e->n_stages && !rc; si++) {
        stage *st = &e->stages[si];
        cuda_stage *cs = st->cuda;
        CUDA_CHECK(err, cudaSetDevice(cs->dev));
        rc = stage_inputs(e, st, cs, rows, c, err);
        if (!rc && si > 0)
            rc = cross(e, e->stages[si - 1].cuda, cs, n, err);
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
