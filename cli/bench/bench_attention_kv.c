/* bench_attention_kv.c: `strata-cli bench --attention --kv F1,F2,..` — what
 * each KV cache format costs a decode step on the card, per piece.
 *
 * Called by bench_attention when --kv is given.  For each format (the first
 * listed is the baseline the others are compared with):
 *   store    cuda_kv_store of one token per sequence (--batch sequences) and
 *            of a 512-token chunk of one sequence; for the rotated formats
 *            also cuda_kv_rotate_store, the rotation of q|k|v with the store,
 *            as the engine launches it;
 *   decode   the attention of one query token per sequence at the last
 *            position of each --ctx, --batch sequences (the rotated formats:
 *            cuda_attention_rotated, its output rotated back as it is
 *            written, as the engine runs it);
 *   layer    the whole attention part of one layer's decode step as the
 *            engine launches it (engine/cuda/forward_cuda.c): store (with the
 *            rotation of q|k|v in its launch for the rotated formats) and
 *            attention — what a format adds per layer; for the rotated
 *            formats also with both rotations as launches of their own
 *            (cuda_kv_rotate before the store, cuda_kv_unrotate after the
 *            attention: the engine's STRATA_ROT_SPLIT=all), column "apart";
 *   prefill  512 query tokens of one sequence ending at the last position.
 * Method as bench_attention.c: bench_graph_us over a CUDA graph of 8
 * launches (the engine replays its decode step as a graph, with the same
 * programmatic launches), the median of --runs replays; the caches rotate
 * over disjoint copies (>= 512 MiB together, each launch's sequences on
 * copies of their own) so no launch finds its K/V in the L2.  The shape is
 * bench_attention's: head_dim 128, 8 kv heads, 4 query heads per kv head
 * (an 8B llama's attention).  The cache bytes are random but valid; the
 * time of the V decode does not depend on the codes.  K bias: none (llama;
 * k8v4r2's kshift is NULL, as the engine sets it for such a model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"

#ifdef STRATA_CUDA

#include <cuda_runtime_api.h>

#include "cli/bench/bench_time.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

#define BK_HD 128
#define BK_NKV 8
#define BK_GROUP 4
#define BK_NHEAD (BK_NKV * BK_GROUP)
#define BK_PER_GRAPH 8
#define BK_CHUNK 512 /* the store's and prefill's chunk */

/* The formats by their --kv names: the kernels' type and whether q, k, v
 * are rotated around the attention (engine.c, engine_kv_rotated). */
typedef struct bk_format {
    const char *name;
    int type, rot;
} bk_format;

static const bk_format bk_formats[] = {
    {"k8v4", KV_K8V4, 0}, {"k8v4r", KV_K8V4, 1}, {"k8v4r2", KV_K8V4NL, 1}, {"f16", KV_F16, 0}};

static const bk_format *bk_format_of(const char *name)
{
    for (size_t i = 0; i < sizeof bk_formats / sizeof bk_formats[0]; i++)
        if (!strcmp(name, bk_formats[i].name))
            return &bk_formats[i];
    return NULL;
}

/* BK_ROT: the rotated formats' store with the rotation of q|k|v; BK_APART:
 * their rotations as launches of their own */
enum { BK_STORE = 1, BK_ROT = 2, BK_ATT = 4, BK_APART = 8 };

typedef struct bk_run {
    kv_view kv;        /* device pools; pages: (n_sets + n_seq) rows of pages_per */
    int pages_per, n_sets, n_seq, n_tok, max_ctx, rot, what;
    const int32_t *d_first; /* attention: first query position per sequence */
    const int32_t *d_tok;   /* store: position of each token (sequence-major) */
    float *q, *k, *v, *out;
    void *scratch;
    size_t scratch_bytes;
} bk_run;

/* Launch i of the graph: its n_seq sequences on cache copies of their own,
 * n_seq copies further than launch i - 1's. */
