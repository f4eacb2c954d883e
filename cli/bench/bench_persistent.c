/* bench_persistent.c: `strata-cli bench --persistent` — the persistent
 * decode experiment (doc/cuda-kernels.md, "The persistent kernel"): the
 * 8B layer's weight matvecs at batch 1, L layers of distinct random
 * weights, run (a) as today's kernels, one launch per matvec and the
 * residual add, captured in a CUDA graph with programmatic dependent launch,
 * and (b) as one persistent launch (cuda_mvchain).  Per layer:
 *   qkv = Wqkv x            6144 x 4096
 *   a   = Wo qkv[0:4096]    4096 x 4096   (q standing in for the attention)
 *   gu  = Wgu a             28672 x 4096  (gate | up)
 *   x'  = x + Wd swiglu(gu) 4096 x 14336  (SwiGLU fused, then the residual)
 * GB/s counts the GGUF weight bytes a step reads; the read probe
 * (bench --kernels') is measured in the same run.  Then every output of
 * (b) is compared with (a)'s bit for bit.  Options:
 *   --layers L          layers (default 32: ~2.7 GB of IQ3_XXS)
 *   --type T            iq3_xxs (default) or q2_0
 *   --reps N            timed runs (default 20)
 *   --depth D           (b)'s ring depth in tiles: 0 the decode kernel's (IQ3_XXS
 *                       4, Q2_0 12), or IQ3_XXS 5, Q2_0 16
 *   --ahead N           (b) asks L2 for each warp's tiles N items ahead (0: no)
 *   --l2-tiles N        (b) asks L2 for each warp's tile N tiles past its ring (0: no)
 *   --no-pdl            (a) without programmatic dependent launch */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "model/quant.h"

void bench_persistent_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --persistent [--layers L] [--type iq3_xxs|q2_0] [--reps N] [--depth D] [--ahead N]\n                                   [--l2-tiles N] [--no-pdl]\n\n"
               "The 8B layer's weight matvecs at batch 1 (q|k|v, o, gate|up, down with the SwiGLU\n"
               "and the residual add), L layers of random weights: today's kernels in a CUDA graph\n"
               "against one persistent launch (doc/cuda-kernels.md, \"The persistent kernel\"),\n"
               "GB/s of the weights against the card's read bandwidth, and the two runs' outputs\n"
               "compared bit for bit.  Needs a CUDA build and a card.\n\n"
               "  --layers L     layers, 1..64 (default 32)\n"
               "  --type T       iq3_xxs (default) or q2_0\n"
               "  --reps N       timed runs, 15..200 (default 20)\n"
               "  --depth D      the persistent kernel's ring of tiles per warp: 0 (default) the decode\n"
               "                 kernel's (iq3_xxs 4, q2_0 12), or iq3_xxs 5, q2_0 16\n"
               "  --ahead N      the persistent kernel prefetches each warp's tiles of the item N\n"
               "                 items ahead into L2, 0..8 (default 0: none)\n"
               "  --l2-tiles N   the persistent kernel prefetches into L2 each warp's tile N tiles past\n"
               "                 the ones its ring copies, 0..64 (default 0: none)\n"
               "  --no-pdl       the separate kernels without programmatic dependent launch\n\n");
}

#ifndef STRATA_CUDA

int bench_persistent(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench --persistent: strata was built without CUDA\n");
    return 1;
}

#else

#include <cuda_runtime_api.h>

#include "cli/bench/bench_time.h"
#include "kernels/cuda/cuda_ops.h"

#define BP_DIM 4096
#define BP_QKV 6144
#define BP_FF 14336
#define BP_MAX_LAYERS 64

/* The four matrices of a layer: rows and columns. */
static const int64_t bp_shape[4][2] = {{BP_QKV, BP_DIM}, {BP_DIM, BP_DIM}, {2 * BP_FF, BP_DIM}, {BP_DIM, BP_FF}};

/* One run's outputs, layer by layer: q|k|v, o, gate|up, the next x. */
typedef struct bp_out {
    float *qkv[BP_MAX_LAYERS], *a[BP_MAX_LAYERS], *gu[BP_MAX_LAYERS], *xn[BP_MAX_LAYERS];
} bp_out;

typedef struct bp_ctx {
    int type, layers;
    void *w[BP_MAX_LAYERS][4]; /* the card's layout */
    float *x0;
    bp_out sep, per;
    cuda_mvchain *chain;
} bp_ctx;

static const float *bp_x(const bp_out *o, const bp_ctx *c, int l) { return l ? o->xn[l - 1] : c->x0; }

