/* convcache.h: the conversation cache, host-memory images of parked
 * conversations keyed by their token history.
 *
 * An image is what a conversation needs to continue without re-reading its
 * history: its tokens (int32 ids), its position, and for every stage of the
 * layer split that stage's K/V bytes.  The bytes are opaque here: the engine
 * decides their layout; the cache only owns, counts, shares and checksums
 * them.
 *
 * Spans: how "K/V reused" works without copying.  An image's bytes are a
 * list of spans; span i holds, for every stage, the bytes of the tokens
 * [t0, t1).  A fresh capture has one span [0, n).  A capture that extends a
 * cached prefix image of p tokens takes the prefix's spans by reference
 * (reference-counted) and adds one new span [p, n): only the new tokens are
 * copied from the cards, and nothing is copied host to host.  The engine
 * restores an image by copying each span of its stage to the tokens it
 * names.  A span's bytes are freed when the last image holding it goes.
 *
 * Budgets: max_bytes bounds the bytes of all live spans (shared ones
 * counted once, captures in flight included: their bytes are reserved when
 * they begin); max_images bounds committed images plus captures in flight.
 * Beginning a capture evicts least-recently-used images until both budgets
 * hold; pinned images are never evicted; if even evicting every unpinned
 * image would not make room, the capture fails with STRATA_E_LIMIT and
 * nothing is evicted.  When the budgets hold but the allocator refuses a
 * part (an arena of exactly max_bytes, fragmented), begin evicts the least
 * recently used unpinned image that frees bytes and retries, until the
 * parts fit or no such image is left (then STRATA_E_NOMEM; the images
 * evicted for it stay evicted: doc/convcache.md, "Fragmentation").  Token lists and bookkeeping (4 bytes per token,
 * against tens of KiB of K/V per token) are not counted.
 *
 * Threading: ONE orchestration thread calls everything, except these, which
 * the stage pool's bodies may call at the same time, each for its own stage:
 * convcache_capture_part, convcache_capture_part_bytes,
 * convcache_capture_seal, and the read-only image accessors
 * (convcache_image_*, convcache_verify) on an image that stays pinned (or
 * at least is not evicted) meanwhile.  A capture's part buffers never move
 * between begin and commit/abort, so bodies can write into them freely.
 *
 * Lifetimes: an image pointer from convcache_find or convcache_commit stays
 * valid until the next convcache_begin (which may evict it) unless pinned,
 * and until convcache_free in any case. */
#ifndef STRATA_CONVCACHE_H
#define STRATA_CONVCACHE_H

#include "base/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct convcache convcache;
typedef struct convcache_image convcache_image;
typedef struct convcache_capture convcache_capture;

/* Where part bytes come from: on CUDA the engine passes an arena over one
 * pinned block of max_bytes (cache/arena.h; per-part cudaHostAlloc as the
 * fallback) so the cards copy at pinned speed (pageable memory copies 4-6x
 * slower, see doc/BENCHMARKS.md, "Reference figures").  alloc returns NULL on failure (the
 * cache then evicts and retries, see above); it is called for non-zero
 * sizes only, and alloc and free may be called from the orchestration
 * thread only. */
typedef struct convcache_allocator {
    void *(*alloc)(size_t bytes, void *ctx);
    void (*free)(void *ptr, void *ctx);
    void *ctx;
} convcache_allocator;

typedef struct convcache_config {
    int n_stages;                  /* parts per span, >= 1 */
    size_t max_bytes;              /* budget of part bytes, > 0 */
    int max_images;                /* budget of images, > 0 */
    convcache_allocator allocator; /* all NULL: malloc / free */
    /* 1: write no checksums (seal and commit skip the hashing, verify
     * answers STRATA_E_UNSUPPORTED).  Hashing reads every byte once on the
     * host, at ~10 GB/s per core against a PCIe copy's ~55 GB/s: on an
     * H200 a 100K-token capture took 6.5x the copy's floor with checksums
     * and 1.02x without (doc/convcache.md), so park/park.c writes them
     * only when it verifies them (debug builds, tests). */
    int skip_checksums;
    /* What the parts' bytes are, opaque here and the same for every image
     * of the cache: park/park.c writes the engine's KV type (enum
     * strata_kv_type), so an image is never read back as another format
     * (the plain and the rotated k8v4 have the same sizes and layout). */
    int format;
} convcache_config;

typedef struct convcache_stats {
    size_t bytes_used, bytes_max;  /* live part bytes (reserved included) */
    int images, images_max;        /* committed images */
    int captures;                  /* captures begun, not yet ended */
    int pinned;                    /* committed images pinned now */
    uint64_t hits, misses;         /* convcache_find found an image / none */
    uint64_t evictions;            /* images evicted to make room */
    uint64_t commits, aborts;      /* captures ended either way */
    uint64_t bytes_reused;         /* prefix bytes shared by committed
                                      extending captures instead of copied */
} convcache_stats;

/* One span of one stage, as the engine reads it to restore. */
typedef struct convcache_span {
    int32_t t0, t1;                /* the tokens [t0, t1) it holds */
    const void *data;              /* that stage's bytes for them */
    size_t bytes;
} convcache_span;

convcache *convcache_new(const convcache_config *cfg, strata_error *err);
/* Frees every image and every capture still in flight.  NULL ok. */
void convcache_free(convcache *c);

/* ---- lookup ------------------------------------------------------------- */

