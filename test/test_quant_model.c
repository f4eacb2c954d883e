/* test_quant_model.c: suite "quant_model" — files that mix llama.cpp's 2-6
 * bit tensor types load and run on the CPU engine, and bad ones are refused.
 *
 *  - A model whose matrices use Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS,
 *    IQ2_XS, IQ2_S, IQ3_S and IQ4_XS (random blocks, scales sized to the
 *    weights) gives the logits of the same model written as F32 with each
 *    tensor decoded by the type's reference decoder: the fused kernels and
 *    the F32 path differ only in summation order.
 *  - mkmodel writes those decode-only types (random blocks) and they run.
 *  - An unknown type id, a row that is not a whole number of blocks and a
 *    NaN or infinite block scale are refused with the tensor, the type and
 *    the fault named.
 *  - `inspect` says which types a card runs natively; the upload note of
 *    the CUDA backend names what it converts and what that costs. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cuda/weight_types.h"
#include "engine/strata.h"
#include "kernels/cpu/act_q8.h"
#include "kernels/ops.h"
#include "model/gguf.h"
#include "model/make/mkmodel.h"
#include "model/quant.h"

static const int mixed_types[] = {
    GGML_TYPE_Q2_K,    GGML_TYPE_Q3_K,   GGML_TYPE_Q5_K,  GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS,
    GGML_TYPE_IQ2_S,   GGML_TYPE_IQ3_S,  GGML_TYPE_IQ4_XS, GGML_TYPE_Q4_K,   GGML_TYPE_Q6_K,
};
#define N_MIXED (int)(sizeof mixed_types / sizeof mixed_types[0])

/* A small F32 llama from mkmodel (2 layers, dim 256, ff 512: every matrix
 * row a multiple of 256). */
static void write_f32_model(const char *path, int type)
{
    mkmodel_params mp;
    memset(&mp, 0, sizeof mp);
    mp.arch = "llama";
    mp.n_layer = 2;
    mp.n_embd = 256;
    mp.n_head = 4;
    mp.n_head_kv = 2;
    mp.n_ff = 512;
    mp.n_vocab = 300;
    mp.type = type;
    mp.seed = 7;
    mp.n_threads = 1;
    strata_error err = {0};
    ck_assert_msg(mkmodel_write(&mp, path, &err) == 0, "mkmodel: %s", err.msg);
}

/* nb random blocks of `type` whose fp16 scales are set so the decoded RMS
 * of each block is `rms` (every decoded value is linear in the scales). */
static void random_blocks(int type, uint8_t *dst, int64_t nb, double rms, uint64_t *st)
{
    const type_traits *t = type_traits_get(type);
    int offs[2];
    const int ns = type_fp16_scales(type, offs);
    ck_assert_int_gt(ns, 0);
    float y[256];
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = dst + b * t->bytes;
        for (int k = 0; k < t->bytes; k++)
            blk[k] = (uint8_t)test_rand_u64(st);
        const uint16_t one = 0x3c00;
        for (int k = 0; k < ns; k++)
            memcpy(blk + offs[k], &one, 2);
        t->dequant(blk, y, t->blck);
        double ss = 0;
        for (int i = 0; i < t->blck; i++)
            ss += (double)y[i] * y[i];
        const uint16_t h = f32_to_fp16((float)(rms / sqrt(ss / t->blck + 1e-30)));
        for (int k = 0; k < ns; k++)
            memcpy(blk + offs[k], &h, 2);
    }
}

/* Rewrite the F32 model `src`: every matrix takes the next type of
 * mixed_types, as random blocks of the source's RMS, into `mixed`; `ref`
 * gets the same tensors decoded back to F32.  Counts tensors per type. */
