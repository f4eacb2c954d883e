/* test_kv_r2.c: suite "kv_r2" — the two parts of the k8v4r2 cache that
 * k8v4r lacks: V's codes (cpu_quant_v4nl / cpu_dequant_v4nl,
 * kernels/cpu/kv.c: 4-bit codes into the IQ4_NL levels with a searched
 * scale, in Q4_0's bytes) and the K shift (kv_view.kshift: a fixed vector
 * subtracted from every key before it is stored).
 *
 * Judges: the level table itself (each code is the nearest level), the
 * scale's 7 significant bits (what the card's one-FMA decode needs), and the
 * squared error against Q4_0's absmax recipe on the values a rotated cache
 * stores (Gaussian blocks): measured relative RMS error Q4_0 0.0861,
 * IQ4_NL-coded 0.0753 (-24 % in squared error; 0.0752 before the
 * scale kept 7 significant bits); bound: below 0.92 x Q4_0's.
 * Edge blocks (zeros, an Inf, a NaN among finite values) give a defined
 * block: finite decoded values, the finite elements of a NaN-holding block
 * within 2x the Gaussian error.
 * The K shift: keys with a large fixed bias on 4 channels (as Qwen2.5's K
 * biases put on its K), attention against float64 attention over the exact
 * keys and values: with the bias as kshift the error must fall below half
 * of the error without it (measured: 0.063 against 0.141 of max |out|,
 * 2.2x; V's 4 bits are most of what remains), and the stored keys must
 * decode to k - shift. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "model/quant.h"

/* The code is the nearest level's index (the lower one on a tie). */
START_TEST(nl_codes_are_nearest_levels)
{
    uint64_t st = 5;
    for (int i = 0; i < 20000; i++) {
        float r = 150.0f * test_rand_normal(&st);
        int c = kv_nl_code(r), best = 0;
        for (int j = 1; j < 16; j++)
            if (fabsf(r - iq4nl_values[j]) < fabsf(r - iq4nl_values[best]))
                best = j;
        ck_assert_msg(c == best, "r %.9g: code %d, nearest %d", r, c, best);
    }
    ck_assert_int_eq(kv_nl_code(NAN), 8);
    ck_assert_int_eq(kv_nl_code(0.0f), 8);     /* level 1: the one nearest zero */
    ck_assert_int_eq(kv_nl_code(-1e30f), 0);
    ck_assert_int_eq(kv_nl_code(1e30f), 15);
}
END_TEST

static double rel_err(const float *x, const float *y, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)x[i] * x[i];
    }
    return sqrt(num / den);
}

START_TEST(nl_beats_q4_0_on_gaussian_blocks)
{
    const int n = 32 * 4096;
    float *x = malloc(sizeof *x * n), *y = malloc(sizeof *y * n);
    uint8_t *q = malloc((size_t)n / 2);
    uint16_t *d = malloc(sizeof *d * (n / 32));
    test_fill_normal(x, n, 0.3f, 2024);
    cpu_quant_v4(x, n, q, d);
    cpu_dequant_v4(q, d, n, y);
    double e4 = rel_err(x, y, n);
    cpu_quant_v4nl(x, n, q, d);
    cpu_dequant_v4nl(q, d, n, y);
    double enl = rel_err(x, y, n);
    printf("  kv_r2: relative RMS error Q4_0 %.4f, IQ4_NL levels %.4f\n", e4, enl);
    ck_assert_msg(enl < 0.92 * e4, "IQ4_NL-coded V %.4f, Q4_0 %.4f", enl, e4);
    ck_assert_msg(enl > 0.03, "error %.4f: too small to be 4 bits", enl);
    free(x);
    free(y);
    free(q);
    free(d);
}
END_TEST

START_TEST(nl_edge_blocks_are_defined)
{
    float x[4 * 32], y[4 * 32];
    uint8_t q[4 * 16];
    uint16_t d[4];
    test_fill_normal(x, 4 * 32, 1.0f, 99);
    for (int j = 0; j < 32; j++)
        x[j] = 0.0f;             /* block 0: zeros */
    x[32 + 5] = INFINITY;        /* block 1: an Inf */
    x[64 + 9] = NAN;             /* block 2: one NaN among finite values */
    cpu_quant_v4nl(x, 4 * 32, q, d);
    cpu_dequant_v4nl(q, d, 4 * 32, y);
    for (int j = 0; j < 64; j++)
        ck_assert_msg(y[j] == 0.0f, "zero/Inf block element %d decodes to %g", j, y[j]);
    float xf[32], yf[32];
    int m = 0;
    for (int j = 0; j < 32; j++)
        if (j != 9) {
            xf[m] = x[64 + j];
            yf[m++] = y[64 + j];
        }
    ck_assert(isfinite(y[64 + 9]));
    double e = rel_err(xf, yf, m);
    ck_assert_msg(e < 0.16, "NaN-holding block: finite elements' error %.4f", e);
    ck_assert_msg(rel_err(x + 96, y + 96, 32) < 0.16, "plain block error");
}
END_TEST

