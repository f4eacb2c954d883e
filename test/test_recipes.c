/* test_recipes.c: the quantization recipes (model/make/recipe.c) and the
 * importance matrix (model/make/imatrix.c, strata-cli imatrix).
 *
 * The expected type of every tensor below was worked out by hand from the
 * recipe rules (doc/quant.md, "Recipes"), never by calling recipe_type: for
 * each model and recipe a row gives the type of each role, and the two
 * layer-dependent roles (attn_v, ffn_down) name the layers that get the
 * larger type.  The models:
 *   L16  llama, 16 layers, dim 256, 4/4 heads (G = 1), ff 512, untied
 *        (n/8 = 2, n/16 = 1, more_bits: 0 1 4 7 10 13 14 15);
 *   Q8G4 qwen3, 8 layers, dim 256, 8/2 heads (G = 4), ff 512, tied
 *        (n/8 = 1, n/16 = 0, more_bits: 0 3 6 7);
 *   MOE  qwen3moe, 8 layers, dim 256, 4/2 heads, 8 experts of 256, untied;
 *   F320 llama, 8 layers, dim 320 (not a multiple of 256), 5/1 heads of 64
 *        (G = 5), ff 512, tied: the row-length fallbacks. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/strata.h"
#include "engine/engine_internal.h"
#include "kernels/ops.h"
#include "model/gguf.h"
#include "model/make/imatrix.h"
#include "model/make/mkmodel.h"
#include "model/make/recipe.h"
#include "model/quant.h"
#include "test/testutil.h"
#include "text/tokenizer.h"

/* hi on the listed layers (space-separated), lo elsewhere. */
typedef struct by_layer {
    const char *hi, *layers, *lo;
} by_layer;
#define ALL(t) {"", "", t}

typedef struct expect {
    const char *recipe;
    const char *embd;   /* token_embd (the tied head's type when tied) */
    const char *output; /* NULL: the model is tied */
    const char *q, *k;
    by_layer v;
    const char *o, *gate_up;
    by_layer down;
} expect;

#define L16_MORE "0 1 4 7 10 13 14 15"
static const expect l16[] = {
    {"iq3_xxs", "IQ3_S", "Q5_K", "IQ2_S", "IQ2_S", ALL("IQ3_S"), "IQ3_S", "IQ3_XXS", {"Q4_K", "0 1", "Q3_K"}},
    {"iq2_xxs", "Q2_K", "Q5_K", "IQ2_XXS", "IQ2_XXS", ALL("Q2_K"), "IQ2_XXS", "IQ2_XXS", {"Q2_K", "0 1", "IQ2_XXS"}},
    {"iq2_s", "IQ3_S", "Q5_K", "IQ2_XS", "IQ2_XS", ALL("IQ3_S"), "IQ3_S", "IQ2_XS", {"IQ3_S", "0 1", "IQ2_XS"}},
    {"q2_0", "Q4_K", "Q6_K", "Q2_0", "Q2_0", ALL("Q2_0"), "Q2_0", "Q2_0", ALL("Q2_0")},
    {"q2_k", "Q2_K", "Q6_K", "Q2_K", "Q2_K", ALL("Q3_K"), "Q3_K", "Q2_K", ALL("Q3_K")},
    {"q3_k_m", "Q3_K", "Q6_K", "Q3_K", "Q3_K", {"Q5_K", "0 1", "Q4_K"}, "Q4_K", "Q3_K", {"Q5_K", "0", "Q4_K"}},
    {"q4_k_m", "Q4_K", "Q6_K", "Q4_K", "Q4_K", {"Q6_K", L16_MORE, "Q4_K"}, "Q4_K", "Q4_K", {"Q6_K", L16_MORE, "Q4_K"}},
};
/* L16 quantized with an importance matrix: only IQ3_XXS's attn_v and
 * ffn_down rows differ */
static const expect l16_imatrix = {"iq3_xxs", "IQ3_S", "Q5_K", "IQ2_S", "IQ2_S", ALL("IQ3_XXS"), "IQ3_S", "IQ3_XXS", ALL("IQ3_XXS")};

