/* test_cuda_engine.c: the whole forward pass on the card against the CPU
 * reference (the judge), and the invariance rule on the card: a layer split
 * over stages sharing one GPU, batch slots and chunking change no bit.
 *
 * Models come from `strata-cli mkmodel` (llama, qwen3, qwen3moe; IQ3_XXS and
 * Q2_0) and, when present, the demo model (whose Q4_1 tensors the card runs
 * as F16).  Tolerances, and where they come from:
 *   - teacher-forced logits, with an f16 KV cache on both sides:
 *     ||gpu - cpu|| / ||cpu|| < TF_TOL per position.  The weight kernels
 *     quantize activations to int8 (5e-3..7e-3 per product,
 *     kernels/cuda/cuda_ops.h) and random-weight models pass that error on
 *     through every layer: measured on the H200 (STRATA_TRACE_DIR +
 *     scripts/trace-diff.py, 6-layer llama) it grows from 7e-3 at layer 0 to
 *     5e-2 (F16 weights) .. 1.3e-1 (IQ3_XXS weights, k8v4 cache) at the
 *     logits.  With k8v4 the V rows add Q4_0 rounding flips (a value on the
 *     other side of a rounding boundary moves by a whole step), so both
 *     checks against the CPU use --kv f16 (the k8v4 formats' own cost is
 *     measured against float64 in doc/perplexity.md; the split, batch and
 *     chunk checks below run the default cache, card against card, bitwise);
 *   - greedy generation of 256 tokens (f16 cache; 32 under
 *     STRATA_TEST_SMALL):
 *     identical, or the first
 *     divergence is a near-tie — the CPU's logit for the GPU's token is
 *     within NEAR_TIE x the RMS of (gpu - cpu) logits at that step, i.e. the
 *     two paths disagree on which token leads by no more than their own
 *     measured noise. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/strata.h"
#include "kernels/cpu/act_q8.h"
#include "kernels/ops.h"
#ifdef STRATA_CUDA
#include "engine/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_ops.h"
#endif

#define TF_TOL 0.2
#define NEAR_TIE 3.0
/* compute-sanitizer runs (STRATA_TEST_SMALL, testutil.h) take every code
 * path with 32 greedy steps: memcheck slows each launch a hundredfold */
#define GREEDY_FULL 256
#define GREEDY_SMALL 32

#ifdef STRATA_CUDA

static strata_engine *open_kv(const char *path, int backend, const char *split, int slots,
                              int chunk, int kv)
{
    strata_params p = test_params(path, backend);
    p.kv_type = kv;
    p.layer_split = split;
    p.n_slots = slots;
    p.n_chunk = chunk;
    p.n_ctx = 512;
    return test_open(&p);
}

/* The cache the split, batch and chunk checks below run: the default, or
 * a rotated one (cuda_rotated_caches). */
static int on_kv = STRATA_KV_DEFAULT;

static strata_engine *open_on(const char *path, int backend, const char *split, int slots,
                              int chunk)
{
    return open_kv(path, backend, split, slots, chunk, on_kv);
}

static void prompt_ids(int32_t *ids, int n, int vocab, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(test_rand_u64(&seed) % (uint64_t)vocab);
}

static float *all_logits(strata_engine *e, const int32_t *ids, int n)
{
    strata_error err = {0};
    strata_seq *s = strata_seq_new(e, &err);
    float *lg = malloc(sizeof(float) * (size_t)n * strata_n_vocab(e));
    int rc = strata_seq_feed(s, ids, n, NULL, lg, &err);
    ck_assert_msg(rc == 0, "feed: %s", err.msg);
    strata_seq_free(s);
    return lg;
}

/* Greedy tokens after a prompt; logits of every step kept for near-tie
 * checks (steps x V). */
