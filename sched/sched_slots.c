/* sched_slots.c: which slot a request takes, and room in the KV pool.
 *
 * Resident reuse.  A finished conversation stays in its slot (sched_step.c,
 * sched_slot_finish); a follow-up whose tokens begin with it takes that
 * slot and reads only what is new.  Nothing is copied: the K/V is where the
 * forward pass left it, so the output is the output of one long sequence.
 *
 * KV room.  The engine reserves pages inside strata_seq_feed and
 * strata_decode_batch and answers a full pool with STRATA_E_LIMIT for the
 * whole call (a decode batch fails for every row, with no word on which
 * one was short).  So the scheduler counts before it calls: each stage's
 * free pages against what the next chunk or decode step will take, from
 * the pools' and sequences' page tables (engine_internal.h: this file is
 * part of the engine).  When the pages are not there it makes them free,
 * cheapest first: idle-resident conversations (least recently used first;
 * captured to the conversation cache on the way out), then running
 * requests, most recently submitted first, parked (cache on) or failed (no
 * cache) — so an older request is never held up by a newer one, and the
 * oldest always runs as long as it fits the pool alone.
 *
 * Everything here runs on the orchestration thread. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kernels/ops.h"
#include "sched/sched_internal.h"

const int32_t *sched_target(const sched_handle *h, int *n)
{
    if (h->resume) {
        *n = h->n_resume;
        return h->resume;
    }
    *n = h->n_prompt;
    return h->prompt;
}

int sched_target_end(const sched_handle *h)
{
    return h->resume ? h->n_resume - 1 : h->n_prompt;
}

/* ---- resident reuse ------------------------------------------------------ */

static int slot_idle_resident(const sched_slot *sl)
{
    return !sl->h && strata_seq_len(sl->seq) > 0;
}

/* The least recently used idle-resident slot, or NULL. */
static sched_slot *lru_idle(strata_sched *s)
{
    sched_slot *best = NULL;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        if (slot_idle_resident(sl) && (!best || sl->last_used < best->last_used))
            best = sl;
    }
    return best;
}

/* The length of the slot's resident conversation when tokens[0..n) begins
 * with all of it, else 0.  Only a whole conversation counts: keeping part
 * of one would throw away the rest, which its own follow-up may still
 * want. */
static int resident_match(const sched_slot *sl, const int32_t *tokens, int n)
{
    int len = strata_seq_len(sl->seq);
    if (len <= 0 || len > n)
        return 0;
    return memcmp(strata_seq_tokens(sl->seq), tokens, (size_t)len * sizeof *tokens) ? 0 : len;
}

void sched_slot_capture(strata_sched *s, sched_slot *sl)
{
    if (!s->park || strata_seq_len(sl->seq) <= 0)
        return;
    strata_error err = {0};
    int rc = park_capture(s->park, sl->seq, sl->pending, 0, NULL, &err);
    s->counts.captures += rc == 0;
    s->counts.capture_failures += rc != 0;
    sched_stats_publish(s);
}

int sched_open_save(strata_sched *s, strata_error *err)
{
    park_set_min_free(s->park, s->p.min_free_mib);
    if (!s->p.save_dir)
        return 0;
    persist_params pp = {s->p.save_dir, s->p.save_mib, s->p.save_days, s->p.min_free_mib,
                         s->p.on_load, s->p.load_user};
    int rc = park_persist_start(s->park, &pp, err);
    if (rc)
        return rc;
    /* after a restart a prompt's ids need not run to the end of a saved
     * image: restore what they share (park.h) */
    park_set_partial_restore(s->park, 1);
    sched_stats_publish(s);   /* the images loaded show at once */
    return 0;
}

void sched_save_slots(strata_sched *s)
{
    /* chat's conversation stays resident between turns and would
     * otherwise never be captured, so never saved */
    if (s->park && s->p.save_dir)
        for (int i = 0; i < s->n_slots; i++)
            sched_slot_capture(s, &s->slots[i]);
}

void sched_slot_evict(strata_sched *s, sched_slot *sl, sched_step *st)
{
    sched_slot_capture(s, sl);
    strata_seq_reset(sl->seq);
    sl->pending = -1;
    s->counts.resident_evictions++;
    if (st)
        st->n_evicted++;
    sched_stats_publish(s);
}

