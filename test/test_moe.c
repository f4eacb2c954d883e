/* test_moe.c: suite "moe" — the CPU MoE steps (kernels/cpu/moe.c) against
 * what they must compute, written independently here, on random (never
 * zero) router logits; the card's kernels are compared with these twins in
 * suite cuda_ops.  Tolerances: routing picks exactly the experts a float64
 * softmax ranks highest (lowest index on ties), weights within 1e-6
 * relative of the float64 renormalised probabilities; group and gather are
 * exact permutations; combine within 1e-6 relative of a float64 sum.  A
 * model asking more than MOE_MAX_USED experts per token is refused by the
 * loader with a message naming the key. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "model/make/mkmodel.h"
#include "model/model.h"

static const struct {
    int ne, k, nt;
} CASES[] = {{8, 2, 5}, {64, 8, 37}, {128, 8, 13}, {256, MOE_MAX_USED, 3}};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

START_TEST(route_picks_top_k_renormalised)
{
    for (int c = 0; c < N_CASES; c++) {
        int ne = CASES[c].ne, k = CASES[c].k, nt = CASES[c].nt;
        float *lg = malloc((size_t)nt * ne * 4), *p = malloc((size_t)nt * ne * 4);
        int32_t *sel = malloc((size_t)nt * k * 4);
        float *w = malloc((size_t)nt * k * 4);
        test_fill_normal(lg, (size_t)nt * ne, 2.0f, 500 + c);
        memcpy(p, lg, (size_t)nt * ne * 4);
        cpu_moe_route(p, nt, ne, k, sel, w);
        for (int t = 0; t < nt; t++) {
            const float *r = lg + (size_t)t * ne;
            double mx = r[0], sum = 0.0, *q = malloc((size_t)ne * sizeof *q);
            for (int i = 1; i < ne; i++)
                mx = r[i] > mx ? r[i] : mx;
            for (int i = 0; i < ne; i++)
                sum += q[i] = exp((double)r[i] - mx);
            double wsum = 0.0;
            for (int j = 0; j < k; j++)
                wsum += q[sel[t * k + j]];
            for (int j = 0; j < k; j++) {
                int e = sel[t * k + j];
                ck_assert_msg(e >= 0 && e < ne, "case %d token %d slot %d: expert %d", c, t, j, e);
                /* slot j holds the j-th largest: nothing unchosen beats it, and
                 * the earlier slots are not smaller */
                for (int i = 0; i < ne; i++) {
                    int chosen = 0;
                    for (int jj = 0; jj < k; jj++)
                        chosen |= sel[t * k + jj] == i;
                    ck_assert_msg(chosen || q[i] < q[e] || (q[i] == q[e] && i > e),
                                  "case %d token %d: expert %d (p %g) left out for %d (p %g)",
                                  c, t, i, q[i] / sum, e, q[e] / sum);
                }
                if (j > 0)
                    ck_assert(q[sel[t * k + j - 1]] >= q[e]);
                double want = q[e] / wsum;
                ck_assert_msg(fabs(w[t * k + j] - want) <= 1e-6 * want,
                              "case %d token %d slot %d: weight %.9g, float64 %.9g", c, t, j,
                              w[t * k + j], want);
            }
            free(q);
        }
        free(lg);
        free(p);
        free(sel);
        free(w);
    }
}
END_TEST