/* The stored V scale keeps 7 significant bits, and with it the card's one-FMA
 * decode is exact: for every finite fp16 h, fp16_keep7(h) clears the low 4
 * mantissa bits, keeps the sign, moves the value by at most 2^-7 of itself
 * (normal h) or 8 of the smallest steps (subnormal h), and for |d| < 57
 * 1152 d is an fp16 value (so (1152 + l) d - 1152 d = l d before the FMA's
 * one rounding).  kv_nl_scale also clamps |d| to 56.5, so every scale
 * cpu_quant_v4nl writes is such a value, however large the elements (they
 * saturate at 127 x 56.5). */
START_TEST(nl_scale_keeps_7_bits)
{
    int exact = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u)
            continue; /* Inf, NaN */
        uint16_t r = fp16_keep7((uint16_t)h);
        float v = fp16_to_f32((uint16_t)h), w = fp16_to_f32(r);
        ck_assert_msg((r & 0xfu) == 0 && (r & 0x8000u) == (h & 0x8000u), "h %04x -> %04x", h,
                      r);
        ck_assert_msg((r & 0x7c00u) != 0x7c00u, "h %04x rounds to Inf", h);
        double tol = (h & 0x7c00u) ? ldexp(fabs(v), -7) : 8.0 * ldexp(1.0, -24);
        ck_assert_msg(fabs((double)w - v) <= tol || (h & 0x7fffu) >= 0x7bf8u,
                      "h %04x (%g) -> %g", h, v, w);
        if (fabsf(w) < 57.0f) {
            float p = 1152.0f * w; /* exact in float */
            ck_assert_msg(fp16_to_f32(f32_to_fp16(p)) == p, "1152 x %g not fp16", w);
            exact++;
        }
        /* the stored scale: fp16_keep7's, clamped to 56.5, and every one
         * the attention's one-FMA decode takes exactly */
        uint16_t c = kv_nl_scale((uint16_t)h);
        ck_assert_msg(kv_nl_scale_ok(c), "h %04x -> scale %04x", h, c);
        ck_assert_msg(c == ((r & 0x7fffu) <= KV_NL_DMAX ? r : (uint16_t)((h & 0x8000u) | KV_NL_DMAX)),
                      "h %04x: scale %04x, keep7 %04x", h, c, r);
        float pc = 1152.0f * fp16_to_f32(c);
        ck_assert_msg(fp16_to_f32(f32_to_fp16(pc)) == pc, "1152 x scale %04x not fp16", c);
    }
    ck_assert_int_gt(exact, 20000);
    ck_assert_msg(fp16_to_f32(KV_NL_DMAX) == 56.5f, "KV_NL_DMAX is %g", fp16_to_f32(KV_NL_DMAX));
    const int n = 32 * 512;
    float *x = malloc(sizeof *x * n);
    uint8_t *q = malloc((size_t)n / 2);
    uint16_t d[512];
    float *y = malloc(sizeof *y * n);
    const float sds[4] = {1e-6f, 0.3f, 900.0f, 9000.0f};
    for (int scale = 0; scale < 4; scale++) {
        test_fill_normal(x, n, sds[scale], 77 + scale);
        cpu_quant_v4nl(x, n, q, d);
        cpu_dequant_v4nl(q, d, n, y);
        int clamped = 0;
        for (int b = 0; b < 512; b++) {
            ck_assert_msg(kv_nl_scale_ok(d[b]), "block %d: scale %04x", b, d[b]);
            clamped += (d[b] & 0x7fffu) == KV_NL_DMAX;
        }
        /* elements past 127 x 56.5 saturate: the decoded block stays within
         * it, and a clamped block's largest element decodes to its end */
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabsf(y[i]) <= 127.0f * 56.5f, "element %d: %g", i, y[i]);
        if (scale == 3)
            ck_assert_msg(clamped > 400, "sd 9000: %d of 512 scales clamped", clamped);
        else if (scale < 2)
            ck_assert_int_eq(clamped, 0);
    }
    free(y);
    free(x);
    free(q);
}
END_TEST