sched_slot *sched_slot_choose(strata_sched *s, const sched_handle *h, sched_step *st)
{
    int n;
    const int32_t *t = sched_target(h, &n);
    sched_slot *best = NULL, *free_slot = NULL;
    int best_len = 0;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->h)
            continue;
        if (!slot_idle_resident(sl)) {
            if (!free_slot)
                free_slot = sl;
            continue;
        }
        int m = resident_match(sl, t, n);
        if (m > best_len) {
            best = sl;
            best_len = m;
        }
    }
    if (best) {
        /* The last target token is always read: its logits give the next
         * token.  A target equal to the resident conversation gives its last
         * token back (truncate keeps the K/V of the others). */
        int keep = best_len < n ? best_len : n - 1;
        if (keep < best_len)
            strata_seq_truncate(best->seq, keep);
        best->fed = best->reused = keep;
        return best;
    }
    /* admit() takes no more requests than there are slots not running one,
     * so one of the two exists. */
    sched_slot *sl = free_slot ? free_slot : lru_idle(s);
    if (slot_idle_resident(sl))
        sched_slot_evict(s, sl, st);
    sl->fed = sl->reused = 0;
    return sl;
}

/* ---- KV accounting ------------------------------------------------------- */

/* Where a set of sequences falls short of pages: the stage with the
 * largest gap, and the numbers an error message names. */
typedef struct kv_gap {
    int gap;                /* pages missing beyond the free ones (<= 0: fits) */
    int stage, need, free, total;
} kv_gap;

/* Pages q still has to take on stage i to hold n tokens. */
static int pages_missing(const strata_seq *q, int i, int n)
{
    int need = (n + KV_PAGE - 1) / KV_PAGE;
    return need > q->kv[i].n_pages ? need - q->kv[i].n_pages : 0;
}

static int holds_pages(const strata_seq *q)
{
    for (int i = 0; i < q->e->n_stages; i++)
        if (q->kv[i].n_pages > 0)
            return 1;
    return 0;
}

/* Sequences q[j] growing to ntok[j] tokens: the worst stage's gap. */
static kv_gap kv_shortfall(const strata_sched *s, strata_seq *const *q, const int *ntok, int m)
{
    const strata_engine *e = s->e;
    kv_gap g = {.gap = INT_MIN};
    for (int i = 0; i < e->n_stages; i++) {
        int need = 0;
        for (int j = 0; j < m; j++)
            need += pages_missing(q[j], i, ntok[j]);
        const kv_pool *pool = e->stages[i].kv;
        if (need - pool->n_free > g.gap)
            g = (kv_gap){need - pool->n_free, i, need, pool->n_free, pool->n_pages};
    }
    return g;
}

/* ---- parking and failing ------------------------------------------------- */

/* Running slots other than `self` that hold pages. */
static int other_holders(const strata_sched *s, const sched_slot *self)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        const sched_slot *sl = &s->slots[i];
        n += sl != self && sl->h && holds_pages(sl->seq);
    }
    return n;
}

/* The most recently submitted running request among those holding pages,
 * and `self` (a slot about to grow, holding pages or not). */
static sched_slot *newest_holder(strata_sched *s, sched_slot *self)
{
    sched_slot *v = self;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->h && sl != self && holds_pages(sl->seq) && (!v || sl->h->id > v->h->id))
            v = sl;
    }
    return v;
}

/* Finish the slot's request: its sequence cannot grow to n tokens. */
static void fail_for_pages(strata_sched *s, sched_slot *sl, int n)
{
    kv_gap g = kv_shortfall(s, &sl->seq, &n, 1);
    strata_error err;
    strata_err(&err, STRATA_E_LIMIT,
               "KV pool full: request %llu needs %d more page%s (%d tokens a page) to hold %d "
               "tokens, %d of the pool's %d pages are free (stage %d)%s",
               (unsigned long long)sl->h->id, g.need, g.need == 1 ? "" : "s", KV_PAGE, n, g.free,
               g.total, g.stage,
               /* With the cache, a request fails only when no other holds
                * pages: parking could not help. */
               s->park ? "; no other request holds pages, the pool cannot hold this conversation "
                         "alone: raise --kv-resident"
                       : "; raise --kv-resident, or turn on the conversation cache "
                         "(--conversation-cache-mib) to park requests instead");
    s->counts.kv_failures++;
    sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err); /* publishes the count */
}

