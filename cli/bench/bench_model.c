/* bench_model.c: `strata-cli bench -m MODEL` — the rates a user sees.
 *
 *   prompt  -p P random token ids read into a fresh sequence (prefill in
 *           the engine's chunks), tokens per second;
 *   decode  for each context C of --ctx (default 0) and batch size B: B
 *           sequences, each first reads C + BM_SHORT tokens (untimed), then
 *           -n N timed steps of strata_decode_batch (one token per sequence
 *           per step).
 * Each figure is the median of --reps R runs after one warm-up run (first
 * touches of the weights and KV pages are not what a server sees).
 *
 * The roofline columns: a decode step reads every weight once
 * (model->weight_bytes: the token embedding counts in full, which is exact
 * for tied embeddings where it is also the output head, and over-counts an
 * untied one by its size less one row) — except a MoE layer's experts, of
 * which a row reads its k of E: a step of B rows counts the expected share
 * 1 - (1 - k/E)^B of them (exact for B = 1; for B > 1 it assumes rows
 * route independently and uniformly) — plus each sequence's K and V at its
 * current context (the mean over the timed steps).  GB/s = those bytes per
 * step / seconds per step: the number to hold against the memory
 * bandwidth, which a CUDA build measures in the same run (a 16-byte-load
 * read of 2 GiB, cuda_read_probe) and prints the fraction of. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cache/kvcache.h"
#include "engine/generate.h"
#include "cli/options.h"

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.h"
#endif

enum { BM_SHORT = 32, BM_MAX_BATCH = BENCH_MODEL_MAX_BATCH };

typedef struct bm_decode {
    int batch, ctx;
    double tok_s, ms_step, weight_mb, kv_mb, gb_s;
} bm_decode;

/* Weight bytes a decode step of B rows reads (the header comment says how
 * MoE experts count). */
static double step_weight_bytes(const model *m, int B)
{
    uint64_t exps = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const layer_weights *L = &m->layers[il];
        const weight *w[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int i = 0; i < 3; i++)
            if (w[i]->data)
                exps += w[i]->mat_bytes * (uint64_t)w[i]->n_mat;
    }
    if (!exps || m->hp.n_expert <= 0)
        return (double)m->weight_bytes;
    const double share = 1.0 - pow(1.0 - (double)m->hp.n_expert_used / m->hp.n_expert, B);
    return (double)(m->weight_bytes - exps) + share * (double)exps;
}
static uint32_t bm_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 11);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "1,2,4,8" -> sizes; returns the count, or -1 on a bad list. */
/* "1,2,4" -> values in [lo, hi]; the count, or -1 on a bad list. */
static int parse_list(const char *s, int *out, int cap, long lo, long hi)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || n == cap)
            return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',' && !s[1])
            return -1; /* "1,2,": an empty entry, not a list of two */
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* K+V bytes of one token over all layers. */
static double kv_token_bytes(const model *m, int kv_type)
{
    kv_row_bytes r = kv_row_size(kv_type, m->hp.head_dim);
    return (double)(r.kq + r.kd + r.vq + r.vd) * m->hp.n_head_kv * m->hp.n_layer;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Fill ids with n random token ids. */
static void random_ids(int32_t *ids, int n, int n_vocab, uint64_t *rng)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(bm_rand(rng) % (uint32_t)n_vocab);
}

typedef struct bm_run {
    strata_engine *e;
    strata_seq **seqs;
    int32_t *ids;
    float *logits;
    uint64_t rng;
    int n_vocab;
} bm_run;

/* Seconds to read n_prompt random tokens into a fresh sequence. */
static int time_prompt(bm_run *r, int n_prompt, double *dt, strata_error *err)
{
    strata_seq_reset(r->seqs[0]);
    random_ids(r->ids, n_prompt, r->n_vocab, &r->rng);
    double t0 = strata_now();
    int rc = strata_seq_feed(r->seqs[0], r->ids, n_prompt, r->logits, NULL, err);
    *dt = strata_now() - t0;
    return rc;
}

/* Seconds for `steps` decode steps of `batch` sequences after a prompt of
 * ctx + BM_SHORT tokens each. */
static int time_decode(bm_run *r, int batch, int ctx, int steps, double *dt, strata_error *err)
{
    int rc = 0;
    for (int b = 0; b < batch && !rc; b++) {
        strata_seq_reset(r->seqs[b]);
        random_ids(r->ids, ctx + BM_SHORT, r->n_vocab, &r->rng);
        rc = strata_seq_feed(r->seqs[b], r->ids, ctx + BM_SHORT, r->logits, NULL, err);
    }
    double t0 = strata_now();
    for (int s = 0; s < steps && !rc; s++) {
        random_ids(r->ids, batch, r->n_vocab, &r->rng);
        rc = strata_decode_batch(r->seqs, r->ids, batch, r->logits, err);
    }
    *dt = strata_now() - t0;
    return rc;
}

/* The card's read bandwidth, measured now: median of 9 reads of 2 GiB with
 * 16-byte loads (0 without CUDA or on failure). */
