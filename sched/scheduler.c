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
 * it captures a conversation when it leaves its slot and restores one
 * before a slot reads its first prompt chunk, so no copy ever runs beside
 * a step that reads or writes the same pages.  The counters are published
 * under the scheduler's mutex for sched_get_cache_stats.
 *
 * Which slot a request takes (resident reuse) and how KV pages are found
 * when the pool runs short (eviction, parking) are in sched_slots.c; the
 * structures both files use are in sched_internal.h. */
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

/* The request is over: publish the result, wake its readers, and drop the
 * scheduler's reference.  t_end: strata_now() when it ended. */
static void handle_finish(sched_handle *h, int finish, const strata_error *err, double t_end)
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

/* ---- the orchestration thread -------------------------------------------- */

void sched_stats_publish(strata_sched *s)
{
    if (s->park) {
        park_get_stats(s->park, &s->counts.park);
        convcache_get_stats(park_cache(s->park), &s->counts.cache);
    }
    pthread_mutex_lock(&s->mu);
    s->cstats = s->counts;
    pthread_mutex_unlock(&s->mu);
}

void sched_queue_push_front(strata_sched *s, sched_handle *h)
{
    pthread_mutex_lock(&s->mu);
    h->next = s->head;
    s->head = h;
    if (!s->tail)
        s->tail = h;
    s->n_queued++;
    pthread_mutex_unlock(&s->mu);
}

/* The slot's request left it; `keep`: its conversation stays resident. */
static void slot_vacate(strata_sched *s, sched_slot *sl, int keep)
{
    if (keep)
        sl->last_used = ++s->clock;
    else
        strata_seq_reset(sl->seq);
    sl->h = NULL;
    sl->decoding = 0;
    sl->fed = 0;
    sl->reused = 0;
    sl->started = 0;
}