/* float64 softmax(q K^T * scale) V over n exact keys/values of one head. */
static void exact_attention(const float *q, const float *k, const float *v, int n, int hd,
                            float scale, double *out)
{
    double *s = malloc(sizeof *s * n), m = -INFINITY, l = 0;
    for (int t = 0; t < n; t++) {
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * k[t * hd + i];
        s[t] = d * scale;
        m = s[t] > m ? s[t] : m;
    }
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int t = 0; t < n; t++) {
        double p = exp(s[t] - m);
        l += p;
        for (int i = 0; i < hd; i++)
            out[i] += p * v[t * hd + i];
    }
    for (int i = 0; i < hd; i++)
        out[i] /= l;
    free(s);
}

START_TEST(kshift_removes_a_fixed_bias_from_the_keys)
{
    enum { HD = 64, N = 300, NH = 2 };
    int32_t pages[2] = {1, 0};
    int8_t *kq = malloc((size_t)2 * KV_PAGE * HD);
    uint16_t *kd = malloc(sizeof *kd * 2 * KV_PAGE * HD / 32);
    uint8_t *vq = malloc((size_t)2 * KV_PAGE * HD / 2);
    uint16_t *vd = malloc(sizeof *vd * 2 * KV_PAGE * HD / 32);
    float *k = malloc(sizeof *k * N * HD), *v = malloc(sizeof *v * N * HD);
    float bias[HD] = {0}, q[NH * HD], out[NH * HD];
    test_fill_normal(k, (size_t)N * HD, 1.0f, 31);
    test_fill_normal(v, (size_t)N * HD, 1.0f, 32);
    test_fill_normal(q, NH * HD, 0.5f, 33);
    for (int c = 0; c < 4; c++)
        bias[5 + 17 * c] = c % 2 ? -120.0f : 140.0f;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < HD; i++)
            k[t * HD + i] += bias[i];
    double err[2], ref[HD];
    for (int shifted = 0; shifted <= 1; shifted++) {
        kv_view kv = {.type = KV_K8V4NL, .n_kv_head = 1, .head_dim = HD, .pages = pages,
                      .kq = kq, .kd = kd, .vq = vq, .vd = vd, .kshift = shifted ? bias : NULL};
        for (int t = 0; t < N; t++)
            cpu_kv_store(&kv, t, k + t * HD, v + t * HD);
        if (shifted) { /* token 7's key decodes to k - bias */
            float back[HD];
            size_t slot = (size_t)pages[0] * KV_PAGE + 7;
            cpu_dequant_k8(kq + slot * HD, kd + slot * (HD / 32), HD, back);
            for (int i = 0; i < HD; i++)
                ck_assert_msg(fabsf(back[i] - (k[7 * HD + i] - bias[i])) < 0.05f,
                              "element %d: %g vs %g", i, back[i], k[7 * HD + i] - bias[i]);
        }
        cpu_attention(q, NH, &kv, N, 0.125f, out);
        double worst = 0, mx = 0;
        for (int h = 0; h < NH; h++) {
            exact_attention(q + h * HD, k, v, N, HD, 0.125f, ref);
            for (int i = 0; i < HD; i++) {
                double d = fabs(out[h * HD + i] - ref[i]);
                worst = d > worst ? d : worst;
                mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
            }
        }
        err[shifted] = worst / mx;
    }
    printf("  kv_r2: attention error, biased keys: no shift %.4f, shifted %.4f (of max |out|)\n",
           err[0], err[1]);
    ck_assert_msg(err[1] < 0.5 * err[0], "shift %.4g, none %.4g", err[1], err[0]);
    free(kq);
    free(kd);
    free(vq);
    free(vd);
    free(k);
    free(v);
}
END_TEST

static Suite *kv_r2_suite(void)
{
    Suite *s = suite_create("kv_r2");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, nl_codes_are_nearest_levels);
    tcase_add_test(tc, nl_beats_q4_0_on_gaussian_blocks);
    tcase_add_test(tc, nl_edge_blocks_are_defined);
    tcase_add_test(tc, nl_scale_keeps_7_bits);
    tcase_add_test(tc, kshift_removes_a_fixed_bias_from_the_keys);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(kv_r2_suite)