/* Park the slot's request for pages: capture its conversation, empty the
 * slot and put the request at the front of the queue with what it needs to
 * go on exactly where it stopped (its sampler and counters are in the
 * handle; a decoding request also keeps the tokens it held and the token it
 * sampled but has not fed).  No admission happens until a running request
 * ends, so it does not come straight back to the same shortage.  Returns
 * 0, or -1 when it could not be parked and was failed instead. */
static int slot_park_request(strata_sched *s, sched_slot *sl, sched_step *st)
{
    sched_handle *h = sl->h;
    if (sl->decoding) {
        int len = strata_seq_len(sl->seq);
        int32_t *r = malloc((size_t)(len + 1) * sizeof *r);
        if (!r) {
            strata_error err;
            strata_err(&err, STRATA_E_NOMEM, "out of memory parking request %llu",
                       (unsigned long long)h->id);
            sched_slot_finish(s, sl, SCHED_FINISH_ERROR, &err);
            return -1;
        }
        memcpy(r, strata_seq_tokens(sl->seq), (size_t)len * sizeof *r);
        r[len] = sl->next;
        free(h->resume);
        h->resume = r;
        h->n_resume = len + 1;
    }
    /* A capture that fails leaves the resume to re-read: the same tokens on
     * the CPU (one arithmetic for prompt and decode rows), later. */
    sched_slot_capture(s, sl);
    h->parks++;
    h->res.n_parks = h->parks;
    strata_seq_reset(sl->seq);
    sl->h = NULL;
    sl->decoding = 0;
    sl->fed = sl->reused = 0;
    sl->started = 0;
    s->kv_wait = 1;
    s->counts.parks++;
    st->n_parked++;
    sched_queue_push_front(s, h);
    sched_stats_publish(s);
    return 0;
}

int sched_room_for_slot(strata_sched *s, sched_slot *sl, int n, sched_step *st)
{
    while (kv_shortfall(s, &sl->seq, &n, 1).gap > 0) {
        sched_slot *idle = lru_idle(s);
        if (idle) {
            sched_slot_evict(s, idle, st);
            continue;
        }
        /* Without the cache nobody else is touched; with it, a request alone
         * in the pool that still does not fit would only come back to the
         * same shortage. */
        if (!s->park || !other_holders(s, sl)) {
            fail_for_pages(s, sl, n);
            return SCHED_ROOM_FAILED;
        }
        sched_slot *v = newest_holder(s, sl);
        int rc = slot_park_request(s, v, st);
        if (v == sl)
            return rc ? SCHED_ROOM_FAILED : SCHED_ROOM_PARKED;
    }
    return SCHED_ROOM_OK;
}

/* The decode batch as it stands: sequences and the length each grows to. */
static int decode_batch_plan(strata_sched *s, strata_seq **q, int *ntok, sched_slot **who)
{
    int m = 0;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->h && sl->decoding) {
            q[m] = sl->seq;
            ntok[m] = strata_seq_len(sl->seq) + 1;
            who[m++] = sl;
        }
    }
    return m;
}

/* Without the cache: the most recently submitted decoding request whose
 * next token needs a page on the short stage (one exists when the batch
 * is short). */
static sched_slot *newest_needing(sched_slot **who, const int *ntok, int m, int stage)
{
    sched_slot *v = NULL;
    for (int j = 0; j < m; j++)
        if (pages_missing(who[j]->seq, stage, ntok[j]) > 0 && (!v || who[j]->h->id > v->h->id))
            v = who[j];
    return v;
}

void sched_room_for_decode(strata_sched *s, sched_step *st)
{
    strata_seq *q[s->n_slots];
    int ntok[s->n_slots];
    sched_slot *who[s->n_slots];
    for (;;) {
        int m = decode_batch_plan(s, q, ntok, who);
        kv_gap g = m ? kv_shortfall(s, q, ntok, m) : (kv_gap){.gap = 0};
        if (g.gap <= 0)
            return;
        sched_slot *idle = lru_idle(s);
        if (idle) {
            sched_slot_evict(s, idle, st);
            continue;
        }
        if (s->park && other_holders(s, NULL) >= 2) {
            slot_park_request(s, newest_holder(s, NULL), st);
            continue;
        }
        sched_slot *v = newest_needing(who, ntok, m, g.stage);
        fail_for_pages(s, v, strata_seq_len(v->seq) + 1);
    }
}
