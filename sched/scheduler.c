/* scheduler.c: the thread-safe request API around the orchestration
 * thread: handles, submission, the scheduler's life (see scheduler.h and
 * doc/scheduler.md).
 *
 * Locks: the scheduler's mutex guards the queue and the stopping flag; each
 * handle's mutex guards its token queue, its reference count and its
 * result.  When both are held, the scheduler's is taken first.  The slots
 * belong to the orchestration thread alone and need no lock.  The cancel
 * flag is an atomic so that the thread can poll it every step for free.
 *
 * The conversation cache (park) belongs to the orchestration thread too:
 * it captures a conversation when it leaves its slot and restores one
 * before a slot reads its first prompt chunk, so no copy ever runs beside
 * a step that reads or writes the same pages.  The counters are published
 * under the scheduler's mutex for sched_get_cache_stats.
 *
 * The orchestration thread itself (admission, the prefill chunk and the
 * decode step of every step, a request's end in its slot) is in
 * sched_step.c; which slot a request takes (resident reuse) and how KV
 * pages are found when the pool runs short (eviction, parking) are in
 * sched_slots.c; the structures the three files use are in
 * sched_internal.h. */
#include "sched/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/strata.h"
#include "engine/generate.h"
#include "text/tokenizer.h"
#include "sched/sched_internal.h"

sched_params sched_params_default(void)
{
    sched_params p;
    memset(&p, 0, sizeof p);
    return p;
}

sched_request sched_request_default(void)
{
    sched_request r;
    memset(&r, 0, sizeof r);
    r.sampling = sampler_defaults();
    return r;
}

const char *sched_finish_name(int finish)
{
    switch (finish) {
    case SCHED_FINISH_NONE: return "running";
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_CANCELLED: return "cancelled";
    case SCHED_FINISH_ERROR: return "error";
    }
    return "?";
}

int sched_n_slots(const strata_sched *s) { return s->n_slots; }
uint64_t sched_handle_id(const sched_handle *h) { return h->id; }

/* ---- handles ------------------------------------------------------------- */

static void handle_destroy(sched_handle *h)
{
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    sampler_free(&h->smp);
    tokdec_free(h->dec);
    free(h->resume);
    free(h->prompt);
    free(h->q);
    free(h);
}

/* Drop one reference (under no lock); the last one frees the handle. */
static void handle_unref(sched_handle *h)
{
    pthread_mutex_lock(&h->mu);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (last)
        handle_destroy(h);
}

void sched_handle_finish(sched_handle *h, int finish, const strata_error *err, double t_end)
{
    pthread_mutex_lock(&h->mu);
    sched_result *r = &h->res;
    r->finish = finish;
    r->t_done = t_end - h->t_submit;
    if (r->n_gen >= 2 && r->t_done > r->t_first)
        r->decode_tps = (r->n_gen - 1) / (r->t_done - r->t_first);
    if (err)
        r->err = *err;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    handle_unref(h);
}

int sched_handle_push(sched_handle *h, int32_t tok)
{
    pthread_mutex_lock(&h->mu);
    if (h->q_len == h->q_cap) {
        size_t cap = h->q_cap ? h->q_cap * 2 : 64;
        int32_t *q = realloc(h->q, cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&h->mu);
            return STRATA_E_NOMEM;
        }
        h->q = q;
        h->q_cap = cap;
    }
    h->q[h->q_len++] = tok;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void sched_cancel(sched_handle *h)
{
    if (h)
        atomic_store(&h->cancel, 1);
}

/* Absolute CLOCK_MONOTONIC deadline timeout_s from now (the handle's
 * condition variable uses that clock, so a wall-clock jump cannot stretch
 * or cut a wait). */
