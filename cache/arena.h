/* arena.h: a thread-safe allocator over ONE caller-provided block.
 *
 * Why: the conversation cache's part buffers must be pinned (page-locked)
 * host memory so the cards copy at 55 GB/s instead of 8-14 GB/s pageable
 * (doc/BENCHMARKS.md, "Reference figures").  Pinning is the expensive part: cudaHostAlloc
 * page-locks (and maps for every card) each byte it hands out, and on an
 * H200 a capture that pinned its own gigabytes ran at 1.6 GB/s end to end,
 * far below the copy it was meant to feed.  So the engine pins one block of
 * the cache's whole byte budget once, at start, and this arena carves the
 * parts out of it: an allocation is then a walk over a short free list.
 *
 * How: first the free extents, kept sorted by address in an array outside
 * the block; an allocation takes the best fit (the smallest extent that
 * holds it, the lowest address among equals) and carves from its start;
 * a free puts the extent back and merges it with its neighbours, so freeing
 * everything leaves one extent again.  Live allocations sit in a second
 * sorted array (address, size), found by binary search on free.  No header
 * is ever written into the block: it is pinned memory the cards copy into
 * and out of, and every byte of it belongs to the caller.  Both arrays are
 * O(n) to edit, which is nothing for the hundreds of spans a cache holds.
 *
 * Sizes are rounded up to ARENA_ALIGN and every address is ARENA_ALIGN
 * aligned (a cache line; also what the copy engines like).  So a block of
 * B bytes holds at most B / ARENA_ALIGN allocations, and an allocation of
 * n bytes uses round_up(n, ARENA_ALIGN) of them.
 *
 * Threading: every call takes the arena's mutex, so any thread may allocate
 * and free at the same time. */
#ifndef STRATA_ARENA_H
#define STRATA_ARENA_H

#include <pthread.h>
#include <stddef.h>

#define ARENA_ALIGN 64

typedef struct arena_extent {
    size_t off;          /* from arena.base, a multiple of ARENA_ALIGN */
    size_t bytes;        /* a multiple of ARENA_ALIGN, > 0 */
} arena_extent;

typedef struct arena {
    pthread_mutex_t mu;
    unsigned char *base; /* the block's first ARENA_ALIGN-aligned byte */
    size_t bytes;        /* usable bytes from base (a multiple of ARENA_ALIGN) */
    arena_extent *free_ext; /* [n_free], sorted by off, never adjacent */
    int n_free, cap_free;
    arena_extent *used;  /* [n_used], sorted by off: live allocations */
    int n_used, cap_used;
    size_t used_bytes;   /* sum of used[].bytes (rounded sizes) */
} arena;

/* Manage [base, base + bytes): the first aligned address onwards, whole
 * ARENA_ALIGN units only.  The block stays the caller's (arena_fini does not
 * free it).  0, or -1 when the mutex or the bookkeeping cannot be made. */
int arena_init(arena *a, void *base, size_t bytes);
/* Free the bookkeeping (not the block).  Live allocations are forgotten. */
void arena_fini(arena *a);

/* An ARENA_ALIGN-aligned buffer of at least `bytes`, or NULL when bytes is
 * 0 or no free extent holds it (or its bookkeeping cannot grow). */
void *arena_alloc(arena *a, size_t bytes);
/* Give back p (from arena_alloc of this arena); NULL is a no-op (0).
 * -1 when p is not a live allocation of this arena (a double free): the
 * arena is left as it was. */
int arena_free(arena *a, void *p);

/* The largest allocation that would succeed now, in bytes. */
size_t arena_largest_free(arena *a);
/* Bytes held by live allocations (rounded sizes). */
size_t arena_used(arena *a);
/* How many free extents there are (1 when nothing is allocated). */
int arena_free_extents(arena *a);

/* Walk the bookkeeping and check it: extents sorted, in bounds, aligned,
 * non-overlapping, free ones never adjacent, used + free = the block.
 * 0, or -1 with a reason in why (may be NULL).  For the tests. */
int arena_check(arena *a, const char **why);

#endif
