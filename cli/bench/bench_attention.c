/* bench_attention.c: `strata-cli bench --kernels` — attention over the
 * k8v4 cache on the card, against the card's own read bandwidth and ggml.
 *
 * Called by cmd_bench as bench_attention(argc, argv); options:
 *   --runs N        timed runs per figure (default 21, at least 15)
 *   --quick         contexts 4K and 32K only
 *   --kv F1,F2,..   per KV format, the pieces of a decode step against the
 *                   first format (bench_attention_kv.c); with --ctx and --batch
 * Shapes are those of ggml's reference figures (doc/BENCHMARKS.md): head_dim
 * 128, 8 kv heads, 4 query heads per kv head (32 heads), one sequence.  For each context:
 *   decode   one query token at the last position (flash-decoding split);
 *   prefill  512 query tokens ending at the last position.
 * Timing (bench_time.h, as bench --kernels): CUDA events around replays of a
 * CUDA graph of 8 launches (the engine's decode step is a graph too), 3
 * warm-ups, the median per launch.  The caches rotate among enough
 * disjoint copies (>= 512 MiB together) that no run finds its K/V in the
 * 60 MiB L2.  Bandwidth counts the K+V bytes a decode must read (quants and
 * scales, each once); the ceiling is measured here with a 16-byte streaming
 * read of 4 GiB (cuda_read_probe, as bench --kernels).  The last lines sweep the decode chunk
 * (a lab knob: the engine uses the default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"

int bench_attention(int argc, char **argv);

void bench_attention_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --attention [--runs N] [--quick]\n"
               "       strata-cli bench --attention --kv k8v4,k8v4r2 [--ctx 4096,8192,32768]\n"
               "                        [--batch 1,8] [--runs N]\n\n"
               "Paged flash attention over the k8v4 cache on the card: decode and prefill\n"
               "times per context against the bytes read and ggml's figures.  Needs a CUDA\n"
               "build and a card.  With --kv: per KV format, the K/V store (one token per\n"
               "sequence, a 512-token chunk; the rotated formats also with the rotation of\n"
               "q|k|v in the store's launch), decode per context and batch, the layer's whole\n"
               "attention part (store and attention, as the engine launches them) and a\n"
               "512-token prefill, each against the first format.\n\n"
               "  --runs N                timed runs per figure, 15..101 (default 21)\n"
               "  --quick                 contexts 4K and 32K only\n"
               "  --kv LIST               formats among k8v4, k8v4r, k8v4r2, f16 (at most 8)\n"
               "  --ctx LIST              with --kv: contexts, multiples of 512 in 512..131072\n"
               "                          (default 4096,8192,32768)\n"
               "  --batch LIST            with --kv: sequences per decode, 1..64 (default 1)\n");
}

/* A comma list for --kv (names) or --ctx/--batch (integers in lo..hi, a
 * multiple of `mult`) into out[BENCH_ATT_MAX_LIST]; the count, or -1 with a
 * message.  buf keeps the names' text. */
static int ba_list(const char *opt, const char *v, char *buf, size_t buf_n, char **names,
                   int *ints, long lo, long hi, long mult)
{
    if (!v || !*v || strlen(v) >= buf_n) {
        fprintf(stderr, "strata-cli bench --attention: %s needs a list\n", opt);
        return -1;
    }
    strcpy(buf, v);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == BENCH_ATT_MAX_LIST) {
            fprintf(stderr, "strata-cli bench --attention: %s: more than %d items\n", opt,
                    BENCH_ATT_MAX_LIST);
            return -1;
        }
        if (names) {
            if (strcmp(t, "k8v4") && strcmp(t, "k8v4r") && strcmp(t, "k8v4r2") && strcmp(t, "f16")) {
                fprintf(stderr, "strata-cli bench --attention: --kv '%s': expected k8v4, k8v4r, "
                                "k8v4r2 or f16\n", t);
                return -1;
            }
            names[n++] = t;
            continue;
        }
        long x;
        if (bench_int("--attention", opt, t, lo, hi, &x))
            return -1;
        if (x % mult) {
            fprintf(stderr, "strata-cli bench --attention: %s %ld is not a multiple of %ld\n", opt,
                    x, mult);
            return -1;
        }
        ints[n++] = (int)x;
    }
    if (!n) {
        fprintf(stderr, "strata-cli bench --attention: %s needs a list\n", opt);
        return -1;
    }
    return n;
}

