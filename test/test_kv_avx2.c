/* test_kv_avx2.c: suite "kv_avx2" — the KV store's AVX2 twins
 * (kernels/cpu/kv_avx2.c) against their plain C twins (kernels/cpu/kv.c,
 * kernels/cpu/rotate.c), bit for bit: the engine stores with the AVX2 ones,
 * the card's kernels and the reference scripts reproduce the C ones.
 *
 * Inputs: Gaussian blocks at scales from 1e-3 to 1e3, blocks with one
 * outlier (one past k8v4nl's V range, whose scale is clamped), ties for the
 * largest element (either sign), values at exact
 * halves of a K step (roundf's half away from zero), zeros, an Inf, NaNs,
 * subnormals; head dims 32 to 512 for the rotation.  Skipped without AVX2. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/dot_kernels.h"
#include "kernels/ops.h"

#define NB 64 /* blocks of 32 per input */

/* NB blocks of assorted shapes (the first few are the edge cases). */
static void fill_blocks(float *x, uint64_t seed)
{
    uint64_t st = seed;
    for (int b = 0; b < NB; b++) {
        float *xb = x + 32 * b;
        const float scale = powf(10.0f, (float)(b % 7) - 3.0f);
        for (int j = 0; j < 32; j++)
            xb[j] = scale * test_rand_normal(&st);
        switch (b) {
        case 0: memset(xb, 0, 32 * sizeof *xb); break;
        case 1: xb[7] = INFINITY; break;
        case 2: xb[3] = NAN; break;
        case 3: xb[0] = NAN; xb[31] = -NAN; break;
        case 4: xb[5] = 40.0f * scale; break;              /* one outlier */
        case 5: xb[2] = 9.0f; xb[20] = -9.0f; break;       /* a tie of magnitudes */
        case 6: xb[2] = -9.0f; xb[20] = 9.0f; break;
        case 7: /* K codes at exact halves: amax 127 gives id 1 */
            for (int j = 0; j < 32; j++)
                xb[j] = (float)(j - 16) + 0.5f;
            xb[0] = 127.0f;
            break;
        case 8:
            for (int j = 0; j < 32; j++)
                xb[j] = 1e-40f * (float)(j + 1); /* subnormals */
            break;
        case 9: xb[11] = -INFINITY; break;
        case 10: xb[9] = -2.0e4f; break; /* past 127 x 56.5: V's scale clamped */
        default: break;
        }
    }
}

START_TEST(k8_twin_gives_the_c_bits)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "no AVX2 on this CPU");
    for (uint64_t seed = 1; seed <= 20; seed++) {
        float x[32 * NB];
        int8_t q0[32 * NB], q1[32 * NB];
        uint16_t d0[NB], d1[NB];
        fill_blocks(x, seed);
        cpu_quant_k8(x, 32 * NB, q0, d0);
        cpu_quant_k8_avx2(x, 32 * NB, q1, d1);
        ck_assert_msg(!memcmp(d0, d1, sizeof d0), "seed %d: scales differ", (int)seed);
        for (int i = 0; i < 32 * NB; i++)
            ck_assert_msg(q0[i] == q1[i], "seed %d element %d (x %.9g): code %d, C %d", (int)seed,
                          i, x[i], q1[i], q0[i]);
    }
}
END_TEST

START_TEST(v4nl_twin_gives_the_c_bits)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "no AVX2 on this CPU");
    for (uint64_t seed = 1; seed <= 20; seed++) {
        float x[32 * NB];
        uint8_t q0[16 * NB], q1[16 * NB];
        uint16_t d0[NB], d1[NB];
        fill_blocks(x, 100 + seed);
        cpu_quant_v4nl(x, 32 * NB, q0, d0);
        cpu_quant_v4nl_avx2(x, 32 * NB, q1, d1);
        for (int b = 0; b < NB; b++) {
            ck_assert_msg(d0[b] == d1[b], "seed %d block %d: scale %04x, C %04x", (int)seed, b,
                          d1[b], d0[b]);
            ck_assert_msg(!memcmp(q0 + 16 * b, q1 + 16 * b, 16), "seed %d block %d: codes differ",
                          (int)seed, b);
        }
    }
}
END_TEST

START_TEST(rotation_twin_gives_the_c_bits)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "no AVX2 on this CPU");
    static const int dims[] = {32, 64, 128, 256, 512};
    for (int k = 0; k < 5; k++) {
        const int d = dims[k], nh = 3;
        float x[3 * 512], a[3 * 512], b[3 * 512];
        test_fill_normal(x, (size_t)nh * d, 2.0f, 7 + (uint64_t)k);
        memcpy(a, x, sizeof(float) * nh * d);
        memcpy(b, x, sizeof(float) * nh * d);
        cpu_kv_rotate_c(a, nh, d);
        cpu_kv_rotate_avx2(b, nh, d);
        ck_assert_msg(!memcmp(a, b, sizeof(float) * nh * d), "rotate, head_dim %d", d);
        cpu_kv_unrotate_c(a, nh, d);
        cpu_kv_unrotate_avx2(b, nh, d);
        ck_assert_msg(!memcmp(a, b, sizeof(float) * nh * d), "unrotate, head_dim %d", d);
    }
}
END_TEST

static Suite *kv_avx2_suite(void)
{
    Suite *s = suite_create("kv_avx2");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, k8_twin_gives_the_c_bits);
    tcase_add_test(tc, v4nl_twin_gives_the_c_bits);
    tcase_add_test(tc, rotation_twin_gives_the_c_bits);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(kv_avx2_suite)
