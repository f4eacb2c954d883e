/* park.h: parking conversations in host memory and moving them between
 * sequences — capture, restore and the slot shuttle.
 *
 * A parked conversation is an image in the conversation cache
 * (cache/convcache.h): its tokens and, for every stage of the layer split,
 * that stage's K/V bytes.  Every operation here is one per-stage body run on
 * the engine's stage pool (stagepool/stagepool.h), so all stages copy at the
 * same time, each on its own card, its own pages and its own thread-local
 * non-blocking copy stream; STRATA_STAGE_COPY_PARALLEL=0 runs the same
 * bodies one after another and gives the same bytes.
 *
 * Image layout of one span [t0, t1) of one stage (the cache treats it as
 * opaque): for each layer of the stage, for each KV buffer (kq kd vq vd;
 * f16: kh vh), for each KV page the span touches, [head][tokens of the span
 * in that page][row].  A span that starts and ends on page boundaries is
 * therefore byte for byte the pages themselves, and a run of physically
 * consecutive pages is ONE copy per (layer, buffer); a partly filled first
 * or last page is one strided (2D) copy of only its tokens per head.  Why
 * only its tokens and not the whole page: the span then holds exactly the
 * new tokens (a 300-token turn costs 300 tokens of bytes, not two pages),
 * no byte of another conversation's stale page tail ever reaches the cache,
 * and the cost is one 2D copy per (layer, buffer) at each end.
 *
 * Threading: one orchestration thread calls everything here (the thread
 * that drives the engine). */
#ifndef STRATA_PARK_H
#define STRATA_PARK_H

#include <stddef.h>
#include <stdint.h>

#include "cache/convcache.h"
#include "engine/strata.h"
#include "park/persist.h"

typedef struct strata_park strata_park;

/* What park_capture did. */
enum park_capture_kind {
    PARK_CAPTURE_FRESH = 0,  /* copied every token */
    PARK_CAPTURE_REUSED = 1, /* a cached prefix image was shared ("K/V reused"),
                                only the new tokens were copied */
    PARK_CAPTURE_CACHED = 2, /* an image of exactly these tokens was cached:
                                nothing copied */
};

/* park_capture flags */
#define PARK_CAPTURE_DRY 1   /* copy (and seal) every stage's part, then
                                discard it: the bench times the copy without
                                keeping a second image */

/* park_shuttle flags */
#define PARK_SHUTTLE_KEEP 1     /* leave `from` as it is (a copy, not a move) */
#define PARK_SHUTTLE_VIA_HOST 2 /* go through pinned host memory even when both
                                   sides share a card (what happens when `to`
                                   belongs to another engine: implied then) */

typedef struct park_stats {
    uint64_t captures[3];     /* by enum park_capture_kind */
    uint64_t restores;        /* restores that copied an image */
    uint64_t shuttles_d2d, shuttles_host;
    uint64_t bytes_d2h, bytes_h2d, bytes_d2d; /* bytes copied, all stages */
    /* the host-memory floor (park_set_min_free) */
    uint64_t floor_warnings;  /* stretches under the floor (one warning each) */
    uint64_t floor_evictions; /* captures that evicted to make their room */
    uint64_t floor_declines;  /* captures declined: nothing to give back */
    persist_stats persist;    /* the save directory (park_persist_start) */
} park_stats;

/* One copy operation, timed by park itself, for a caller that wants each
 * one rather than the totals above (park_set_observer): when the scheduler
 * drives parking, only park sees the calls, so `bench --workload` takes its
 * distributions from here instead of timing calls it does not make. */
enum park_op { PARK_OP_CAPTURE = 0, PARK_OP_RESTORE = 1, PARK_OP_SHUTTLE = 2 };
typedef struct park_event {
    int op;                   /* enum park_op */
    int kind;                 /* capture: enum park_capture_kind; else 0 */
    int flags;                /* the call's PARK_CAPTURE_* / PARK_SHUTTLE_* */
    int tokens;               /* tokens copied (a capture: only the new ones) */
    int n_tokens;             /* the conversation's length */
    uint64_t bytes;           /* bytes copied, all stages */
    double seconds;           /* the whole call: lookup, cache room (evictions
                                 included), the stages' copies, commit */
} park_event;
typedef void (*park_observer)(const park_event *ev, void *user);
/* Call fn on the orchestration thread after each capture, restore and
 * shuttle that succeeded and copied something (fn NULL: none). */
void park_set_observer(strata_park *p, park_observer fn, void *user);

/* A conversation cache of cache_mib MiB and cache_slots images.  On the
 * CUDA backend its bytes are one block of cache_mib MiB pinned here, once
 * (cudaHostAlloc), and carved into parts by an arena (cache/arena.h); if
 * that block cannot be pinned, a line on stderr says so and each part is
 * pinned on its own (correct, but captures pay for the pinning).  On the
 * CPU: malloc per part.  Uses the engine's stage pool (none with one
 * stage). */
