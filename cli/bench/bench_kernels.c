/* bench_kernels.c: `strata-cli bench --kernels` — the weight kernels against
 * the card's own read bandwidth and against ggml's figures
 * (doc/BENCHMARKS.md, "Reference figures").
 *
 * Called by cmd_bench as bench_kernels(argc, argv); options:
 *   --json            one JSON object instead of the table
 *   --types a,b,...   weight types (default iq3_xxs,q2_0,q4_0,q8_0)
 *   --reps N          timed runs per measurement (default 20, at least 15)
 *   --shapes RxC[xN],...  these shapes instead of the standard set (N: tokens, 1)
 *   --mix T:R+T:R..xC[xN]  a mixed stack (cuda_matmul_mix: parts of these
 *                     types and rows, C columns) as one launch against its
 *                     parts launched one by one (n = 1 and 8 unless N)
 *
 * Method (METHOD.md): the read bandwidth is measured in the same run with a
 * 16-byte-load streaming kernel over 4 GiB.  Timing is bench_time.h's, shared
 * with --attention: the launches captured in one CUDA graph, so host launch
 * overhead is not in the numbers (the engine replays graphs too), warm-up
 * replays, then the median of N replays between events, per launch.
 * Weights rotate through enough copies (>= 256 MiB in all, >= 2 copies) that
 * L2 (60 MiB on the H200) never holds the matrix a launch reads.  Weights are
 * random valid blocks, activations random normals: never zeros. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "model/quant.h"

void bench_kernels_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --kernels [--types T1,T2,..] [--shapes RxC[xN],..]\n"
               "                        [--reps N] [--json] [attention options]\n\n"
               "The CUDA weight kernels (matvec; matmul for shapes with N columns) per type\n"
               "and shape, against the card's read bandwidth; then the attention bench\n"
               "(bench --attention, its options below).  Needs a CUDA build and a card.\n\n"
               "  --types T1,T2,..        weight types, any the card runs (default iq3_xxs,q2_0,q4_0,q8_0)\n"
               "  --shapes RxC[xN],..     shapes instead of the standard set (at most 16)\n"
               "  --mix T:R+T:R..xC[xN]   a mixed stack (e.g. iq2_s:4096+iq2_s:1024+q4_k:1024x4096) as one\n"
               "                          launch and as its parts one by one\n"
               "  --reps N                timed runs per figure, 15..200 (default 20)\n"
               "  --json                  print JSON lines instead of the table\n\n");
}

#ifndef STRATA_CUDA

int bench_kernels(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench --kernels: strata was built without CUDA\n");
    return 1;
}

#else

#include <cuda_runtime_api.h>

#include "cli/bench/bench_time.h"
#include "kernels/cuda/cuda_ops.h"

#define BK_MAX_REPS BENCH_MAX_REPS

/* ggml's figures on the H200 (us; doc/BENCHMARKS.md, "Reference figures"):
 * n=1 at 131072x4096, n=1 at 4096x14336, n=8 at 4096x14336, n=512 at
 * 4096x14336. */
typedef struct bk_ggml {
    int type;
    double n1_big, n1, n8, n512;
} bk_ggml;
static const bk_ggml bk_ggml_us[] = {
    {GGML_TYPE_IQ3_XXS, 185.3, 19.65, 42.0, 337.8},
    {GGML_TYPE_Q2_0, 124.9, 11.73, 32.3, 291.2},
    {GGML_TYPE_Q4_0, 133.1, 14.44, 32.9, 310.2},
    {GGML_TYPE_Q8_0, 197.1, 23.00, 45.5, 311.9},
};

static const bk_ggml *bk_ggml_of(int type)
{
    for (size_t i = 0; i < sizeof bk_ggml_us / sizeof bk_ggml_us[0]; i++)
        if (bk_ggml_us[i].type == type)
            return &bk_ggml_us[i];
    return NULL;
}

#define BK_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench --kernels: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorString(e_));                                                       \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* One launch of the thing being timed, for launch i of a graph (selects the
 * rotating copy). */
typedef bench_launch bk_launch;

/* Median microseconds per launch (bench_time.h).  per_graph launches per
 * replay: a matrix's every copy once, so a replay reads >= 256 MiB and L2
 * holds none of them when it comes round again. */
