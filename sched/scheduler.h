/* scheduler.h: many requests, one engine — batch slots and a thread-safe
 * in-process request API.
 *
 * An engine is driven by one thread (strata.h).  The scheduler owns that
 * thread: any number of threads submit requests, and the orchestration
 * thread runs them through the engine's n_slots batch slots:
 *
 *   - requests wait in a FIFO queue; a slot not running a request admits
 *     the next one;
 *   - an admitted prompt is read in chunks of at most `chunk` tokens, one
 *     chunk per scheduling step, and between two chunks every decoding slot
 *     takes its step (strata_decode_batch, one token each), so a long prompt
 *     slows the others down instead of stopping them;
 *   - a finished or cancelled request leaves its slot at the next step.
 *
 * Each slot keeps one strata_seq for the scheduler's life, and each request
 * a sampler seeded from it.  Because the engine computes each row alike
 * alone and in a batch, and alike in any prefill chunking, a greedy request
 * produces exactly the tokens it would produce alone.
 *
 * Resident reuse: a request that ends by stop or length leaves its
 * conversation (tokens and K/V) in its slot, now idle-resident.  A later
 * request whose tokens extend it takes that slot and reads only the new
 * tokens (sched_result.n_resident); a request that extends none takes a free
 * slot, else the least recently used idle-resident one, whose conversation
 * is then dropped (captured to the conversation cache first, when on).
 * sched_params.no_resident_reuse turns it off (every finished slot is
 * reset, as before).
 *
 * KV room: the engine's per-stage KV pool may be smaller than n_slots x
 * n_ctx (strata_params.kv_resident).  Before any sequence grows, the
 * scheduler makes sure its pages are free: idle-resident conversations are
 * dropped first (LRU); then, with the conversation cache, the most recently
 * submitted running request is parked (captured, its slot reset, put back
 * at the front of the queue with its sampler and counters) and resumes
 * later from its image, producing the tokens it would have; without the
 * cache the request that cannot grow finishes with an error naming the
 * pages needed, free and in the pool.  No other conversation is touched.
 *
 * Tokens reach the caller one of two ways: through the request's on_token
 * callback (run on the orchestration thread, so it must be quick; a non-zero
 * return cancels the request), or, without a callback, through a queue in
 * the handle read with sched_next() from any thread.
 *
 * With a conversation cache (sched_params.cache_mib), a conversation that
 * leaves its slot (an idle-resident one evicted, or any finished one with
 * no_resident_reuse) is parked in host memory (park/park.h), and a later
 * request whose tokens extend a parked conversation starts from that image
 * instead of re-reading its history (sched_result.n_restored).  Both copies
 * run on the orchestration thread, between steps; see doc/scheduler.md.
 *
 * --batch-groups G (strata_params.batch_groups) needs nothing here: the
 * engine pipelines each decode step of a layer split in G groups itself
 * (doc/engine.md, "Batch groups"). */
#ifndef STRATA_SCHEDULER_H
#define STRATA_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "park/park.h"
#include "engine/sample.h"
#include "engine/strata.h"
#include "text/chat.h"

typedef struct strata_sched strata_sched;
typedef struct sched_handle sched_handle;

/* What happened in one scheduling step (for tests and tracing): called on
 * the orchestration thread after the step. */
typedef struct sched_step {
    uint64_t step;          /* 0, 1, 2, ... */
    uint64_t prefill_id;    /* request whose prompt chunk was read, or 0 */
    int prefill_tokens;     /* tokens of that chunk */
    int restored_tokens;    /* before that chunk: tokens of its prompt
                             * restored from the conversation cache */
    int resident_tokens;    /* before that chunk: tokens of its prompt kept
                             * in place in an idle-resident slot */
    int n_evicted;          /* idle-resident conversations dropped */
    int n_parked;           /* running requests parked for KV pages */
    int n_decode;           /* slots that took a decode step */
    int n_active;           /* slots holding a request after the step */
    int n_queued;           /* requests waiting for a slot */
} sched_step;