static double read_bandwidth(const strata_engine *e)
{
#ifdef STRATA_CUDA
    if (strata_backend(e) != STRATA_BACKEND_CUDA)
        return 0;
    size_t bytes = (size_t)2 << 30;
    void *buf = NULL;
    uint32_t *sink = NULL;
    cudaEvent_t a = NULL, b = NULL;
    double t[9], gbs = 0;
    strata_error err;
    if (cudaMalloc(&buf, bytes) == cudaSuccess && cudaMalloc((void **)&sink, 4) == cudaSuccess &&
        cudaMemset(buf, 1, bytes) == cudaSuccess && cudaEventCreate(&a) == cudaSuccess &&
        cudaEventCreate(&b) == cudaSuccess && !cuda_read_probe(buf, bytes, sink, 0, &err)) {
        int ok = 1;
        for (int i = 0; i < 9 && ok; i++) {
            float ms = 0;
            ok = cudaEventRecord(a, 0) == cudaSuccess && !cuda_read_probe(buf, bytes, sink, 0, &err) &&
                 cudaEventRecord(b, 0) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
            t[i] = bytes / (ms * 1e-3) / 1e9;
        }
        if (ok)
            gbs = median(t, 9);
    }
    cudaGetLastError();
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    return gbs;
#else
    (void)e;
    return 0;
#endif
}

static void usage_hint(void)
{
    fprintf(stderr, "(strata-cli bench --help lists the options)\n");
}