static void write_mixed(const char *src, const char *mixed, const char *ref, int *per_type)
{
    strata_error err = {0};
    gguf *g = NULL;
    ck_assert_msg(gguf_open(src, &g, &err) == 0, "%s", err.msg);
    gguf_writer *wm = gguf_writer_new(0), *wr = gguf_writer_new(0);
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        ck_assert_int_eq(gguf_writer_copy_kv(wm, gguf_kv_at(g, i)), 0);
        ck_assert_int_eq(gguf_writer_copy_kv(wr, gguf_kv_at(g, i)), 0);
    }
    const uint64_t nt = gguf_n_tensors(g);
    void **owned = calloc(2 * nt, sizeof *owned);
    uint64_t st = 99;
    int next = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(t->type, GGML_TYPE_F32);
        if (t->n_dims != 2 || t->ne[0] % 256) {
            ck_assert_int_eq(gguf_writer_add_tensor(wm, t->name, t->type, t->n_dims, t->ne,
                                                    t->data, t->nbytes, &err), 0);
            ck_assert_int_eq(gguf_writer_add_tensor(wr, t->name, t->type, t->n_dims, t->ne,
                                                    t->data, t->nbytes, &err), 0);
            continue;
        }
        const int type = mixed_types[next++ % N_MIXED];
        per_type[type]++;
        const int64_t n = t->ne[0] * t->ne[1];
        const float *x = t->data;
        double ss = 0;
        for (int64_t k = 0; k < n; k++)
            ss += (double)x[k] * x[k];
        const size_t qb = type_row_bytes(type, t->ne[0]) * (size_t)t->ne[1];
        uint8_t *q = malloc(qb);
        float *f = malloc((size_t)n * sizeof *f);
        random_blocks(type, q, (int64_t)(qb / (size_t)type_traits_get(type)->bytes),
                      sqrt(ss / (double)n), &st);
        type_traits_get(type)->dequant(q, f, n);
        owned[2 * i] = q;
        owned[2 * i + 1] = f;
        ck_assert_int_eq(gguf_writer_add_tensor(wm, t->name, (uint32_t)type, 2, t->ne, q, qb, &err),
                         0);
        ck_assert_int_eq(gguf_writer_add_tensor(wr, t->name, GGML_TYPE_F32, 2, t->ne, f,
                                                (uint64_t)n * 4, &err), 0);
    }
    ck_assert_msg(gguf_writer_write(wm, mixed, &err) == 0, "%s", err.msg);
    ck_assert_msg(gguf_writer_write(wr, ref, &err) == 0, "%s", err.msg);
    gguf_writer_free(wm);
    gguf_writer_free(wr);
    for (uint64_t i = 0; i < 2 * nt; i++)
        free(owned[i]);
    free(owned);
    gguf_close(g);
}

static strata_engine *open_cpu(const char *path, strata_error *err)
{
    strata_params p = strata_params_default();
    p.model_path = path;
    p.backend = STRATA_BACKEND_CPU;
    p.kv_type = KV_F16;
    p.n_ctx = 64;
    p.quiet = 1;
    strata_engine *e = NULL;
    if (strata_open(&p, &e, err))
        return NULL;
    return e;
}

static float *logits_of(const char *path, const int32_t *toks, int n, int *vocab)
{
    strata_error err = {0};
    strata_engine *e = open_cpu(path, &err);
    ck_assert_msg(e != NULL, "strata_open %s: %s", path, err.msg);
    *vocab = strata_n_vocab(e);
    strata_seq *s = strata_seq_new(e, &err);
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)*vocab);
    ck_assert_msg(strata_seq_feed(s, toks, n, NULL, lg, &err) == 0, "%s", err.msg);
    strata_seq_free(s);
    strata_close(e);
    return lg;
}

static char *tmp_path(const char *name)
{
    char *p = malloc(1024);
    snprintf(p, 1024, "%s/%s", test_tmpdir(), name);
    return p;
}

/* Tolerance: the mixed model runs the fused block kernels (f32 partial
 * sums, 16 lanes), the reference the F32 chunk path; the weights are the
 * same floats, so logits differ by summation order only, ~1e-6 of their
 * scale per matvec.  1e-3 of the largest |logit| leaves a wide margin and
 * is still ~1000x below what one wrong decoded sub-block does. */