/* The longest committed image whose tokens are a prefix of (or equal to)
 * tokens[0..n_tokens): *img and its length as the return value; or 0 and
 * *img = NULL (a miss).  A hit makes the image most recently used. */
int convcache_find(convcache *c, const int32_t *tokens, int n_tokens,
                   convcache_image **img);

/* The committed image sharing the longest common prefix with
 * tokens[0..n_tokens), which need not be all of it: *img and the prefix's
 * length, or 0 (a miss).  The K/V of a prefix depends only on its tokens,
 * so those of any image are valid for them.  For a restore whose ids may
 * differ from the image's after some point (after a restart the server no
 * longer knows which ids its answers had).  Cost: a compare per shared
 * token of every image (convcache_find hashes instead). */
int convcache_find_common(convcache *c, const int32_t *tokens, int n_tokens,
                          convcache_image **img);

/* Keep an image from being evicted while it is in use (a restore in
 * flight, a prefix held across other captures).  Pins nest. */
void convcache_pin(convcache_image *img);
void convcache_unpin(convcache_image *img);

/* ---- capture ------------------------------------------------------------ */

/* Begin capturing the image of tokens[0..n_tokens) at position pos.
 * prefix: NULL for a fresh capture, or a committed image of this cache
 * whose tokens are a proper prefix of tokens; its spans are shared and the
 * new span holds tokens [prefix length, n_tokens).  new_bytes[stage]: the
 * bytes of the new span on each stage (0 allowed).  Evicts as needed (see
 * the top of the file).  On success *cap holds writable parts; end it with
 * convcache_commit or convcache_abort. */
int convcache_begin(convcache *c, const int32_t *tokens, int n_tokens,
                    int32_t pos, convcache_image *prefix,
                    const size_t *new_bytes, convcache_capture **cap,
                    strata_error *err);

/* The new span's buffer of a stage (stable until commit/abort; NULL when
 * its size is 0), its size, and the first token it holds. */
void *convcache_capture_part(convcache_capture *cap, int stage);
size_t convcache_capture_part_bytes(const convcache_capture *cap, int stage);
int32_t convcache_capture_first_token(const convcache_capture *cap);

/* Checksum a stage's new part now that it is written: called from that
 * stage's body, so the hashing of all stages runs in parallel.  Commit
 * hashes the stages not sealed (or written after their seal: do not). */
void convcache_capture_seal(convcache_capture *cap, int stage);

/* The token sampled after the captured ones and never fed: the last token
 * of an answer that ended at its length limit, which its client got but no
 * K/V row holds (-1, the default: none).  Kept with the image and saved
 * with it (park/persist.h), so that after a restart a front end knows the
 * conversation's ids as its client holds them.  Call before commit; when
 * commit finds a twin (below), the twin keeps its own. */
void convcache_capture_set_pending(convcache_capture *cap, int32_t tok);

/* Make the capture an image (most recently used).  If an image of the same
 * tokens was committed meanwhile, the new bytes are dropped and that image
 * is the result.  *img (may be NULL) receives the image. */
int convcache_commit(convcache *c, convcache_capture *cap,
                     convcache_image **img, strata_error *err);
/* Drop the capture and every byte it reserved: nothing of it remains (a
 * capture that failed on any stage is aborted, never committed).  NULL ok. */
void convcache_abort(convcache *c, convcache_capture *cap);

/* ---- images ------------------------------------------------------------- */

const int32_t *convcache_image_tokens(const convcache_image *img,
                                      int *n_tokens);
int32_t convcache_image_pos(const convcache_image *img);
/* convcache_capture_set_pending's token, or -1. */
int32_t convcache_image_pending(const convcache_image *img);
/* The format its bytes were written in (convcache_config.format). */
int convcache_image_format(const convcache_image *img);
int convcache_image_n_spans(const convcache_image *img);
/* Span i (0 = oldest, tokens from 0) of a stage; STRATA_E_ARG if out of
 * range. */
int convcache_image_span(const convcache_image *img, int stage, int i,
                         convcache_span *out, strata_error *err);
/* All bytes of a stage, over all spans. */
size_t convcache_image_bytes(const convcache_image *img, int stage);

/* Recompute the checksums of a stage's parts (stage -1: every stage) and
 * compare them with those written at commit: STRATA_E_FORMAT naming the
 * stage and tokens of the first mismatch; STRATA_E_UNSUPPORTED when the
 * cache writes no checksums. */
int convcache_verify(const convcache_image *img, int stage, strata_error *err);
/* Turn checksums on or off (config.skip_checksums) before anything was
 * captured: STRATA_E_ARG once the cache holds an image or a capture, so
 * every part of a cache has a checksum or none has. */
int convcache_set_checksums(convcache *c, int on, strata_error *err);

/* Evict least recently used unpinned images that give bytes back (keep
 * excepted; may be NULL) until the cache holds at most `bytes`, or no such
 * image is left: for the host-memory floor, under which a capture may only
 * take bytes the cache gives back first.  Returns the bytes held after. */
size_t convcache_evict_to(convcache *c, size_t bytes, const convcache_image *keep);

/* ---- accounting --------------------------------------------------------- */

void convcache_get_stats(const convcache *c, convcache_stats *st);

/* Walk every structure and check the invariants (budgets, byte and image
 * counts, reference counts, span coverage, list links): for the tests and
 * debug builds.  STRATA_E_FORMAT with the first broken one. */
int convcache_check(convcache *c, strata_error *err);

#endif
