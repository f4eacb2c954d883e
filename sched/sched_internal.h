/* sched_internal.h: what scheduler.c (the request API), sched_step.c (the
 * orchestration thread's step loop) and sched_slots.c (which slot a request
 * takes, resident reuse, and KV room: eviction and parking) share.  Not
 * public.
 *
 * Ownership: a handle's request state (prompt, sampler, text decoder,
 * resume tokens) is read and written by the orchestration thread only, from
 * submission until the request finishes; the fields under the handle's mu
 * are the ones other threads read.  Slots belong to the orchestration
 * thread alone. */
#ifndef STRATA_SCHED_INTERNAL_H
#define STRATA_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/sample.h"
#include "sched/scheduler.h"
#include "engine/strata.h"
#include "text/tokenizer.h"

struct sched_handle {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a token was queued, or the request finished */
    int refs;               /* the caller's and the scheduler's (under mu) */
    atomic_int cancel;
    uint64_t id;            /* submission order: also the parking priority */
    double t_submit;        /* strata_now() at submission */

    /* The request, copied at submission; read by the orchestration thread. */
    int32_t *prompt;
    int n_prompt;
    sampler_params sp;
    int max_tokens;
    int ignore_stop;
    sched_token_fn on_token;
    void *user;

    /* The request's running state.  It lives here, not in the slot, so that
     * a request parked for KV pages takes it along and resumes exactly: the
     * sampler's generator, the callback's unfinished UTF-8 bytes. */
    sampler smp;            /* seeded at submission */
    tokdec *dec;            /* callback text; NULL without a callback */
    int parks;              /* times parked for KV pages */
    /* Parked while decoding: the tokens its sequence held, then the sampled
     * token still to be fed (n_resume = held + 1).  NULL otherwise: the
     * prompt is what its slot must read. */
    int32_t *resume;
    int n_resume;

    /* Under mu: queued tokens (no callback) and the result. */
    int32_t *q;
    size_t q_len, q_cap, q_read;
    sched_result res;       /* res.finish != 0 once finished */

    sched_handle *next;     /* FIFO link, under the scheduler's mu */
};

/* A batch slot: one sequence, reused request after request.  Three states:
 * running (h set), idle-resident (h NULL, the sequence still holds the
 * finished conversation for a follow-up to extend), free (h NULL, empty). */
typedef struct sched_slot {
    strata_seq *seq;        /* created once */
    sched_handle *h;        /* the running request, or NULL */
    uint64_t admitted;      /* admission order: prompts are read FIFO */
    uint64_t last_used;     /* idle-resident: when it went idle (LRU) */
    int fed;                /* tokens of the request's target held in seq */
    int reused;             /* of those: kept in place from the idle slot */
    int decoding;           /* target read; `next` waits to be fed */
    int started;            /* room made and the cache asked (once) */
    int32_t next;           /* the last emitted token, fed at the next step */
    /* The last token of an answer that ended by its length: emitted, never
     * fed; kept with the conversation while it stays resident and saved
     * with its image (park_capture), so a restarted server knows the ids
     * its client holds.  -1: none (any other end, or a request running). */
    int32_t pending;
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
    uint64_t step, admissions, clock;
    int kv_wait;            /* a request was parked: admit nothing until a
                             * running request ends (its pages come back) */
    strata_park *park;      /* the conversation cache, or NULL */
    sched_cache_stats counts; /* the thread's counters ... */
    sched_cache_stats cstats; /* ... and their snapshot, under mu */
};

/* ---- scheduler.c ---------------------------------------------------------- */

/* The request is over: publish the result, wake its readers, and drop the
 * scheduler's reference.  t_end: strata_now() when it ended. */
void sched_handle_finish(sched_handle *h, int finish, const strata_error *err, double t_end);
/* Queue mode: append a token for sched_next (0, or STRATA_E_NOMEM). */
int sched_handle_push(sched_handle *h, int32_t tok);

/* ---- sched_step.c ---------------------------------------------------------- */

/* The orchestration thread (arg: the strata_sched), until sched_free stops
 * it: then what is left ends as cancelled and the slots are saved. */
void *sched_main(void *arg);
/* The request is over: leave its conversation resident in the slot, or
 * capture it (cache on, resident reuse off) and empty the slot; publish the
 * counters; then publish the result and wake its readers, last, so that
 * the counters include the request when sched_wait returns. */
void sched_slot_finish(strata_sched *s, sched_slot *sl, int finish, const strata_error *err);
/* Copy the thread's counters for sched_get_cache_stats. */
void sched_stats_publish(strata_sched *s);
/* Put a parked request back at the front of the queue. */
void sched_queue_push_front(strata_sched *s, sched_handle *h);

/* ---- sched_slots.c ---------------------------------------------------------- */

/* The tokens the request's slot must hold before it decodes (the prompt,
 * or what a request parked while decoding held plus its pending token). */
const int32_t *sched_target(const sched_handle *h, int *n);
/* How many of them are read by prefill: all of a prompt, all but the
 * pending token of a resumed request. */
int sched_target_end(const sched_handle *h);

/* Choose h's slot among those not running: the idle-resident slot with the
 * longest conversation that h's target extends, else a free slot, else the
 * least recently used idle-resident slot, evicted.  Sets sl->fed to the
 * tokens kept in place.  st may be NULL. */
sched_slot *sched_slot_choose(strata_sched *s, const sched_handle *h, sched_step *st);

/* Capture the slot's conversation into the conversation cache, when there
 * is one and the sequence is not empty; a failure is counted, not reported
 * (whoever comes back for it re-reads: slower, the same tokens). */
void sched_slot_capture(strata_sched *s, sched_slot *sl);
/* Drop an idle-resident slot's conversation (captured to the conversation
 * cache first when there is one). */
void sched_slot_evict(strata_sched *s, sched_slot *sl, sched_step *st);

enum sched_room { SCHED_ROOM_OK = 0, SCHED_ROOM_PARKED = 1, SCHED_ROOM_FAILED = 2 };
/* Before sl's sequence grows to n tokens: make its pages free on every
 * stage.  Idle-resident slots go first (LRU); then, with the cache, the
 * newest request holding pages is parked (sl itself when it is the
 * newest: SCHED_ROOM_PARKED); without, sl fails (SCHED_ROOM_FAILED). */
int sched_room_for_slot(strata_sched *s, sched_slot *sl, int n, sched_step *st);
/* Before a decode step: the same for every decoding slot's next token,
 * parking (cache) or failing (no cache) requests newest first until the
 * batch fits. */
void sched_room_for_decode(strata_sched *s, sched_step *st);

/* With the cache: the host-memory floor, and with sched_params.save_dir
 * the save directory (loaded now) and restores by common prefix. */
int sched_open_save(strata_sched *s, strata_error *err);
/* At shutdown, with a save directory: capture (so save) every slot's
 * conversation still held. */
void sched_save_slots(strata_sched *s);

#endif