START_TEST(mixed_types_match_f32_reference)
{
    char *src = tmp_path("qm_src.gguf"), *mixed = tmp_path("qm_mixed.gguf"),
         *ref = tmp_path("qm_ref.gguf");
    write_f32_model(src, GGML_TYPE_F32);
    int per_type[GGML_TYPE_COUNT] = {0};
    write_mixed(src, mixed, ref, per_type);
    for (int i = 0; i < N_MIXED; i++)
        ck_assert_msg(per_type[mixed_types[i]] > 0, "no %s tensor in the mixed model",
                      type_name(mixed_types[i]));
    static const int32_t toks[] = {5, 17, 42, 100, 250, 7};
    const int n = (int)(sizeof toks / sizeof toks[0]);
    int V = 0, V2 = 0;
    /* float activations: this judges the decoders, and int8 activations
     * (the default on AVX2, kernels/cpu/act_q8.h) would add their own
     * rounding to the quantized side only (measured 1.3e-2 of the largest
     * logit) */
    cpu_matmul_fast_set_q8(0);
    float *a = logits_of(mixed, toks, n, &V), *b = logits_of(ref, toks, n, &V2);
    cpu_matmul_fast_set_q8(-1);
    ck_assert_int_eq(V, V2);
    double amax = 0, worst = 0;
    for (int i = 0; i < n * V; i++) {
        ck_assert_msg(isfinite(a[i]), "logit %d is %g", i, a[i]);
        amax = fmax(amax, fabs(b[i]));
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    }
    printf("quant_model: %d x %d logits, max |logit| %.4g, max |mixed - f32 reference| %.3g\n",
           n, V, amax, worst);
    ck_assert_msg(amax > 0.1, "degenerate logits (max %g)", amax);
    ck_assert_msg(worst <= 1e-3 * amax, "mixed model differs from its F32 decode by %g (max %g)",
                  worst, amax);
    free(a);
    free(b);
    unlink(src);
    unlink(mixed);
    unlink(ref);
    free(src);
    free(mixed);
    free(ref);
}
END_TEST

/* mkmodel --type for a type strata decodes but cannot quantize: random
 * blocks, and the model runs with finite logits of a sane size. */
START_TEST(mkmodel_writes_decode_only_types)
{
    static const int types[] = {GGML_TYPE_Q4_K, GGML_TYPE_IQ2_S, GGML_TYPE_Q3_K};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        char *path = tmp_path("qm_mk.gguf");
        write_f32_model(path, types[k]);
        strata_error err = {0};
        gguf *g = NULL;
        ck_assert_int_eq(gguf_open(path, &g, &err), 0);
        ck_assert_int_eq(gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, types[k]);
        gguf_close(g);
        static const int32_t toks[] = {3, 9, 27};
        int V = 0;
        float *lg = logits_of(path, toks, 3, &V);
        double amax = 0;
        for (int i = 0; i < 3 * V; i++) {
            ck_assert_msg(isfinite(lg[i]), "%s: logit %d is %g", type_name(types[k]), i, lg[i]);
            amax = fmax(amax, fabs(lg[i]));
        }
        ck_assert_msg(amax > 0.01 && amax < 1e3, "%s: max |logit| %g", type_name(types[k]), amax);
        free(lg);
        unlink(path);
        free(path);
    }
}
END_TEST

/* Every decodable block type names its fp16 scale fields right: with the
 * scales doubled (1.0 -> 2.0) every decoded value doubles exactly, and
 * random bytes elsewhere stay as they were. */