typedef struct sched_params {
    int n_slots;            /* 0: all the engine's slots; fewer: only these
                             * (1 serializes requests: a baseline for bench) */
    int chunk;              /* prompt tokens per step; 0: the engine's n_chunk */
    const char *chat_template; /* format name overriding the model's, or NULL */
    void (*on_step)(const sched_step *s, void *user);
    void *step_user;
    /* The conversation cache: MiB of host memory and most images kept.
     * cache_mib > 0 turns it on (cache_slots <= 0 then means 64); 0: off. */
    size_t cache_mib;
    int cache_slots;
    /* With the cache: save its images to save_dir and load them at start
     * (park_persist_start; NULL: off), at most save_mib MiB of files (0: no
     * cap), none older than save_days days (0: no limit); and the
     * host-memory floor in MiB (park_set_min_free; 0: none). */
    const char *save_dir;
    size_t save_mib;
    int save_days;
    size_t min_free_mib;
    /* 1: reset a slot when its request ends (no idle-resident slots): the
     * baseline that resident reuse is compared with. */
    int no_resident_reuse;
    /* With the cache: called on the orchestration thread after each copy
     * parking makes (capture, restore), with park's own timing of it
     * (park_set_observer); bench --workload takes its figures from it. */
    park_observer on_park;
    void *park_user;
    /* With save_dir: called within sched_new, on its caller's thread, with
     * the tokens and the pending token (-1: none) of each image loaded from
     * save_dir (persist_params.on_load): the server rebuilds its text index
     * from them. */
    void (*on_load)(const int32_t *tokens, int n, int32_t pending, void *user);
    void *load_user;
} sched_params;

sched_params sched_params_default(void);

/* Start the orchestration thread on e (which it then owns: no other thread
 * may use e until sched_free).  NULL with err on failure. */
strata_sched *sched_new(strata_engine *e, const sched_params *p, strata_error *err);
/* Cancel every queued and running request (they finish as cancelled), join
 * the thread and free the slots.  Handles stay valid until
 * sched_handle_free.  NULL ok. */
void sched_free(strata_sched *s);
int sched_n_slots(const strata_sched *s);

/* Called with each generated token (never the stop token) and the complete
 * UTF-8 text it finishes (possibly empty; the bytes of a character split
 * over tokens come with the token that completes it).  Runs on the
 * orchestration thread; a non-zero return cancels the request.  When a
 * request ends (by stop or length) with bytes of an unfinished character
 * pending, one last call brings them with tok = -1 (as U+FFFD). */
typedef int (*sched_token_fn)(int32_t tok, const char *text, size_t len, void *user);

typedef struct sched_request {
    /* Either messages (rendered with the model's chat format, plus the
     * assistant's generation prompt) ... */
    const chat_msg *messages;
    size_t n_messages;
    /* ... or token ids, used as given (messages win when both are set). */
    const int32_t *tokens;
    int n_tokens;
    sampler_params sampling;
    int max_tokens;         /* <= 0: until a stop token or the context is full */
    int ignore_stop;        /* 1: a stop token is emitted like any other
                             * (benchmarks that want exactly max_tokens) */
    sched_token_fn on_token; /* NULL: tokens queue in the handle (sched_next) */
    void *user;
} sched_request;

/* A request with sampler_defaults() and nothing else set. */
sched_request sched_request_default(void);

/* Queue a request.  The request (messages, tokens) is copied: the caller's
 * memory may go once this returns.  Errors found here (empty or too long
 * prompt, no chat format, scheduler shut down) return a negative code and
 * no handle.  Thread-safe. */
int sched_submit(strata_sched *s, const sched_request *req, sched_handle **out,
                 strata_error *err);

/* Ask the request to stop.  A queued request leaves the queue, a running one
 * frees its slot at the next step; either finishes as cancelled (unless it
 * finished first).  Thread-safe, any number of times. */
void sched_cancel(sched_handle *h);

enum {
    SCHED_TIMEOUT = 2,      /* sched_next: no token within the timeout (not 1:
                             * that is "here is a token") */
};