void sched_slot_finish(strata_sched *s, sched_slot *sl, int finish, const strata_error *err)
{
    sched_handle *h = sl->h;
    if (h->dec && finish != SCHED_FINISH_ERROR) {
        /* Bytes of an unfinished character: the callback's last word. */
        size_t len = 0;
        const char *tail = tokdec_flush(h->dec, &len);
        if (tail && len && finish != SCHED_FINISH_CANCELLED)
            h->on_token(-1, tail, len, h->user);
    }
    /* The request ends here: t_done and the decode rate do not count the
     * capture below. */
    double t_end = strata_now();
    int ended = finish == SCHED_FINISH_STOP || finish == SCHED_FINISH_LENGTH;
    /* A running request ended: its pages (or its slot) can be had again, so
     * a request parked for pages may be admitted. */
    s->kv_wait = 0;
    /* A cancelled conversation stays resident too: its sequence holds
     * exactly the tokens it fed, which a follow-up (chat after Ctrl-C)
     * extends.  Only an error leaves the slot empty. */
    int keep = ended || finish == SCHED_FINISH_CANCELLED;
    if (keep && !s->p.no_resident_reuse && strata_seq_len(sl->seq) > 0) {
        slot_vacate(s, sl, 1);
    } else {
        if (ended)
            sched_slot_capture(s, sl);
        slot_vacate(s, sl, 0);
    }
    /* The caller hears last: when sched_wait returns, the conversation is
     * captured (resident reuse off) and the counters that count this
     * request (its capture, a failure for KV pages) are published, so a
     * client that reads sched_get_cache_stats then (chat's /stats, a bench)
     * sees them.  Waking it before the capture would save it little: its
     * next request waits for this thread, hence for the copy, anyway. */
    sched_stats_publish(s);
    handle_finish(h, finish, err, t_end);
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
            handle_finish(h, SCHED_FINISH_CANCELLED, NULL, strata_now());
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

/* How many queued requests may take a slot now (under s->mu): one per slot
 * not running a request, none while a parked request waits for a running
 * one to end (admitting it earlier would only park it again). */
static int admittable(strata_sched *s)
{
    int running = n_active(s);
    if (s->kv_wait && running)
        return 0;
    s->kv_wait = 0;
    return s->n_slots - running;
}

/* A slot takes the request: the slot whose resident conversation it
 * extends, a free one, or the least recently used idle one. */
static void slot_admit(strata_sched *s, sched_handle *h, sched_step *st)
{
    sched_slot *sl = sched_slot_choose(s, h, st);
    sl->h = h;
    sl->admitted = s->admissions++;
    sl->decoding = 0;
    sl->started = 0;
    h->res.slot = (int)(sl - s->slots);
    if (h->parks) {
        s->counts.unparks++;
    } else {
        h->res.t_admit = strata_now() - h->t_submit;
        h->res.n_resident = sl->reused;
    }
    if (sl->reused) {
        s->counts.resident_hits++;
        s->counts.resident_tokens += (uint64_t)sl->reused;
    }
    sched_stats_publish(s);
}

/* Wait for work, then give slots to queued requests, FIFO.  The requests
 * leave the queue under the lock; choosing their slots (which may capture
 * an evicted conversation) runs after it, so submitters never wait for a
 * copy.  Returns 0 to go on, 1 to stop. */
static int admit(strata_sched *s, sched_step *st)
{
    sched_handle *taken[s->n_slots];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    queue_drop_cancelled(s);
    while (!s->stopping && !s->head && !n_active(s))
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return 1;
    }
    for (int room = admittable(s); n < room && s->head; n++) {
        sched_handle *h = s->head;
        s->head = h->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        h->next = NULL;
        taken[n] = h;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
        slot_admit(s, taken[i], st);
    return 0;
}

/* A token was sampled for the slot's request: emit it or end the request;
 * on return the slot either still decodes (with sl->next to feed) or no
 * longer runs the request.  A full context ends the answer as "length", as
 * strata_generate does (engine/generate.c): the decode policy both drivers
 * share. */
static void slot_take_token(strata_sched *s, sched_slot *sl, int32_t tok)
{
    sched_handle *h = sl->h;
    if (tok < 0) {
        strata_error err;
        strata_err(&err, STRATA_E_NOMEM, "sampler: out of memory");
        sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return;
    }
    if (!h->ignore_stop && tokenizer_is_stop(strata_tokenizer(s->e), tok)) {
        h->res.stop_token = tok;
        sched_slot_finish(s, sl, SCHED_FINISH_STOP, NULL);
        return;
    }
    if (h->res.n_gen == 0)
        h->res.t_first = strata_now() - h->t_submit;
    h->res.n_gen++;
    if (h->on_token) {
        size_t len = 0;
        const char *text = tokdec_push(h->dec, tok, &len, NULL);
        if (!text) {
            text = "";
            len = 0;
        }
        if (h->on_token(tok, text, len, h->user)) {
            sched_slot_finish(s, sl, SCHED_FINISH_CANCELLED, NULL);
            return;
        }
    } else if (handle_push(h, tok)) {
        strata_error err;
        strata_err(&err, STRATA_E_NOMEM, "out of memory for the token queue");
        sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return;
    }
    if ((h->max_tokens > 0 && h->res.n_gen >= h->max_tokens) ||
        strata_seq_len(sl->seq) + 1 > s->n_ctx) {
        sched_slot_finish(s, sl, SCHED_FINISH_LENGTH, NULL);
        return;
    }
    sl->decoding = 1;
    sl->next = tok;
}

/* The first token of an answer, from the prompt's last logits (on the
 * host, as in strata_generate). */
static void slot_take_logits(strata_sched *s, sched_slot *sl, float *logits)
{
    sched_handle *h = sl->h;
    slot_take_token(s, sl, sampler_sample(&h->smp, logits, s->V, strata_seq_tokens(sl->seq),
                                          strata_seq_len(sl->seq)));
}

/* Start the slot from the longest parked conversation its target extends,
 * so only the rest is read.  A failed restore (no KV pages free for it) is
 * not the request's failure: the sequence was emptied, and reading the
 * whole target gives the same tokens, only later. */
static void slot_restore(strata_sched *s, sched_slot *sl, sched_step *st)
{
    sched_handle *h = sl->h;
    int n;
    const int32_t *t = sched_target(h, &n);
    double t0 = strata_now();
    int restored = 0;
    strata_error err = {0};
    if (park_restore(s->park, sl->seq, t, n, &restored, &err))
        restored = 0;
    sl->fed = restored;
    if (!h->parks) {
        h->res.n_restored = restored;
        h->res.t_restore = strata_now() - t0;
    }
    if (restored > 0) {
        s->counts.restores++;
        s->counts.restored_tokens += (uint64_t)restored;
    }
    sched_stats_publish(s);
    st->restored_tokens = restored;
}

/* Before a slot reads its first chunk: make room for all it will read
 * (failing early rather than after half a prompt), then, with the cache and
 * nothing kept in place, restore.  Returns 0 when the slot still runs its
 * request. */
static int slot_start(strata_sched *s, sched_slot *sl, sched_step *st)
{
    sl->started = 1;
    st->resident_tokens = sl->reused;
    if (sched_room_for_slot(s, sl, sched_target_end(sl->h), st) != SCHED_ROOM_OK)
        return 1;
    if (s->park && !sl->reused)
        slot_restore(s, sl, st);
    return 0;
}

/* The slot's target is read: a fresh request samples its first token from
 * the last chunk's logits; a resumed one already has it, to be fed. */
static void slot_prompt_read(strata_sched *s, sched_slot *sl)
{
    sched_handle *h = sl->h;
    if (!h->resume) {
        slot_take_logits(s, sl, s->logits);
        return;
    }
    sl->decoding = 1;
    sl->next = h->resume[h->n_resume - 1];
}

/* Read one chunk of the target of the earliest admitted slot still reading
 * one.  Returns the slot index or -1 when no slot is reading. */
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
    if (!sl->started && slot_start(s, sl, st))
        return idx;
    sched_handle *h = sl->h;
    int n_t;
    const int32_t *t = sched_target(h, &n_t);
    int end = sched_target_end(h);
    int n = end - sl->fed;
    if (n > s->chunk)
        n = s->chunk;
    if (n <= 0) {   /* a resumed request whose whole history came back */
        slot_prompt_read(s, sl);
        return idx;
    }
    if (sched_room_for_slot(s, sl, sl->fed + n, st) != SCHED_ROOM_OK)
        return idx;
    int last = sl->fed + n == end;
    strata_error err = {0};
    st->prefill_id = h->id;
    st->prefill_tokens = n;
    int rc = strata_seq_feed(sl->seq, t + sl->fed, n, last && !h->resume ? s->logits : NULL, NULL,
                             &err);
    if (rc) {
        sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return idx;
    }
    sl->fed += n;
    if (last)
        slot_prompt_read(s, sl);
    return idx;
}

