/* generate.c: the prompt-then-decode loop (see generate.h). */
#include "engine/generate.h"

#include <stdlib.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "text/tokenizer.h"

double strata_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int strata_generate(strata_seq *s, const int32_t *prompt, int n_prompt, sampler *smp,
                    int max_new, gen_token_fn cb, void *user, volatile sig_atomic_t *cancel,
                    gen_stats *st, strata_error *err)
{
    strata_engine *e = s->e;
    int V = strata_n_vocab(e);
    gen_stats local;
    if (!st)
        st = &local;
    *st = (gen_stats){0};
    st->stop_token = -1;
    if (n_prompt <= 0)
        return strata_err(err, STRATA_E_ARG, "empty prompt: nothing to continue from");
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!logits)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    double t0 = strata_now();
    int rc = strata_seq_feed(s, prompt, n_prompt, logits, NULL, err);
    st->n_prompt = n_prompt;
    st->t_prompt = strata_now() - t0;
    t0 = strata_now();
    /* The first token comes from the prompt's logits; every later one from a
     * decode step that samples on the card when it can (only ids cross). */
    int32_t tok = -1;
    if (!rc) {
        tok = sampler_sample(smp, logits, V, strata_seq_tokens(s), strata_seq_len(s));
        if (tok < 0)
            rc = strata_err(err, STRATA_E_NOMEM, "sampler: out of memory");
    }
    while (!rc && (max_new < 0 || st->n_gen < max_new)) {
        if (cancel && *cancel) {
            st->cancelled = 1;
            break;
        }
        if (tokenizer_is_stop(strata_tokenizer(e), tok)) {
            st->stop_token = tok;
            break;
        }
        st->n_gen++;
        /* A token the caller has seen belongs to the history even when the
         * answer ends here (limit or caller stop), so a chat's next turn
         * continues after it. */
        if ((cb && cb(tok, user)) || (max_new >= 0 && st->n_gen >= max_new)) {
            rc = strata_seq_feed(s, &tok, 1, NULL, NULL, err);
            break;
        }
        /* A full context ends the answer (finish "length"), as in the
         * scheduler (sched/sched_step.c, slot_take_token): the answer so far
         * stands and is not an error; the last token, seen by the caller,
         * has no room in the history. */
        if (strata_seq_len(s) + 1 > strata_n_ctx(e)) {
            st->context_full = 1;
            break;
        }
        int32_t next;
        rc = strata_decode_batch_sample(&s, &tok, 1, &smp, &next, err);
        tok = next;
    }
    st->t_gen = strata_now() - t0;
    free(logits);
    return rc;
}
