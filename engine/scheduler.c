/* scheduler.c: batch slots on one orchestration thread, and the thread-safe
 * request API around them (see scheduler.h and doc/scheduler.md).
 *
 * Locks: the scheduler's mutex guards the queue and the stopping flag; each
 * handle's mutex guards its token queue, its reference count and its
 * result.  When both are held, the scheduler's is taken first.  The slots
 * belong to the orchestration thread alone and need no lock.  The cancel
 * flag is an atomic so that the thread can poll it every step for free.
 *
 * The conversation cache (park) belongs to the orchestration thread too:
 * it captures a slot's conversation when its request ends and restores one
 * before a slot reads its first prompt chunk, so no copy ever runs beside
 * a step that reads or writes the same pages.  Its counters are published
 * under the scheduler's mutex for sched_get_cache_stats. */
#include "scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/strata.h"
#include "generate.h"
#include "model/tokenizer.h"

struct sched_handle {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a token was queued, or the request finished */
    int refs;               /* the caller's and the scheduler's (under mu) */
    atomic_int cancel;
    uint64_t id;
    double t_submit;        /* strata_now() at submission */

    /* The request, copied at submission; read by the orchestration thread. */
    int32_t *prompt;
    int n_prompt;
    sampler_params sp;
    int max_tokens;
    int ignore_stop;
    sched_token_fn on_token;
    void *user;

    /* Under mu: queued tokens (no callback) and the result. */
    int32_t *q;
    size_t q_len, q_cap, q_read;
    sched_result res;       /* res.finish != 0 once finished */

    sched_handle *next;     /* FIFO link, under the scheduler's mu */
};

/* A batch slot: one conversation's sequence, reused request after request. */
typedef struct sched_slot {
    strata_seq *seq;        /* created once; reset when a request leaves */
    sampler smp;            /* seeded from the request on admission */
    tokdec *dec;            /* text for the callback, complete UTF-8 only */
    sched_handle *h;        /* NULL: the slot is free */
    uint64_t admitted;      /* admission order: prompts are read FIFO */
    int fed;                /* prompt tokens read so far */
    int decoding;           /* prompt read; `next` waits to be fed */
    int restore_tried;      /* the conversation cache was asked (once) */
    int32_t next;           /* the last emitted token, fed at the next step */
} sched_slot;

struct strata_sched {
    strata_engine *e;
    sched_params p;
    int chunk;              /* prompt tokens per step */
    int n_slots, V, n_ctx;
    chat_template fmt;
    int fmt_rc;             /* chat format unknown: why, for submit */
    strata_error fmt_err;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived, or stop */
    sched_handle *head, *tail;
    int n_queued;
    int stopping;
    uint64_t next_id;

    /* The orchestration thread's own. */
    sched_slot *slots;
    float *logits;          /* n_slots x V: one row per decoding slot */
    strata_seq **b_seq;     /* n_slots: the decode batch */
    int32_t *b_tok;
    int *b_slot;
    uint64_t step, admissions;
    strata_park *park;      /* the conversation cache, or NULL */
    sched_cache_stats cstats; /* under mu */
};

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

/* The request is over: publish the result, wake its readers, and drop the
 * scheduler's reference. */
static void handle_finish(sched_handle *h, int finish, const strata_error *err)
{
    double now = strata_now() - h->t_submit;
    pthread_mutex_lock(&h->mu);
    sched_result *r = &h->res;
    r->finish = finish;
    r->t_done = now;
    if (r->n_gen >= 2 && r->t_done > r->t_first)
        r->decode_tps = (r->n_gen - 1) / (r->t_done - r->t_first);
    if (err)
        r->err = *err;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    handle_unref(h);
}

/* Queue mode: append a token for sched_next. */
static int handle_push(sched_handle *h, int32_t tok)
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

/* ---- the orchestration thread -------------------------------------------- */

static void slot_release(sched_slot *sl)
{
    strata_seq_reset(sl->seq);
    sampler_free(&sl->smp);
    sl->h = NULL;
    sl->decoding = 0;
    sl->fed = 0;
    sl->restore_tried = 0;
}

/* Publish the cache's counters for sched_get_cache_stats. */
static void cache_publish(strata_sched *s, int captured, int failed, int restored)
{
    pthread_mutex_lock(&s->mu);
    sched_cache_stats *c = &s->cstats;
    c->captures += captured;
    c->capture_failures += failed;
    c->restores += restored > 0;
    c->restored_tokens += (uint64_t)(restored > 0 ? restored : 0);
    park_get_stats(s->park, &c->park);
    convcache_get_stats(park_cache(s->park), &c->cache);
    pthread_mutex_unlock(&s->mu);
}

