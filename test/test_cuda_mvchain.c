/* test_cuda_mvchain.c: suite "cuda_mvchain" — the persistent decode chain
 * (cuda_mvchain, kernels/cuda/mvchain.cu) on a small random chain of the
 * 8B layer's form (q|k|v, o on q, gate|up, down with the SwiGLU and the
 * residual), 3 layers, IQ3_XXS and Q2_0, shapes that split k into 2-8
 * segments (the fold) and a q|k|v whose rows end inside a 16-row tile:
 *   - every step's output bitwise what the separate kernels write
 *     (cuda_matvec, cuda_matvec_swiglu, cuda_add), on two launches in a row
 *     (the flags put back by the first), and with the deeper ring and the
 *     L2 prefetch;
 *   - every step against its twin cpu_mv_chain fed the card's own inputs,
 *     within the matvec's int8 tolerance (1e-2), and the whole chain on the
 *     CPU against the card's last x within 3e-2 (the steps' errors add up);
 *   - chains it must refuse. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_wtest.h"

#ifdef STRATA_CUDA

#define MC_LAYERS 3
#define MC_DIM 1024
#define MC_QKV 1320 /* q 1024 + 296: the last 16-row tile ragged */
#define MC_FF 2048

static const int64_t mc_shape[4][2] = {{MC_QKV, MC_DIM}, {MC_DIM, MC_DIM}, {2 * MC_FF, MC_DIM}, {MC_DIM, MC_FF}};

/* A chain's buffers: host weights (ggml), the card's, and each step's
 * output per layer on the card (outputs of layer l: 4 l .. 4 l + 3). */
typedef struct mc_chain {
    int type;
    uint8_t *w[MC_LAYERS][4];
    void *dw[MC_LAYERS][4];
    float *dx0;
    float *dy[2][4 * MC_LAYERS]; /* [0]: separate kernels, [1]: persistent */
    mv_chain_op ops[4 * MC_LAYERS];
} mc_chain;

static int64_t mc_rows(int k) { return mc_shape[k % 4][0]; }

/* Random weights whose scales keep the chain's values of order 1 (a
 * weight's rms about 1/sqrt(cols)). */
static uint8_t *mc_weights(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    uint8_t *w = cw_random_weights(type, rows, cols, seed);
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows / t->bytes;
    const float d0 = (type == GGML_TYPE_IQ3_XXS ? 1.f / 160 : 1.f / 1.2f) / sqrtf((float)cols);
    uint64_t st = seed + 99;
    for (size_t b = 0; b < nb; b++) {
        const float v = d0 * (0.5f + (float)(test_rand_u64(&st) % 1000) / 1000.f);
        const uint16_t h = f32_to_fp16(v);
        memcpy(w + b * t->bytes, &h, 2); /* d at offset 0 in IQ3_XXS and Q2_0 */
    }
    return w;
}

/* The steps of run r (0: separate, 1: persistent) as mv_chain_op. */
static void mc_ops(const mc_chain *c, int r, mv_chain_op *ops)
{
    for (int l = 0; l < MC_LAYERS; l++) {
        float *const *y = &c->dy[r][4 * l];
        const float *x = l ? c->dy[r][4 * l - 1] : c->dx0;
        ops[4 * l + 0] = (mv_chain_op){c->type, c->dw[l][0], MC_QKV, MC_DIM, x, NULL, NULL, y[0]};
        ops[4 * l + 1] = (mv_chain_op){c->type, c->dw[l][1], MC_DIM, MC_DIM, y[0], NULL, NULL, y[1]};
        ops[4 * l + 2] = (mv_chain_op){c->type, c->dw[l][2], 2 * MC_FF, MC_DIM, y[1], NULL, NULL, y[2]};
        ops[4 * l + 3] = (mv_chain_op){c->type, c->dw[l][3], MC_DIM, MC_FF, y[2], y[2] + MC_FF, x, y[3]};
    }
}

static void mc_init(mc_chain *c, int type)
{
    memset(c, 0, sizeof *c);
    c->type = type;
    for (int l = 0; l < MC_LAYERS; l++)
        for (int k = 0; k < 4; k++) {
            c->w[l][k] = mc_weights(type, mc_shape[k][0], mc_shape[k][1], 500 + 10 * l + k + 100 * (uint64_t)type);
            c->dw[l][k] = cw_upload(type, mc_shape[k][0], mc_shape[k][1], c->w[l][k]);
        }
    float x[MC_DIM];
    test_fill_normal(x, MC_DIM, 1.0f, 31 + type);
    c->dx0 = cw_dev_copy(x, sizeof x);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4 * MC_LAYERS; k++) {
            ck_assert(cudaMalloc((void **)&c->dy[r][k], (size_t)mc_rows(k) * sizeof(float)) == cudaSuccess);
            cw_poison(c->dy[r][k], (size_t)mc_rows(k));
        }
    mc_ops(c, 1, c->ops);
}