static double bk_time(bk_launch fn, void *ctx, int per_graph, int reps, cudaStream_t s)
{
    return bench_graph_us("bench --kernels", fn, ctx, per_graph, reps, s);
}

/* ---- the read probe ------------------------------------------------------- */
typedef struct bk_probe {
    const void *buf;
    size_t bytes;
    uint32_t *sink;
} bk_probe;
static int bk_probe_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    (void)i;
    bk_probe *p = ctx;
    return cuda_read_probe(p->buf, p->bytes, p->sink, s, err);
}

/* ---- weight kernels -------------------------------------------------------- */
typedef struct bk_mat {
    int type;
    int64_t rows, cols, n;
    int copies;
    uint8_t *w;      /* copies x wbytes, device layout */
    size_t wbytes;
    float *x, *y;    /* device */
    void *scratch;
    size_t scratch_bytes;
} bk_mat;

static int bk_mat_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    bk_mat *m = ctx;
    const void *w = m->w + (size_t)(i % m->copies) * m->wbytes;
    if (m->n <= 8)
        return cuda_matvec(m->type, w, m->rows, m->cols, m->x, (int)m->n, m->y, s, err);
    return cuda_matmul(m->type, w, m->rows, m->cols, m->x, m->n, m->y, m->scratch, m->scratch_bytes, s, err);
}

static uint64_t bk_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random valid weights in ggml layout with small finite fp16 scales. */
static uint8_t *bk_weights(int type, int64_t rows, int64_t cols, size_t *bytes)
{
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *w = malloc(nb);
    if (!w)
        return NULL;
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)type;
    for (size_t i = 0; i + 8 <= nb; i += 8) {
        const uint64_t v = bk_rand(&s);
        memcpy(w + i, &v, 8);
    }
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_F32) {
        for (size_t i = 0; i < nb; i += (size_t)t->bytes) {
            const float v = (float)((int64_t)(bk_rand(&s) % 2001) - 1000) * 1e-5f + 1e-6f;
            if (type != GGML_TYPE_F32) {
                const uint16_t h = type == GGML_TYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
                memcpy(w + i, &h, 2);
            } else {
                memcpy(w + i, &v, 4);
            }
        }
    } else {
        int offs[2];
        const int ns = type_fp16_scales(type, offs); /* d (and dmin / m) wherever the block has them */
        for (size_t b = 0; b < nb / t->bytes; b++)
            for (int k = 0; k < ns; k++) {
                const uint16_t h = f32_to_fp16(0.001f + (float)(bk_rand(&s) % 1000) * 1e-5f);
                memcpy(w + b * t->bytes + offs[k], &h, 2);
            }
    }
    *bytes = nb;
    return w;
}

typedef struct bk_row {
    const char *kernel;
    int type;
    int64_t rows, cols, n;
    double us, ggml_us;
    double gbps, frac;    /* matvec: weight+activation bytes / time, / measured bandwidth */
    double tflops, ggml_tflops;
} bk_row;