strata_park *park_new(strata_engine *e, size_t cache_mib, int cache_slots, strata_error *err);
void park_free(strata_park *p);   /* NULL ok */

/* Capture s's K/V on every stage into an image keyed by its tokens.  When
 * the cache holds an image of a prefix, only the new tokens are copied.
 * pending: the token sampled after s's and never fed (an answer ended by
 * its length), kept with the image (convcache_capture_set_pending), or -1;
 * an image of exactly these tokens already cached keeps its own.  kind
 * (may be NULL) receives an enum park_capture_kind.  On any stage's
 * failure nothing of the capture remains and the first failing stage's
 * error is returned ("stage N: ..."). */
int park_capture(strata_park *p, strata_seq *s, int32_t pending, int flags, int *kind,
                 strata_error *err);

/* Make s continue the conversation tokens[0..n): find the longest cached
 * image whose tokens are a prefix of tokens, reserve its pages on every
 * stage, copy it back and set s's history.  *restored receives how many
 * tokens s now holds; feed it the rest.  It is always < n (for n > 0): the
 * caller needs the logits of the last token, so at least that one is fed.
 * If s's history shares a prefix with tokens at least as long as the image,
 * s keeps that prefix (truncated to it) and nothing is copied; otherwise s
 * is reset first.  A miss is not an error (*restored = 0, or what s kept). */
int park_restore(strata_park *p, strata_seq *s, const int32_t *tokens, int n, int *restored,
                 strata_error *err);

/* 1: park_restore also uses an image that shares only a prefix with
 * tokens (convcache_find_common), restoring that prefix.  The scheduler
 * turns it on with a save directory: after a restart the ids a client's
 * resent history encodes to need not be those the model wrote, and a
 * chat's first turn is a prefix of its saved conversation.  0 (the
 * default): only an image all of whose tokens begin tokens. */
void park_set_partial_restore(strata_park *p, int on);

/* The slot shuttle: make `to` (reset first) hold from's conversation.
 * Device to device when both are sequences of one engine (each stage copies
 * within its own pool, on its card); through pinned host memory when `to`
 * belongs to another engine of the same shape (or PARK_SHUTTLE_VIA_HOST).
 * Unless PARK_SHUTTLE_KEEP, `from` is reset afterwards (its pages return to
 * the pool).  On failure `to` is reset and `from` is untouched. */
int park_shuttle(strata_park *p, strata_seq *from, strata_seq *to, int flags, strata_error *err);

/* 1: write a checksum of every stage part at capture and verify it on
 * restore.  On in debug builds (make DEBUG=1, make asan: STRATA_DEBUG) and
 * with STRATA_PARK_VERIFY=1; off by default, since hashing on the host
 * costs several times the copy.  Tests turn it on; only before the first
 * capture (STRATA_E_ARG after). */
int park_set_verify(strata_park *p, int on, strata_error *err);
convcache *park_cache(strata_park *p);
/* The arena carving the cache's one block (cache/arena.h), or NULL when
 * parts are allocated one by one (CPU, or the CUDA fallback). */
struct arena *park_arena(strata_park *p);
void park_get_stats(const strata_park *p, park_stats *st);
/* K/V bytes per token of stage i (all its layers and buffers). */
size_t park_token_bytes(const strata_park *p, int stage);

/* Save every committed image to pp->dir and load the directory's images
 * now (park/persist.h; doc/convcache.md, "Conversations on disk").  Call
 * once, before the first capture; a refused file is a warning, a directory
 * that cannot be used an error. */
int park_persist_start(strata_park *p, const persist_params *pp, strata_error *err);
/* Wait until every queued save is written (tests; park_free does it too). */
void park_persist_flush(strata_park *p);
/* The host-memory floor: while MemAvailable (park/hostmem.h) is under mib
 * MiB, a capture first evicts least recently used images to make its room
 * and is declined (STRATA_E_LIMIT) when they cannot give enough back; one
 * warning per stretch under the floor.  0: no floor (the default). */
void park_set_min_free(strata_park *p, size_t mib);

/* Test hook: when >= 0, that stage's body fails with STRATA_E_DEVICE
 * ("injected failure") after doing its copy, as a real copy error would
 * surface at the stream synchronisation. */
extern int park_fail_stage;

/* Test hook: when 1, park_new on the CPU backend takes one malloc'd block
 * and the arena, as the CUDA backend does with its pinned block, so the CPU
 * suites run the arena path of the engine too. */
extern int park_arena_on_cpu;


#endif