static int32_t *greedy(strata_engine *e, const int32_t *ids, int n, int steps, float **keep)
{
    strata_error err = {0};
    int V = strata_n_vocab(e);
    strata_seq *s = strata_seq_new(e, &err);
    float *lg = malloc(sizeof(float) * (size_t)V * steps);
    int32_t *out = malloc(sizeof(int32_t) * steps);
    ck_assert_int_eq(strata_seq_feed(s, ids, n, lg, NULL, &err), 0);
    for (int i = 0; i < steps; i++) {
        out[i] = cpu_argmax(lg + (size_t)i * V, V);
        if (i + 1 < steps) {
            int rc = strata_seq_decode(s, out[i], lg + (size_t)(i + 1) * V, &err);
            ck_assert_msg(rc == 0, "decode step %d: %s", i, err.msg);
        }
    }
    strata_seq_free(s);
    *keep = lg;
    return out;
}

static double rel(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Is the GPU's choice a near-tie on the CPU's logits?  Both rows were
 * computed from the same history; gap in units of their RMS difference. */
static int near_tie(const float *lc, const float *lg, int V, int32_t tc, int32_t tg, double *gap_out)
{
    double d2 = 0;
    for (int i = 0; i < V; i++)
        d2 += ((double)lc[i] - lg[i]) * ((double)lc[i] - lg[i]);
    double rms = sqrt(d2 / V);
    *gap_out = (lc[tc] - lc[tg]) / (rms > 0 ? rms : 1e-30);
    return *gap_out <= NEAR_TIE;
}

static void gpu_matches_cpu(const char *path, int n_prompt)
{
    /* the CPU side is the float reference the tolerances were measured
     * against: float activations (its int8 ones differ by up to 3.4e-2,
     * kernels/cpu/act_q8.h) */
    cpu_matmul_fast_set_q8(0);
    strata_engine *cpu = open_kv(path, STRATA_BACKEND_CPU, NULL, 1, 256, STRATA_KV_F16);
    strata_engine *gpu = open_kv(path, STRATA_BACKEND_CUDA, NULL, 1, 256, STRATA_KV_F16);
    int V = strata_n_vocab(cpu);
    int32_t ids[64];
    prompt_ids(ids, n_prompt, V, 7);
    float *lc = all_logits(cpu, ids, n_prompt), *lgpu = all_logits(gpu, ids, n_prompt);
    double worst = 0;
    for (int r = 0; r < n_prompt; r++) {
        double err = rel(lgpu + (size_t)r * V, lc + (size_t)r * V, V);
        worst = err > worst ? err : worst;
        ck_assert_msg(err < TF_TOL, "%s: position %d: relative error %.3g > %.3g", path, r, err,
                      TF_TOL);
    }
    printf("  %s: teacher-forced (f16 KV) worst relative error %.3g over %d positions\n", path,
           worst, n_prompt);
    strata_close(cpu);
    strata_close(gpu);
    /* greedy with the f16 cache too: with k8v4 one Q4_0 rounding flip of a
     * V value (gpu and cpu differ by ~1e-3 before quantizing) moves a logit
     * by more than the RMS noise this criterion measures (seen on the H200:
     * the demo model diverged at step 3 with a gap of 3.1 x RMS) */
    cpu = open_kv(path, STRATA_BACKEND_CPU, NULL, 1, 256, STRATA_KV_F16);
    gpu = open_kv(path, STRATA_BACKEND_CUDA, NULL, 1, 256, STRATA_KV_F16);
    float *kc, *kg;
    const int greedy_n = test_small() ? GREEDY_SMALL : GREEDY_FULL;
    int32_t *tc = greedy(cpu, ids, 8, greedy_n, &kc), *tg = greedy(gpu, ids, 8, greedy_n, &kg);
    int i = 0;
    while (i < greedy_n && tc[i] == tg[i])
        i++;
    if (i < greedy_n) {
        double gap;
        int tie = near_tie(kc + (size_t)i * V, kg + (size_t)i * V, V, tc[i], tg[i], &gap);
        printf("  %s: greedy diverges at step %d (cpu %d, gpu %d), gap %.3g x RMS difference\n",
               path, i, tc[i], tg[i], gap);
        ck_assert_msg(tie, "%s: greedy diverges at step %d and it is not a near-tie "
                      "(gap %.3g x RMS difference > %.3g)", path, i, gap, NEAR_TIE);
    } else {
        printf("  %s: greedy %d tokens identical\n", path, greedy_n);
    }
    free(lc);
    free(lgpu);
    free(kc);
    free(kg);
    free(tc);
    free(tg);
    strata_close(cpu);
    strata_close(gpu);
}

/* Feed ids through a split3 engine (chunks of 5) whose receiving stages lag
 * (cuda_test_cross_lag); 1 if the last token's logits equal `last`. */
static int lagged_feed_matches(const char *path, const char *split, const int32_t *ids, int n,
                               const float *last, float *ll, long long lag)
{
    strata_error err = {0};
    cuda_test_cross_lag = lag;
    strata_engine *el = open_on(path, STRATA_BACKEND_CUDA, split, 1, 5);
    strata_seq *sl = strata_seq_new(el, &err);
    int rc = strata_seq_feed(sl, ids, n, ll, NULL, &err);
    cuda_test_cross_lag = 0;
    ck_assert_msg(rc == 0, "feed: %s", err.msg);
    int V = strata_n_vocab(el);
    int same = !memcmp(ll, last, sizeof(float) * V);
    strata_seq_free(sl);
    strata_close(el);
    return same;
}

/* Splits on one card, batch slots and chunk sizes: bit-identical logits. */
static void gpu_invariance(const char *path, int n_layers)
{
    strata_error err = {0};
    strata_engine *base = open_on(path, STRATA_BACKEND_CUDA, NULL, 1, 256);
    int V = strata_n_vocab(base), n = 24;
    int32_t ids[24];
    prompt_ids(ids, n, V, 11);
    float *ref = all_logits(base, ids, n);
    char split2[32], split3[32];
    snprintf(split2, sizeof split2, "%d", n_layers / 2);
    snprintf(split3, sizeof split3, "%d,%d", n_layers / 3, 2 * n_layers / 3);
    const char *splits[] = {split2, split3};
    int chunks[] = {5, 256};
    for (int c = 0; c < 2; c++) {
        strata_engine *e = open_on(path, STRATA_BACKEND_CUDA, splits[c], 1, chunks[c]);
        float *lg = all_logits(e, ids, n);
        ck_assert_msg(!memcmp(lg, ref, sizeof(float) * (size_t)n * V),
                      "%s: split %s chunk %d changed the logits on the card", path, splits[c],
                      chunks[c]);
        free(lg);
        strata_close(e);
    }
    /* The crossing through pinned host memory (cards without peer access),
     * forced on one card; chunks of 5 leave uploads from the bounce queued
     * while the next chunk refills it (cross(), bounce_free). */
    setenv("STRATA_FORCE_BOUNCE", "1", 1);
    strata_engine *eb = open_on(path, STRATA_BACKEND_CUDA, split3, 1, 5);
    unsetenv("STRATA_FORCE_BOUNCE");
    float *lb = all_logits(eb, ids, n);
    ck_assert_msg(!memcmp(lb, ref, sizeof(float) * (size_t)n * V),
                  "%s: split %s through host memory changed the logits", path, split3);
    free(lb);
    strata_close(eb);
    /* Receiving stages that lag (a spin before each crossing, ~1 ms) while
     * the prompt is read in chunks that want no logits, so nothing
     * synchronises between them: the sending stage's next chunk must not
     * overwrite its hidden state before the lagging stage has copied it
     * (backend_cuda.c, x_free).  Judge: the last token's logits of the
     * same feed without a split (one logits row both times, so the same
     * kernels make it). */
    float *last = malloc(sizeof(float) * V), *ll = malloc(sizeof(float) * V);
    strata_seq *s0 = strata_seq_new(base, &err);
    ck_assert_int_eq(strata_seq_feed(s0, ids, n, last, NULL, &err), 0);
    strata_seq_free(s0);
    int lag_ok = lagged_feed_matches(path, split3, ids, n, last, ll, 2000000);
    if (!lag_ok) {
        /* say whether the stages' lag is the cause at all, and whether
         * programmatic dependent launch is involved (pdl.cuh) */
        int ok_without_lag = lagged_feed_matches(path, split3, ids, n, last, ll, 0);
        strata_pdl_off = 1;
        int ok_without_pdl = lagged_feed_matches(path, split3, ids, n, last, ll, 2000000);
        strata_pdl_off = 0;
        ck_assert_msg(0, "%s: split %s with lagging stages changed the logits (without the lag "
                      "they %s; without programmatic dependent launch they %s)", path, split3,
                      ok_without_lag ? "do not: an ordering bug" : "do too",
                      ok_without_pdl ? "do not: a PDL ordering bug" : "do too");
    }
    free(ll);
    free(last);
    /* Batch: 4 sequences decoding together equal their solo steps. */
    strata_engine *e = open_on(path, STRATA_BACKEND_CUDA, split2, 4, 256);
    float *solo = malloc(sizeof(float) * V * 4 * 6), *lg = malloc(sizeof(float) * V * 4);
    int32_t next[4][6];
    for (int q = 0; q < 4; q++) {
        strata_seq *s = strata_seq_new(e, &err);
        ck_assert_int_eq(strata_seq_feed(s, ids + q, 4 + 3 * q, lg, NULL, &err), 0);
        for (int t = 0; t < 6; t++) {
            next[q][t] = cpu_argmax(lg, V);
            ck_assert_int_eq(strata_seq_decode(s, next[q][t], solo + ((size_t)q * 6 + t) * V, &err), 0);
            memcpy(lg, solo + ((size_t)q * 6 + t) * V, sizeof(float) * V);
        }
        strata_seq_free(s);
    }
    strata_seq *seqs[4];
    for (int q = 0; q < 4; q++) {
        seqs[q] = strata_seq_new(e, &err);
        ck_assert_int_eq(strata_seq_feed(seqs[q], ids + q, 4 + 3 * q, NULL, NULL, &err), 0);
    }
    for (int t = 0; t < 6; t++) {
        int32_t toks[4] = {next[0][t], next[1][t], next[2][t], next[3][t]};
        ck_assert_int_eq(strata_decode_batch(seqs, toks, 4, lg, &err), 0);
        for (int q = 0; q < 4; q++)
            ck_assert_msg(!memcmp(lg + (size_t)q * V, solo + ((size_t)q * 6 + t) * V,
                                  sizeof(float) * V),
                          "%s: batch row %d step %d differs from solo", path, q, t);
    }
    for (int q = 0; q < 4; q++)
        strata_seq_free(seqs[q]);
    free(solo);
    free(lg);
    free(ref);
    strata_close(e);
    strata_close(base);
}

/* A model from mkmodel, made once per run (test_mkmodel: a fixture keyed
 * by the arguments); the name is for the reader. */
static const char *mkmodel(const char *name, const char *args)
{
    (void)name;
    char a[1024];
    snprintf(a, sizeof a, "%s --seed 3", args);
    return test_mkmodel(a);
}

#define NEED_GPU()                                                                          \
    do {                                                                                    \
        const char *why_;                                                                   \
        if (!test_have_gpu(&why_))                                                          \
            TEST_SKIP("gpu", why_);                                                         \
        if (!test_cli())                                                                    \
            TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");                    \
    } while (0)

static const char *LLAMA = "--arch llama --layers 6 --dim 256 --heads 8 --kv-heads 2 --ff 768 --vocab 2048";
static const char *QWEN3 = "--arch qwen3 --layers 6 --dim 512 --heads 8 --kv-heads 4 --head-dim 64 --ff 1024 --vocab 2048";
static const char *MOE = "--arch qwen3moe --layers 4 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 512 --experts 8 --experts-used 2 --ff-exp 256 --vocab 1024";

START_TEST(cuda_llama_iq3_xxs_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", LLAMA);
    gpu_matches_cpu(mkmodel("llama-iq3", a), 32);
}
END_TEST

START_TEST(cuda_llama_q2_0_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type q2_0", LLAMA);
    gpu_matches_cpu(mkmodel("llama-q2", a), 32);
}
END_TEST

START_TEST(cuda_qwen3_iq3_xxs_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", QWEN3);
    gpu_matches_cpu(mkmodel("qwen3-iq3", a), 32);
}
END_TEST

START_TEST(cuda_qwen3moe_q2_0_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type q2_0", MOE);
    gpu_matches_cpu(mkmodel("moe-q2", a), 24);
}
END_TEST

START_TEST(cuda_demo_model_matches_cpu)
{
    NEED_GPU();
    const char *m = test_demo_model();
    if (!m)
        TEST_SKIP("model", "demo model not present (make model)");
    gpu_matches_cpu(m, 24);
}
END_TEST

START_TEST(cuda_split_batch_chunk_invariance)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", LLAMA);
    gpu_invariance(mkmodel("llama-inv", a), 6);
}
END_TEST

/* Dense again, with head_dim 64: the attention's tensor-core path
 * (kernels/cuda/attention.cu, att_fast_ok), which the llama above (head_dim
 * 32) does not take and the MoE model below does. */
START_TEST(cuda_qwen3_split_batch_chunk_invariance)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", QWEN3);
    gpu_invariance(mkmodel("qwen3-inv", a), 6);
}
END_TEST