/* Time one shape; fills *r. */
static int bk_run(int type, int64_t rows, int64_t cols, int64_t n, double ggml_us, double bw, int reps,
                  cudaStream_t s, bk_row *r)
{
    bk_mat m = {0};
    size_t gbytes = 0;
    uint8_t *hw = NULL, *packed = NULL;
    float *hx = NULL;
    int rc = -1;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.n = n;
    m.wbytes = cuda_weight_bytes(type, rows, cols);
    if (!m.wbytes)
        return -1;
    m.copies = (int)((256u << 20) / m.wbytes + 1);
    if (m.copies < 2)
        m.copies = 2;
    hw = bk_weights(type, rows, cols, &gbytes);
    packed = malloc(m.wbytes);
    hx = malloc((size_t)(n * cols) * sizeof *hx);
    if (!hw || !packed || !hx)
        goto fail;
    strata_error err = {0};
    if (cuda_weight_pack(type, rows, cols, hw, packed, &err)) {
        fprintf(stderr, "bench --kernels: %s\n", err.msg);
        goto fail;
    }
    uint64_t st = 12345;
    for (int64_t i = 0; i < n * cols; i++)
        hx[i] = (float)((int64_t)(bk_rand(&st) % 2001) - 1000) * 1e-3f + 1e-4f;
    BK_CHECK(cudaMalloc((void **)&m.w, m.wbytes * (size_t)m.copies));
    for (int c = 0; c < m.copies; c++)
        BK_CHECK(cudaMemcpy(m.w + (size_t)c * m.wbytes, packed, m.wbytes, cudaMemcpyHostToDevice));
    BK_CHECK(cudaMalloc((void **)&m.x, (size_t)(n * cols) * sizeof(float)));
    BK_CHECK(cudaMalloc((void **)&m.y, (size_t)(n * rows) * sizeof(float)));
    BK_CHECK(cudaMemcpy(m.x, hx, (size_t)(n * cols) * sizeof(float), cudaMemcpyHostToDevice));
    m.scratch_bytes = cuda_matmul_scratch_bytes(type, cols, n);
    if (m.scratch_bytes)
        BK_CHECK(cudaMalloc(&m.scratch, m.scratch_bytes));
    const int per_graph = m.copies < 8 ? 8 : m.copies > 256 ? 256 : m.copies;
    const double us = bk_time(bk_mat_launch, &m, per_graph, reps, s);
    if (us <= 0)
        goto fail;
    memset(r, 0, sizeof *r);
    r->kernel = n <= 8 ? "matvec" : "matmul";
    r->type = type;
    r->rows = rows;
    r->cols = cols;
    r->n = n;
    r->us = us;
    r->ggml_us = ggml_us;
    /* the bytes a launch must move: the GGUF weight bytes, x in, y out */
    const double bytes = (double)gbytes + 4.0 * (double)(n * cols + n * rows);
    r->gbps = bytes / (us * 1e3);
    r->frac = bw > 0 ? r->gbps / bw : 0;
    r->tflops = 2.0 * (double)rows * (double)cols * (double)n / (us * 1e6);
    r->ggml_tflops = ggml_us > 0 ? 2.0 * (double)rows * (double)cols * (double)n / (ggml_us * 1e6) : 0;
    rc = 0;
fail:
    cudaFree(m.w);
    cudaFree(m.x);
    cudaFree(m.y);
    cudaFree(m.scratch);
    free(hw);
    free(packed);
    free(hx);
    return rc;
}

/* ---- a mixed stack: one launch against its parts one by one --------------- */
typedef struct bk_mix {
    cuda_mix m;
    int64_t cols, n, rows;
    int copies, separate;
    uint8_t *w;   /* copies x bytes: the parts one after another */
    size_t bytes, off[CUDA_MIX_MAX];
    float *x, *y;
} bk_mix;

static int bk_mix_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    bk_mix *b = ctx;
    cuda_mix m = b->m;
    for (int k = 0; k < m.n; k++)
        m.w[k] = b->w + (size_t)(i % b->copies) * b->bytes + b->off[k];
    if (!b->separate)
        return cuda_matmul_mix(&m, b->cols, b->x, b->n, b->y, NULL, 0, s, err);
    int64_t r0 = 0;
    for (int k = 0; k < m.n; k++) { /* each part's rows alone: n x rows_k, then the next */
        const int rc = cuda_matvec(m.type[k], m.w[k], m.rows[k], b->cols, b->x, (int)b->n, b->y + r0 * b->n, s, err);
        if (rc)
            return rc;
        r0 += m.rows[k];
    }
    return 0;
}

/* "T:R+T:R..xC[xN]" -> b (types, rows, cols, n; n 0 when not given) */
static int bk_parse_mix(const char *spec, bk_mix *b)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    if (!buf[0])
        return -1;
    char *x = buf; /* the first 'x' after a digit (type names hold x's: iq2_xs) */
    while ((x = strchr(x + 1, 'x')) && !(x[-1] >= '0' && x[-1] <= '9'))
        ;
    if (!x)
        return -1;
    *x++ = 0;
    long long c = 0, n = 0;
    if (sscanf(x, "%lld", &c) != 1 || c < 1)
        return -1;
    const char *x2 = strchr(x, 'x');
    if (x2 && (sscanf(x2 + 1, "%lld", &n) != 1 || n < 1 || n > 8))
        return -1;
    memset(b, 0, sizeof *b);
    b->cols = c;
    b->n = n;
    for (char *tok = strtok(buf, "+"); tok; tok = strtok(NULL, "+")) {
        char *colon = strchr(tok, ':');
        if (!colon || b->m.n == CUDA_MIX_MAX)
            return -1;
        *colon = 0;
        const type_traits *t = type_traits_by_name(tok);
        const long long r = atoll(colon + 1);
        if (!t || r < 1)
            return -1;
        b->m.type[b->m.n] = t->id;
        b->m.rows[b->m.n++] = r;
        b->rows += r;
    }
    return cuda_mix_supported(b->m.type, b->m.rows, b->m.n, b->cols) ? 0 : -1;
}