/* (a): one launch per matvec and the add, as the engine's decode step runs them */
static int bp_separate(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    (void)i;
    bp_ctx *c = ctx;
    const bp_out *o = &c->sep;
    int rc = 0;
    for (int l = 0; l < c->layers && !rc; l++) {
        const float *x = bp_x(o, c, l);
        rc = cuda_matvec(c->type, c->w[l][0], BP_QKV, BP_DIM, x, 1, o->qkv[l], s, err);
        if (!rc)
            rc = cuda_matvec(c->type, c->w[l][1], BP_DIM, BP_DIM, o->qkv[l], 1, o->a[l], s, err);
        if (!rc)
            rc = cuda_matvec(c->type, c->w[l][2], 2 * BP_FF, BP_DIM, o->a[l], 1, o->gu[l], s, err);
        if (!rc)
            rc = cuda_matvec_swiglu(c->type, c->w[l][3], BP_DIM, BP_FF, NULL, 1, o->gu[l], o->gu[l] + BP_FF,
                                    2 * BP_FF, o->xn[l], s, err);
        if (!rc)
            rc = cuda_add(o->xn[l], x, BP_DIM, s, err);
    }
    return rc;
}

/* (b): the same steps as one persistent launch */
static int bp_persistent(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    (void)i;
    return cuda_mvchain_run(((bp_ctx *)ctx)->chain, s, err);
}

/* the read probe, as bench --kernels times it: 4 GiB of 16-byte loads */
typedef struct bp_probe {
    const void *buf;
    size_t bytes;
    uint32_t *sink;
} bp_probe;
static int bp_probe_launch(void *ctx, int i, cudaStream_t s, strata_error *err)
{
    (void)i;
    const bp_probe *p = ctx;
    return cuda_read_probe(p->buf, p->bytes, p->sink, s, err);
}

static uint64_t bp_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random valid blocks whose fp16 scales make a weight's rms about
 * 1/sqrt(cols) (IQ3_XXS: |w| ~ 160 d on average; Q2_0, ternary: 0.71 d), so
 * the chain's values stay finite over 64 layers without norms. */
static uint8_t *bp_weights(int type, int64_t rows, int64_t cols, uint64_t seed, size_t *bytes)
{
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *w = malloc(nb);
    if (!w)
        return NULL;
    uint64_t s = 0x9e3779b97f4a7c15ull ^ seed * 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i + 8 <= nb; i += 8) {
        const uint64_t v = bp_rand(&s);
        memcpy(w + i, &v, 8);
    }
    if (type == GGML_TYPE_Q2_0) /* codes 0..2 only (-d, 0, +d: mean 0, as ggml's quantizer writes them) */
        for (size_t i = 0; i < nb; i++)
            if (i % t->bytes >= 2) /* the 2-byte d first, then 16 bytes of codes */
                for (int k = 0; k < 8; k += 2)
                    if (((w[i] >> k) & 3) == 3)
                        w[i] = (uint8_t)(w[i] & ~(2u << k)); /* 3 -> 1 */
    const double d0 = (type == GGML_TYPE_IQ3_XXS ? 1.0 / 160 : 1.0 / 0.71) / sqrt((double)cols);
    int offs[2];
    const int ns = type_fp16_scales(type, offs);
    for (size_t b = 0; b < nb / t->bytes; b++)
        for (int k = 0; k < ns; k++) {
            const uint16_t h = f32_to_fp16((float)(d0 * (0.5 + (double)(bp_rand(&s) % 1000) / 1000.0)));
            memcpy(w + b * t->bytes + offs[k], &h, 2);
        }
    *bytes = nb;
    return w;
}

#define BP_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench --persistent: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
                    cudaGetErrorString(e_));                                                       \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static int bp_alloc_out(bp_out *o, int layers)
{
    for (int l = 0; l < layers; l++)
        if (cudaMalloc((void **)&o->qkv[l], BP_QKV * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&o->a[l], BP_DIM * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&o->gu[l], 2 * BP_FF * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&o->xn[l], BP_DIM * sizeof(float)) != cudaSuccess)
            return -1;
    return 0;
}

static void bp_free_out(bp_out *o, int layers)
{
    for (int l = 0; l < layers; l++) {
        cudaFree(o->qkv[l]);
        cudaFree(o->a[l]);
        cudaFree(o->gu[l]);
        cudaFree(o->xn[l]);
    }
}