START_TEST(cuda_moe_split_batch_chunk_invariance)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type q2_0", MOE);
    gpu_invariance(mkmodel("moe-inv", a), 4);
}
END_TEST

/* The rotated caches on the card (k8v4r2, k8v4r), whose forward rotation
 * runs inside the store's launch (cuda_kv_rotate_store): teacher-forced
 * logits close to the CPU's with the same cache (llama: head_dim 32, the
 * plain attention; qwen3: head_dim 64, the tensor-core kernel), and on
 * qwen3 splits, chunks and the host-memory crossing change no bit. */
static void rotated_matches_cpu(const char *path, int kv)
{
    cpu_matmul_fast_set_q8(0);
    strata_engine *cpu = open_kv(path, STRATA_BACKEND_CPU, NULL, 1, 256, kv);
    strata_engine *gpu = open_kv(path, STRATA_BACKEND_CUDA, NULL, 1, 256, kv);
    ck_assert_int_eq(strata_kv_type(gpu), kv);
    int V = strata_n_vocab(cpu), n = 32;
    int32_t ids[32];
    prompt_ids(ids, n, V, 5);
    float *lc = all_logits(cpu, ids, n), *lg = all_logits(gpu, ids, n);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double err = rel(lg + (size_t)r * V, lc + (size_t)r * V, V);
        worst = err > worst ? err : worst;
        ck_assert_msg(err < TF_TOL, "%s kv %s: position %d: relative error %.3g > %.3g", path,
                      strata_kv_name(kv), r, err, TF_TOL);
    }
    printf("  %s: teacher-forced (%s) worst relative error %.3g over %d positions\n", path,
           strata_kv_name(kv), worst, n);
    free(lc);
    free(lg);
    strata_close(cpu);
    strata_close(gpu);
}