static const expect q8g4[] = {
    {"iq3_xxs", "Q5_K", NULL, "IQ2_S", "IQ2_S", ALL("Q4_K"), "IQ3_S", "IQ3_XXS", {"Q4_K", "0", "Q3_K"}},
    {"iq2_xxs", "Q5_K", NULL, "IQ2_XXS", "IQ2_XXS", ALL("Q4_K"), "IQ2_XXS", "IQ2_XXS", {"Q2_K", "0", "IQ2_XXS"}},
    {"iq2_s", "Q5_K", NULL, "IQ2_XS", "IQ2_XS", ALL("Q4_K"), "IQ3_S", "IQ2_XS", {"IQ3_S", "0", "IQ2_XS"}},
    {"q2_0", "Q6_K", NULL, "Q2_0", "Q2_0", ALL("Q2_0"), "Q2_0", "Q2_0", ALL("Q2_0")},
    {"q2_k", "Q6_K", NULL, "Q2_K", "Q2_K", ALL("Q4_K"), "Q3_K", "Q2_K", ALL("Q3_K")},
    {"q3_k_m", "Q6_K", NULL, "Q3_K", "Q3_K", {"Q5_K", "0 1", "Q4_K"}, "Q4_K", "Q3_K", ALL("Q4_K")},
    {"q4_k_m", "Q6_K", NULL, "Q4_K", "Q4_K", {"Q6_K", "0 3 6 7", "Q4_K"}, "Q4_K", "Q4_K", {"Q6_K", "0 3 6 7", "Q4_K"}},
};

static const expect moe[] = {
    {"iq3_xxs", "IQ3_S", "Q5_K", "IQ2_S", "Q8_0", ALL("Q8_0"), "Q5_K", "IQ3_XXS", {"Q4_K", "0", "Q3_K"}},
    {"iq2_xxs", "Q2_K", "Q5_K", "IQ2_XXS", "Q4_K", ALL("Q4_K"), "Q5_K", "IQ2_XXS", {"Q2_K", "0", "IQ2_XXS"}},
    {"iq2_s", "IQ3_S", "Q5_K", "IQ2_XS", "Q4_K", ALL("Q4_K"), "Q5_K", "IQ2_XS", {"IQ3_S", "0", "IQ2_XS"}},
    {"q2_0", "Q4_K", "Q6_K", "Q2_0", "Q8_0", ALL("Q8_0"), "Q2_0", "Q2_0", ALL("Q2_0")},
    {"q2_k", "Q2_K", "Q6_K", "Q2_K", "Q8_0", ALL("Q8_0"), "Q5_K", "Q2_K", ALL("Q3_K")},
    {"q3_k_m", "Q3_K", "Q6_K", "Q3_K", "Q8_0", ALL("Q8_0"), "Q5_K", "Q3_K", ALL("Q4_K")},
    {"q4_k_m", "Q4_K", "Q6_K", "Q4_K", "Q8_0", ALL("Q8_0"), "Q5_K", "Q4_K", {"Q6_K", "0 3 6 7", "Q4_K"}},
};

/* rows of 320: IQ types -> IQ4_NL, Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0; the tied head is Q8_0 (320 % 256 != 0; for
 * Q2_0, 320 % 64 == 0 gives Q6_K, which falls back to Q8_0); ffn_down's
 * rows of 512 keep their type */
static const expect f320[] = {
    {"iq3_xxs", "Q8_0", NULL, "IQ4_NL", "IQ4_NL", ALL("Q5_0"), "IQ4_NL", "IQ4_NL", {"Q4_K", "0", "Q3_K"}},
    {"iq2_xxs", "Q8_0", NULL, "IQ4_NL", "IQ4_NL", ALL("Q5_0"), "IQ4_NL", "IQ4_NL", {"Q2_K", "0", "IQ2_XXS"}},
    {"iq2_s", "Q8_0", NULL, "IQ4_NL", "IQ4_NL", ALL("Q5_0"), "IQ4_NL", "IQ4_NL", {"IQ3_S", "0", "IQ2_XS"}},
    {"q2_0", "Q8_0", NULL, "Q2_0", "Q2_0", ALL("Q2_0"), "Q2_0", "Q2_0", ALL("Q2_0")},
    {"q2_k", "Q8_0", NULL, "Q4_0", "Q4_0", ALL("Q5_0"), "Q4_0", "Q4_0", ALL("Q3_K")},
    {"q3_k_m", "Q8_0", NULL, "Q4_0", "Q4_0", {"Q5_1", "0 1", "Q5_0"}, "Q5_0", "Q4_0", ALL("Q4_K")},
    {"q4_k_m", "Q8_0", NULL, "Q5_0", "Q5_0", {"Q8_0", "0 3 6 7", "Q5_0"}, "Q5_0", "Q5_0", {"Q6_K", "0 3 6 7", "Q4_K"}},
};