static void mc_free(mc_chain *c)
{
    for (int l = 0; l < MC_LAYERS; l++)
        for (int k = 0; k < 4; k++) {
            free(c->w[l][k]);
            cudaFree(c->dw[l][k]);
        }
    cudaFree(c->dx0);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4 * MC_LAYERS; k++)
            cudaFree(c->dy[r][k]);
}

/* The separate kernels into dy[0], as the engine's decode step runs them. */
static void mc_separate(const mc_chain *c)
{
    mv_chain_op ops[4 * MC_LAYERS];
    mc_ops(c, 0, ops);
    strata_error err = {0};
    for (int i = 0; i < 4 * MC_LAYERS; i++) {
        const mv_chain_op *o = &ops[i];
        int rc = o->xu ? cuda_matvec_swiglu(o->type, o->w, o->rows, o->cols, NULL, 1, o->x, o->xu, 2 * MC_FF, o->y,
                                            0, &err)
                       : cuda_matvec(o->type, o->w, o->rows, o->cols, o->x, 1, o->y, 0, &err);
        if (!rc && o->res)
            rc = cuda_add(o->y, o->res, o->rows, 0, &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
    }
    ck_assert(cudaDeviceSynchronize() == cudaSuccess);
}

static void mc_persistent(mc_chain *c, int launches, int depth)
{
    strata_error err = {0};
    cuda_mvchain *ch = NULL;
    ck_assert_msg(cuda_mvchain_make(c->ops, 4 * MC_LAYERS, depth, depth ? 1 : 0, depth ? 8 : 0, &ch, &err) == 0, "%s", err.msg);
    for (int i = 0; i < launches; i++) {
        for (int k = 0; k < 4 * MC_LAYERS; k++)
            cw_poison(c->dy[1][k], (size_t)mc_rows(k));
        ck_assert_msg(cuda_mvchain_run(ch, 0, &err) == 0, "%s", err.msg);
        ck_assert_msg(cudaDeviceSynchronize() == cudaSuccess, "launch %d: %s", i,
                      cudaGetErrorString(cudaGetLastError()));
    }
    cuda_mvchain_free(ch);
}

static const int mc_types[] = {GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_0};

/* Every step of run 1 (persistent) bitwise run 0's (separate). */
static void mc_assert_bitwise(const mc_chain *c, int depth)
{
    float *a = malloc(2 * MC_FF * sizeof *a), *b = malloc(2 * MC_FF * sizeof *b);
    ck_assert(a && b);
    for (int k = 0; k < 4 * MC_LAYERS; k++) {
        cw_fetch(a, c->dy[0][k], (size_t)mc_rows(k));
        cw_fetch(b, c->dy[1][k], (size_t)mc_rows(k));
        char what[64];
        snprintf(what, sizeof what, "depth %d layer %d step %d", depth, k / 4, k % 4);
        cw_assert_bitwise(c->type, what, a, b, 1, mc_rows(k));
    }
    fprintf(stderr, "cuda_mvchain %-7s %d steps, ring depth %d: bitwise the separate kernels' outputs\n",
            type_name(c->type), 4 * MC_LAYERS, depth);
    free(a);
    free(b);
}

START_TEST(mvchain_bitwise_separate)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    for (int ti = 0; ti < 2; ti++) {
        mc_chain c;
        mc_init(&c, mc_types[ti]);
        mc_separate(&c);
        mc_persistent(&c, 2, 0); /* two launches: the flags were put back */
        mc_assert_bitwise(&c, 0);
        /* more in flight (a deeper ring, L2 prefetch one item and 8 tiles ahead): the same bits */
        const int deep = c.type == GGML_TYPE_IQ3_XXS ? 5 : 16;
        mc_persistent(&c, 1, deep);
        mc_assert_bitwise(&c, deep);
        mc_free(&c);
    }
}
END_TEST

/* Host copy of n device floats (malloc'd). */
static float *mc_host(const float *d, int64_t n)
{
    float *h = malloc((size_t)n * sizeof *h);
    ck_assert(h);
    cw_fetch(h, d, (size_t)n);
    return h;
}

