/* test_scheduler.h: helpers the scheduler's suites share
 * (test_scheduler.c, test_scheduler_kv.c). */
#ifndef STRATA_TEST_SCHEDULER_H
#define STRATA_TEST_SCHEDULER_H

#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "sched/scheduler.h"
#include "engine/strata.h"
#include "kernels/ops.h"
#include "text/tokenizer.h"

/* The solo answer: up to max greedy tokens of prompt on a sequence of its
 * own, ending early at a stop token unless ignore_stop.  Returns the
 * count. */
static inline int sched_test_solo_ex(strata_engine *e, const int32_t *prompt, int n, int max,
                                     int ignore_stop, int32_t *out)
{
    strata_error err = {0};
    int V = strata_n_vocab(e);
    float *lg = malloc(sizeof(float) * V);
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(strata_seq_feed(s, prompt, n, lg, NULL, &err) == 0, "%s", err.msg);
    int k = 0;
    while (k < max) {
        int32_t t = cpu_argmax(lg, V);
        if (!ignore_stop && tokenizer_is_stop(strata_tokenizer(e), t))
            break;
        out[k++] = t;
        if (k < max)
            ck_assert_msg(strata_seq_decode(s, t, lg, &err) == 0, "%s", err.msg);
    }
    strata_seq_free(s);
    free(lg);
    return k;
}

static inline int sched_test_solo(strata_engine *e, const int32_t *prompt, int n, int max,
                                  int32_t *out)
{
    return sched_test_solo_ex(e, prompt, n, max, 0, out);
}

static inline sched_request sched_test_greedy(const int32_t *prompt, int n, int max)
{
    sched_request r = sched_request_default();
    r.sampling.temp = 0;
    r.tokens = prompt;
    r.n_tokens = n;
    r.max_tokens = max;
    return r;
}

/* Read a queue-mode handle to the end. */
static inline int sched_test_drain(sched_handle *h, int32_t *out, int cap)
{
    int n = 0;
    int32_t t;
    while (sched_next(h, &t, -1) == 1)
        if (n < cap)
            out[n++] = t;
    return n;
}

static inline void sched_test_expect(const char *what, int q, const int32_t *got, int n_got,
                                     const int32_t *want, int n_want)
{
    ck_assert_msg(n_got == n_want, "%s %d: %d tokens, want %d", what, q, n_got, n_want);
    for (int i = 0; i < n_want; i++)
        ck_assert_msg(got[i] == want[i], "%s %d token %d: %d, want %d", what, q, i, got[i],
                      want[i]);
}

/* A step trace, recorded by the on_step hook. */
#define MAX_STEPS 1024
typedef struct trace {
    sched_step steps[MAX_STEPS];
    int n;
    int max_queued;
    atomic_int recorded;  /* n, for another thread to read while it runs */
} trace;

static inline void record_step(const sched_step *st, void *user)
{
    trace *t = user;
    if (t->n < MAX_STEPS)
        t->steps[t->n++] = *st;
    if (st->n_queued > t->max_queued)
        t->max_queued = st->n_queued;
    atomic_store(&t->recorded, t->n);
}

#endif
