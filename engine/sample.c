/* sample.c: the sampling chain (see sample.h). */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/ops.h"

sampler_params sampler_defaults(void)
{
    sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0};
    return p;
}

void sampler_init(sampler *s, const sampler_params *p)
{
    s->p = *p;
    /* xorshift needs a non-zero state; mix the seed so 0 and 1 differ. */
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (!s->rng)
        s->rng = 1;
    s->cand = NULL;
    s->cap = 0;
}

void sampler_free(sampler *s)
{
    free(s->cand);
    s->cand = NULL;
    s->cap = 0;
}

float sampler_uniform(sampler *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    uint64_t r = s->rng * 0x2545F4914F6CDD1Dull;
    return (float)(r >> 40) / 16777216.0f; /* 24 bits: exactly representable */
}

void sampler_penalize(const sampler_params *p, float *logits, int n_vocab,
                      const int32_t *history, int n_history)
{
    if (p->repeat_penalty == 1.0f || p->repeat_last_n <= 0)
        return;
    int start = n_history > p->repeat_last_n ? n_history - p->repeat_last_n : 0;
    /* Penalize each distinct token once (CTRL-style): divide positive logits,
     * multiply negative ones.  A repeated token is skipped after its first
     * occurrence in the window (the window is short: 64 by default). */
    for (int i = start; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= n_vocab)
            continue;
        int seen = 0;
        for (int j = start; j < i && !seen; j++)
            seen = history[j] == t;
        if (seen)
            continue;
        logits[t] = logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
    }
}

static int cmp_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* lower id first on ties: deterministic */
}

/* Heap of the k best candidates seen so far with the worst (in cmp_desc's
 * order) at the root. */
static void sift_down(struct cand *c, int k, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && cmp_desc(&c[l], &c[w]) > 0)
            w = l;
        if (r < k && cmp_desc(&c[r], &c[w]) > 0)
            w = r;
        if (w == i)
            return;
        struct cand t = c[i];
        c[i] = c[w];
        c[w] = t;
        i = w;
    }
}

/* The k best of the n logits into c[0..k), sorted as qsort with cmp_desc
 * sorts them (the order is total: ties go by id), in O(n log k) instead of
 * sorting the whole vocabulary: a top-k of 40 over 150K logits took
 * milliseconds per token with qsort.  A logit not above the worst kept one
 * cannot enter (on a tie the kept one has the lower id), and that one
 * compare is all most of the vocabulary costs; NaNs take cmp_desc. */
static void top_k_sorted(struct cand *c, const float *logits, int n, int k)
{
    for (int i = 0; i < k; i++)
        c[i] = (struct cand){logits[i], i};
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int i = k; i < n; i++) {
        if (logits[i] <= c[0].logit)
            continue;
        const struct cand x = {logits[i], i};
        if (cmp_desc(&x, &c[0]) < 0) {
            c[0] = x;
            sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cmp_desc);
}

int32_t sampler_sample(sampler *s, float *logits, int n_vocab, const int32_t *history,
                       int n_history)
{
    sampler_penalize(&s->p, logits, n_vocab, history, n_history);
    if (s->p.temp <= 0.0f)
        return cpu_argmax(logits, n_vocab);
    if (s->cap < n_vocab) {
        struct cand *c = realloc(s->cand, (size_t)n_vocab * sizeof *c);
        if (!c)
            return -1;
        s->cand = c;
        s->cap = n_vocab;
    }
    int n = n_vocab;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        top_k_sorted(s->cand, logits, n, s->p.top_k);
        n = s->p.top_k;
    } else {
        for (int i = 0; i < n; i++)
            s->cand[i] = (struct cand){logits[i], i};
        qsort(s->cand, (size_t)n, sizeof *s->cand, cmp_desc);
    }
    /* Probabilities at temperature 1 for the top-p / min-p cuts, as
     * llama.cpp applies them before the temperature. */
    double mx = s->cand[0].logit, sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp(s->cand[i].logit - mx);
    if (s->p.top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            acc += exp(s->cand[i].logit - mx) / sum;
            if (acc >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        /* keep tokens with p >= min_p * p_max; p_max corresponds to exp(0) */
        int k = 1;
        while (k < n && exp(s->cand[k].logit - mx) >= s->p.min_p)
            k++;
        n = k;
    }
    double tot = 0.0;
    for (int i = 0; i < n; i++)
        tot += exp((s->cand[i].logit - mx) / s->p.temp);
    double r = sampler_uniform(s) * tot, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += exp((s->cand[i].logit - mx) / s->p.temp);
        if (r < acc)
            return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