#ifndef STRATA_CUDA

int bench_attention(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    (void)ba_list;
    fprintf(stderr, "bench_attention: built without CUDA (nvcc not found or CUDA=0)\n");
    return 1;
}

#else

#include <cuda_runtime_api.h>

#include "cli/bench/bench_time.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

#define BA_HD 128
#define BA_NKV 8
#define BA_GROUP 4
#define BA_MAX_RUNS 101 /* <= BENCH_MAX_REPS */

#define BA_CHECK(call)                                                                     \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "bench_attention: %s: %s\n", #call, cudaGetErrorString(e_));  \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

/* The launches to time, as a callback over "set" i (which cache copy). */
typedef int (*ba_launch)(void *ctx, int set, cudaStream_t s, strata_error *err);

/* Launch i of the graph takes cache copy (i + 1) % n_sets. */
typedef struct ba_rot {
    ba_launch fn;
    void *ctx;
    int n_sets;
} ba_rot;
static int ba_rot_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    const ba_rot *r = ctx;
    return r->fn(r->ctx, (i + 1) % r->n_sets, s, err);
}

/* Median µs per launch (bench_time.h, shared with bench --kernels): BA_BATCH
 * launches rotating over the n_sets cache copies in one CUDA graph, as the
 * engine runs its decode step.  (Timing single eager launches instead adds
 * the host's enqueue time to short kernels: 4K decode read ~15 us slower
 * that way.) */
#define BA_BATCH 8
static float ba_time(ba_launch fn, void *ctx, int n_sets, int runs, cudaStream_t s)
{
    ba_rot r = {fn, ctx, n_sets};
    return (float)bench_graph_us("bench_attention", ba_rot_launch, &r, BA_BATCH, runs, s);
}

/* ---- the read-bandwidth ceiling ---- */

typedef struct ba_read {
    void *buf;
    size_t bytes;
    unsigned *sink;
} ba_read;

static int ba_read_launch(void *ctx, int set, cudaStream_t s, strata_error *err)
{
    (void)set;
    ba_read *r = ctx;
    return cuda_read_probe(r->buf, r->bytes, r->sink, s, err);
}

/* ---- attention ---- */

typedef struct ba_att {
    kv_view kv;          /* device pools; pages: n_sets rows */
    int pages_per, n_sets, n_tok, max_ctx;
    int32_t *d_pos;      /* per set: position of the first query */
    float *q, *out;
    void *scratch;
    size_t scratch_bytes;
} ba_att;

static int ba_att_launch(void *ctx, int set, cudaStream_t s, strata_error *err)
{
    ba_att *a = ctx;
    kv_view kv = a->kv;
    kv.pages = a->kv.pages + (size_t)set * a->pages_per;
    int n_head = BA_NKV * BA_GROUP;
    return cuda_attention(&kv, a->pages_per, a->d_pos + set, 1, a->n_tok, a->max_ctx, a->q,
                          (int64_t)n_head * BA_HD, n_head, 0.08838834764831845f, a->out,
                          (int64_t)n_head * BA_HD, a->scratch, a->scratch_bytes, s, err);
}