typedef struct shape {
    const char *arch;
    int layers, dim, heads, kv_heads, head_dim, ff, experts, ff_exp;
    bool tied;
} shape;

static const shape S_L16 = {"llama", 16, 256, 4, 4, 0, 512, 0, 0, false};
static const shape S_Q8G4 = {"qwen3", 8, 256, 8, 2, 0, 512, 0, 0, true};
static const shape S_MOE = {"qwen3moe", 8, 256, 4, 2, 0, 512, 8, 256, false};
static const shape S_F320 = {"llama", 8, 320, 5, 1, 64, 512, 0, 0, true};

static const char *pick(const by_layer *b, int il)
{
    char want[16], list[128];
    snprintf(want, sizeof want, " %d ", il);
    snprintf(list, sizeof list, " %s ", b->layers);
    return strstr(list, want) ? b->hi : b->lo;
}

/* The hand table's type for one tensor; NULL for "stays F32". */
static const char *expected(const expect *x, const char *name, uint32_t n_dims)
{
    const int il = strncmp(name, "blk.", 4) ? -1 : atoi(name + 4);
    if (n_dims < 2 || strstr(name, "ffn_gate_inp"))
        return "F32";
    if (!strcmp(name, "token_embd.weight"))
        return x->embd;
    if (!strcmp(name, "output.weight"))
        return x->output;
    if (strstr(name, ".attn_q.weight"))
        return x->q;
    if (strstr(name, ".attn_k.weight"))
        return x->k;
    if (strstr(name, ".attn_v.weight"))
        return pick(&x->v, il);
    if (strstr(name, ".attn_output.weight"))
        return x->o;
    if (strstr(name, ".ffn_gate") || strstr(name, ".ffn_up"))
        return x->gate_up;
    if (strstr(name, ".ffn_down"))
        return pick(&x->down, il);
    return "?";
}

/* Every tensor of the file has the table's type; returns the count checked. */
static int check_file(const char *path, const expect *x, const shape *s)
{
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s: %s", path, err.msg);
    int n = 0, n_mat = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const char *want = expected(x, t->name, t->n_dims);
        ck_assert_msg(want != NULL, "%s %s: tensor %s not in the table", path, x->recipe, t->name);
        ck_assert_msg(!strcmp(type_name((int)t->type), want),
                      "%s (%s, %d layers, dim %d): recipe %s gives %s %s, the table says %s",
                      path, s->arch, s->layers, s->dim, x->recipe, t->name,
                      type_name((int)t->type), want);
        n++;
        n_mat += t->n_dims >= 2;
    }
    /* every matrix was there to check: embedding (+ head), 7 per layer */
    ck_assert_int_eq(n_mat, 1 + !s->tied + 7 * s->layers + (s->experts ? s->layers : 0));
    gguf_close(g);
    return n;
}

static void fill_params(mkmodel_params *mp, const shape *s)
{
    memset(mp, 0, sizeof *mp);
    mp->arch = s->arch;
    mp->n_layer = s->layers;
    mp->n_embd = s->dim;
    mp->n_head = s->heads;
    mp->n_head_kv = s->kv_heads;
    mp->head_dim = s->head_dim;
    mp->n_ff = s->ff;
    mp->n_expert = s->experts;
    mp->n_expert_used = s->experts ? 2 : 0;
    mp->n_ff_exp = s->ff_exp;
    mp->n_vocab = MKMODEL_MIN_VOCAB;
    mp->tied = s->tied;
    mp->seed = 11;
}

/* mkmodel --ftype for each recipe (block pool: the types, not the
 * quantizers, are under test), every tensor against the table. */
static void mkmodel_recipes(const shape *s, const expect *table, int n)
{
    for (int r = 0; r < n; r++) {
        mkmodel_params mp;
        fill_params(&mp, s);
        mp.ftype = recipe_by_name(table[r].recipe);
        ck_assert_msg(mp.ftype != RECIPE_NONE, "recipe %s unknown", table[r].recipe);
        mp.type = recipe_base_type(mp.ftype);
        mp.block_pool = 4;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s-%s.gguf", test_tmpdir(), s->arch, table[r].recipe);
        strata_error err = {0};
        ck_assert_msg(mkmodel_write(&mp, path, &err) == 0, "mkmodel %s: %s", table[r].recipe, err.msg);
        check_file(path, &table[r], s);
        remove(path);
    }
}

