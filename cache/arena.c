/* arena.c: best-fit allocation over one block, bookkeeping outside it (see
 * arena.h for why the block is pinned memory and must hold no headers).
 *
 * Two arrays of extents, both sorted by offset: the free ones and the live
 * allocations.  Free extents are never adjacent (a free merges), so there
 * are at most n_used + 1 of them; alloc reserves room in both arrays before
 * it changes anything, which leaves free with nothing to allocate and so
 * nothing to fail on. */
#include "cache/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- sorted extent arrays ----------------------------------------------- */

/* The first index whose extent starts at or after off (n if none). */
static int lower_bound(const arena_extent *v, int n, size_t off)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (v[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Make *v hold at least want entries; 0, or -1 (unchanged) on failure. */
static int reserve(arena_extent **v, int *cap, int want)
{
    if (want <= *cap)
        return 0;
    int n = *cap ? *cap : 16;
    while (n < want)
        n *= 2;
    arena_extent *nv = realloc(*v, (size_t)n * sizeof *nv);
    if (!nv)
        return -1;
    *v = nv;
    *cap = n;
    return 0;
}

/* Insert at i; the caller reserved the room. */
static void insert_at(arena_extent *v, int *n, int i, arena_extent e)
{
    memmove(&v[i + 1], &v[i], (size_t)(*n - i) * sizeof *v);
    v[i] = e;
    (*n)++;
}

static void remove_at(arena_extent *v, int *n, int i)
{
    memmove(&v[i], &v[i + 1], (size_t)(*n - i - 1) * sizeof *v);
    (*n)--;
}

/* ---- life cycle --------------------------------------------------------- */

int arena_init(arena *a, void *base, size_t bytes)
{
    memset(a, 0, sizeof *a);
    if (pthread_mutex_init(&a->mu, NULL) != 0)
        return -1;
    uintptr_t b = (uintptr_t)base;
    size_t pad = (size_t)((ARENA_ALIGN - b % ARENA_ALIGN) % ARENA_ALIGN);
    a->base = (unsigned char *)base + pad;
    a->bytes = base && bytes > pad ? (bytes - pad) / ARENA_ALIGN * ARENA_ALIGN : 0;
    if (reserve(&a->free_ext, &a->cap_free, 2) != 0 ||
        reserve(&a->used, &a->cap_used, 1) != 0) {
        arena_fini(a);
        return -1;
    }
    if (a->bytes > 0)
        a->free_ext[a->n_free++] = (arena_extent){0, a->bytes};
    return 0;
}

void arena_fini(arena *a)
{
    if (!a)
        return;
    free(a->free_ext);
    free(a->used);
    pthread_mutex_destroy(&a->mu);
    memset(a, 0, sizeof *a);
}

/* ---- alloc and free ----------------------------------------------------- */

/* Best fit: the smallest free extent that holds need, the lowest address
 * among equals (the scan goes up in address).  Best fit leaves the big
 * extents whole for the big spans (a fresh 100K-token capture) instead of
 * nibbling at them with small turns.  -1 when none holds it. */
static int best_fit(const arena *a, size_t need)
{
    int best = -1;
    for (int i = 0; i < a->n_free; i++)
        if (a->free_ext[i].bytes >= need &&
            (best < 0 || a->free_ext[i].bytes < a->free_ext[best].bytes))
            best = i;
    return best;
}

void *arena_alloc(arena *a, size_t bytes)
{
    if (!a || bytes == 0 || bytes > SIZE_MAX - (ARENA_ALIGN - 1))
        return NULL;
    size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    void *p = NULL;
    pthread_mutex_lock(&a->mu);
    int i = best_fit(a, need);
    /* Room for this allocation, and for the free extents any later free can
     * leave (at most n_used + 1 of them, n_used counting this one). */
    if (i >= 0 && reserve(&a->used, &a->cap_used, a->n_used + 1) == 0 &&
        reserve(&a->free_ext, &a->cap_free, a->n_used + 2) == 0) {
        arena_extent got = {a->free_ext[i].off, need};
        if (a->free_ext[i].bytes == need) {
            remove_at(a->free_ext, &a->n_free, i);
        } else {
            a->free_ext[i].off += need;
            a->free_ext[i].bytes -= need;
        }
        insert_at(a->used, &a->n_used, lower_bound(a->used, a->n_used, got.off), got);
        a->used_bytes += need;
        p = a->base + got.off;
    }
    pthread_mutex_unlock(&a->mu);
    return p;
}

/* Put e back on the free list, merged with the free extents it touches. */
static void free_extent(arena *a, arena_extent e)
{
    int i = lower_bound(a->free_ext, a->n_free, e.off);
    int with_prev = i > 0 && a->free_ext[i - 1].off + a->free_ext[i - 1].bytes == e.off;
    int with_next = i < a->n_free && e.off + e.bytes == a->free_ext[i].off;
    if (with_prev && with_next) {
        a->free_ext[i - 1].bytes += e.bytes + a->free_ext[i].bytes;
        remove_at(a->free_ext, &a->n_free, i);
    } else if (with_prev) {
        a->free_ext[i - 1].bytes += e.bytes;
    } else if (with_next) {
        a->free_ext[i].off = e.off;
        a->free_ext[i].bytes += e.bytes;
    } else {
        insert_at(a->free_ext, &a->n_free, i, e); /* room reserved by alloc */
    }
}

int arena_free(arena *a, void *p)
{
    if (!a || !p)
        return 0;
    unsigned char *q = p;
    if (q < a->base || q >= a->base + a->bytes)
        return -1;
    size_t off = (size_t)(q - a->base);
    int rc = -1;
    pthread_mutex_lock(&a->mu);
    int i = lower_bound(a->used, a->n_used, off);
    if (i < a->n_used && a->used[i].off == off) {
        arena_extent e = a->used[i];
        remove_at(a->used, &a->n_used, i);
        a->used_bytes -= e.bytes;
        free_extent(a, e);
        rc = 0;
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* ---- accounting --------------------------------------------------------- */

size_t arena_largest_free(arena *a)
{
    size_t best = 0;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->n_free; i++)
        if (a->free_ext[i].bytes > best)
            best = a->free_ext[i].bytes;
    pthread_mutex_unlock(&a->mu);
    return best;
}

size_t arena_used(arena *a)
{
    pthread_mutex_lock(&a->mu);
    size_t used = a->used_bytes;
    pthread_mutex_unlock(&a->mu);
    return used;
}

int arena_free_extents(arena *a)
{
    pthread_mutex_lock(&a->mu);
    int n = a->n_free;
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* Walk both lists in address order: together they must tile [0, bytes). */
static const char *check_locked(const arena *a)
{
    size_t at = 0, used = 0;
    int i = 0, j = 0, last_free = 0;
    while (i < a->n_free || j < a->n_used) {
        int take_free = j >= a->n_used ||
                        (i < a->n_free && a->free_ext[i].off < a->used[j].off);
        const arena_extent *e = take_free ? &a->free_ext[i++] : &a->used[j++];
        if (e->off != at)
            return e->off < at ? "extents overlap" : "a gap no extent covers";
        if (e->bytes == 0 || e->off % ARENA_ALIGN || e->bytes % ARENA_ALIGN)
            return "an empty or unaligned extent";
        if (take_free && last_free)
            return "two free extents adjacent (not merged)";
        if (!take_free)
            used += e->bytes;
        last_free = take_free;
        at += e->bytes;
    }
    if (at != a->bytes)
        return "the extents do not end at the block's end";
    if (used != a->used_bytes)
        return "used bytes do not add up";
    if (a->cap_free < a->n_used + 1)
        return "no room reserved for the free list";
    return NULL;
}

int arena_check(arena *a, const char **why)
{
    pthread_mutex_lock(&a->mu);
    const char *bad = check_locked(a);
    pthread_mutex_unlock(&a->mu);
    if (why)
        *why = bad;
    return bad ? -1 : 0;
}