START_TEST(group_gather_combine)
{
    for (int c = 0; c < N_CASES; c++) {
        int ne = CASES[c].ne, k = CASES[c].k, nt = CASES[c].nt, n = nt * k;
        int64_t D = 40;
        float *lg = malloc((size_t)nt * ne * 4), *w = malloc((size_t)n * 4);
        int32_t *sel = malloc((size_t)n * 4), *off = malloc((size_t)(ne + 1) * 4);
        int32_t *rows = malloc((size_t)n * 4), *inv = malloc((size_t)n * 4);
        test_fill_normal(lg, (size_t)nt * ne, 2.0f, 600 + c);
        cpu_moe_route(lg, nt, ne, k, sel, w);
        cpu_moe_group(sel, nt, k, ne, off, rows, inv);
        ck_assert_int_eq(off[0], 0);
        ck_assert_int_eq(off[ne], n);
        for (int e = 0; e < ne; e++)
            for (int r = off[e]; r < off[e + 1]; r++) {
                ck_assert_int_eq(sel[rows[r]], e);
                ck_assert_int_eq(inv[rows[r]], r);
                if (r > off[e])
                    ck_assert_int_lt(rows[r - 1], rows[r]);
            }
        float *x = malloc((size_t)nt * D * 4), *xg = malloc((size_t)n * D * 4);
        test_fill_normal(x, (size_t)nt * D, 1.0f, 700 + c);
        cpu_moe_gather(x, nt, k, D, rows, xg);
        for (int r = 0; r < n; r++)
            ck_assert(!memcmp(xg + (size_t)r * D, x + (size_t)(rows[r] / k) * D, (size_t)D * 4));
        /* combine: expert-sorted rows through inv, and the same rows put back
         * in token-slot order with inv NULL, give the same bits */
        float *y = malloc((size_t)n * D * 4), *ys = malloc((size_t)n * D * 4);
        float *o1 = malloc((size_t)nt * D * 4), *o2 = malloc((size_t)nt * D * 4);
        test_fill_normal(y, (size_t)n * D, 1.0f, 800 + c);
        for (int i = 0; i < n; i++)
            memcpy(ys + (size_t)i * D, y + (size_t)inv[i] * D, (size_t)D * 4);
        cpu_moe_combine(y, w, inv, nt, k, D, o1);
        cpu_moe_combine(ys, w, NULL, nt, k, D, o2);
        ck_assert(!memcmp(o1, o2, (size_t)nt * D * 4));
        for (int t = 0; t < nt; t++)
            for (int64_t i = 0; i < D; i++) {
                double want = 0.0, mag = 0.0;
                for (int j = 0; j < k; j++) {
                    double v = (double)w[t * k + j] * ys[((size_t)t * k + j) * D + i];
                    want += v;
                    mag += fabs(v);
                }
                ck_assert_msg(fabs(o1[t * D + i] - want) <= 1e-6 * mag,
                              "case %d token %d dim %lld: %.9g vs %.9g", c, t, (long long)i,
                              o1[t * D + i], want);
            }
        free(lg);
        free(w);
        free(sel);
        free(off);
        free(rows);
        free(inv);
        free(x);
        free(xg);
        free(y);
        free(ys);
        free(o1);
        free(o2);
    }
}
END_TEST

/* mkmodel can write any expert_used_count; the loader must refuse one above
 * MOE_MAX_USED by name, not let a fixed array overflow later. */
START_TEST(loader_refuses_too_many_experts)
{
    char path[512];
    snprintf(path, sizeof path, "%s/moe_too_many.gguf", test_tmpdir());
    mkmodel_params p = {.arch = "qwen3moe", .n_layer = 1, .n_embd = 64, .n_head = 2,
                        .n_head_kv = 1, .n_expert = MOE_MAX_USED + 2,
                        .n_expert_used = MOE_MAX_USED + 1, .n_ff_exp = 32, .n_vocab = 300,
                        .type = 0 /* F32 */, .seed = 5, .n_threads = 1};
    strata_error err = {0};
    ck_assert_msg(mkmodel_write(&p, path, &err) == 0, "mkmodel: %s", err.msg);
    model *m = NULL;
    int rc = model_load(path, &m, &err);
    remove(path);
    ck_assert_int_eq(rc, STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "expert_used_count"), "message: %s", err.msg);
    /* one fewer is accepted: the limit is MOE_MAX_USED itself */
    p.n_expert_used = MOE_MAX_USED;
    ck_assert_msg(mkmodel_write(&p, path, &err) == 0, "mkmodel: %s", err.msg);
    rc = model_load(path, &m, &err);
    remove(path);
    ck_assert_msg(rc == 0, "load: %s", err.msg);
    model_free(m);
}
END_TEST

static Suite *moe_suite(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, route_picks_top_k_renormalised);
    tcase_add_test(tc, group_gather_combine);
    tcase_add_test(tc, loader_refuses_too_many_experts);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(moe_suite)