START_TEST(mkmodel_llama_16_layers)
{
    mkmodel_recipes(&S_L16, l16, 7);
}
END_TEST

START_TEST(mkmodel_qwen3_gqa4_tied)
{
    mkmodel_recipes(&S_Q8G4, q8g4, 7);
}
END_TEST

START_TEST(mkmodel_qwen3moe_8_experts)
{
    mkmodel_recipes(&S_MOE, moe, 7);
}
END_TEST

START_TEST(mkmodel_rows_of_320_fall_back)
{
    mkmodel_recipes(&S_F320, f320, 7);
}
END_TEST

/* The names and the fallback alone, against hand values. */
START_TEST(names_and_fallbacks)
{
    ck_assert_int_eq(recipe_by_name("Q4_K_M"), RECIPE_Q4_K_M);
    ck_assert_int_eq(recipe_by_name("iq2_s"), RECIPE_IQ2_S);
    ck_assert_int_eq(recipe_by_name("q4_k"), RECIPE_NONE);
    ck_assert_int_eq(recipe_base_type(RECIPE_IQ2_S), GGML_TYPE_IQ2_XS);
    ck_assert_int_eq(recipe_layer("blk.12.ffn_down_exps.weight"), 12);
    ck_assert_int_eq(recipe_layer("output.weight"), -1);
    /* 80 is a multiple of 16 only: no 32-element type fits, F16 */
    ck_assert_int_eq(recipe_fallback(GGML_TYPE_IQ3_XXS, 80), GGML_TYPE_F16);
    ck_assert_int_eq(recipe_fallback(GGML_TYPE_Q2_0, 96), GGML_TYPE_Q4_0);
    ck_assert_int_eq(recipe_fallback(GGML_TYPE_Q6_K, 896), GGML_TYPE_Q8_0);
    ck_assert_int_eq(recipe_fallback(GGML_TYPE_Q4_K, 4864), GGML_TYPE_Q4_K);
}
END_TEST

/* The fallback types' encoders with importance weights: on Gaussian rows
 * with random importances (0.01..1, never zero), the error weighted by
 * them is lower than without, and the plain error stays close (a weighted
 * fit trades a little of it). */
START_TEST(fallback_encoders_use_the_imatrix)
{
    static const int types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL};
    const int n = 4096;
    float *x = malloc(sizeof(float) * n), *im = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * n);
    uint8_t *b = malloc((size_t)n * 2);
    test_fill_normal(x, (size_t)n, 1.0f, 7);
    uint64_t st = 99;
    for (int j = 0; j < n; j++)
        im[j] = 0.01f + (float)(test_rand_u64(&st) % 1000) / 1000.0f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const type_traits *t = type_traits_get(types[k]);
        double e[2] = {0, 0}, plain[2] = {0, 0};
        for (int with = 0; with < 2; with++) {
            t->quant(x, b, n, with ? im : NULL);
            t->dequant(b, y, n);
            for (int j = 0; j < n; j++) {
                const double d = (double)x[j] - y[j];
                e[with] += im[j] * d * d;
                plain[with] += d * d;
            }
        }
        printf("recipes: %s weighted error with imatrix / without %.3f, plain error %.3f\n",
               t->name, e[1] / e[0], plain[1] / plain[0]);
        ck_assert_msg(e[1] < 0.97 * e[0], "%s: weighted error %g with imatrix, %g without",
                      t->name, e[1], e[0]);
        ck_assert_msg(plain[1] < 1.5 * plain[0], "%s: plain error %g with imatrix, %g without",
                      t->name, plain[1], plain[0]);
    }
    free(x);
    free(im);
    free(y);
    free(b);
}
END_TEST

/* ---- through strata-cli: mkmodel --ftype, quantize, imatrix -------------- */

static const char *cli_or_skip(void)
{
    return test_cli();
}