START_TEST(cuda_rotated_caches)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", LLAMA);
    const char *llama = mkmodel("llama-iq3", a);
    snprintf(a, sizeof a, "%s --type iq3_xxs", QWEN3);
    const char *qwen3 = mkmodel("qwen3-inv", a);
    const int kvs[2] = {STRATA_KV_K8V4R2, STRATA_KV_K8V4R};
    for (int k = 0; k < 2; k++) {
        rotated_matches_cpu(llama, kvs[k]);
        rotated_matches_cpu(qwen3, kvs[k]);
    }
    on_kv = STRATA_KV_K8V4R2;
    gpu_invariance(qwen3, 6);
    on_kv = STRATA_KV_DEFAULT;
}
END_TEST

/* The recipe mixes (mkmodel --ftype iq3_xxs): q and k IQ2_S with v Q4_K
 * (llama, 4 query heads per KV head) or v IQ3_S (the MoE, 16 experts: no
 * 8-expert rules), each layer's q|k|v a mixed stack (cuda_matmul_mix): the
 * CPU's tokens, and greedy the same solo, batched and chunked. */
START_TEST(cuda_llama_mix_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --ftype iq3_xxs", LLAMA);
    gpu_matches_cpu(mkmodel("llama-mix", a), 32);
}
END_TEST