START_TEST(fp16_scale_fields_scale_the_block)
{
    uint64_t st = 5;
    for (int id = 0; id < GGML_TYPE_COUNT; id++) {
        const type_traits *t = type_traits_get(id);
        if (!t || !t->dequant || t->blck == 1)
            continue;
        int offs[2];
        const int ns = type_fp16_scales(id, offs);
        ck_assert_msg(ns > 0, "%s: no fp16 scale fields listed", t->name);
        uint8_t blk[512];
        float y1[256], y2[256];
        for (int trial = 0; trial < 8; trial++) {
            for (int k = 0; k < t->bytes; k++)
                blk[k] = (uint8_t)test_rand_u64(&st);
            const uint16_t one = 0x3c00, two = 0x4000;
            for (int k = 0; k < ns; k++)
                memcpy(blk + offs[k], &one, 2);
            t->dequant(blk, y1, t->blck);
            for (int k = 0; k < ns; k++)
                memcpy(blk + offs[k], &two, 2);
            t->dequant(blk, y2, t->blck);
            int nonzero = 0;
            for (int i = 0; i < t->blck; i++) {
                ck_assert_msg(y2[i] == 2 * y1[i], "%s element %d: %g at d=1, %g at d=2", t->name,
                              i, y1[i], y2[i]);
                nonzero += y1[i] != 0;
            }
            ck_assert_msg(nonzero > 0, "%s: all-zero block", t->name);
        }
    }
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* The tensor-info record of `name`: the byte just after its name string
 * (n_dims u32, ne u64 x n_dims, type u32, offset u64 follow). */
static size_t tensor_info_at(const uint8_t *b, size_t len, const char *name)
{
    const size_t nl = strlen(name);
    for (size_t i = 8; i + nl < len; i++) {
        uint64_t l;
        memcpy(&l, b + i - 8, 8);
        if (l == nl && !memcmp(b + i, name, nl))
            return i + nl;
    }
    ck_abort_msg("tensor info of %s not found", name);
    return 0;
}

/* Open `path` with the CPU engine; it must fail with every needle in the
 * message. */
static void expect_refused(const char *path, const char *const *needles, int nn)
{
    strata_error err = {0};
    strata_engine *e = open_cpu(path, &err);
    ck_assert_msg(e == NULL, "%s opened", path);
    printf("quant_model: refused: %s\n", err.msg);
    for (int i = 0; i < nn; i++)
        ck_assert_msg(strstr(err.msg, needles[i]), "'%s' not in: %s", needles[i], err.msg);
}

START_TEST(bad_tensors_are_refused_by_name)
{
    char *src = tmp_path("qm_bsrc.gguf"), *mixed = tmp_path("qm_bmixed.gguf"),
         *ref = tmp_path("qm_bref.gguf"), *bad = tmp_path("qm_bad.gguf");
    write_f32_model(src, GGML_TYPE_F32);
    int per_type[GGML_TYPE_COUNT] = {0};
    write_mixed(src, mixed, ref, per_type);
    size_t len;
    uint8_t *orig = slurp(mixed, &len), *b = malloc(len);
    strata_error err = {0};
    gguf *g = NULL;
    ck_assert_int_eq(gguf_open(mixed, &g, &err), 0);
    const gguf_tensor *down = gguf_find_tensor(g, "blk.1.ffn_down.weight");
    const size_t data0 = (size_t)gguf_data_offset(g);
    const int down_type = (int)down->type;
    const int64_t ne0 = down->ne[0], ne1 = down->ne[1];

    /* an unknown type id (4 was Q4_2, retired) */
    memcpy(b, orig, len);
    size_t at = tensor_info_at(b, len, "blk.1.ffn_down.weight");
    uint32_t v = 4;
    memcpy(b + at + 4 + 16, &v, 4);
    spit(bad, b, len);
    expect_refused(bad, (const char *const[]){"blk.1.ffn_down.weight", "type = 4", "unknown"}, 3);

    /* rows of 128 (ffn_down's are 512): not a whole number of 256-element blocks (same count of
     * elements, so only the block rule can object) */
    memcpy(b, orig, len);
    int64_t h0 = ne0 / 4, h1 = ne1 * 4;
    memcpy(b + at + 4, &h0, 8);
    memcpy(b + at + 12, &h1, 8);
    spit(bad, b, len);
    char want[64];
    snprintf(want, sizeof want, "not a multiple of the %s block", type_name(down_type));
    expect_refused(bad, (const char *const[]){"blk.1.ffn_down.weight", "ne[0] = 128", want}, 3);

    /* a NaN d, then an infinite second scale (dmin / m) where the type has
     * one, in the 3rd block of each tensor */
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int offs[2];
        const int ns = type_fp16_scales((int)t->type, offs);
        if (!ns)
            continue;
        for (int k = 0; k < ns; k++) {
            memcpy(b, orig, len);
            const uint16_t h = k ? 0xfc00 : 0x7e00;
            const size_t at_scale = data0 + (size_t)t->offset +
                                    2 * (size_t)type_traits_get((int)t->type)->bytes + offs[k];
            memcpy(b + at_scale, &h, 2);
            spit(bad, b, len);
            char tn[80];
            snprintf(tn, sizeof tn, "'%s' (%s)", t->name, type_name((int)t->type));
            expect_refused(bad, (const char *const[]){tn, "block 2", k ? "-inf" : "NaN",
                                                      k ? "dmin" : "d = "}, 4);
        }
    }
    gguf_close(g);
    free(orig);
    free(b);
    unlink(src);
    unlink(mixed);
    unlink(ref);
    unlink(bad);
    free(src);
    free(mixed);
    free(ref);
    free(bad);
}
END_TEST