static char *run_ok(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run_ok(const char *what, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    ck_assert_msg(rc == 0, "%s: %s failed (%d): %s", what, cmd, rc, out ? out : "");
    return out;
}

/* mkmodel --ftype on the command line, and quantize of an f16 source by a
 * recipe: the same table.  Rows of 320 (every fallback kind) with the
 * cheap K recipes, and the MoE model with Q2_K. */
START_TEST(cli_quantize_follows_the_table)
{
    const char *cli = cli_or_skip();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    const char *d = test_tmpdir();
    free(run_ok("mkmodel --ftype", "'%s' mkmodel -q --arch qwen3moe --layers 8 --dim 256 --heads 4 "
                "--kv-heads 2 --ff 512 --experts 8 --experts-used 2 --ff-exp 256 --vocab 259 "
                "--seed 11 --block-pool 4 --ftype q4_k_m -o %s/moe.gguf 2>&1", cli, d));
    char path[1024];
    snprintf(path, sizeof path, "%s/moe.gguf", d);
    check_file(path, &moe[6], &S_MOE);

    free(run_ok("mkmodel f16", "'%s' mkmodel -q --arch llama --layers 8 --dim 320 --heads 5 "
                "--kv-heads 1 --head-dim 64 --ff 512 --vocab 259 --tied --seed 3 --type f16 "
                "-o %s/f320.gguf 2>&1", cli, d));
    for (int r = 4; r < 7; r++) { /* q2_k, q3_k_m, q4_k_m */
        char *out = run_ok("quantize", "'%s' quantize -q %s/f320.gguf %s/f320-%s.gguf %s", cli, d,
                           d, f320[r].recipe, f320[r].recipe);
        printf("recipes: %s", out);
        /* the summary lists each type with its tensors and bytes */
        ck_assert_msg(strstr(out, "recipe ") && strstr(out, "type Q8_0") &&
                      strstr(out, " tensors "), "summary: %s", out);
        free(out);
        snprintf(path, sizeof path, "%s/f320-%s.gguf", d, f320[r].recipe);
        check_file(path, &f320[r], &S_F320);
    }
}
END_TEST

/* imatrix over a text -> quantize --imatrix: the with-imatrix rows of the
 * IQ3_XXS recipe are taken, and the tensors whose type is the same both
 * ways (ffn_gate, IQ3_XXS) change their bytes and lower their error
 * weighted by the importance matrix. */
START_TEST(cli_imatrix_switches_rows_and_lowers_weighted_error)
{
    const char *cli = cli_or_skip();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    const char *d = test_tmpdir();
    free(run_ok("mkmodel", "'%s' mkmodel -q --arch llama --layers 16 --dim 256 --heads 4 "
                "--kv-heads 4 --ff 512 --vocab 259 --seed 11 --type f32 -o %s/l16.gguf 2>&1",
                cli, d));
    char *out = run_ok("imatrix", "'%s' imatrix -m %s/l16.gguf -f %s/test/data/gettysburg_declaration.txt "
                       "-c 64 --chunks 3 -o %s/im.gguf 2>&1", cli, d, test_root(), d);
    printf("recipes: %s\n", out);
    ck_assert_ptr_nonnull(strstr(out, "3 windows of 64 tokens"));
    free(out);
    out = run_ok("quantize --imatrix", "'%s' quantize -q --imatrix %s/im.gguf %s/l16.gguf %s/w.gguf iq3_xxs",
                 cli, d, d, d);
    printf("recipes: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "with imatrix"));
    free(out);
    free(run_ok("quantize", "'%s' quantize -q %s/l16.gguf %s/n.gguf iq3_xxs", cli, d, d));
    char path[1024];
    snprintf(path, sizeof path, "%s/w.gguf", d);
    check_file(path, &l16_imatrix, &S_L16);
    snprintf(path, sizeof path, "%s/n.gguf", d);
    check_file(path, &l16[0], &S_L16);

    /* the weighted error of blk.3.ffn_gate.weight, both IQ3_XXS */
    gguf *src = NULL, *w = NULL, *n = NULL;
    imatrix *im = NULL;
    strata_error err = {0};
    char p_src[1024], p_w[1024], p_n[1024], p_im[1024];
    snprintf(p_src, sizeof p_src, "%s/l16.gguf", d);
    snprintf(p_w, sizeof p_w, "%s/w.gguf", d);
    snprintf(p_n, sizeof p_n, "%s/n.gguf", d);
    snprintf(p_im, sizeof p_im, "%s/im.gguf", d);
    ck_assert(gguf_open(p_src, &src, &err) == 0 && gguf_open(p_w, &w, &err) == 0 &&
              gguf_open(p_n, &n, &err) == 0 && imatrix_load(p_im, &im, &err) == 0);
    const char *name = "blk.3.ffn_gate.weight";
    const gguf_tensor *ts = gguf_find_tensor(src, name), *tw = gguf_find_tensor(w, name),
                      *tn = gguf_find_tensor(n, name);
    ck_assert(ts && tw && tn && tw->type == GGML_TYPE_IQ3_XXS && tn->type == GGML_TYPE_IQ3_XXS);
    ck_assert_msg(memcmp(tw->data, tn->data, tw->nbytes) != 0, "the imatrix changed no byte of %s", name);
    const float *imp = imatrix_lookup(im, name, ts->ne[0], 1);
    ck_assert_ptr_nonnull(imp);
    const int64_t cols = ts->ne[0], rows = ts->ne[1];
    float *yw = malloc(sizeof(float) * cols), *yn = malloc(sizeof(float) * cols);
    const float *x = ts->data;
    const size_t rb = type_row_bytes(GGML_TYPE_IQ3_XXS, cols);
    double ew = 0, en = 0;
    for (int64_t r = 0; r < rows; r++) {
        type_traits_get(GGML_TYPE_IQ3_XXS)->dequant((const uint8_t *)tw->data + r * rb, yw, cols);
        type_traits_get(GGML_TYPE_IQ3_XXS)->dequant((const uint8_t *)tn->data + r * rb, yn, cols);
        for (int64_t j = 0; j < cols; j++) {
            const double a = x[r * cols + j] - yw[j], b = x[r * cols + j] - yn[j];
            ew += imp[j] * a * a;
            en += imp[j] * b * b;
        }
    }
    printf("recipes: %s weighted error with imatrix %.6g, without %.6g (ratio %.3f)\n", name, ew,
           en, ew / en);
    ck_assert_msg(ew < en, "weighted error with imatrix %g is not below %g", ew, en);
    free(yw);
    free(yn);
    imatrix_free(im);
    gguf_close(src);
    gguf_close(w);
    gguf_close(n);
}
END_TEST

/* The whole file as a string (NULL if unreadable). */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* imatrix on the demo model: layer 0's attn_q (and attn_k, attn_v) input
 * is the attn_norm output, which depends on the token alone, so the file's
 * means can be recomputed here from the text with the engine's own
 * embedding and RMSNorm, without running the model. */
START_TEST(imatrix_of_the_demo_model_equals_a_direct_computation)
{
    const char *cli = test_cli(), *demo = test_demo_model();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    if (!demo)
        TEST_SKIP("model", "demo model not found (make model, or STRATA_MODEL)");
    const char *d = test_tmpdir();
    char text[1024], im_path[1024];
    snprintf(text, sizeof text, "%s/test/data/gettysburg_declaration.txt", test_root());
    snprintf(im_path, sizeof im_path, "%s/demo-im.gguf", d);
    const int ctx = 48, chunks = 3;
    char *out = run_ok("imatrix", "'%s' imatrix -m '%s' -f %s -c %d --chunks %d -o %s 2>&1", cli,
                       demo, text, ctx, chunks, im_path);
    printf("recipes: %s", out);
    free(out);

    strata_params p = test_params(demo, STRATA_BACKEND_CPU);
    strata_engine *e = test_open(&p);
    const model *m = strata_model(e);
    const tokenizer *tok = strata_tokenizer(e);
    size_t len = 0;
    char *txt = slurp(text, &len);
    ck_assert_ptr_nonnull(txt);
    const int add_bos = tokenizer_add_bos(tok) && tokenizer_bos(tok) >= 0;
    tok_ids ids = {0};
    strata_error err = {0};
    ck_assert(tokenizer_encode(tok, txt, len, add_bos ? TOK_ENCODE_ADD_BOS : 0, &ids, &err) == 0);
    const int64_t D = m->hp.n_embd;
    double *sum = calloc((size_t)D, sizeof *sum);
    float *x = malloc(sizeof(float) * D), *xn = malloc(sizeof(float) * D);
    for (int w = 0; w < chunks; w++)
        for (int i = 0; i < ctx; i++) {
            int32_t t = ids.ids[(size_t)w * ctx + i];
            if (i == 0 && add_bos)
                t = tokenizer_bos(tok); /* each window starts with bos */
            cpu_embed(m->tok_embd.type, m->tok_embd.data, D, t, x);
            cpu_rmsnorm(x, m->layers[0].attn_norm, D, m->hp.eps, xn);
            for (int64_t j = 0; j < D; j++)
                sum[j] += (double)xn[j] * xn[j];
        }
    imatrix *im = NULL;
    ck_assert_msg(imatrix_load(im_path, &im, &err) == 0, "%s", err.msg);
    const char *names[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"};
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        int64_t cols;
        int n_mat;
        const float *v = imatrix_values(im, names[k], &cols, &n_mat);
        ck_assert_msg(v && cols == D && n_mat == 1, "%s missing or misshapen", names[k]);
        for (int64_t j = 0; j < D; j++) {
            const double want = sum[j] / (chunks * ctx);
            const double rel = fabs(v[j] - want) / want;
            worst = rel > worst ? rel : worst;
            ck_assert_msg(rel < 1e-5, "%s column %lld: file %.9g, direct %.9g", names[k],
                          (long long)j, v[j], want);
        }
    }
    printf("recipes: demo imatrix, layer 0 q/k/v input: worst relative difference %.3g over %lld "
           "columns, %d tokens\n", worst, (long long)D, chunks * ctx);
    /* the embedding and head are not recorded, as llama.cpp's imatrix */
    int64_t c;
    int nm;
    ck_assert_ptr_null(imatrix_values(im, "token_embd.weight", &c, &nm));
    ck_assert_ptr_null(imatrix_values(im, "output.weight", &c, &nm));
    imatrix_free(im);
    free(sum);
    free(x);
    free(xn);
    free(txt);
    tok_ids_free(&ids);
    strata_close(e);
}
END_TEST

/* MoE: each expert's matrix has its own means and row count, from the
 * tokens routed to it: the counts of one layer's experts add up to
 * tokens x experts used. */
START_TEST(imatrix_counts_per_expert)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset)");
    const char *d = test_tmpdir();
    free(run_ok("mkmodel", "'%s' mkmodel -q --arch qwen3moe --layers 2 --dim 256 --heads 4 "
                "--kv-heads 2 --ff 512 --experts 8 --experts-used 2 --ff-exp 256 --vocab 259 "
                "--seed 5 --type q8_0 -o %s/moe.gguf 2>&1", cli, d));
    free(run_ok("imatrix", "'%s' imatrix -m %s/moe.gguf -f %s/test/data/gettysburg_declaration.txt "
                "-c 40 --chunks 2 -o %s/im.gguf 2>&1", cli, d, test_root(), d));
    char path[1024];
    snprintf(path, sizeof path, "%s/im.gguf", d);
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
    const gguf_tensor *c = gguf_find_tensor(g, "blk.1.ffn_down_exps.weight.counts");
    ck_assert(t && c && t->ne[0] == 256 && t->ne[1] == 8 && c->ne[0] == 8);
    const float *cnt = c->data;
    double total = 0;
    int used = 0;
    for (int k = 0; k < 8; k++) {
        total += cnt[k];
        used += cnt[k] > 0;
    }
    ck_assert_msg(total == 2 * 40 * 2, "expert rows add up to %g, want %d", total, 2 * 40 * 2);
    ck_assert_msg(used >= 2, "only %d experts saw rows", used);
    /* the attention weights are plain: one matrix of 80 rows */
    const gguf_tensor *q = gguf_find_tensor(g, "blk.0.attn_q.weight.counts");
    ck_assert(q && q->ne[0] == 1 && ((const float *)q->data)[0] == 80);
    gguf_close(g);
}
END_TEST

static Suite *recipes_suite(void)
{
    Suite *s = suite_create("recipes");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, names_and_fallbacks);
    tcase_add_test(tc, fallback_encoders_use_the_imatrix);
    tcase_add_test(tc, mkmodel_llama_16_layers);
    tcase_add_test(tc, mkmodel_qwen3_gqa4_tied);
    tcase_add_test(tc, mkmodel_qwen3moe_8_experts);
    tcase_add_test(tc, mkmodel_rows_of_320_fall_back);
    tcase_add_test(tc, cli_quantize_follows_the_table);
    tcase_add_test(tc, cli_imatrix_switches_rows_and_lowers_weighted_error);
    tcase_add_test(tc, imatrix_of_the_demo_model_equals_a_direct_computation);
    tcase_add_test(tc, imatrix_counts_per_expert);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(recipes_suite);
