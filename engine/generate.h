/* generate.h: read a prompt, then sample and decode until a stop token, a
 * limit, or a cancel request.  The loop the front ends share. */
#ifndef STRATA_GENERATE_H
#define STRATA_GENERATE_H

#include <signal.h>
#include <stdint.h>

#include "engine/sample.h"
#include "engine/strata.h"

typedef struct gen_stats {
    int n_prompt, n_gen;
    double t_prompt, t_gen; /* seconds */
    int32_t stop_token;     /* the stop token sampled (not fed), or -1 */
    int cancelled;
    int context_full;       /* the answer ended because the context was full */
} gen_stats;

/* Called with each generated token (never the stop token); a non-zero
 * return stops generation. */
typedef int (*gen_token_fn)(int32_t token, void *user);

/* Feed prompt[0..n_prompt) to s, then generate up to max_new tokens (< 0:
 * until the context is full).  *cancel (may be NULL) is polled between
 * tokens: a signal handler can set it.  A sampled stop token ends the
 * answer and is reported in stats->stop_token without being fed, so the
 * caller decides whether it joins the history (chat feeds it with the next
 * turn).  A full context ends the answer too (stats->context_full), with
 * status 0: what was generated stands. */
int strata_generate(strata_seq *s, const int32_t *prompt, int n_prompt, sampler *smp,
                    int max_new, gen_token_fn cb, void *user, volatile sig_atomic_t *cancel,
                    gen_stats *stats, strata_error *err);

double strata_now(void); /* monotonic seconds */

#endif