/* ---- what a card does with each type ------------------------------------ */

START_TEST(inspect_says_native_or_converted)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("strata-cli not built");
    char *src = tmp_path("qm_isrc.gguf"), *mixed = tmp_path("qm_imixed.gguf"),
         *ref = tmp_path("qm_iref.gguf");
    write_f32_model(src, GGML_TYPE_F32);
    int per_type[GGML_TYPE_COUNT] = {0};
    write_mixed(src, mixed, ref, per_type);
    char *out = NULL;
    ck_assert_int_eq(test_runf(&out, "'%s' inspect '%s'", cli, mixed), 0);
    /* the attn_norm row is F32: native; every matrix's type is one the card
     * reads from its blocks, native too (nothing decodable is converted) */
    ck_assert_msg(strstr(out, "blk.0.attn_norm.weight") && strstr(out, "native"), "%.3000s", out);
    for (int i = 0; i < N_MIXED; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s ", type_name(mixed_types[i]));
        const char *p = strstr(out, "\ntotals:");
        ck_assert_ptr_nonnull(p);
        p = strstr(p, line);
        ck_assert_msg(p, "no %s row in the totals", type_name(mixed_types[i]));
        const char *eol = strchr(p, '\n');
        ck_assert_msg(eol && memmem(p, (size_t)(eol - p), "native", 6), "%.*s",
                      (int)(eol ? eol - p : 40), p);
    }
    free(out);
    ck_assert_int_eq(test_runf(&out, "'%s' inspect --json '%s'", cli, mixed), 0);
    ck_assert_ptr_null(strstr(out, "\"card\": \"converted\""));
    ck_assert_ptr_nonnull(strstr(out, "\"card\": \"native\""));
    free(out);
    ck_assert(cuda_type_native(GGML_TYPE_IQ3_XXS) && cuda_type_native(GGML_TYPE_Q8_0) &&
              cuda_type_native(GGML_TYPE_Q4_K) && cuda_type_native(GGML_TYPE_IQ2_S) &&
              !cuda_type_native(GGML_TYPE_IQ1_S));
    unlink(src);
    unlink(mixed);
    unlink(ref);
    free(src);
    free(mixed);
    free(ref);
}
END_TEST

START_TEST(upload_note_names_conversions_and_cost)
{
    upload_note *n = calloc(1, sizeof *n);
    char name[64];
    for (int l = 0; l < 6; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        /* 1 MiB of Q4_K (2^20 / 144 * 256 weights) -> 3.5555 MiB of F16 */
        upload_note_add(n, name, GGML_TYPE_Q4_K, 1048576, 3728270);
    }
    upload_note_add(n, "token_embd.weight", GGML_TYPE_IQ2_S, 2097152, 13094500);
    ck_assert_int_eq(upload_note_count(n), 7);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    upload_note_print(n, f);
    fclose(f);
    printf("quant_model: upload note:\n%s", buf);
    ck_assert_msg(strstr(buf, "6 Q4_K tensors converted to F16 at upload") &&
                  strstr(buf, "6.0 MiB in the file -> 21.3 MiB on the card (+15.3 MiB)") &&
                  strstr(buf, "blk.0.attn_q.weight, blk.1.attn_q.weight") &&
                  !strstr(buf, "blk.4.attn_q") && strstr(buf, ", ...\n") &&
                  strstr(buf, "1 IQ2_S tensor converted") && strstr(buf, "token_embd.weight\n"),
                  "%s", buf);
    free(buf);
    /* nothing converted: nothing printed */
    memset(n, 0, sizeof *n);
    f = open_memstream(&buf, &len);
    upload_note_print(n, f);
    fclose(f);
    ck_assert_uint_eq(len, 0);
    free(buf);
    free(n);
}
END_TEST

static Suite *quant_model_suite(void)
{
    Suite *s = suite_create("quant_model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, mixed_types_match_f32_reference);
    tcase_add_test(tc, mkmodel_writes_decode_only_types);
    tcase_add_test(tc, fp16_scale_fields_scale_the_block);
    tcase_add_test(tc, bad_tensors_are_refused_by_name);
    tcase_add_test(tc, inspect_says_native_or_converted);
    tcase_add_test(tc, upload_note_names_conversions_and_cost);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(quant_model_suite)
