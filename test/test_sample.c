/* test_sample.c: the sampling chain (engine/sample.c). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "engine/sample.h"

#define V 64

static void logits_fill(float *x, uint64_t seed)
{
    test_fill_normal(x, V, 2.0f, seed);
}

static sampler_params plain(float temp)
{
    sampler_params p = sampler_defaults();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 1;
    return p;
}

static int32_t argmax(const float *x)
{
    int32_t b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

START_TEST(greedy_is_argmax)
{
    float x[V];
    logits_fill(x, 3);
    sampler_params p = plain(0.0f);
    sampler s;
    sampler_init(&s, &p);
    ck_assert_int_eq(sampler_sample(&s, x, V, NULL, 0), argmax(x));
    sampler_free(&s);
}
END_TEST

START_TEST(same_seed_same_tokens)
{
    sampler_params p = plain(0.9f);
    p.seed = 42;
    sampler a, b;
    sampler_init(&a, &p);
    sampler_init(&b, &p);
    int differs_from_greedy = 0;
    for (int i = 0; i < 200; i++) {
        float x[V], y[V];
        logits_fill(x, 100 + i);
        memcpy(y, x, sizeof x);
        int32_t ta = sampler_sample(&a, x, V, NULL, 0), tb = sampler_sample(&b, y, V, NULL, 0);
        ck_assert_int_eq(ta, tb);
        differs_from_greedy |= ta != argmax(y);
    }
    ck_assert_msg(differs_from_greedy, "temperature 0.9 never left the argmax in 200 draws");
    sampler_free(&a);
    sampler_free(&b);
}
END_TEST

/* top-k 3: only the three largest logits are ever drawn. */
START_TEST(top_k_keeps_k)
{
    sampler_params p = plain(2.0f);
    p.top_k = 3;
    sampler s;
    sampler_init(&s, &p);
    float x[V];
    logits_fill(x, 7);
    int32_t top[3];
    float y[V];
    memcpy(y, x, sizeof x);
    for (int k = 0; k < 3; k++) {
        top[k] = argmax(y);
        y[top[k]] = -INFINITY;
    }
    int seen[3] = {0};
    for (int i = 0; i < 500; i++) {
        memcpy(y, x, sizeof x);
        int32_t t = sampler_sample(&s, y, V, NULL, 0);
        ck_assert_msg(t == top[0] || t == top[1] || t == top[2], "token %d outside the top 3", t);
        for (int k = 0; k < 3; k++)
            seen[k] |= t == top[k];
    }
    ck_assert_msg(seen[0] && seen[1] && seen[2], "temperature 2 never drew all of the top 3");
    sampler_free(&s);
}
END_TEST

/* Top-k picks its k by a heap, not a full sort: with many tied logits the
 * k kept are still the k first in (logit descending, id ascending) order,
 * as the full sort keeps them: every draw is one of them, and at a high
 * temperature each of them is drawn. */
START_TEST(top_k_with_ties_keeps_the_sorted_first_k)
{
    enum { K = 8 };
    sampler_params p = plain(50.0f);
    p.top_k = K;
    sampler s;
    sampler_init(&s, &p);
    float x[V], y[V];
    logits_fill(x, 9);
    for (int i = 0; i < V; i++)
        x[i] = roundf(x[i]); /* a handful of values: ties everywhere */
    int32_t top[K];
    memcpy(y, x, sizeof x);
    for (int k = 0; k < K; k++) { /* argmax takes the lowest id on ties */
        top[k] = argmax(y);
        y[top[k]] = -INFINITY;
    }
    int seen[K] = {0};
    for (int i = 0; i < 2000; i++) {
        memcpy(y, x, sizeof x);
        int32_t t = sampler_sample(&s, y, V, NULL, 0);
        int in = 0;
        for (int k = 0; k < K; k++)
            if (t == top[k])
                in = seen[k] = 1;
        ck_assert_msg(in, "token %d (logit %g) outside the sorted top %d", t, x[t], K);
    }
    for (int k = 0; k < K; k++)
        ck_assert_msg(seen[k], "token %d of the top %d never drawn", top[k], K);
    sampler_free(&s);
}
END_TEST

/* A dominant token with top-p 0.5 or min-p 0.5 is always chosen. */
START_TEST(top_p_and_min_p_cut)
{
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = (float)(i % 7) * 0.1f;
    x[17] = 8.0f; /* p(17) ~ 0.96 at temperature 1 */
    for (int mode = 0; mode < 2; mode++) {
        sampler_params p = plain(1.5f);
        if (mode == 0)
            p.top_p = 0.5f;
        else
            p.min_p = 0.5f;
        sampler s;
        sampler_init(&s, &p);
        for (int i = 0; i < 200; i++) {
            float y[V];
            memcpy(y, x, sizeof x);
            ck_assert_int_eq(sampler_sample(&s, y, V, NULL, 0), 17);
        }
        sampler_free(&s);
    }
}
END_TEST

/* The penalty divides a positive logit, multiplies a negative one, once per
 * distinct token in the window, and only inside the window. */
START_TEST(repetition_penalty)
{
    sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = 1.0f;
    x[5] = 4.0f;
    x[6] = -4.0f;
    x[9] = 3.0f;
    int32_t hist[] = {9, 5, 5, 6}; /* window: 5, 5, 6 (9 is outside) */
    sampler_penalize(&p, x, V, hist, 4);
    ck_assert_float_eq(x[5], 2.0f);
    ck_assert_float_eq(x[6], -8.0f);
    ck_assert_float_eq(x[9], 3.0f);
    ck_assert_float_eq(x[0], 1.0f);
    /* and the chain applies it: 9 now leads */
    sampler s;
    float y[V];
    for (int i = 0; i < V; i++)
        y[i] = 1.0f;
    y[5] = 4.0f;
    y[9] = 3.0f;
    sampler_init(&s, &p);
    ck_assert_int_eq(sampler_sample(&s, y, V, hist, 4), 9);
    sampler_free(&s);
}
END_TEST

START_TEST(uniform_in_range_and_seeded)
{
    sampler_params p = plain(1.0f);
    sampler a, b;
    p.seed = 0;
    sampler_init(&a, &p);
    p.seed = 1;
    sampler_init(&b, &p);
    int same = 0;
    for (int i = 0; i < 1000; i++) {
        float u = sampler_uniform(&a), w = sampler_uniform(&b);
        ck_assert(u >= 0.0f && u < 1.0f);
        same += u == w;
    }
    ck_assert_int_lt(same, 5);
    sampler_free(&a);
    sampler_free(&b);
}
END_TEST

static Suite *sample_suite(void)
{
    Suite *s = suite_create("sample");
    TCase *tc = tcase_create("chain");
    tcase_add_test(tc, greedy_is_argmax);
    tcase_add_test(tc, same_seed_same_tokens);
    tcase_add_test(tc, top_k_keeps_k);
    tcase_add_test(tc, top_k_with_ties_keeps_the_sorted_first_k);
    tcase_add_test(tc, top_p_and_min_p_cut);
    tcase_add_test(tc, repetition_penalty);
    tcase_add_test(tc, uniform_in_range_and_seeded);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(sample_suite)