START_TEST(cuda_mix_split_batch_chunk_invariance)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --ftype iq3_xxs", LLAMA);
    gpu_invariance(mkmodel("llama-mix", a), 6);
    snprintf(a, sizeof a,
             "--arch qwen3moe --layers 4 --dim 256 --heads 4 --kv-heads 2 --head-dim 64 --ff 512 --experts 16 "
             "--experts-used 2 --ff-exp 256 --vocab 1024 --ftype iq3_xxs");
    gpu_invariance(mkmodel("moe-mix", a), 4);
}
END_TEST

/* The fused launches (STRATA_DECODE_FUSE, doc/cuda-kernels.md "Fewer
 * launches per decode layer") change no bit: a prompt in chunks of 5 (the
 * matvec path: rows <= 8) and of 256 (the prompt kernels), greedy decode
 * steps, and 4 sequences decoding as one batch, over a two-stage split (so
 * a stage's last layer, which hands x on without the next norm, is
 * covered), give the same logits with fusion on and off. */
static float *fuse_run(const char *path, const char *split, int fuse)
{
    strata_error err = {0};
    setenv("STRATA_DECODE_FUSE", fuse ? "1" : "0", 1);
    strata_engine *e5 = open_on(path, STRATA_BACKEND_CUDA, split, 4, 5);
    strata_engine *e256 = open_on(path, STRATA_BACKEND_CUDA, split, 1, 256);
    unsetenv("STRATA_DECODE_FUSE");
    const int V = strata_n_vocab(e5), n = 16, steps = 6;
    int32_t ids[16];
    prompt_ids(ids, n, V, 21);
    const size_t per = (size_t)V * (2 * n + steps + 4 * 3);
    float *out = malloc(sizeof(float) * per), *o = out, *keep = NULL;
    float *a = all_logits(e5, ids, n), *b = all_logits(e256, ids, n);
    memcpy(o, a, sizeof(float) * (size_t)n * V);
    memcpy(o += (size_t)n * V, b, sizeof(float) * (size_t)n * V);
    o += (size_t)n * V;
    free(a);
    free(b);
    free(greedy(e5, ids, n, steps, &keep));
    memcpy(o, keep, sizeof(float) * (size_t)steps * V);
    o += (size_t)steps * V;
    free(keep);
    strata_seq *seqs[4];
    for (int q = 0; q < 4; q++) {
        seqs[q] = strata_seq_new(e5, &err);
        ck_assert_int_eq(strata_seq_feed(seqs[q], ids + q, 3 + 2 * q, NULL, NULL, &err), 0);
    }
    for (int t = 0; t < 3; t++) {
        int32_t toks[4] = {ids[t], ids[t + 4], ids[t + 8], ids[t + 12]};
        ck_assert_int_eq(strata_decode_batch(seqs, toks, 4, o, &err), 0);
        o += (size_t)4 * V;
    }
    for (int q = 0; q < 4; q++)
        strata_seq_free(seqs[q]);
    strata_close(e5);
    strata_close(e256);
    return out;
}