int bench_model(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = BENCH_MODEL_USES;
    o.cmd = "bench";
    int n_prompt = 512, steps = 128, reps = 3, json = 0;
    int batches[16] = {1, 2, 4, 8}, n_batches = 4;
    int ctxs[16] = {0}, n_ctxs = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* -p, -n and --batch mean counts here, not the shared prompt text,
         * answer length and slot count */
        int *count = !strcmp(a, "-p") ? &n_prompt : !strcmp(a, "-n") ? &steps
                   : !strcmp(a, "--reps") ? &reps : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--ctx")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "strata-cli bench: --ctx needs a value\n");
                return 2;
            }
            n_ctxs = parse_list(argv[++i], ctxs, 16, 0, 1 << 20);
            if (n_ctxs < 1) {
                fprintf(stderr, "strata-cli bench: --ctx '%s': expected contexts like "
                                "0,4096,32768\n", argv[i]);
                return 2;
            }
        } else if (count || !strcmp(a, "--batch")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "strata-cli bench: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!count) {
                n_batches = parse_list(v, batches, 16, 1, BM_MAX_BATCH);
                if (n_batches < 1) {
                    fprintf(stderr, "strata-cli bench: --batch '%s': expected sizes 1..%d like "
                                    "1,2,4,8\n", v, BM_MAX_BATCH);
                    return 2;
                }
                continue;
            }
            char *end;
            long x = strtol(v, &end, 10);
            if (!*v || *end || x < (count == &n_prompt ? 0 : 1) || x > 1 << 20) {
                fprintf(stderr, "strata-cli bench: %s '%s' is not a count\n", a, v);
                return 2;
            }
            *count = (int)x;
        } else {
            int r = cli_opts_parse(&o, "bench", argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                fprintf(stderr, "strata-cli bench: unknown option '%s'\n", a);
                usage_hint();
                return 2;
            }
        }
    }
    int max_batch = 1;
    for (int k = 0; k < n_batches; k++)
        max_batch = batches[k] > max_batch ? batches[k] : max_batch;
    o.ep.n_slots = max_batch; /* the engine's slots: the largest batch */
    if (cli_opts_check(&o, "bench"))
        return 2;
    if (cli_opts_default_model(&o, "bench"))
        return 1;
    int max_ctx = 0;
    for (int k = 0; k < n_ctxs; k++)
        max_ctx = ctxs[k] > max_ctx ? ctxs[k] : max_ctx;
    const int need_ctx =
        (n_prompt > max_ctx + BM_SHORT + steps ? n_prompt : max_ctx + BM_SHORT + steps) + 1;
    if (!o.ep.n_ctx)
        o.ep.n_ctx = need_ctx;
    if (o.ep.n_ctx < need_ctx) {
        fprintf(stderr, "strata-cli bench: -c %d is less than the %d tokens the runs need\n",
                o.ep.n_ctx, need_ctx);
        return 2;
    }
    o.ep.quiet = json; /* JSON alone on stdout, and no info lines around it */
    if (!o.ep.quiet)
        o.ep.progress = cli_progress;

    strata_error err = {0};
    bm_run r = {0};
    r.rng = 0x5eed;
    int rc = strata_open(&o.ep, &r.e, &err);
    bm_decode dec[256];
    int n_dec = 0;
    double prompt_tok_s = 0;
    double *times = calloc((size_t)reps, sizeof *times);
    if (!rc) {
        r.n_vocab = strata_n_vocab(r.e);
        r.seqs = calloc((size_t)max_batch, sizeof *r.seqs);
        r.ids = malloc(sizeof *r.ids * (size_t)(need_ctx + BM_MAX_BATCH));
        r.logits = malloc(sizeof *r.logits * (size_t)max_batch * (size_t)r.n_vocab);
        if (!r.seqs || !r.ids || !r.logits || !times)
            rc = strata_err(&err, STRATA_E_NOMEM, "out of memory for %d sequences", max_batch);
    }
    for (int b = 0; b < max_batch && !rc; b++) {
        r.seqs[b] = strata_seq_new(r.e, &err);
        rc = r.seqs[b] ? 0 : err.code;
    }
    const model *m = rc ? NULL : strata_model(r.e);
    double dt;
    if (!rc && n_prompt > 0) {
        rc = time_prompt(&r, n_prompt < 64 ? n_prompt : 64, &dt, &err); /* warm-up */
        for (int k = 0; k < reps && !rc; k++) {
            rc = time_prompt(&r, n_prompt, &dt, &err);
            times[k] = n_prompt / dt;
        }
        if (!rc)
            prompt_tok_s = median(times, reps);
        if (!rc && !json)
            printf("prompt  %5d tok: %9.1f tok/s (median of %d)\n", n_prompt, prompt_tok_s, reps);
    }
    const double kv_tok = m ? kv_token_bytes(m, strata_kv_type(r.e) == STRATA_KV_F16 ? KV_F16
                                                                                   : KV_K8V4)
                            : 0;
    /* 1 unless --batch-groups G > 1 with a layer split (the engine says so) */
    const int groups = rc ? 1 : strata_batch_groups(r.e);
    const double bw = rc ? 0 : read_bandwidth(r.e);
    if (bw > 0 && !json)
        printf("card read bandwidth, measured now: %.0f GB/s\n", bw);
    for (int k = 0; k < n_batches * n_ctxs && !rc; k++) {
        const int B = batches[k % n_batches], C = ctxs[k / n_batches];
        rc = time_decode(&r, B, C, steps < 4 ? steps : 4, &dt, &err); /* warm-up */
        for (int q = 0; q < reps && !rc; q++) {
            rc = time_decode(&r, B, C, steps, &dt, &err);
            times[q] = dt / steps;
        }
        if (rc)
            break;
        bm_decode *d = &dec[n_dec++];
        const double s_step = median(times, reps);
        /* mean context over the timed steps: the prompt, then one more
         * token per step */
        const double mean_ctx = C + BM_SHORT + (steps + 1) / 2.0;
        d->batch = B;
        d->ctx = C;
        d->ms_step = s_step * 1e3;
        d->tok_s = B / s_step;
        d->weight_mb = step_weight_bytes(m, B) / 1e6;
        d->kv_mb = B * mean_ctx * kv_tok / 1e6;
        d->gb_s = (d->weight_mb + d->kv_mb) / 1e3 / s_step;
        if (!json) {
            printf("decode batch %2d ctx %6d: %9.1f tok/s, %8.2f ms/step, reads %.1f MB weights + "
                   "%.2f MB KV per step = %.2f GB/s", B, C, d->tok_s, d->ms_step, d->weight_mb,
                   d->kv_mb, d->gb_s);
            if (groups > 1)
                printf(" [%d batch groups]", groups);
            if (bw > 0)
                printf(" (%.1f %% of %.0f)", 100.0 * d->gb_s / bw, bw);
            printf("\n");
            fflush(stdout);
        }
    }
    if (rc) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
    } else if (json) {
        printf("{\"model\": ");
        json_string(stdout, o.ep.model_path);
        printf(", \"arch\": ");
        json_string(stdout, m->arch_name);
        printf(", \"backend\": \"%s\", \"stages\": %d, \"kv\": \"%s\", \"threads\": %d, "
               "\"batch_groups\": %d, \"reps\": %d, \"weight_bytes\": %llu, \"read_gb_s\": %.1f,\n \"prompt\": {\"tokens\": %d, "
               "\"tok_s\": %.2f},\n \"decode\": [",
               strata_backend(r.e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu", strata_n_stages(r.e),
               strata_kv_name(strata_kv_type(r.e)), o.ep.n_threads, groups, reps,
               (unsigned long long)m->weight_bytes, bw, n_prompt, prompt_tok_s);
        for (int k = 0; k < n_dec; k++)
            printf("%s\n  {\"batch\": %d, \"ctx\": %d, \"steps\": %d, \"short_prompt\": %d, "
                   "\"tok_s\": %.2f, \"ms_per_step\": %.3f, \"weight_mb\": %.2f, "
                   "\"kv_mb\": %.3f, \"gb_s\": %.3f}", k ? "," : "", dec[k].batch, dec[k].ctx,
                   steps, BM_SHORT, dec[k].tok_s, dec[k].ms_step, dec[k].weight_mb, dec[k].kv_mb,
                   dec[k].gb_s);
        printf("]}\n");
    }
    for (int b = 0; r.seqs && b < max_batch; b++)
        strata_seq_free(r.seqs[b]);
    free(r.seqs);
    free(r.ids);
    free(r.logits);
    free(times);
    strata_close(r.e);
    return rc ? 1 : 0;
}
