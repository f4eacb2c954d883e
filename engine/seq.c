/* seq.c: sequences (conversations) and running tokens through the stages. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/engine_internal.h"
#include "engine/sample.h"

strata_seq *strata_seq_new(strata_engine *e, strata_error *err)
{
    strata_seq *s = calloc(1, sizeof *s);
    if (s)
        s->kv = calloc((size_t)e->n_stages, sizeof *s->kv);
    if (!s || !s->kv) {
        free(s);
        strata_err(err, STRATA_E_NOMEM, "out of memory for a sequence");
        return NULL;
    }
    s->e = e;
    return s;
}

void strata_seq_free(strata_seq *s)
{
    if (!s)
        return;
    strata_engine *e = s->e;
    for (int i = 0; i < e->n_stages; i++)
        kv_seq_release(&s->kv[i], e->stages[i].kv);
    e->be->seq_free(e, s);
    free(s->kv);
    free(s->tokens);
    free(s);
}

void strata_seq_truncate(strata_seq *s, int n)
{
    if (n < 0)
        n = 0;
    /* Also when n == n_tokens: pages reserved past the history (a failed
     * feed's) go back to the pool. */
    if (n < s->n_tokens)
        s->n_tokens = n;
    for (int i = 0; i < s->e->n_stages; i++)
        kv_seq_truncate(&s->kv[i], s->e->stages[i].kv, n);
}

void strata_seq_reset(strata_seq *s) { strata_seq_truncate(s, 0); }
int strata_seq_len(const strata_seq *s) { return s->n_tokens; }
const int32_t *strata_seq_tokens(const strata_seq *s) { return s->tokens; }

/* Reserve KV pages on every stage for n_tokens and record the new tokens. */
static int seq_grow(strata_seq *s, const int32_t *tokens, int n, strata_error *err)
{
    strata_engine *e = s->e;
    if (s->n_tokens + n > e->n_ctx)
        return strata_err(err, STRATA_E_LIMIT, "context full: %d tokens + %d new > context %d "
                          "(raise -c, or /reset the conversation)", s->n_tokens, n, e->n_ctx);
    for (int i = 0; i < e->n_stages; i++) {
        int rc = kv_seq_reserve(&s->kv[i], e->stages[i].kv, s->n_tokens + n, err);
        if (rc)
            return rc;
    }
    if (s->n_tokens + n > s->cap) {
        int cap = s->cap ? s->cap : 256;
        while (cap < s->n_tokens + n)
            cap *= 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
        if (!t)
            return strata_err(err, STRATA_E_NOMEM, "out of memory for the token history");
        s->tokens = t;
        s->cap = cap;
    }
    memcpy(s->tokens + s->n_tokens, tokens, (size_t)n * sizeof *tokens);
    return e->be->seq_sync(e, s, err);
}

int strata_seq_feed(strata_seq *s, const int32_t *tokens, int n, float *logits,
                    float *all_logits, strata_error *err)
{
    strata_engine *e = s->e;
    int V = e->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return strata_err(err, STRATA_E_ARG, "token id %d at %d is outside the vocabulary (%d)",
                              tokens[i], i, V);
    if (n <= 0)
        return 0;
    int rc = seq_grow(s, tokens, n, err);
    if (rc) {
        /* A later stage's reservation failed: give back the pages the
         * earlier stages took (the history is unchanged). */
        strata_seq_truncate(s, s->n_tokens);
        return rc;
    }
    fwd_row *rows = malloc((size_t)e->max_rows * sizeof *rows);
    if (!rows)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    int base = s->n_tokens;
    for (int done = 0; done < n && !rc; done += e->p.n_chunk) {
        int c = n - done < e->p.n_chunk ? n - done : e->p.n_chunk;
        for (int r = 0; r < c; r++) {
            int last = done + r == n - 1;
            rows[r] = (fwd_row){s, tokens[done + r], base + done + r,
                                all_logits ? r : (last && logits ? 0 : -1)};
        }
        float *out = all_logits ? all_logits + (size_t)done * V : logits;
        rc = e->be->forward(e, rows, c, 0, out, err);
    }
    free(rows);
    if (rc) {
        /* The KV of the failed chunk is unusable: drop the new tokens. */
        strata_seq_truncate(s, base);
        return rc;
    }
    s->n_tokens = base + n;
    return 0;
}