static void fuse_changes_no_bit(const char *path, const char *split)
{
    float *on = fuse_run(path, split, 1), *off = fuse_run(path, split, 0);
    strata_engine *e = open_on(path, STRATA_BACKEND_CUDA, NULL, 1, 256);
    const size_t per = (size_t)strata_n_vocab(e) * (2 * 16 + 6 + 4 * 3);
    strata_close(e);
    size_t first = 0;
    while (first < per && !memcmp(on + first, off + first, sizeof(float)))
        first++;
    ck_assert_msg(first == per, "%s: fused and unfused launches differ at logit %zu of %zu", path,
                  first, per);
    free(on);
    free(off);
}

START_TEST(cuda_decode_fuse_changes_no_bit)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type q2_0", MOE);
    fuse_changes_no_bit(mkmodel("moe-inv", a), "2");
    snprintf(a, sizeof a, "%s --type iq3_xxs", QWEN3);
    fuse_changes_no_bit(mkmodel("qwen3-inv", a), "3");
    snprintf(a, sizeof a, "%s --type iq3_xxs", LLAMA);
    fuse_changes_no_bit(mkmodel("llama-inv", a), "3");
    snprintf(a, sizeof a, "%s --type f32", MOE); /* F32 experts: the per-pair fallback */
    fuse_changes_no_bit(mkmodel("moe-f32", a), "2");
}
END_TEST