/* Time the stack (one launch) and its parts (one launch each) at n tokens;
 * prints one line each. */
static int bk_run_mix(const bk_mix *spec, int64_t n, double bw, int reps, cudaStream_t s, int json)
{
    bk_mix b = *spec;
    b.n = n;
    size_t gbytes = 0;
    int rc = -1;
    uint8_t *packed = NULL;
    float *hx = NULL;
    for (int k = 0; k < b.m.n; k++) {
        b.off[k] = b.bytes;
        b.bytes += (cuda_weight_bytes(b.m.type[k], b.m.rows[k], b.cols) + 255) / 256 * 256;
    }
    b.copies = (int)((256u << 20) / b.bytes + 1);
    if (b.copies < 2)
        b.copies = 2;
    packed = calloc(1, b.bytes);
    hx = malloc((size_t)(n * b.cols) * sizeof *hx);
    if (!packed || !hx)
        goto fail;
    strata_error err = {0};
    for (int k = 0; k < b.m.n; k++) {
        size_t gb = 0;
        uint8_t *hw = bk_weights(b.m.type[k], b.m.rows[k], b.cols, &gb);
        if (!hw)
            goto fail;
        const int prc = cuda_weight_pack(b.m.type[k], b.m.rows[k], b.cols, hw, packed + b.off[k], &err);
        free(hw);
        if (prc) {
            fprintf(stderr, "bench --kernels: %s\n", err.msg);
            goto fail;
        }
        gbytes += gb;
    }
    uint64_t st = 777;
    for (int64_t i = 0; i < n * b.cols; i++)
        hx[i] = (float)((int64_t)(bk_rand(&st) % 2001) - 1000) * 1e-3f + 1e-4f;
    BK_CHECK(cudaMalloc((void **)&b.w, b.bytes * (size_t)b.copies));
    for (int c = 0; c < b.copies; c++)
        BK_CHECK(cudaMemcpy(b.w + (size_t)c * b.bytes, packed, b.bytes, cudaMemcpyHostToDevice));
    BK_CHECK(cudaMalloc((void **)&b.x, (size_t)(n * b.cols) * sizeof(float)));
    BK_CHECK(cudaMalloc((void **)&b.y, (size_t)(n * b.rows) * sizeof(float)));
    BK_CHECK(cudaMemcpy(b.x, hx, (size_t)(n * b.cols) * sizeof(float), cudaMemcpyHostToDevice));
    const int per_graph = b.copies < 8 ? 8 : b.copies > 256 ? 256 : b.copies;
    char name[160] = "";
    for (int k = 0; k < b.m.n; k++)
        snprintf(name + strlen(name), sizeof name - strlen(name), "%s%s:%lld", k ? "+" : "",
                 type_name(b.m.type[k]), (long long)b.m.rows[k]);
    const double bytes = (double)gbytes + 4.0 * (double)(n * b.cols + n * b.rows);
    for (int sep = 0; sep < 2; sep++) {
        b.separate = sep;
        const double us = bk_time(bk_mix_launch, &b, per_graph, reps, s);
        if (us <= 0)
            goto fail;
        const double gbps = bytes / (us * 1e3);
        if (json)
            printf("{\"kernel\": \"%s\", \"parts\": \"%s\", \"cols\": %lld, \"n\": %lld, \"us\": %.2f, "
                   "\"gbps\": %.1f, \"bw_frac\": %.3f}\n",
                   sep ? "parts" : "mix", name, (long long)b.cols, (long long)n, us, gbps, bw > 0 ? gbps / bw : 0);
        else
            printf("%-5s %s x %lld n=%lld: %.2f us (%s), %.0f GB/s, %.1f%% of bw\n", sep ? "parts" : "mix", name,
                   (long long)b.cols, (long long)n, us, sep ? "one launch per part" : "one launch", gbps,
                   bw > 0 ? 100 * gbps / bw : 0);
    }
    rc = 0;
fail:
    cudaFree(b.w);
    cudaFree(b.x);
    cudaFree(b.y);
    free(packed);
    free(hx);
    return rc;
}