START_TEST(mvchain_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    for (int ti = 0; ti < 2; ti++) {
        mc_chain c;
        mc_init(&c, mc_types[ti]);
        mc_persistent(&c, 1, 0);
        double worst = 0;
        /* each step from the card's own inputs */
        for (int k = 0; k < 4 * MC_LAYERS; k++) {
            const mv_chain_op *o = &c.ops[k];
            mv_chain_op h = *o;
            float *x = mc_host(o->x, o->cols), *xu = o->xu ? mc_host(o->xu, o->cols) : NULL;
            float *res = o->res ? mc_host(o->res, o->rows) : NULL;
            float *y = malloc((size_t)o->rows * sizeof *y), *gy = mc_host(o->y, o->rows);
            ck_assert(y);
            h.w = c.w[k / 4][k % 4];
            h.x = x;
            h.xu = xu;
            h.res = res;
            h.y = y;
            ck_assert(cpu_mv_chain(&h, 1) == 0);
            const double e = cw_rel_err(gy, y, (size_t)o->rows);
            if (e > worst)
                worst = e;
            ck_assert_msg(e < cw_tolerance(c.type), "%s layer %d step %d: rel err %g", type_name(c.type), k / 4,
                          k % 4, e);
            free(x);
            free(xu);
            free(res);
            free(y);
            free(gy);
        }
        /* the whole chain on the CPU */
        float *hy[4 * MC_LAYERS];
        float x0[MC_DIM];
        cw_fetch(x0, c.dx0, MC_DIM);
        mv_chain_op h[4 * MC_LAYERS];
        for (int k = 0; k < 4 * MC_LAYERS; k++) {
            hy[k] = malloc((size_t)mc_rows(k) * sizeof(float));
            ck_assert(hy[k]);
        }
        for (int l = 0; l < MC_LAYERS; l++) {
            const float *x = l ? hy[4 * l - 1] : x0;
            h[4 * l + 0] = (mv_chain_op){c.type, c.w[l][0], MC_QKV, MC_DIM, x, NULL, NULL, hy[4 * l]};
            h[4 * l + 1] = (mv_chain_op){c.type, c.w[l][1], MC_DIM, MC_DIM, hy[4 * l], NULL, NULL, hy[4 * l + 1]};
            h[4 * l + 2] = (mv_chain_op){c.type, c.w[l][2], 2 * MC_FF, MC_DIM, hy[4 * l + 1], NULL, NULL, hy[4 * l + 2]};
            h[4 * l + 3] = (mv_chain_op){c.type, c.w[l][3], MC_DIM, MC_FF, hy[4 * l + 2], hy[4 * l + 2] + MC_FF, x,
                                         hy[4 * l + 3]};
        }
        ck_assert(cpu_mv_chain(h, 4 * MC_LAYERS) == 0);
        float *gx = mc_host(c.dy[1][4 * MC_LAYERS - 1], MC_DIM);
        const double e = cw_rel_err(gx, hy[4 * MC_LAYERS - 1], MC_DIM);
        fprintf(stderr, "cuda_mvchain %-7s worst step rel err %.3g (1e-2), the chain's last x %.3g (3e-2)\n",
                type_name(c.type), worst, e);
        ck_assert_msg(e < 3e-2, "%s chain: rel err %g", type_name(c.type), e);
        free(gx);
        for (int k = 0; k < 4 * MC_LAYERS; k++)
            free(hy[k]);
        mc_free(&c);
    }
}
END_TEST

START_TEST(mvchain_rejects_bad_chains)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    mc_chain c;
    mc_init(&c, GGML_TYPE_IQ3_XXS);
    strata_error err = {0};
    cuda_mvchain *ch = NULL;
    mv_chain_op ops[4 * MC_LAYERS];
    memcpy(ops, c.ops, sizeof ops);
    ops[2].y = c.dy[1][0]; /* gate|up writes q|k|v, which o reads */
    ops[2].rows = MC_QKV;
    ck_assert_int_eq(cuda_mvchain_make(ops, 3, 0, 0, 0, &ch, &err), STRATA_E_ARG);
    ck_assert(ch == NULL);
    memcpy(ops, c.ops, sizeof ops);
    ops[1].x = c.dy[1][0] + 400; /* o reads past the end of q|k|v */
    ck_assert_int_eq(cuda_mvchain_make(ops, 2, 0, 0, 0, &ch, &err), STRATA_E_ARG);
    memcpy(ops, c.ops, sizeof ops);
    ops[1].type = GGML_TYPE_Q2_0; /* two types */
    ck_assert_int_eq(cuda_mvchain_make(ops, 2, 0, 0, 0, &ch, &err), STRATA_E_ARG);
    memcpy(ops, c.ops, sizeof ops);
    ops[0].type = ops[1].type = GGML_TYPE_Q4_0;
    ck_assert_int_eq(cuda_mvchain_make(ops, 2, 0, 0, 0, &ch, &err), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(cuda_mvchain_make(ops, 0, 0, 0, 0, &ch, &err), STRATA_E_ARG);
    mc_free(&c);
}
END_TEST

#else

START_TEST(mvchain_bitwise_separate) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(mvchain_matches_cpu) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(mvchain_rejects_bad_chains) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST

#endif

static Suite *cuda_mvchain_suite(void)
{
    Suite *s = suite_create("cuda_mvchain");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, mvchain_bitwise_separate);
    tcase_add_test(tc, mvchain_matches_cpu);
    tcase_add_test(tc, mvchain_rejects_bad_chains);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(cuda_mvchain_suite)