/* gemma3 (doc/engine.md, "gemma3"): the real model's head shape (4 query
 * heads on one kv head of 256: the tensor-core attention), a window of 8
 * that the 32-token prompt and the chunks of 5 cross, 7 layers so a global
 * layer (il 5) sits between windowed ones; GELU-tanh gating on the stacked
 * gate|up, the sandwich norms, the embedding scale. */
static const char *GEMMA3 = "--arch gemma3 --layers 7 --dim 256 --heads 4 --kv-heads 1 --head-dim 256 --ff 512 --window 8 --vocab 2048 --tied";

START_TEST(cuda_gemma3_matches_cpu)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type q8_0", GEMMA3);
    gpu_matches_cpu(mkmodel("gemma3-q8", a), 32);
}
END_TEST

START_TEST(cuda_gemma3_split_batch_chunk_invariance)
{
    NEED_GPU();
    char a[512];
    snprintf(a, sizeof a, "%s --type iq3_xxs", GEMMA3);
    gpu_invariance(mkmodel("gemma3-inv", a), 7);
}
END_TEST

/* The real Gemma 3 270M file when present (`make gemma3-model`). */
START_TEST(cuda_gemma3_real_model_matches_cpu)
{
    NEED_GPU();
    static char path[1024];
    const char *env = getenv("STRATA_GEMMA3_MODEL"), *home = getenv("HOME");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/.cache/strata/gemma-3-270m-q4_k_m.gguf",
                 home ? home : "/root");
    FILE *f = fopen(path, "rb");
    if (!f)
        TEST_SKIP("gemma3", "gemma3 model not present (make gemma3-model)");
    fclose(f);
    gpu_matches_cpu(path, 24);
}
END_TEST

static Suite *cuda_engine_suite(void)
{
    Suite *s = suite_create("cuda_engine");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, cuda_gemma3_matches_cpu);
    tcase_add_test(tc, cuda_gemma3_split_batch_chunk_invariance);
    tcase_add_test(tc, cuda_gemma3_real_model_matches_cpu);
    tcase_add_test(tc, cuda_llama_iq3_xxs_matches_cpu);
    tcase_add_test(tc, cuda_llama_q2_0_matches_cpu);
    tcase_add_test(tc, cuda_qwen3_iq3_xxs_matches_cpu);
    tcase_add_test(tc, cuda_qwen3moe_q2_0_matches_cpu);
    tcase_add_test(tc, cuda_demo_model_matches_cpu);
    tcase_add_test(tc, cuda_split_batch_chunk_invariance);
    tcase_add_test(tc, cuda_qwen3_split_batch_chunk_invariance);
    tcase_add_test(tc, cuda_moe_split_batch_chunk_invariance);
    tcase_add_test(tc, cuda_decode_fuse_changes_no_bit);
    tcase_add_test(tc, cuda_rotated_caches);
    tcase_add_test(tc, cuda_llama_mix_matches_cpu);
    tcase_add_test(tc, cuda_mix_split_batch_chunk_invariance);
    suite_add_tcase(s, tc);
    return s;
}

#else /* !STRATA_CUDA */

START_TEST(cuda_engine_needs_cuda)
{
    TEST_SKIP("gpu", "built without CUDA (nvcc not found or CUDA=0)");
}
END_TEST

static Suite *cuda_engine_suite(void)
{
    Suite *s = suite_create("cuda_engine");
    TCase *tc = tcase_create("gpu");
    tcase_add_test(tc, cuda_engine_needs_cuda);
    suite_add_tcase(s, tc);
    return s;
}

#endif
TEST_SUITE(cuda_engine_suite)