/* Floats of a and b (device, n each) that differ in their bits; -1 on error. */
static long long bp_diff(const float *a, const float *b, size_t n, float *ha, float *hb)
{
    if (cudaMemcpy(ha, a, n * sizeof *ha, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(hb, b, n * sizeof *hb, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    long long d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&ha[i], &hb[i], sizeof *ha) != 0;
    return d;
}

int bench_persistent(int argc, char **argv)
{
    long layers = 32, reps = 20, depth = 0, ahead = 0, l2_tiles = 0;
    int type = GGML_TYPE_IQ3_XXS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--persistent"))
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_persistent_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-pdl")) {
            strata_pdl_off = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench --persistent: %s needs a value or is unknown\n", argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--layers")) {
            if (bench_int("persistent", "--layers", v, 1, BP_MAX_LAYERS, &layers))
                return 2;
        } else if (!strcmp(argv[i - 1], "--reps")) {
            if (bench_int("persistent", "--reps", v, 15, BENCH_MAX_REPS, &reps))
                return 2;
        } else if (!strcmp(argv[i - 1], "--depth")) {
            if (bench_int("persistent", "--depth", v, 0, 16, &depth))
                return 2;
        } else if (!strcmp(argv[i - 1], "--ahead")) {
            if (bench_int("persistent", "--ahead", v, 0, 8, &ahead))
                return 2;
        } else if (!strcmp(argv[i - 1], "--l2-tiles")) {
            if (bench_int("persistent", "--l2-tiles", v, 0, 64, &l2_tiles))
                return 2;
        } else if (!strcmp(argv[i - 1], "--type")) {
            const type_traits *t = type_traits_by_name(v);
            if (!t || (t->id != GGML_TYPE_IQ3_XXS && t->id != GGML_TYPE_Q2_0)) {
                fprintf(stderr, "bench --persistent: --type %s (iq3_xxs or q2_0)\n", v);
                return 2;
            }
            type = t->id;
        } else {
            fprintf(stderr, "bench --persistent: unknown option %s\n", argv[i - 1]);
            return 2;
        }
    }
    bp_ctx c;
    memset(&c, 0, sizeof c);
    c.type = type;
    c.layers = (int)layers;
    int rc = 1;
    void *probe = NULL, *scratch = NULL;
    uint32_t *sink = NULL;
    float *ha = NULL, *hb = NULL;
    uint8_t *packed = NULL;
    cudaStream_t s = NULL;
    strata_error err = {0};
    BP_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    BP_CHECK(cudaMalloc(&scratch, CUDA_MATVEC_SCRATCH_BYTES));
    if (cuda_matvec_attach_scratch(s, scratch, CUDA_MATVEC_SCRATCH_BYTES, &err)) {
        fprintf(stderr, "bench --persistent: %s\n", err.msg);
        goto fail;
    }
    packed = malloc(cuda_weight_bytes(type, 2 * BP_FF, BP_DIM));
    if (!packed)
        goto fail;
    for (int l = 0; l < c.layers; l++)
        for (int m = 0; m < 4; m++) {
            size_t gb = 0;
            uint8_t *hw = bp_weights(type, bp_shape[m][0], bp_shape[m][1], (uint64_t)(4 * l + m + 1), &gb);
            const size_t db = cuda_weight_bytes(type, bp_shape[m][0], bp_shape[m][1]);
            if (!hw || cuda_weight_pack(type, bp_shape[m][0], bp_shape[m][1], hw, packed, &err)) {
                fprintf(stderr, "bench --persistent: weights: %s\n", hw ? err.msg : "out of memory");
                free(hw);
                goto fail;
            }
            free(hw);
            BP_CHECK(cudaMalloc(&c.w[l][m], db));
            BP_CHECK(cudaMemcpy(c.w[l][m], packed, db, cudaMemcpyHostToDevice));
        }
    ha = malloc(2 * BP_FF * sizeof *ha);
    hb = malloc(2 * BP_FF * sizeof *hb);
    if (!ha || !hb)
        goto fail;
    uint64_t st = 12345;
    for (int i = 0; i < BP_DIM; i++)
        ha[i] = (float)((int64_t)(bp_rand(&st) % 2001) - 1000) * 1e-3f + 1e-4f;
    BP_CHECK(cudaMalloc((void **)&c.x0, BP_DIM * sizeof(float)));
    BP_CHECK(cudaMemcpy(c.x0, ha, BP_DIM * sizeof(float), cudaMemcpyHostToDevice));
    if (bp_alloc_out(&c.sep, c.layers) || bp_alloc_out(&c.per, c.layers)) {
        fprintf(stderr, "bench --persistent: out of device memory\n");
        goto fail;
    }
    mv_chain_op ops[4 * BP_MAX_LAYERS];
    for (int l = 0; l < c.layers; l++) {
        const float *x = bp_x(&c.per, &c, l);
        const bp_out *o = &c.per;
        ops[4 * l + 0] = (mv_chain_op){type, c.w[l][0], BP_QKV, BP_DIM, x, NULL, NULL, o->qkv[l]};
        ops[4 * l + 1] = (mv_chain_op){type, c.w[l][1], BP_DIM, BP_DIM, o->qkv[l], NULL, NULL, o->a[l]};
        ops[4 * l + 2] = (mv_chain_op){type, c.w[l][2], 2 * BP_FF, BP_DIM, o->a[l], NULL, NULL, o->gu[l]};
        ops[4 * l + 3] = (mv_chain_op){type, c.w[l][3], BP_DIM, BP_FF, o->gu[l], o->gu[l] + BP_FF, x, o->xn[l]};
    }
    if (cuda_mvchain_make(ops, 4 * c.layers, (int)depth, (int)ahead, (int)l2_tiles, &c.chain, &err)) {
        fprintf(stderr, "bench --persistent: %s\n", err.msg);
        goto fail;
    }
    int grid = 0;
    long long items = 0, wbytes = 0;
    cuda_mvchain_info(c.chain, &grid, &items, &wbytes);

    const size_t pbytes = (size_t)4 << 30;
    BP_CHECK(cudaMalloc(&probe, pbytes));
    BP_CHECK(cudaMalloc((void **)&sink, sizeof *sink));
    BP_CHECK(cudaMemset(probe, 0x5a, pbytes));
    bp_probe pr = {probe, pbytes, sink};
    const double probe_us = bench_graph_us("bench --persistent", bp_probe_launch, &pr, 1, (int)reps, s);
    cudaFree(probe);
    probe = NULL;
    if (probe_us <= 0)
        goto fail;
    const double bw = (double)pbytes / (probe_us * 1e3);
    const double sep_us = bench_graph_us("bench --persistent", bp_separate, &c, 1, (int)reps, s);
    const double per_us = bench_graph_us("bench --persistent", bp_persistent, &c, 1, (int)reps, s);
    if (sep_us <= 0 || per_us <= 0)
        goto fail;
    BP_CHECK(cudaStreamSynchronize(s));
    long long differ = 0, total = 0;
    for (int l = 0; l < c.layers; l++) {
        const float *pa[4] = {c.sep.qkv[l], c.sep.a[l], c.sep.gu[l], c.sep.xn[l]};
        const float *pb[4] = {c.per.qkv[l], c.per.a[l], c.per.gu[l], c.per.xn[l]};
        const size_t n[4] = {BP_QKV, BP_DIM, 2 * BP_FF, BP_DIM};
        for (int k = 0; k < 4; k++) {
            const long long d = bp_diff(pa[k], pb[k], n[k], ha, hb);
            if (d < 0)
                goto fail;
            differ += d;
            total += (long long)n[k];
        }
    }
    BP_CHECK(cudaMemcpy(ha, c.per.xn[c.layers - 1], BP_DIM * sizeof(float), cudaMemcpyDeviceToHost));
    double ss = 0;
    for (int i = 0; i < BP_DIM; i++)
        ss += (double)ha[i] * ha[i];
    printf("bench --persistent: %d layers of the 8B's matvecs at batch 1 (q|k|v 6144x4096, o 4096x4096, "
           "gate|up 28672x4096, down 4096x14336 + SwiGLU + residual), %s, %.1f MB of weights a step\n",
           c.layers, type_name(type), (double)wbytes / 1e6);
    printf("read probe: %.0f GB/s; PDL %s\n", bw, strata_pdl_off ? "off" : "on");
    printf("%-44s %10s %10s %8s %8s\n", "", "us/step", "us/layer", "GB/s", "of probe");
    const double us[2] = {sep_us, per_us};
    char label[2][96];
    snprintf(label[0], sizeof label[0], "separate kernels (graph, %d launches)", 5 * c.layers);
    snprintf(label[1], sizeof label[1], "persistent (%d CTAs, %lld items, D %ld, ahead %ld, l2 %ld)", grid, items,
             depth, ahead, l2_tiles);
    for (int k = 0; k < 2; k++) {
        const double gbps = (double)wbytes / (us[k] * 1e3);
        printf("%-44s %10.1f %10.2f %8.0f %7.1f%%\n", label[k], us[k], us[k] / c.layers, gbps, 100 * gbps / bw);
    }
    printf("persistent / separate: %.3fx the time\n", per_us / sep_us);
    printf("outputs, persistent against separate: %lld of %lld floats differ in their bits; final x rms %.4g\n",
           differ, total, sqrt(ss / BP_DIM));
    rc = differ ? 1 : 0;
fail:
    cuda_mvchain_free(c.chain);
    for (int l = 0; l < c.layers; l++)
        for (int m = 0; m < 4; m++)
            cudaFree(c.w[l][m]);
    bp_free_out(&c.sep, c.layers);
    bp_free_out(&c.per, c.layers);
    cudaFree(c.x0);
    cudaFree(probe);
    cudaFree(sink);
    if (s) {
        cuda_matvec_attach_scratch(s, NULL, 0, &err);
        cudaStreamDestroy(s);
    }
    cudaFree(scratch);
    free(packed);
    free(ha);
    free(hb);
    return rc;
}

#endif