static int bk_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    const bk_run *r = ctx;
    kv_view kv = r->kv;
    kv.pages = r->kv.pages + (size_t)(((i + 1) * r->n_seq) % r->n_sets) * r->pages_per;
    const int64_t qs = (int64_t)BK_NHEAD * BK_HD, ks = (int64_t)BK_NKV * BK_HD;
    int rc = 0;
    const int apart = r->rot && (r->what & BK_APART);
    if (apart && (r->what & BK_STORE))
        rc = cuda_kv_rotate(r->q, BK_NHEAD, qs, r->k, r->v, BK_NKV, ks, ks, r->n_seq * r->n_tok,
                            BK_HD, s, err);
    if (!rc && (r->what & BK_STORE)) /* with the rotation: one launch, as the engine */
        rc = r->rot && (r->what & BK_ROT) && !apart
                 ? cuda_kv_rotate_store(&kv, r->pages_per, r->n_seq, r->n_tok, r->d_tok, r->q,
                                        BK_NHEAD, qs, r->k, ks, r->v, ks, s, err)
                 : cuda_kv_store(&kv, r->pages_per, r->n_seq, r->n_tok, r->d_tok, r->k, ks, r->v,
                                 ks, s, err);
    if (!rc && (r->what & BK_ATT)) /* the rotated formats: the output rotated back in it */
        rc = (r->rot && !apart ? cuda_attention_rotated : cuda_attention_window)(
            &kv, r->pages_per, r->d_first, r->n_seq, r->n_tok, r->max_ctx, 0, r->q, qs, BK_NHEAD,
            0.08838834764831845f, r->out, qs, r->scratch, r->scratch_bytes, s, err);
    if (!rc && apart && (r->what & BK_ATT))
        rc = cuda_kv_unrotate(r->out, BK_NHEAD, qs, r->n_seq * r->n_tok, BK_HD, s, err);
    return rc;
}

static double bk_time(bk_run *r, int what, int n_seq, int n_tok, int runs, cudaStream_t s,
                      int32_t *host_pos)
{
    r->what = what;
    r->n_seq = n_seq;
    r->n_tok = n_tok;
    /* sequence j's tokens at max_ctx - n_tok .. max_ctx - 1 */
    for (int j = 0; j < n_seq; j++)
        for (int t = 0; t < n_tok; t++)
            host_pos[j * n_tok + t] = r->max_ctx - n_tok + t;
    if (cudaMemcpy((void *)r->d_tok, host_pos, (size_t)n_seq * n_tok * 4,
                   cudaMemcpyHostToDevice) != cudaSuccess)
        return -1;
    for (int j = 0; j < n_seq; j++)
        host_pos[j] = r->max_ctx - n_tok;
    if (cudaMemcpy((void *)r->d_first, host_pos, (size_t)n_seq * 4, cudaMemcpyHostToDevice) !=
        cudaSuccess)
        return -1;
    return bench_graph_us("bench --attention --kv", bk_launch, r, BK_PER_GRAPH, runs, s);
}

/* Random but valid bytes: int8 quants without -128 and nibbles; fp16 scales
 * near 0.02 (kind 3: with 7 significant bits, as the k8v4nl store writes V's,
 * so the attention takes its one-FMA V decode); f16 values of magnitude
 * 0.125 .. 0.25. */
static void bk_fill(void *p, size_t n, int kind, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    uint16_t *h = p;
    for (size_t i = 0; i < n / 8; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        if (kind == 0) {
            uint64_t v = s & 0x7f7f7f7f7f7f7f7full;
            memcpy((char *)p + 8 * i, &v, 8);
            continue;
        }
        for (int j = 0; j < 4; j++) {
            uint16_t r = (uint16_t)(s >> (16 * j));
            h[4 * i + j] = kind == 1   ? (uint16_t)(0x2500 + (r & 0xff))
                           : kind == 3 ? (uint16_t)(0x2500 + (r & 0xf0))
                                       : (uint16_t)(0x3000 | (r & 0x83ff));
        }
    }
}

static size_t bk_per_tok(int type)
{
    return type == KV_F16 ? (size_t)BK_NKV * BK_HD * 4
                          : (size_t)BK_NKV * (BK_HD + BK_HD / 16 + BK_HD / 2 + BK_HD / 16);
}

typedef struct bk_pool {
    void *buf[4];
    int32_t *pages;
} bk_pool;