/* Park the slot's conversation (its prompt and every token fed after it)
 * so that the next turn can start from it.  A capture that fails (an image
 * larger than the whole budget, out of memory) leaves the cache as it was:
 * the next turn re-reads its history, which is slower but not wrong, so
 * the failure is counted, not reported. */
static void slot_park(strata_sched *s, sched_slot *sl)
{
    if (strata_seq_len(sl->seq) <= 0)
        return;
    strata_error err = {0};
    int rc = park_capture(s->park, sl->seq, 0, NULL, &err);
    cache_publish(s, rc == 0, rc != 0, 0);
}

static void slot_finish(strata_sched *s, sched_slot *sl, int finish, const strata_error *err)
{
    sched_handle *h = sl->h;
    if (h->on_token && finish != SCHED_FINISH_ERROR) {
        /* Bytes of an unfinished character: the callback's last word. */
        size_t len = 0;
        const char *tail = tokdec_flush(sl->dec, &len);
        if (tail && len && finish != SCHED_FINISH_CANCELLED)
            h->on_token(-1, tail, len, h->user);
    }
    /* The caller hears first; the capture runs before any other request
     * is admitted (same thread), so the next turn finds the image. */
    handle_finish(h, finish, err);
    if (s->park && (finish == SCHED_FINISH_STOP || finish == SCHED_FINISH_LENGTH))
        slot_park(s, sl);
    slot_release(sl);
}

/* Remove cancelled requests from the queue (under s->mu). */
static void queue_drop_cancelled(strata_sched *s)
{
    sched_handle **pp = &s->head, *prev = NULL;
    while (*pp) {
        sched_handle *h = *pp;
        if (atomic_load(&h->cancel)) {
            *pp = h->next;
            if (s->tail == h)
                s->tail = prev;
            s->n_queued--;
            h->next = NULL;
            handle_finish(h, SCHED_FINISH_CANCELLED, NULL);
        } else {
            prev = h;
            pp = &h->next;
        }
    }
}

static int n_active(const strata_sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++)
        n += s->slots[i].h != NULL;
    return n;
}

/* Wait for work, then fill free slots from the queue, FIFO.  Returns 0 to
 * go on, 1 to stop. */
static int admit(strata_sched *s)
{
    pthread_mutex_lock(&s->mu);
    queue_drop_cancelled(s);
    while (!s->stopping && !s->head && !n_active(s))
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    for (int i = 0; i < s->n_slots && s->head; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->h)
            continue;
        sched_handle *h = s->head;
        s->head = h->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        h->next = NULL;
        sl->h = h;
        sl->admitted = s->admissions++;
        sl->fed = 0;
        sl->decoding = 0;
        sl->restore_tried = 0;
        sampler_init(&sl->smp, &h->sp);
        tokdec_reset(sl->dec);
        h->res.slot = i;
        h->res.t_admit = strata_now() - h->t_submit;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A token was sampled for the slot's request: emit it or end the request;
 * on return the slot either still decodes (with sl->next to feed) or is
 * free. */
static void slot_take_logits(strata_sched *s, sched_slot *sl, float *logits)
{
    sched_handle *h = sl->h;
    int32_t tok = sampler_sample(&sl->smp, logits, s->V, strata_seq_tokens(sl->seq),
                                 strata_seq_len(sl->seq));
    if (tok < 0) {
        strata_error err;
        strata_err(&err, STRATA_E_NOMEM, "sampler: out of memory");
        slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return;
    }
    if (!h->ignore_stop && tokenizer_is_stop(strata_tokenizer(s->e), tok)) {
        h->res.stop_token = tok;
        slot_finish(s, sl, SCHED_FINISH_STOP, NULL);
        return;
    }
    if (h->res.n_gen == 0)
        h->res.t_first = strata_now() - h->t_submit;
    h->res.n_gen++;
    if (h->on_token) {
        size_t len = 0;
        const char *text = tokdec_push(sl->dec, tok, &len, NULL);
        if (!text) {
            text = "";
            len = 0;
        }
        if (h->on_token(tok, text, len, h->user)) {
            slot_finish(s, sl, SCHED_FINISH_CANCELLED, NULL);
            return;
        }
    } else if (handle_push(h, tok)) {
        strata_error err;
        strata_err(&err, STRATA_E_NOMEM, "out of memory for the token queue");
        slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return;
    }
    if ((h->max_tokens > 0 && h->res.n_gen >= h->max_tokens) ||
        strata_seq_len(sl->seq) + 1 > s->n_ctx) {
        slot_finish(s, sl, SCHED_FINISH_LENGTH, NULL);
        return;
    }
    sl->decoding = 1;
    sl->next = tok;
}

/* Before a slot reads its prompt: start it from the longest parked
 * conversation its prompt extends, so only the rest is read.  Returns the
 * tokens restored.  A failed restore (no KV pages free for it) is not the
 * request's failure: the sequence was reset, and reading the whole prompt
 * gives the same tokens, only later. */
static int slot_restore(strata_sched *s, sched_slot *sl)
{
    sched_handle *h = sl->h;
    double t0 = strata_now();
    int restored = 0;
    strata_error err = {0};
    if (park_restore(s->park, sl->seq, h->prompt, h->n_prompt, &restored, &err))
        restored = 0;
    sl->fed = restored;
    h->res.n_restored = restored;
    h->res.t_restore = strata_now() - t0;
    cache_publish(s, 0, 0, restored);
    return restored;
}

/* Read one chunk of the prompt of the earliest admitted slot still reading
 * one.  Returns the slot index or -1 when no slot is reading a prompt. */
static int prefill_chunk(strata_sched *s, sched_step *st)
{
    sched_slot *sl = NULL;
    int idx = -1;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *c = &s->slots[i];
        if (c->h && !c->decoding && (!sl || c->admitted < sl->admitted)) {
            sl = c;
            idx = i;
        }
    }
    if (!sl)
        return -1;
    sched_handle *h = sl->h;
    if (s->park && !sl->restore_tried) {
        sl->restore_tried = 1;
        st->restored_tokens = slot_restore(s, sl);
    }
    int n = h->n_prompt - sl->fed;
    if (n > s->chunk)
        n = s->chunk;
    int last = sl->fed + n == h->n_prompt;
    strata_error err = {0};
    st->prefill_id = h->id;
    st->prefill_tokens = n;
    int rc = strata_seq_feed(sl->seq, h->prompt + sl->fed, n, last ? s->logits : NULL, NULL, &err);
    if (rc) {
        slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return idx;
    }
    sl->fed += n;
    if (last)
        slot_take_logits(s, sl, s->logits);
    return idx;
}