/* Append one token to each sequence and fill the rows of a decode step. */
static int decode_rows(strata_seq **seqs, const int32_t *tokens, int n, fwd_row *rows,
                       strata_error *err)
{
    strata_engine *e = seqs[0]->e;
    if (n > e->max_rows)
        return strata_err(err, STRATA_E_ARG, "decode batch of %d > %d rows", n, e->max_rows);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->m->hp.n_vocab)
            return strata_err(err, STRATA_E_ARG, "token id %d is outside the vocabulary (%d)",
                              tokens[i], e->m->hp.n_vocab);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return strata_err(err, STRATA_E_ARG, "sequence appears twice in a decode batch");
        int rc = seq_grow(seqs[i], &tokens[i], 1, err);
        if (rc)
            return rc;
        rows[i] = (fwd_row){seqs[i], tokens[i], seqs[i]->n_tokens, i};
    }
    return 0;
}

/* After the step: the new tokens join the history, or (on failure) leave. */
static void decode_commit(strata_seq **seqs, int n, int ok)
{
    for (int i = 0; i < n; i++) {
        if (ok)
            seqs[i]->n_tokens++;
        else
            strata_seq_truncate(seqs[i], seqs[i]->n_tokens);
    }
}

int strata_decode_batch(strata_seq **seqs, const int32_t *tokens, int n, float *logits,
                        strata_error *err)
{
    if (n <= 0)
        return 0;
    fwd_row rows[n];
    int rc = decode_rows(seqs, tokens, n, rows, err);
    if (!rc)
        rc = seqs[0]->e->be->forward(seqs[0]->e, rows, n, 1, logits, err);
    decode_commit(seqs, n, rc == 0);
    return rc;
}

/* STRATA_SAMPLE_ON_HOST=1: a debugging switch, every decode step copies
 * its logits back and samples on the host (read once). */
static int sample_on_host(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("STRATA_SAMPLE_ON_HOST");
        v = s && *s && strcmp(s, "0") != 0;
    }
    return v;
}

int strata_decode_batch_sample(strata_seq **seqs, const int32_t *tokens, int n, sampler **smp,
                               int32_t *next, strata_error *err)
{
    if (n <= 0)
        return 0;
    strata_engine *e = seqs[0]->e;
    /* Sampled where the logits are when every row's parameters allow it
     * (on a card: no copy of n x vocab logits back), else on the host. */
    int on_card = !sample_on_host();
    for (int i = 0; i < n && on_card; i++)
        on_card = e->be->can_sample(&smp[i]->p);
    fwd_row rows[n];
    int rc = decode_rows(seqs, tokens, n, rows, err);
    if (!rc && on_card) {
        const sampler_params *params[n];
        float uniform[n];
        for (int i = 0; i < n; i++) {
            params[i] = &smp[i]->p;
            /* The host generator stays the one source of randomness, drawn
             * exactly when the host sampler would draw. */
            uniform[i] = smp[i]->p.temp > 0.0f ? sampler_uniform(smp[i]) : 0.0f;
        }
        rc = e->be->forward_sample(e, rows, n, params, uniform, next, err);
    } else if (!rc) {
        int V = e->m->hp.n_vocab;
        float *logits = malloc((size_t)n * V * sizeof *logits);
        if (!logits)
            rc = strata_err(err, STRATA_E_NOMEM, "out of memory");
        if (!rc)
            rc = e->be->forward(e, rows, n, 1, logits, err);
        for (int i = 0; i < n && !rc; i++) {
            /* history includes the token just fed, as in strata_generate */
            seqs[i]->n_tokens++;
            next[i] = sampler_sample(smp[i], logits + (size_t)i * V, V, seqs[i]->tokens,
                                     seqs[i]->n_tokens);
            seqs[i]->n_tokens--;
        }
        free(logits);
    }
    decode_commit(seqs, n, rc == 0);
    return rc;
}

int strata_seq_decode(strata_seq *s, int32_t token, float *logits, strata_error *err)
{
    return strata_decode_batch(&s, &token, 1, logits, err);
}