typedef struct bk_shape {
    int64_t rows, cols, n;
    double ggml; /* ggml's microseconds (reference figures), 0: none */
} bk_shape;

/* "ROWSxCOLS[xN],..." (N defaults to 1) into out; the count, or -1. */
static int bk_parse_shapes(const char *spec, bk_shape *out, int max)
{
    int n = 0;
    const char *p = spec;
    while (*p) {
        long long r = 0, c = 0, k = 1;
        int used = 0;
        if (n == max || sscanf(p, "%lldx%lld%n", &r, &c, &used) != 2 || r < 1 || c < 1)
            return -1;
        p += used;
        if (*p == 'x' && (sscanf(p, "x%lld%n", &k, &used) != 1 || k < 1))
            return -1;
        if (*p == 'x')
            p += used;
        out[n++] = (bk_shape){r, c, k, 0};
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return n;
}

int bench_kernels(int argc, char **argv)
{
    int json = 0, reps = 20;
    int types[32] = {GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_0, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0};
    int ntypes = 4, types_given = 0;
    bk_shape custom[16];
    int ncustom = 0;
    bk_mix mixes[4];
    int nmix = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            ntypes = 0;
            types_given = 1;
            for (char *tok = strtok(buf, ","); tok && ntypes < 32; tok = strtok(NULL, ",")) {
                const type_traits *t = type_traits_by_name(tok);
                if (!t || !cuda_weight_supported(t->id)) {
                    fprintf(stderr, "bench --kernels: type '%s' has no CUDA weight kernel\n", tok);
                    return 2;
                }
                types[ntypes++] = t->id;
            }
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            ncustom = bk_parse_shapes(argv[++i], custom, 16);
            if (ncustom <= 0) {
                fprintf(stderr, "bench --kernels: --shapes '%s': want ROWSxCOLS[xN],... (at most 16)\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--mix") && i + 1 < argc) {
            if (nmix == 4 || bk_parse_mix(argv[++i], &mixes[nmix])) {
                fprintf(stderr, "bench --kernels: --mix '%s': want TYPE:ROWS+TYPE:ROWS..xCOLS[xN] of block-tile "
                        "types that stack (at most 4 --mix)\n", argv[i]);
                return 2;
            }
            nmix++;
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            i++; /* the attention bench's, which runs after this one */
        } else if (strcmp(argv[i], "--kernels") != 0 && strcmp(argv[i], "--quick") != 0) {
            fprintf(stderr, "bench --kernels: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (reps < 15)
        reps = 15;
    if (reps > BK_MAX_REPS)
        reps = BK_MAX_REPS;

    cudaStream_t s = NULL;
    struct cudaDeviceProp prop;
    void *probe = NULL;
    uint32_t *sink = NULL;
    void *mv_scratch = NULL; /* the matvecs' segment fold, as the engine attaches it */
    bk_row rows_out[192];
    int nrows = 0, rc = 1;
    int dev = 0;
    BK_CHECK(cudaGetDevice(&dev));
    BK_CHECK(cudaGetDeviceProperties(&prop, dev));
    BK_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    BK_CHECK(cudaMalloc(&mv_scratch, CUDA_MATVEC_SCRATCH_BYTES));
    {
        strata_error e;
        if (cuda_matvec_attach_scratch(s, mv_scratch, CUDA_MATVEC_SCRATCH_BYTES, &e)) {
            fprintf(stderr, "bench --kernels: %s\n", e.msg);
            goto fail;
        }
    }

    /* the card's read bandwidth, 4 GiB (>= 2 GiB asked; 68x the L2) */
    const size_t pbytes = (size_t)4 << 30;
    BK_CHECK(cudaMalloc(&probe, pbytes));
    BK_CHECK(cudaMalloc((void **)&sink, sizeof *sink));
    BK_CHECK(cudaMemset(probe, 0x5a, pbytes));
    bk_probe pr = {probe, pbytes, sink};
    const double probe_us = bk_time(bk_probe_launch, &pr, 1, reps, s); /* 4 GiB a launch */
    cudaFree(probe);
    probe = NULL;
    if (probe_us <= 0)
        goto fail;
    const double bw = (double)pbytes / (probe_us * 1e3);

    for (int k = 0; k < nmix; k++)
        for (int64_t n = mixes[k].n ? mixes[k].n : 1; n <= (mixes[k].n ? mixes[k].n : 8); n += 7)
            if (bk_run_mix(&mixes[k], n, bw, reps, s, json))
                fprintf(stderr, "bench --kernels: --mix %d failed\n", k);

    if (nmix && !types_given && !ncustom)
        ntypes = 0; /* --mix alone: only the stacks */
    for (int ti = 0; ti < ntypes; ti++) {
        const int type = types[ti];
        const bk_ggml *g = bk_ggml_of(type);
        bk_shape std_shapes[] = {
            {131072, 4096, 1, g ? g->n1_big : 0}, {4096, 14336, 1, g ? g->n1 : 0},
            {4096, 14336, 2, 0},                  {4096, 14336, 4, 0},
            {4096, 14336, 8, g ? g->n8 : 0},      {4096, 14336, 512, g ? g->n512 : 0},
        };
        const bk_shape *shapes = ncustom ? custom : std_shapes;
        const size_t nshapes = ncustom ? (size_t)ncustom : sizeof std_shapes / sizeof std_shapes[0];
        for (size_t k = 0; k < nshapes && nrows < 192; k++) {
            if (bk_run(type, shapes[k].rows, shapes[k].cols, shapes[k].n, shapes[k].ggml, bw, reps, s,
                       &rows_out[nrows]) == 0)
                nrows++;
            else
                fprintf(stderr, "bench --kernels: %s %lldx%lld n=%lld failed\n", type_name(type),
                        (long long)shapes[k].rows, (long long)shapes[k].cols, (long long)shapes[k].n);
        }
    }

    if (json) {
        printf("{\"device\": \"%s\", \"sms\": %d, \"read_gbps\": %.1f, \"reps\": %d, \"results\": [", prop.name,
               prop.multiProcessorCount, bw, reps);
        for (int i = 0; i < nrows; i++) {
            const bk_row *r = &rows_out[i];
            printf("%s\n  {\"kernel\": \"%s\", \"type\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"n\": %lld, "
                   "\"us\": %.2f, \"gbps\": %.1f, \"bw_frac\": %.3f, \"tflops\": %.1f, \"ggml_us\": %.2f, "
                   "\"ggml_tflops\": %.1f}",
                   i ? "," : "", r->kernel, type_name(r->type), (long long)r->rows, (long long)r->cols,
                   (long long)r->n, r->us, r->gbps, r->frac, r->tflops, r->ggml_us, r->ggml_tflops);
        }
        printf("\n]}\n");
    } else {
        printf("strata bench --kernels: %s, %d SMs; median of %d graph-replayed launches, weights rotated "
               "out of L2\n",
               prop.name, prop.multiProcessorCount, reps);
        printf("read bandwidth (16-byte loads over 4 GiB): %.0f GB/s\n\n", bw);
        printf("%-7s %-8s %-13s %4s %9s %8s %6s %8s %9s %8s\n", "kernel", "type", "rows x cols", "n", "us",
               "GB/s", "of bw", "TFLOP/s", "ggml us", "x ggml");
        for (int i = 0; i < nrows; i++) {
            const bk_row *r = &rows_out[i];
            char shape[32];
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)r->rows, (long long)r->cols);
            printf("%-7s %-8s %-13s %4lld %9.2f %8.0f %5.1f%% %8.1f ", r->kernel, type_name(r->type), shape,
                   (long long)r->n, r->us, r->gbps, 100 * r->frac, r->tflops);
            if (r->ggml_us > 0)
                printf("%9.2f %7.2fx\n", r->ggml_us, r->ggml_us / r->us);
            else
                printf("%9s %8s\n", "-", "-");
        }
    }
    rc = 0;
fail:
    cudaFree(probe);
    cudaFree(sink);
    if (mv_scratch)
        cuda_matvec_attach_scratch(s, NULL, 0, NULL);
    cudaFree(mv_scratch);
    if (s)
        cudaStreamDestroy(s);
    return rc;
}

#endif