/* Random but valid cache bytes: int8 quants, nibbles, fp16 scales near 0.02. */
static void ba_fill(unsigned char *p, size_t n, int scales, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    if (scales) {
        uint16_t *h = (uint16_t *)p;
        for (size_t i = 0; i < n / 2; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            h[i] = (uint16_t)(0x2500 + (s & 0xff)); /* 0.0195 .. 0.0237 */
        }
        return;
    }
    for (size_t i = 0; i < n; i += 8) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint64_t v = s & 0x7f7f7f7f7f7f7f7full; /* no -128 in the int8 quants */
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

typedef struct ba_ggml {
    int ctx;
    float decode_us, prefill_us;
} ba_ggml;

/* doc/BENCHMARKS.md, "Reference figures" (ggml d99724f, H200, FLASH_ATTN_EXT
 * q8_0/q4_0). */
static const ba_ggml ggml_ref[] = {{4096, 19.9f, 191.0f}, {16384, 67.3f, 712.0f},
                                   {131072, 543.6f, 5170.0f}};

int bench_attention(int argc, char **argv)
{
    int runs = 21, quick = 0;
    int via_kernels = 0; /* run by --kernels, after the weight kernels */
    static char kv_buf[256];
    char *kv_names[BENCH_ATT_MAX_LIST] = {"k8v4"};
    int kv_ctx[BENCH_ATT_MAX_LIST] = {4096, 8192, 32768}, kv_batch[BENCH_ATT_MAX_LIST] = {1};
    int n_kv = 1, n_kv_ctx = 3, n_kv_batch = 1, kv_mode = 0;
    for (int i = 1; i < argc; i++)
        via_kernels |= !strcmp(argv[i], "--kernels");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int kernels_opt = !strcmp(a, "--reps") || !strcmp(a, "--types") || !strcmp(a, "--shapes") ||
                          !strcmp(a, "--mix");
        if (!strcmp(a, "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(a, "--quick"))
            quick = 1;
        else if (!via_kernels && !strcmp(a, "--kv")) {
            if ((n_kv = ba_list(a, i + 1 < argc ? argv[++i] : NULL, kv_buf, sizeof kv_buf,
                                kv_names, NULL, 0, 0, 1)) < 0)
                return 2;
            kv_mode = 1;
        } else if (!via_kernels && !strcmp(a, "--ctx")) {
            char buf[256];
            if ((n_kv_ctx = ba_list(a, i + 1 < argc ? argv[++i] : NULL, buf, sizeof buf, NULL,
                                    kv_ctx, 512, 131072, 512)) < 0)
                return 2;
            kv_mode = 1;
        } else if (!via_kernels && !strcmp(a, "--batch")) {
            char buf[256];
            if ((n_kv_batch = ba_list(a, i + 1 < argc ? argv[++i] : NULL, buf, sizeof buf, NULL,
                                      kv_batch, 1, 64, 1)) < 0)
                return 2;
            kv_mode = 1;
        }
        else if (via_kernels && kernels_opt && i + 1 < argc)
            i++; /* the weight kernels' options, parsed there */
        else if (strcmp(a, "--attention") && strcmp(a, "--kernels") &&
                 !(via_kernels && !strcmp(a, "--json"))) {
            fprintf(stderr, "strata-cli bench --attention: unknown option '%s' (see bench "
                            "--attention --help)\n", a);
            return 2;
        }
    }
    if (runs < 15)
        runs = 15;
    if (runs > BA_MAX_RUNS)
        runs = BA_MAX_RUNS;
    if (kv_mode)
        return bench_attention_kv(kv_names, n_kv, kv_ctx, n_kv_ctx, kv_batch, n_kv_batch, runs);

    int rc = 1;
    cudaStream_t s = NULL;
    ba_read rd = {0};
    ba_att a;
    memset(&a, 0, sizeof a);
    void *pool[4] = {0};
    unsigned char *host = NULL;
    int32_t *pages = NULL, *pos = NULL;
    struct cudaDeviceProp prop;

    BA_CHECK(cudaGetDeviceProperties(&prop, 0));
    BA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("bench_attention: %s, %d SMs, L2 %d MiB; head_dim %d, %d kv heads x %d query heads, "
           "k8v4, median of %d runs\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, BA_HD, BA_NKV, BA_GROUP,
           runs);

    rd.bytes = (size_t)4 << 30;
    BA_CHECK(cudaMalloc(&rd.buf, rd.bytes));
    BA_CHECK(cudaMemset(rd.buf, 0x3c, rd.bytes));
    BA_CHECK(cudaMalloc((void **)&rd.sink, 4096));
    float read_us = ba_time(ba_read_launch, &rd, 1, runs, s);
    double read_gbs = rd.bytes / (read_us * 1e-6) / 1e9;
    printf("read ceiling: 4 GiB streaming 16-byte loads: %.1f us = %.0f GB/s\n", read_us, read_gbs);
    cudaFree(rd.buf);
    rd.buf = NULL;

    const int ctxs_all[] = {4096, 16384, 32768, 131072};
    const int n_ctx = quick ? 2 : 4;
    const int ctxs_quick[] = {4096, 32768};
    const size_t per_tok = (size_t)BA_NKV * (BA_HD + BA_HD / 16 + BA_HD / 2 + BA_HD / 16);
    printf("\n%-8s %-8s %10s %9s %8s   %-30s\n", "context", "kind", "us", "GB/s", "of read",
           "ggml (reference figures)");
    for (int ci = 0; ci < n_ctx; ci++) {
        int ctx = quick ? ctxs_quick[ci] : ctxs_all[ci];
        size_t kv_bytes = per_tok * ctx;
        int n_sets = (int)((((size_t)512 << 20) + kv_bytes - 1) / kv_bytes);
        if (n_sets < 2)
            n_sets = 2;
        int pages_per = ctx / KV_PAGE;
        int n_pages = n_sets * pages_per;
        size_t rows = (size_t)n_pages * BA_NKV * KV_PAGE;
        size_t bytes[4] = {rows * BA_HD, rows * (BA_HD / 32) * 2, rows * BA_HD / 2,
                           rows * (BA_HD / 32) * 2};
        for (int b = 0; b < 4; b++) {
            BA_CHECK(cudaMalloc(&pool[b], bytes[b]));
            host = malloc(bytes[b]);
            if (!host)
                goto fail;
            ba_fill(host, bytes[b], b == 1 || b == 3, 1000 * ci + b);
            BA_CHECK(cudaMemcpy(pool[b], host, bytes[b], cudaMemcpyHostToDevice));
            free(host);
            host = NULL;
        }
        pages = malloc((size_t)n_pages * sizeof *pages);
        if (!pages)
            goto fail;
        /* a scattered permutation: no page follows its neighbour */
        for (int i = 0; i < n_pages; i++)
            pages[i] = i;
        for (int i = n_pages - 1; i > 0; i--) {
            int j = (int)(((uint64_t)i * 2654435761u) % (uint64_t)(i + 1));
            int32_t t = pages[i];
            pages[i] = pages[j];
            pages[j] = t;
        }
        memset(&a, 0, sizeof a);
        a.kv.type = KV_K8V4;
        a.kv.n_kv_head = BA_NKV;
        a.kv.head_dim = BA_HD;
        a.kv.kq = pool[0];
        a.kv.kd = pool[1];
        a.kv.vq = pool[2];
        a.kv.vd = pool[3];
        BA_CHECK(cudaMalloc((void **)&a.kv.pages, (size_t)n_pages * 4));
        BA_CHECK(cudaMemcpy((void *)a.kv.pages, pages, (size_t)n_pages * 4,
                            cudaMemcpyHostToDevice));
        free(pages);
        pages = NULL;
        a.pages_per = pages_per;
        a.n_sets = n_sets;
        a.max_ctx = ctx;
        int n_head = BA_NKV * BA_GROUP;
        size_t qbytes = (size_t)512 * n_head * BA_HD * 4;
        BA_CHECK(cudaMalloc((void **)&a.q, qbytes));
        BA_CHECK(cudaMalloc((void **)&a.out, qbytes));
        host = malloc(qbytes);
        if (!host)
            goto fail;
        for (size_t i = 0; i < qbytes / 4; i++)
            ((float *)host)[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
        BA_CHECK(cudaMemcpy(a.q, host, qbytes, cudaMemcpyHostToDevice));
        free(host);
        host = NULL;
        a.scratch_bytes = cuda_attention_scratch_bytes(&a.kv, n_head, 1, ctx);
        BA_CHECK(cudaMalloc(&a.scratch, a.scratch_bytes));
        BA_CHECK(cudaMemset(a.scratch, 0, a.scratch_bytes));
        pos = malloc((size_t)n_sets * 4);
        if (!pos)
            goto fail;
        BA_CHECK(cudaMalloc((void **)&a.d_pos, (size_t)n_sets * 4));

        const ba_ggml *gr = NULL;
        for (size_t i = 0; i < sizeof ggml_ref / sizeof ggml_ref[0]; i++)
            if (ggml_ref[i].ctx == ctx)
                gr = &ggml_ref[i];

        /* decode: one query at ctx - 1 */
        for (int i = 0; i < n_sets; i++)
            pos[i] = ctx - 1;
        BA_CHECK(cudaMemcpy(a.d_pos, pos, (size_t)n_sets * 4, cudaMemcpyHostToDevice));
        a.n_tok = 1;
        float us = ba_time(ba_att_launch, &a, n_sets, runs, s);
        double gbs = kv_bytes / (us * 1e-6) / 1e9;
        char gtxt[64] = "-";
        if (gr)
            snprintf(gtxt, sizeof gtxt, "%.1f us (%.0f GB/s): %.1fx", gr->decode_us,
                     kv_bytes / (gr->decode_us * 1e-6) / 1e9, gr->decode_us / us);
        printf("%-8d %-8s %10.1f %9.0f %7.1f%%   %-30s\n", ctx, "decode", us, gbs,
               100.0 * gbs / read_gbs, gtxt);

        /* prefill: 512 queries ending at ctx - 1 */
        for (int i = 0; i < n_sets; i++)
            pos[i] = ctx - 512;
        BA_CHECK(cudaMemcpy(a.d_pos, pos, (size_t)n_sets * 4, cudaMemcpyHostToDevice));
        a.n_tok = 512;
        us = ba_time(ba_att_launch, &a, n_sets, runs, s);
        double flops = 4.0 * n_head * BA_HD * 512.0 * (ctx - 256.0); /* QK + PV, causal */
        snprintf(gtxt, sizeof gtxt, "-");
        if (gr)
            snprintf(gtxt, sizeof gtxt, "%.0f us: %.2fx", gr->prefill_us, gr->prefill_us / us);
        printf("%-8d %-8s %10.1f %8.1fT %8s   %-30s\n", ctx, "prefill", us, flops / (us * 1e-6) / 1e12,
               "", gtxt);

        /* the decode chunk, swept (lab) */
        if (ctx >= 32768) {
            for (int i = 0; i < n_sets; i++)
                pos[i] = ctx - 1;
            BA_CHECK(cudaMemcpy(a.d_pos, pos, (size_t)n_sets * 4, cudaMemcpyHostToDevice));
            a.n_tok = 1;
            const int chunks[] = {512, 2048, 4096};
            for (int k = 0; k < 3; k++) {
                cuda_attention_set_chunk(chunks[k]);
                size_t need = cuda_attention_scratch_bytes(&a.kv, n_head, 1, ctx);
                if (need > a.scratch_bytes) {
                    cudaFree(a.scratch);
                    BA_CHECK(cudaMalloc(&a.scratch, need));
                    BA_CHECK(cudaMemset(a.scratch, 0, need));
                    a.scratch_bytes = need;
                }
                us = ba_time(ba_att_launch, &a, n_sets, runs, s);
                gbs = kv_bytes / (us * 1e-6) / 1e9;
                printf("%-8d chunk%-4d%9.1f %9.0f %7.1f%%\n", ctx, chunks[k], us, gbs,
                       100.0 * gbs / read_gbs);
            }
            cuda_attention_set_chunk(0);
        }

        free(pos);
        pos = NULL;
        cudaFree(a.d_pos);
        cudaFree(a.scratch);
        cudaFree(a.q);
        cudaFree(a.out);
        cudaFree((void *)a.kv.pages);
        for (int b = 0; b < 4; b++) {
            cudaFree(pool[b]);
            pool[b] = NULL;
        }
        memset(&a, 0, sizeof a);
    }
    rc = 0;
fail:
    free(host);
    free(pages);
    free(pos);
    for (int b = 0; b < 4; b++)
        if (pool[b])
            cudaFree(pool[b]);
    if (rd.buf)
        cudaFree(rd.buf);
    if (rd.sink)
        cudaFree(rd.sink);
    if (s)
        cudaStreamDestroy(s);
    return rc;
}

#endif
