/* sched_step.c: the orchestration thread (see doc/scheduler.md).  Each step
 * drops cancelled requests, admits queued ones into free or idle slots
 * (FIFO), reads one prompt chunk for the earliest admitted slot still
 * reading, and decodes one token for every decoding slot in one batch; a
 * request that ends leaves its conversation resident in its slot or
 * captured.  The request API that feeds it is in scheduler.c, the slot
 * choice and KV room in sched_slots.c.
 *
 * Locks as in scheduler.c: the scheduler's mutex only around the queue,
 * the stopping flag and the published counters; the slots are this
 * thread's alone. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/generate.h"
#include "engine/strata.h"
#include "sched/sched_internal.h"
#include "text/tokenizer.h"

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
    if (!keep)
        sl->pending = -1;
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
    sched_handle_finish(h, finish, err, t_end);
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
            sched_handle_finish(h, SCHED_FINISH_CANCELLED, NULL, strata_now());
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
    /* the slot's conversation goes on with h's prompt now; one that choose
     * evicted was saved with its own pending token */
    sl->pending = -1;
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
    } else if (sched_handle_push(h, tok)) {
        strata_error err;
        strata_err(&err, STRATA_E_NOMEM, "out of memory for the token queue");
        sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
        return;
    }
    if ((h->max_tokens > 0 && h->res.n_gen >= h->max_tokens) ||
        strata_seq_len(sl->seq) + 1 > s->n_ctx) {
        sl->pending = tok;   /* emitted, never fed: saved with the image */
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

void *sched_main(void *arg)
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
        sched_handle_finish(h, SCHED_FINISH_CANCELLED, NULL, strata_now());
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
