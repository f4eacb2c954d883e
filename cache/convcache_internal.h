/* convcache_internal.h: the conversation cache's structures, shared by
 * convcache.c (the cache) and convcache_check.c (its consistency check for
 * the tests).  Not for other files: use convcache.h. */
#ifndef STRATA_CONVCACHE_INTERNAL_H
#define STRATA_CONVCACHE_INTERNAL_H

#include "cache/convcache.h"

#include <stdint.h>

typedef struct span_part {
    void *data;          /* owned; NULL when bytes == 0 */
    size_t bytes;
    uint64_t sum;        /* xxh64 of data, valid once sealed */
    int sealed;
} span_part;

typedef struct span {
    int32_t t0, t1;      /* tokens [t0, t1) */
    int refs;            /* images and captures holding it */
    size_t bytes;        /* sum of part[].bytes */
    unsigned mark;       /* walk epoch, see mark_span */
    int seen;            /* references counted by convcache_check */
    span_part part[];    /* [n_stages] */
} span;

struct convcache_image {
    convcache *owner;
    int32_t *tokens;     /* [n_tokens] */
    int n_tokens;
    int32_t pos;
    int32_t pending;     /* convcache_capture_set_pending; -1: none */
    uint64_t key;        /* token_hash of tokens */
    int n_spans;
    span **spans;        /* [n_spans], covering [0, n_tokens) in order */
    int committed;
    int pins;
    convcache_image *newer, *older;   /* LRU list links when committed */
};

struct convcache_capture {
    convcache_image *img;
    span *fresh;                      /* img->spans[n_spans - 1] */
    size_t reused;                    /* prefix bytes shared, all stages */
    convcache_capture *prev, *next;   /* captures in flight */
};

struct convcache {
    int n_stages;
    size_t max_bytes;
    int max_images;
    int skip_checksums;
    int format;                       /* convcache_config.format */
    convcache_allocator al;

    size_t bytes_used;                /* live spans' bytes */
    int n_images;                     /* committed */
    int n_captures;                   /* in flight */
    convcache_image *newest, *oldest; /* LRU list */
    convcache_capture *captures;

    unsigned epoch;                   /* for mark_span walks */
    convcache_image **scratch;        /* find's candidates */
    int scratch_cap;

    uint64_t hits, misses, evictions, commits, aborts, bytes_reused;
};

/* The lookup key of tokens [from, to), continuing the running hash h
 * (start from CONVCACHE_HASH_SEED). */
extern const uint64_t CONVCACHE_HASH_SEED;
uint64_t convcache_token_hash(const int32_t *tokens, int from, int to, uint64_t h);
/* Mark img's spans with the cache's current epoch; the bytes of those not
 * marked before (so a walk counts a shared span once). */
size_t convcache_mark_image(convcache *c, const convcache_image *img);

#endif