/* One decode step for every decoding slot: one token each. */
static void decode_step(strata_sched *s, sched_step *st)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->h && sl->decoding) {
            s->b_seq[n] = sl->seq;
            s->b_tok[n] = sl->next;
            s->b_slot[n] = i;
            n++;
        }
    }
    st->n_decode = n;
    if (!n)
        return;
    strata_error err = {0};
    int rc = strata_decode_batch(s->b_seq, s->b_tok, n, s->logits, &err);
    for (int r = 0; r < n; r++) {
        sched_slot *sl = &s->slots[s->b_slot[r]];
        if (rc)
            slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        else
            slot_take_logits(s, sl, s->logits + (size_t)r * s->V);
    }
}

static void *sched_main(void *arg)
{
    strata_sched *s = arg;
    for (;;) {
        /* A cancelled request leaves its slot before the step. */
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].h && atomic_load(&s->slots[i].h->cancel))
                slot_finish(s, &s->slots[i], SCHED_FINISH_CANCELLED, NULL);
        if (admit(s))
            break;
        sched_step st = {.step = s->step};
        prefill_chunk(s, &st);
        decode_step(s, &st);
        if (s->p.on_step && (st.prefill_id || st.n_decode)) {
            st.n_active = n_active(s);
            pthread_mutex_lock(&s->mu);
            st.n_queued = s->n_queued;
            pthread_mutex_unlock(&s->mu);
            s->p.on_step(&st, s->p.step_user);
        }
        s->step++;
    }
    /* Shutting down: whatever is left ends as cancelled. */
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].h)
            slot_finish(s, &s->slots[i], SCHED_FINISH_CANCELLED, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->head) {
        sched_handle *h = s->head;
        s->head = h->next;
        h->next = NULL;
        handle_finish(h, SCHED_FINISH_CANCELLED, NULL);
    }
    s->tail = NULL;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    /* Here, not in sched_free: on the CUDA backend a serial copy made its
     * thread-local copy streams on this thread, and park_free releases the
     * calling thread's. */
    park_free(s->park);
    s->park = NULL;
    return NULL;
}

/* ---- life ---------------------------------------------------------------- */

static void sched_destroy(strata_sched *s)
{
    if (s->slots)
        for (int i = 0; i < s->n_slots; i++) {
            strata_seq_free(s->slots[i].seq);
            tokdec_free(s->slots[i].dec);
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
        if (s->p.cache_slots > 0)
            return strata_err(err, STRATA_E_ARG, "conversation cache: %d slots but no memory "
                              "(give the MiB too)", s->p.cache_slots);
        return 0;
    }
    int slots = s->p.cache_slots > 0 ? s->p.cache_slots : 64;
    s->park = park_new(s->e, s->p.cache_mib, slots, err);
    if (!s->park)
        return err->code;
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
        s->slots[i].seq = strata_seq_new(e, err);
        if (!s->slots[i].seq)
            goto fail;
        if (tokdec_new(strata_tokenizer(e), 0, &s->slots[i].dec, err))
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
