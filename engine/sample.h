/* sample.h: choosing the next token from logits.
 *
 * Order (as llama.cpp's default chain): repetition penalty over the last
 * repeat_last_n tokens, then greedy if temp <= 0, else top-k, top-p, min-p,
 * temperature, and a draw from the seeded generator.  Deterministic for a
 * seed: the same logits and history give the same token. */
#ifndef STRATA_SAMPLE_H
#define STRATA_SAMPLE_H

#include <stdint.h>

typedef struct sampler_params {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;
    uint64_t seed;
} sampler_params;

/* Defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1 (off). */
sampler_params sampler_defaults(void);

typedef struct sampler {
    sampler_params p;
    uint64_t rng;
    /* scratch for candidates, grown on demand */
    struct cand { float logit; int32_t id; } *cand;
    int cap;
} sampler;

void sampler_init(sampler *s, const sampler_params *p);
void sampler_free(sampler *s);
/* Uniform in [0, 1) from the sampler's generator (xorshift64*). */
float sampler_uniform(sampler *s);
/* Apply the penalty in place to logits (n_vocab) for tokens in history. */
void sampler_penalize(const sampler_params *p, float *logits, int n_vocab,
                      const int32_t *history, int n_history);
/* Pick a token; logits may be modified.  Returns -1 only if out of memory. */
int32_t sampler_sample(sampler *s, float *logits, int n_vocab,
                       const int32_t *history, int n_history);

#endif