/* Queue mode: the next token.  Returns 1 with *tok, 0 when the request has
 * finished and every token has been read, SCHED_TIMEOUT when none came
 * within timeout_s seconds (< 0: wait as long as it takes; 0: poll).  A
 * request with a callback has no queue: returns 0 once it is done. */
int sched_next(sched_handle *h, int32_t *tok, double timeout_s);

enum sched_finish {
    SCHED_FINISH_NONE = 0,  /* still running */
    SCHED_FINISH_STOP,      /* the model sampled a stop token */
    SCHED_FINISH_LENGTH,    /* max_tokens, or the context is full */
    SCHED_FINISH_CANCELLED, /* sched_cancel, callback, or sched_free */
    SCHED_FINISH_ERROR,     /* result.err says what */
};
const char *sched_finish_name(int finish);

typedef struct sched_result {
    int finish;             /* enum sched_finish */
    uint64_t id;
    int n_prompt, n_gen;    /* prompt tokens, tokens generated */
    int n_restored;         /* of the prompt: tokens restored from the
                             * conversation cache (not read); the model
                             * read n_prompt - n_restored - n_resident */
    int n_resident;         /* of the prompt: tokens kept in place in an
                             * idle-resident slot (not read, not copied) */
    int n_parks;            /* times parked for KV pages (and resumed);
                             * n_restored/n_resident describe the first
                             * admission */
    int32_t stop_token;     /* sampled stop token (not fed), or -1 */
    int slot;               /* slot it ran in, or -1 if never admitted */
    /* Seconds from submission: */
    double t_admit;         /* a slot took it (queue wait) */
    double t_first;         /* first token: the time to first token; 0
                             * when none came (n_gen == 0: a stop token
                             * sampled first, or cancelled or failed
                             * before one) */
    double t_restore;       /* of that: seconds the restore's copy took */
    double t_done;          /* finished (before its conversation was
                             * captured, when it was) */
    double decode_tps;      /* (n_gen - 1) / (t_done - t_first); 0 if n_gen < 2 */
    strata_error err;       /* finish == SCHED_FINISH_ERROR */
} sched_result;

/* The conversation cache's counters (sched_params.cache_mib), and those of
 * resident reuse and KV room, which need no cache. */
typedef struct sched_cache_stats {
    int on;                 /* 0: no cache; the cache's counters are zero */
    uint64_t captures;      /* conversations parked when they left their
                             * slot (fresh, K/V reused or already cached) */
    uint64_t capture_failures; /* could not be parked (too big for the budget,
                             * out of memory): the next turn re-reads */
    uint64_t restores;      /* admissions that restored an image */
    uint64_t restored_tokens; /* prompt tokens not re-read thanks to them */
    uint64_t parks;         /* running requests parked for KV pages */
    uint64_t unparks;       /* parked requests admitted again */
    uint64_t kv_failures;   /* requests failed for KV pages (no cache, or
                             * too long for the pool alone) */
    /* Resident reuse (no cache needed): */
    uint64_t resident_hits; /* admissions that kept a resident conversation */
    uint64_t resident_tokens; /* tokens those did not read */
    uint64_t resident_evictions; /* idle-resident conversations dropped (for
                             * a slot, or for KV pages) */
    park_stats park;        /* copies and bytes (park/park.h) */
    convcache_stats cache;  /* images, bytes, evictions (cache/convcache.h) */
} sched_cache_stats;

/* A snapshot, as of the last change.  Thread-safe. */
void sched_get_cache_stats(strata_sched *s, sched_cache_stats *out);

/* Wait for the request to finish; fill *r (may be NULL).  Returns 0, or the
 * error code when it finished with an error.  By then the scheduler is done
 * with it: sched_get_cache_stats counts what it did (its capture when
 * resident reuse is off, a failure for KV pages).  Thread-safe. */
int sched_wait(sched_handle *h, sched_result *r);
uint64_t sched_handle_id(const sched_handle *h); /* 1, 2, ... in submit order */

/* Drop the caller's reference; a request still running is cancelled.
 * NULL ok.  The handle must not be used by another thread meanwhile. */
void sched_handle_free(sched_handle *h);

#endif