static void bk_pool_free(bk_pool *p)
{
    for (int b = 0; b < 4; b++)
        if (p->buf[b])
            cudaFree(p->buf[b]);
    if (p->pages)
        cudaFree(p->pages);
    memset(p, 0, sizeof *p);
}

/* n_sets copies of a ctx-token cache of format f, pages scattered; the
 * page table has n_sets + max_seq rows, the last ones repeating the first
 * (a launch's sequences may wrap around). */
static int bk_pool_make(bk_pool *p, bk_run *r, const bk_format *f, int ctx, int n_sets,
                        int max_seq)
{
    memset(p, 0, sizeof *p);
    int pages_per = ctx / KV_PAGE, n_pages = n_sets * pages_per;
    size_t rows = (size_t)n_pages * BK_NKV * KV_PAGE;
    size_t bytes[4] = {rows * BK_HD, rows * (BK_HD / 32) * 2, rows * BK_HD / 2,
                       rows * (BK_HD / 32) * 2};
    int kinds[4] = {0, 1, 0, f->type == KV_K8V4NL ? 3 : 1};
    if (f->type == KV_F16) {
        bytes[0] = bytes[2] = rows * BK_HD * 2;
        bytes[1] = bytes[3] = 0;
        kinds[0] = kinds[2] = 2;
    }
    size_t rows_tab = (size_t)(n_sets + max_seq) * pages_per;
    int32_t *tab = malloc(rows_tab * 4);
    void *host = malloc(bytes[0] > bytes[2] ? bytes[0] : bytes[2]);
    int rc = -1;
    if (!tab || !host)
        goto out;
    for (int b = 0; b < 4; b++) {
        if (!bytes[b])
            continue;
        if (cudaMalloc(&p->buf[b], bytes[b]) != cudaSuccess)
            goto out;
        bk_fill(host, bytes[b], kinds[b], 77 * (uint64_t)ctx + b);
        if (cudaMemcpy(p->buf[b], host, bytes[b], cudaMemcpyHostToDevice) != cudaSuccess)
            goto out;
    }
    for (int i = 0; i < n_pages; i++)
        tab[i] = i;
    for (int i = n_pages - 1; i > 0; i--) { /* no page follows its neighbour */
        int j = (int)(((uint64_t)i * 2654435761u) % (uint64_t)(i + 1));
        int32_t t = tab[i];
        tab[i] = tab[j];
        tab[j] = t;
    }
    for (size_t i = (size_t)n_pages; i < rows_tab; i++)
        tab[i] = tab[i - (size_t)n_pages];
    if (cudaMalloc((void **)&p->pages, rows_tab * 4) != cudaSuccess ||
        cudaMemcpy(p->pages, tab, rows_tab * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        goto out;
    memset(&r->kv, 0, sizeof r->kv);
    r->kv.type = f->type;
    r->kv.n_kv_head = BK_NKV;
    r->kv.head_dim = BK_HD;
    r->kv.pages = p->pages;
    if (f->type == KV_F16) {
        r->kv.kh = p->buf[0];
        r->kv.vh = p->buf[2];
    } else {
        r->kv.kq = p->buf[0];
        r->kv.kd = p->buf[1];
        r->kv.vq = p->buf[2];
        r->kv.vd = p->buf[3];
    }
    r->pages_per = pages_per;
    r->n_sets = n_sets;
    r->max_ctx = ctx;
    r->rot = f->rot;
    rc = 0;
out:
    free(tab);
    free(host);
    if (rc)
        bk_pool_free(p);
    return rc;
}

/* The scratch for max_seq sequences at this context (zeroed once). */
static int bk_scratch(bk_run *r, int max_seq)
{
    size_t need = cuda_attention_scratch_bytes(&r->kv, BK_NHEAD, max_seq, r->max_ctx);
    if (need <= r->scratch_bytes)
        return 0;
    if (r->scratch)
        cudaFree(r->scratch);
    r->scratch = NULL;
    r->scratch_bytes = 0;
    if (cudaMalloc(&r->scratch, need) != cudaSuccess || cudaMemset(r->scratch, 0, need))
        return -1;
    r->scratch_bytes = need;
    return 0;
}

static void bk_pct(char *buf, size_t n, double us, double base)
{
    if (base > 0 && us > 0)
        snprintf(buf, n, "%+6.1f %%", 100.0 * (us - base) / base);
    else
        snprintf(buf, n, "%8s", "-");
}

int bench_attention_kv(char *const *names, int n_fmt, const int *ctxs, int n_ctx,
                       const int *batches, int n_batch, int runs)
{
    const bk_format *fmts[BENCH_ATT_MAX_LIST];
    for (int i = 0; i < n_fmt; i++)
        if (!(fmts[i] = bk_format_of(names[i])))
            return 2; /* checked by the caller */
    int max_seq = 1;
    for (int b = 0; b < n_batch; b++)
        max_seq = batches[b] > max_seq ? batches[b] : max_seq;
    int rc = 1;
    cudaStream_t s = NULL;
    bk_run r;
    memset(&r, 0, sizeof r);
    bk_pool pool = {{0}, 0};
    int32_t *host_pos = NULL;
    size_t max_rows = (size_t)(max_seq > BK_CHUNK ? max_seq : BK_CHUNK);
    size_t qbytes = max_rows * BK_NHEAD * BK_HD * 4, kbytes = max_rows * BK_NKV * BK_HD * 4;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        goto fail;
    host_pos = malloc(max_rows * 4);
    float *hq = malloc(qbytes);
    if (!host_pos || !hq) {
        free(hq);
        goto fail;
    }
    for (size_t i = 0; i < qbytes / 4; i++)
        hq[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    int ok = cudaMalloc((void **)&r.q, qbytes) == cudaSuccess &&
             cudaMalloc((void **)&r.out, qbytes) == cudaSuccess &&
             cudaMalloc((void **)&r.k, kbytes) == cudaSuccess &&
             cudaMalloc((void **)&r.v, kbytes) == cudaSuccess &&
             cudaMalloc((void **)&r.d_first, max_rows * 4) == cudaSuccess &&
             cudaMalloc((void **)&r.d_tok, max_rows * 4) == cudaSuccess &&
             cudaMemcpy(r.q, hq, qbytes, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(r.k, hq, kbytes, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(r.v, hq + 7, kbytes, cudaMemcpyHostToDevice) == cudaSuccess;
    free(hq);
    if (!ok)
        goto fail;

    printf("bench --attention --kv: %s; head_dim %d, %d kv heads x %d query heads; median of %d "
           "replays of %d launches; %% against %s\n",
           prop.name, BK_HD, BK_NKV, BK_GROUP, runs, BK_PER_GRAPH,
           fmts[0]->name);

    /* the per-token pieces, independent of the context: a small pool */
    printf("\n%-8s %-28s %10s %9s\n", "kv", "piece (per launch)", "us", "vs base");
    double base_p[BENCH_ATT_MAX_LIST + 1] = {0};
    for (int fi = 0; fi < n_fmt; fi++) {
        const bk_format *f = fmts[fi];
        if (bk_pool_make(&pool, &r, f, 4096, 2 * max_seq + 2, max_seq) || bk_scratch(&r, max_seq))
            goto fail;
        int k = 0;
        for (int bi = 0; bi <= n_batch; bi++) {
            int nseq = bi < n_batch ? batches[bi] : 1, ntok = bi < n_batch ? 1 : BK_CHUNK;
            char what[40];
            snprintf(what, sizeof what, "store %d seq x %d tok", nseq, ntok);
            double us = bk_time(&r, BK_STORE, nseq, ntok, runs, s, host_pos);
            if (us < 0)
                goto fail;
            char pct[24];
            bk_pct(pct, sizeof pct, us, fi ? base_p[k] : 0);
            if (!fi)
                base_p[k] = us;
            k++;
            printf("%-8s %-28s %10.2f %9s\n", f->name, what, us, pct);
            if (!f->rot)
                continue;
            /* the engine's launch: rotation and store together */
            us = bk_time(&r, BK_ROT | BK_STORE, nseq, ntok, runs, s, host_pos);
            if (us < 0)
                goto fail;
            snprintf(what, sizeof what, "rotate+store %d x %d", nseq, ntok);
            printf("%-8s %-28s %10.2f\n", f->name, what, us);
        }
        bk_pool_free(&pool);
    }

    /* decode and the layer's attention part per context and batch */
    printf("\n%-8s %-8s %-6s %10s %9s %9s   %10s %9s %8s\n", "context", "kv", "batch",
           "decode us", "GB/s", "vs base", "layer us", "vs base", "apart");
    for (int ci = 0; ci < n_ctx; ci++) {
        int ctx = ctxs[ci];
        double base_d[BENCH_ATT_MAX_LIST] = {0}, base_l[BENCH_ATT_MAX_LIST] = {0}, base_pf = 0;
        for (int fi = 0; fi < n_fmt; fi++) {
            const bk_format *f = fmts[fi];
            size_t kv_bytes = bk_per_tok(f->type) * (size_t)ctx;
            int n_sets = (int)((((size_t)512 << 20) + kv_bytes - 1) / kv_bytes);
            if (n_sets < 2 * max_seq)
                n_sets = 2 * max_seq;
            if (bk_pool_make(&pool, &r, f, ctx, n_sets, max_seq) || bk_scratch(&r, max_seq))
                goto fail;
            for (int bi = 0; bi < n_batch; bi++) {
                int nseq = batches[bi];
                double us = bk_time(&r, BK_ATT, nseq, 1, runs, s, host_pos);
                double lay = bk_time(&r, BK_ROT | BK_STORE | BK_ATT, nseq, 1, runs, s, host_pos);
                double apt = f->rot ? bk_time(&r, BK_ROT | BK_STORE | BK_ATT | BK_APART, nseq, 1,
                                              runs, s, host_pos)
                                    : 0;
                if (us < 0 || lay < 0 || apt < 0)
                    goto fail;
                char p1[24], p2[24], p3[24] = "";
                bk_pct(p1, sizeof p1, us, fi ? base_d[bi] : 0);
                bk_pct(p2, sizeof p2, lay, fi ? base_l[bi] : 0);
                if (!fi) {
                    base_d[bi] = us;
                    base_l[bi] = lay;
                }
                if (f->rot)
                    snprintf(p3, sizeof p3, "%8.1f", apt);
                printf("%-8d %-8s %-6d %10.1f %9.0f %9s   %10.1f %9s %s\n", ctx, f->name, nseq,
                       us, kv_bytes * nseq / (us * 1e-6) / 1e9, p1, lay, p2, p3);
            }
            if (ctx >= BK_CHUNK) {
                double us = bk_time(&r, BK_ATT, 1, BK_CHUNK, runs, s, host_pos);
                if (us < 0)
                    goto fail;
                char p1[24];
                bk_pct(p1, sizeof p1, us, fi ? base_pf : 0);
                if (!fi)
                    base_pf = us;
                printf("%-8d %-8s %-6s %10.1f %9s %9s\n", ctx, f->name, "pf512", us, "", p1);
            }
            bk_pool_free(&pool);
        }
    }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "bench --attention --kv: a CUDA call failed: %s\n",
                cudaGetErrorString(cudaGetLastError()));
    bk_pool_free(&pool);
    free(host_pos);
    if (r.scratch)
        cudaFree(r.scratch);
    if (r.q)
        cudaFree(r.q);
    if (r.out)
        cudaFree(r.out);
    if (r.k)
        cudaFree(r.k);
    if (r.v)
        cudaFree(r.v);
    if (r.d_first)
        cudaFree((void *)r.d_first);
    if (r.d_tok)
        cudaFree((void *)r.d_tok);
    if (s)
        cudaStreamDestroy(s);
    return rc;
}

#else

int bench_attention_kv(char *const *names, int n_fmt, const int *ctxs, int n_ctx,
                       const int *batches, int n_batch, int runs)
{
    (void)names, (void)n_fmt, (void)ctxs, (void)n_ctx, (void)batches, (void)n_batch, (void)runs;
    fprintf(stderr, "bench_attention: built without CUDA (nvcc not found or CUDA=0)\n");
    return 1;
}

#endif