/* One decode step for every decoding slot: one token each. */
static void decode_step(strata_sched *s, sched_step *st)
{
    sched_room_for_decode(s, st);
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
    /* Sampled where the logits are (engine/seq.c): on a card only the ids
     * come back, as in strata_generate. */
    strata_error err = {0};
    sampler *smp[n];
    int32_t next[n];
    for (int r = 0; r < n; r++)
        smp[r] = &s->slots[s->b_slot[r]].h->smp;
    int rc = strata_decode_batch_sample(s->b_seq, s->b_tok, n, smp, next, &err);
    for (int r = 0; r < n; r++) {
        sched_slot *sl = &s->slots[s->b_slot[r]];
        if (rc)
            sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        else
            slot_take_token(s, sl, next[r]);
    }
}

static void *sched_main(void *arg)
{
    strata_sched *s = arg;
    for (;;) {
        /* A cancelled request leaves its slot before the step. */
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].h && atomic_load(&s->slots[i].h->cancel))
                sched_slot_finish(s, &s->slots[i], SCHED_FINISH_CANCELLED, NULL);
        sched_step st = {.step = s->step};
        if (admit(s, &st))
            break;
        prefill_chunk(s, &st);
        decode_step(s, &st);
        if (s->p.on_step && (st.prefill_id || st.n_decode || st.n_parked || st.n_evicted)) {
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
            sched_slot_finish(s, &s->slots[i], SCHED_FINISH_CANCELLED, NULL);
    sched_save_slots(s);
    pthread_mutex_lock(&s->mu);
    while (s->head) {
        sched_handle *h = s->head;
        s->head = h->next;
        h->next = NULL;
        handle_finish(h, SCHED_FINISH_CANCELLED, NULL, strata_now());
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