static struct timespec deadline_after(double timeout_s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(timeout_s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

int sched_next(sched_handle *h, int32_t *tok, double timeout_s)
{
    struct timespec until = deadline_after(timeout_s > 0 ? timeout_s : 0);
    int rc = SCHED_TIMEOUT;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->q_read < h->q_len) {
            *tok = h->q[h->q_read++];
            rc = 1;
            break;
        }
        if (h->res.finish) {
            rc = 0;
            break;
        }
        if (timeout_s == 0)
            break;
        if (timeout_s < 0)
            pthread_cond_wait(&h->cv, &h->mu);
        else if (pthread_cond_timedwait(&h->cv, &h->mu, &until))
            break; /* ETIMEDOUT: one last look happened above */
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int sched_wait(sched_handle *h, sched_result *r)
{
    pthread_mutex_lock(&h->mu);
    while (!h->res.finish)
        pthread_cond_wait(&h->cv, &h->mu);
    if (r)
        *r = h->res;
    int rc = h->res.finish == SCHED_FINISH_ERROR ? h->res.err.code : 0;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void sched_handle_free(sched_handle *h)
{
    if (!h)
        return;
    /* A request nobody listens to any more is not worth a slot. */
    atomic_store(&h->cancel, 1);
    handle_unref(h);
}

/* ---- submission ---------------------------------------------------------- */

/* The prompt of a request as token ids (malloc'd). */
static int request_prompt(strata_sched *s, const sched_request *req, int32_t **out, int *n,
                          strata_error *err)
{
    const tokenizer *tok = strata_tokenizer(s->e);
    if (req->messages && req->n_messages) {
        if (s->fmt_rc)
            return strata_err(err, s->fmt_rc, "%s", s->fmt_err.msg);
        char *text = NULL;
        tok_ids ids = {0};
        int rc = chat_render(&s->fmt, req->messages, req->n_messages, true, &text, err);
        if (!rc)
            rc = tokenizer_encode(tok, text, strlen(text), TOK_ENCODE_SPECIAL | TOK_ENCODE_ADD_BOS,
                                  &ids, err);
        free(text);
        if (rc) {
            tok_ids_free(&ids);
            return rc;
        }
        *out = ids.ids; /* tok_ids owns a plain malloc'd array */
        *n = (int)ids.n;
        return 0;
    }
    if (!req->tokens || req->n_tokens <= 0)
        return strata_err(err, STRATA_E_ARG, "request has neither messages nor tokens");
    for (int i = 0; i < req->n_tokens; i++)
        if (req->tokens[i] < 0 || req->tokens[i] >= s->V)
            return strata_err(err, STRATA_E_ARG, "token id %d at %d is outside the vocabulary (%d)",
                              req->tokens[i], i, s->V);
    *out = malloc((size_t)req->n_tokens * sizeof **out);
    if (!*out)
        return strata_err(err, STRATA_E_NOMEM, "out of memory for a prompt");
    memcpy(*out, req->tokens, (size_t)req->n_tokens * sizeof **out);
    *n = req->n_tokens;
    return 0;
}

int sched_submit(strata_sched *s, const sched_request *req, sched_handle **out,
                 strata_error *err)
{
    *out = NULL;
    sched_handle *h = calloc(1, sizeof *h);
    if (!h)
        return strata_err(err, STRATA_E_NOMEM, "out of memory for a request");
    int rc = request_prompt(s, req, &h->prompt, &h->n_prompt, err);
    if (!rc && h->n_prompt <= 0)
        rc = strata_err(err, STRATA_E_ARG, "empty prompt");
    if (!rc && h->n_prompt > s->n_ctx)
        rc = strata_err(err, STRATA_E_LIMIT, "prompt of %d tokens does not fit the context of %d "
                        "(raise -c)", h->n_prompt, s->n_ctx);
    /* Text for the callback, kept across a park: one decoder per request. */
    if (!rc && req->on_token)
        rc = tokdec_new(strata_tokenizer(s->e), 0, &h->dec, err);
    if (rc) {
        free(h->prompt);
        free(h);
        return rc;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    h->refs = 2;
    atomic_init(&h->cancel, 0);
    h->sp = req->sampling;
    sampler_init(&h->smp, &h->sp);
    h->max_tokens = req->max_tokens;
    h->ignore_stop = req->ignore_stop;
    h->on_token = req->on_token;
    h->user = req->user;
    h->res.slot = -1;
    h->res.stop_token = -1;
    h->res.n_prompt = h->n_prompt;

    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        handle_destroy(h);
        return strata_err(err, STRATA_E_CANCELLED, "scheduler is shutting down");
    }
    h->id = ++s->next_id;
    h->res.id = h->id;
    h->t_submit = strata_now();
    if (s->tail)
        s->tail->next = h;
    else
        s->head = h;
    s->tail = h;
    s->n_queued++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = h;
    return 0;
}

/* ---- life ---------------------------------------------------------------- */

static void sched_destroy(strata_sched *s)
{
    if (s->slots)
        for (int i = 0; i < s->n_slots; i++) {
            strata_seq_free(s->slots[i].seq);
        }
    park_free(s->park);
    free(s->slots);
    free(s->logits);
    free(s->b_seq);
    free(s->b_tok);
    free(s->b_slot);
    chat_template_free(&s->fmt);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The conversation cache, when sched_params asks for one. */
static int sched_open_cache(strata_sched *s, strata_error *err)
{
    if (!s->p.cache_mib) {
        if (s->p.save_dir)
            return strata_err(err, STRATA_E_ARG, "conversation save to %s: the conversation "
                              "cache is off (give its MiB)", s->p.save_dir);
        if (s->p.cache_slots > 0)
            return strata_err(err, STRATA_E_ARG, "conversation cache: %d slots but no memory "
                              "(give the MiB too)", s->p.cache_slots);
        return 0;
    }
    int slots = s->p.cache_slots > 0 ? s->p.cache_slots : 64;
    s->park = park_new(s->e, s->p.cache_mib, slots, err);
    if (!s->park)
        return err->code;
    int rc = sched_open_save(s, err);
    if (rc)
        return rc;
    park_set_observer(s->park, s->p.on_park, s->p.park_user);
    s->counts.on = 1;
    s->cstats.on = 1;
    return 0;
}

void sched_get_cache_stats(strata_sched *s, sched_cache_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->cstats;
    pthread_mutex_unlock(&s->mu);
}

strata_sched *sched_new(strata_engine *e, const sched_params *p, strata_error *err)
{
    strata_sched *s = calloc(1, sizeof *s);
    if (!s) {
        strata_err(err, STRATA_E_NOMEM, "out of memory for the scheduler");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->e = e;
    s->p = p ? *p : sched_params_default();
    s->n_slots = strata_n_slots(e);
    if (s->p.n_slots > 0 && s->p.n_slots < s->n_slots)
        s->n_slots = s->p.n_slots;
    s->V = strata_n_vocab(e);
    s->n_ctx = strata_n_ctx(e);
    /* A chunk larger than the engine's only splits again inside
     * strata_seq_feed, and still stalls the decoding slots for all of it. */
    s->chunk = s->p.chunk > 0 ? s->p.chunk : strata_n_chunk(e);
    /* An unknown chat format only matters to requests made of messages. */
    s->fmt_rc = chat_template_from_gguf(&s->fmt, strata_model(e)->g, s->p.chat_template,
                                        &s->fmt_err);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->logits = malloc((size_t)s->n_slots * s->V * sizeof *s->logits);
    s->b_seq = calloc((size_t)s->n_slots, sizeof *s->b_seq);
    s->b_tok = calloc((size_t)s->n_slots, sizeof *s->b_tok);
    s->b_slot = calloc((size_t)s->n_slots, sizeof *s->b_slot);
    if (!s->slots || !s->logits || !s->b_seq || !s->b_tok || !s->b_slot) {
        strata_err(err, STRATA_E_NOMEM, "out of memory for %d slots", s->n_slots);
        goto fail;
    }
    for (int i = 0; i < s->n_slots; i++) {
        s->slots[i].pending = -1;
        s->slots[i].seq = strata_seq_new(e, err);
        if (!s->slots[i].seq)
            goto fail;
    }
    if (sched_open_cache(s, err))
        goto fail;
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        strata_err(err, STRATA_E_NOMEM, "cannot start the scheduler thread");
        goto fail;
    }
    return s;
fail:
    sched_destroy(s);
    return NULL;
}

void sched_free(strata_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    sched_destroy(s);
}
