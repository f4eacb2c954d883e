/* convcache.c: the conversation cache (see convcache.h for the model:
 * images made of reference-counted spans, two budgets, LRU eviction).
 *
 * Structures:
 * - span: the bytes of tokens [t0, t1) on every stage, shared by every
 *   image that extends the image it was captured for.
 * - convcache_image: tokens, position, and the list of spans covering
 *   [0, n_tokens) in order.  Committed images sit on one doubly linked LRU
 *   list (newest first); a capture's image sits on no list until commit.
 * - convcache_capture: an image being written plus its new (last) span,
 *   on the list of captures in flight.
 * Everything is small in number (at most max_images images, a handful of
 * spans each), so lookups and budget checks walk the lists. */
#include "cache/convcache.h"
#include "cache/convcache_internal.h"

#include "cache/xxh64.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static void *default_alloc(size_t bytes, void *ctx)
{
    (void)ctx;
    return malloc(bytes);
}

static void default_free(void *ptr, void *ctx)
{
    (void)ctx;
    free(ptr);
}

/* The lookup key: a running hash over the token ids, so find can advance
 * one hash along the query and compare it at every cached length.  Equal
 * keys are confirmed with memcmp; a collision costs a compare, no more. */
const uint64_t CONVCACHE_HASH_SEED = 0xcbf29ce484222325ull;

static uint64_t token_hash_step(uint64_t h, int32_t t)
{
    h ^= (uint32_t)t;
    h *= 0x100000001b3ull;          /* FNV-1a's 64-bit prime */
    return h ^ (h >> 29);
}

uint64_t convcache_token_hash(const int32_t *tokens, int from, int to,
                           uint64_t h)
{
    for (int i = from; i < to; i++)
        h = token_hash_step(h, tokens[i]);
    return h;
}

static int same_tokens(const convcache_image *img, const int32_t *tokens,
                       int n_tokens)
{
    return img->n_tokens <= n_tokens &&
           memcmp(img->tokens, tokens, (size_t)img->n_tokens * sizeof *tokens) == 0;
}

/* ---- spans -------------------------------------------------------------- */

static span *span_new(convcache *c, int32_t t0, int32_t t1)
{
    span *s = calloc(1, sizeof *s + (size_t)c->n_stages * sizeof s->part[0]);
    if (!s)
        return NULL;
    s->t0 = t0;
    s->t1 = t1;
    s->refs = 1;
    return s;
}

/* Allocate every stage's part; on failure the span keeps what it got
 * (span_release_parts gives it back).  evicted: images already evicted
 * for this span's sake, for the message. */
static int span_alloc_parts(convcache *c, span *s, const size_t *bytes,
                            int evicted, strata_error *err)
{
    for (int i = 0; i < c->n_stages; i++) {
        if (bytes[i] == 0)
            continue;
        s->part[i].data = c->al.alloc(bytes[i], c->al.ctx);
        if (!s->part[i].data)
            return strata_err(err, STRATA_E_NOMEM,
                              "conversation cache: stage %d: cannot allocate "
                              "%zu bytes (after evicting %d images for it; "
                              "the allocator's free memory is in holes too "
                              "small, or gone)", i, bytes[i], evicted);
        s->part[i].bytes = bytes[i];
        s->bytes += bytes[i];
    }
    return 0;
}

/* Give back the parts of a span whose bytes are not counted in bytes_used
 * yet (a capture's new span inside convcache_begin), to try again. */
static void span_release_parts(convcache *c, span *s)
{
    for (int i = 0; i < c->n_stages; i++)
        if (s->part[i].data) {
            c->al.free(s->part[i].data, c->al.ctx);
            s->part[i].data = NULL;
            s->part[i].bytes = 0;
        }
    s->bytes = 0;
}

static void span_unref(convcache *c, span *s)
{
    if (!s || --s->refs > 0)
        return;
    for (int i = 0; i < c->n_stages; i++)
        if (s->part[i].data)
            c->al.free(s->part[i].data, c->al.ctx);
    c->bytes_used -= s->bytes;
    free(s);
}

static void span_seal(span *s, int stage)
{
    span_part *p = &s->part[stage];
    p->sum = xxh64(p->data, p->bytes, 0);
    p->sealed = 1;
}

/* ---- images and the LRU list ------------------------------------------- */

static void image_free(convcache *c, convcache_image *img)
{
    if (!img)
        return;
    for (int i = 0; i < img->n_spans; i++)
        span_unref(c, img->spans[i]);
    free(img->spans);
    free(img->tokens);
    free(img);
}

static void lru_unlink(convcache *c, convcache_image *img)
{
    if (img->newer)
        img->newer->older = img->older;
    else
        c->newest = img->older;
    if (img->older)
        img->older->newer = img->newer;
    else
        c->oldest = img->newer;
    img->newer = img->older = NULL;
}

static void lru_push_newest(convcache *c, convcache_image *img)
{
    img->newer = NULL;
    img->older = c->newest;
    if (c->newest)
        c->newest->newer = img;
    else
        c->oldest = img;
    c->newest = img;
}

static void lru_touch(convcache *c, convcache_image *img)
{
    if (c->newest == img)
        return;
    lru_unlink(c, img);
    lru_push_newest(c, img);
}

static void image_evict(convcache *c, convcache_image *img)
{
    lru_unlink(c, img);
    c->n_images--;
    c->evictions++;
    image_free(c, img);
}

/* ---- captures in flight ------------------------------------------------- */

static void capture_unlink(convcache *c, convcache_capture *cap)
{
    if (cap->prev)
        cap->prev->next = cap->next;
    else
        c->captures = cap->next;
    if (cap->next)
        cap->next->prev = cap->prev;
    cap->prev = cap->next = NULL;
    c->n_captures--;
}

static void capture_link(convcache *c, convcache_capture *cap)
{
    cap->prev = NULL;
    cap->next = c->captures;
    if (c->captures)
        c->captures->prev = cap;
    c->captures = cap;
    c->n_captures++;
}

/* ---- life cycle --------------------------------------------------------- */

convcache *convcache_new(const convcache_config *cfg, strata_error *err)
{
    if (!cfg || cfg->n_stages < 1 || cfg->max_bytes == 0 || cfg->max_images < 1) {
        strata_err(err, STRATA_E_ARG,
                   "conversation cache: bad configuration (stages %d, bytes "
                   "%zu, images %d)", cfg ? cfg->n_stages : 0,
                   cfg ? cfg->max_bytes : 0, cfg ? cfg->max_images : 0);
        return NULL;
    }
    if (!cfg->allocator.alloc != !cfg->allocator.free) {
        strata_err(err, STRATA_E_ARG,
                   "conversation cache: allocator needs both alloc and free");
        return NULL;
    }
    convcache *c = calloc(1, sizeof *c);
    if (!c) {
        strata_err(err, STRATA_E_NOMEM, "conversation cache: out of memory");
        return NULL;
    }
    c->n_stages = cfg->n_stages;
    c->max_bytes = cfg->max_bytes;
    c->max_images = cfg->max_images;
    c->skip_checksums = cfg->skip_checksums != 0;
    c->format = cfg->format;
    c->al = cfg->allocator;
    if (!c->al.alloc) {
        c->al.alloc = default_alloc;
        c->al.free = default_free;
        c->al.ctx = NULL;
    }
    return c;
}

void convcache_free(convcache *c)
{
    if (!c)
        return;
    while (c->captures)
        convcache_abort(c, c->captures);
    while (c->oldest) {
        convcache_image *img = c->oldest;
        lru_unlink(c, img);
        image_free(c, img);
    }
    free(c->scratch);
    free(c);
}

/* ---- lookup ------------------------------------------------------------- */

static int by_length(const void *a, const void *b)
{
    const convcache_image *x = *(convcache_image *const *)a;
    const convcache_image *y = *(convcache_image *const *)b;
    return (x->n_tokens > y->n_tokens) - (x->n_tokens < y->n_tokens);
}

int convcache_find(convcache *c, const int32_t *tokens, int n_tokens,
                   convcache_image **img)
{
    if (img)
        *img = NULL;
    if (!c || !tokens || n_tokens <= 0 || !img) {
        if (c)
            c->misses++;
        return 0;
    }
    /* Candidates shortest first, so one running hash along the query
     * reaches each candidate's length in turn: O(n_tokens) hashing plus a
     * memcmp per key match, instead of a memcmp per image.  scratch holds
     * n_images + n_captures entries (grown in convcache_begin). */
    int n = 0;
    for (convcache_image *it = c->newest; it; it = it->older)
        if (it->n_tokens <= n_tokens)
            c->scratch[n++] = it;
    if (n > 1)
        qsort(c->scratch, (size_t)n, sizeof *c->scratch, by_length);

    convcache_image *best = NULL;
    uint64_t h = CONVCACHE_HASH_SEED;
    int hashed = 0;
    for (int i = 0; i < n; i++) {
        convcache_image *cand = c->scratch[i];
        h = convcache_token_hash(tokens, hashed, cand->n_tokens, h);
        hashed = cand->n_tokens;
        if (h == cand->key && same_tokens(cand, tokens, n_tokens))
            best = cand;
    }
    if (!best) {
        c->misses++;
        return 0;
    }
    c->hits++;
    lru_touch(c, best);
    *img = best;
    return best->n_tokens;
}

int convcache_find_common(convcache *c, const int32_t *tokens, int n_tokens,
                          convcache_image **img)
{
    *img = NULL;
    convcache_image *best = NULL;
    int best_n = 0;
    /* newest first, so of images sharing as much the most recent wins */
    for (convcache_image *it = c->newest; it && tokens && n_tokens > 0; it = it->older) {
        int lim = it->n_tokens < n_tokens ? it->n_tokens : n_tokens, k = 0;
        while (k < lim && it->tokens[k] == tokens[k])
            k++;
        if (k > best_n) {
            best = it;
            best_n = k;
        }
    }
    if (!best) {
        c->misses++;
        return 0;
    }
    c->hits++;
    lru_touch(c, best);
    *img = best;
    return best_n;
}

void convcache_pin(convcache_image *img)
{
    if (img)
        img->pins++;
}

void convcache_unpin(convcache_image *img)
{
    if (img && img->pins > 0)
        img->pins--;
}

/* ---- room for a capture ------------------------------------------------- */

size_t convcache_mark_image(convcache *c, const convcache_image *img)
{
    size_t bytes = 0;
    for (int i = 0; i < img->n_spans; i++) {
        span *s = img->spans[i];
        if (s->mark != c->epoch) {
            s->mark = c->epoch;
            bytes += s->bytes;
        }
    }
    return bytes;
}

/* The bytes and images that no eviction can free: pinned images, captures
 * in flight, and the spans of the new capture itself (already referenced
 * through `self`, which holds the prefix spans).  Spans are counted once. */
static void room_floor(convcache *c, const convcache_image *self,
                       size_t *bytes, int *images)
{
    c->epoch++;
    *bytes = convcache_mark_image(c, self);
    *images = 0;
    for (convcache_image *it = c->newest; it; it = it->older)
        if (it->pins > 0) {
            *bytes += convcache_mark_image(c, it);
            (*images)++;
        }
    for (convcache_capture *cap = c->captures; cap; cap = cap->next) {
        *bytes += convcache_mark_image(c, cap->img);
        (*images)++;
    }
}

static int fits(const convcache *c, size_t need)
{
    return c->bytes_used + need <= c->max_bytes &&
           c->n_images + c->n_captures + 1 <= c->max_images;
}

/* Evict least-recently-used unpinned images until `need` more bytes and
 * one more image fit.  Checks first that it can succeed, so a capture that
 * cannot fit evicts nothing. */
static int make_room(convcache *c, const convcache_image *self, size_t need,
                     strata_error *err)
{
    size_t floor_bytes;
    int floor_images;
    room_floor(c, self, &floor_bytes, &floor_images);
    if (need > c->max_bytes || floor_bytes + need > c->max_bytes)
        return strata_err(err, STRATA_E_LIMIT,
                          "conversation cache: a capture of %d tokens needs "
                          "%zu new bytes; the budget is %zu bytes, of which "
                          "%zu are held by images in use",
                          self->n_tokens, need, c->max_bytes, floor_bytes);
    if (floor_images + 1 > c->max_images)
        return strata_err(err, STRATA_E_LIMIT,
                          "conversation cache: all %d image slots are in use "
                          "(pinned or being captured)", c->max_images);

    convcache_image *victim = c->oldest;
    while (!fits(c, need)) {
        while (victim && victim->pins > 0)
            victim = victim->newer;
        if (!victim) /* the floor check above makes this unreachable */
            return strata_err(err, STRATA_E_LIMIT,
                              "conversation cache: cannot make room");
        convcache_image *next = victim->newer;
        image_evict(c, victim);
        victim = next;
    }
    return 0;
}

/* 1 if evicting img gives bytes back: it alone holds one of its spans
 * (a span shared with another image or a capture outlives it). */
static int image_frees_bytes(const convcache_image *img)
{
    for (int i = 0; i < img->n_spans; i++)
        if (img->spans[i]->refs == 1 && img->spans[i]->bytes > 0)
            return 1;
    return 0;
}

/* Allocate the new span's parts; when the allocator refuses, evict the
 * least recently used unpinned image that gives bytes back and try again,
 * until the parts fit or no such image is left.
 *
 * Why the budget check (make_room) is not enough: the engine's allocator is
 * an arena of exactly max_bytes (one pinned block, cache/arena.h), so the
 * free bytes the budget counts can lie in holes none of which holds a part
 * (and the arena rounds each part up to 64 bytes).  Evicting frees holes
 * next to others, which merge.  With a plain allocator (malloc, per-part
 * cudaHostAlloc) a refusal means the host is short of memory, and giving
 * the cache's own memory back is the right answer there too.  Each try
 * starts from no parts, so the stages' parts are placed together in the
 * freed space rather than around a part kept from the last try.  The
 * images evicted stay evicted even if the capture still fails: whether a
 * hole would open cannot be known through the allocator's two calls, and
 * losing an image only costs a re-read later. */
static int alloc_parts_evicting(convcache *c, span *s, const size_t *bytes,
                                strata_error *err)
{
    for (int evicted = 0;; evicted++) {
        int rc = span_alloc_parts(c, s, bytes, evicted, err);
        if (rc == 0)
            return 0;
        span_release_parts(c, s);
        convcache_image *victim = c->oldest;
        while (victim && (victim->pins > 0 || !image_frees_bytes(victim)))
            victim = victim->newer;
        if (!victim)
            return rc;
        image_evict(c, victim);
    }
}

size_t convcache_evict_to(convcache *c, size_t bytes, const convcache_image *keep)
{
    while (c->bytes_used > bytes) {
        convcache_image *victim = c->oldest;
        while (victim && (victim == keep || victim->pins > 0 || !image_frees_bytes(victim)))
            victim = victim->newer;
        if (!victim)
            break;
        image_evict(c, victim);
    }
    return c->bytes_used;
}

static int scratch_reserve(convcache *c, int want)
{
    if (want <= c->scratch_cap)
        return 0;
    int cap = c->scratch_cap ? c->scratch_cap : 16;
    while (cap < want)
        cap *= 2;
    convcache_image **s = realloc(c->scratch, (size_t)cap * sizeof *s);
    if (!s)
        return -1;
    c->scratch = s;
    c->scratch_cap = cap;
    return 0;
}

/* ---- capture ------------------------------------------------------------ */

static int check_prefix(const convcache *c, const convcache_image *prefix,
                        const int32_t *tokens, int n_tokens, strata_error *err)
{
    if (prefix->owner != c || !prefix->committed)
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: the prefix image is not a "
                          "committed image of this cache");
    if (prefix->n_tokens >= n_tokens || !same_tokens(prefix, tokens, n_tokens))
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: the prefix image (%d tokens) "
                          "is not a proper prefix of the %d tokens captured",
                          prefix->n_tokens, n_tokens);
    return 0;
}

/* The new image: tokens copied, prefix spans referenced, new span empty. */
static convcache_image *image_new(convcache *c, const int32_t *tokens,
                                  int n_tokens, int32_t pos,
                                  const convcache_image *prefix)
{
    convcache_image *img = calloc(1, sizeof *img);
    if (!img)
        return NULL;
    img->owner = c;
    img->n_tokens = n_tokens;
    img->pos = pos;
    img->pending = -1;
    img->key = convcache_token_hash(tokens, 0, n_tokens, CONVCACHE_HASH_SEED);
    int n_prefix = prefix ? prefix->n_spans : 0;
    img->tokens = malloc((size_t)n_tokens * sizeof *tokens);
    img->spans = calloc((size_t)n_prefix + 1, sizeof *img->spans);
    span *fresh = span_new(c, prefix ? prefix->n_tokens : 0, n_tokens);
    if (!img->tokens || !img->spans || !fresh) {
        free(fresh);
        image_free(c, img);
        return NULL;
    }
    memcpy(img->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    for (int i = 0; i < n_prefix; i++) {
        img->spans[i] = prefix->spans[i];
        img->spans[i]->refs++;
    }
    img->spans[n_prefix] = fresh;
    img->n_spans = n_prefix + 1;
    return img;
}

static size_t image_total_bytes(const convcache_image *img, int n_spans)
{
    size_t bytes = 0;
    for (int i = 0; i < n_spans; i++)
        bytes += img->spans[i]->bytes;
    return bytes;
}

int convcache_begin(convcache *c, const int32_t *tokens, int n_tokens,
                    int32_t pos, convcache_image *prefix,
                    const size_t *new_bytes, convcache_capture **cap,
                    strata_error *err)
{
    if (cap)
        *cap = NULL;
    if (!c || !tokens || n_tokens <= 0 || pos < 0 || !new_bytes || !cap)
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: bad capture arguments "
                          "(%d tokens, position %d)", n_tokens, (int)pos);
    if (prefix) {
        int rc = check_prefix(c, prefix, tokens, n_tokens, err);
        if (rc)
            return rc;
    }
    size_t need = 0;
    for (int i = 0; i < c->n_stages; i++) {
        if (new_bytes[i] > SIZE_MAX - need)
            return strata_err(err, STRATA_E_LIMIT,
                              "conversation cache: capture size overflows");
        need += new_bytes[i];
    }
    if (scratch_reserve(c, c->n_images + c->n_captures + 1) != 0)
        return strata_err(err, STRATA_E_NOMEM, "conversation cache: out of memory");

    convcache_capture *cp = calloc(1, sizeof *cp);
    convcache_image *img = cp ? image_new(c, tokens, n_tokens, pos, prefix) : NULL;
    if (!img) {
        free(cp);
        return strata_err(err, STRATA_E_NOMEM, "conversation cache: out of memory");
    }
    cp->img = img;
    cp->fresh = img->spans[img->n_spans - 1];
    cp->reused = image_total_bytes(img, img->n_spans - 1);
    if (prefix)
        lru_touch(c, prefix);

    /* Room first, allocation second: with pinned memory the host may hold
     * no more than the budget, so the evicted bytes must go before new ones
     * come.  The prefix spans are already referenced by img, so evicting
     * the prefix image itself (if unpinned) frees none of them. */
    int rc = make_room(c, img, need, err);
    if (rc == 0)
        rc = alloc_parts_evicting(c, cp->fresh, new_bytes, err);
    if (rc != 0) {
        /* The fresh span holds no parts now (released on failure), so
         * freeing it takes nothing off bytes_used. */
        image_free(c, img);
        free(cp);
        return rc;
    }
    c->bytes_used += need;
    capture_link(c, cp);
    *cap = cp;
    return 0;
}

void *convcache_capture_part(convcache_capture *cap, int stage)
{
    if (!cap || stage < 0 || stage >= cap->img->owner->n_stages)
        return NULL;
    return cap->fresh->part[stage].data;
}

size_t convcache_capture_part_bytes(const convcache_capture *cap, int stage)
{
    if (!cap || stage < 0 || stage >= cap->img->owner->n_stages)
        return 0;
    return cap->fresh->part[stage].bytes;
}

int32_t convcache_capture_first_token(const convcache_capture *cap)
{
    return cap ? cap->fresh->t0 : 0;
}

void convcache_capture_seal(convcache_capture *cap, int stage)
{
    if (cap && stage >= 0 && stage < cap->img->owner->n_stages &&
        !cap->img->owner->skip_checksums)
        span_seal(cap->fresh, stage);
}

static convcache_image *find_exact(convcache *c, const convcache_image *img)
{
    for (convcache_image *it = c->newest; it; it = it->older)
        if (it->n_tokens == img->n_tokens && it->key == img->key &&
            same_tokens(it, img->tokens, img->n_tokens))
            return it;
    return NULL;
}

int convcache_commit(convcache *c, convcache_capture *cap,
                     convcache_image **img, strata_error *err)
{
    if (img)
        *img = NULL;
    if (!c || !cap || cap->img->owner != c)
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: commit of an unknown capture");
    for (int i = 0; i < c->n_stages && !c->skip_checksums; i++)
        if (!cap->fresh->part[i].sealed)
            span_seal(cap->fresh, i);
    capture_unlink(c, cap);
    convcache_image *done = cap->img;

    convcache_image *twin = find_exact(c, done);
    if (twin) {
        /* Same tokens, so the same K/V: keep the image already there
         * (others may hold it pinned) and drop the copy. */
        image_free(c, done);
        done = twin;
        lru_touch(c, done);
    } else {
        done->committed = 1;
        lru_push_newest(c, done);
        c->n_images++;
        c->bytes_reused += cap->reused;
    }
    c->commits++;
    free(cap);
    if (img)
        *img = done;
    return 0;
}

void convcache_abort(convcache *c, convcache_capture *cap)
{
    if (!c || !cap)
        return;
    capture_unlink(c, cap);
    image_free(c, cap->img);
    free(cap);
    c->aborts++;
}

/* ---- images ------------------------------------------------------------- */

const int32_t *convcache_image_tokens(const convcache_image *img,
                                      int *n_tokens)
{
    if (n_tokens)
        *n_tokens = img ? img->n_tokens : 0;
    return img ? img->tokens : NULL;
}

int32_t convcache_image_pos(const convcache_image *img)
{
    return img ? img->pos : 0;
}

void convcache_capture_set_pending(convcache_capture *cap, int32_t tok)
{
    cap->img->pending = tok < 0 ? -1 : tok;
}

int32_t convcache_image_pending(const convcache_image *img)
{
    return img ? img->pending : -1;
}

int convcache_image_format(const convcache_image *img)
{
    return img->owner->format;
}

int convcache_image_n_spans(const convcache_image *img)
{
    return img ? img->n_spans : 0;
}

int convcache_image_span(const convcache_image *img, int stage, int i,
                         convcache_span *out, strata_error *err)
{
    if (!img || !out || stage < 0 || stage >= img->owner->n_stages || i < 0 ||
        i >= img->n_spans)
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: no span %d of stage %d", i, stage);
    const span *s = img->spans[i];
    out->t0 = s->t0;
    out->t1 = s->t1;
    out->data = s->part[stage].data;
    out->bytes = s->part[stage].bytes;
    return 0;
}

size_t convcache_image_bytes(const convcache_image *img, int stage)
{
    if (!img || stage < 0 || stage >= img->owner->n_stages)
        return 0;
    size_t bytes = 0;
    for (int i = 0; i < img->n_spans; i++)
        bytes += img->spans[i]->part[stage].bytes;
    return bytes;
}

int convcache_set_checksums(convcache *c, int on, strata_error *err)
{
    if (c->n_images || c->n_captures)
        return strata_err(err, STRATA_E_ARG, "conversation cache: checksums turned %s with "
                          "%d images and %d captures in it", on ? "on" : "off", c->n_images,
                          c->n_captures);
    c->skip_checksums = !on;
    return 0;
}

int convcache_verify(const convcache_image *img, int stage, strata_error *err)
{
    if (!img || stage < -1 || stage >= img->owner->n_stages)
        return strata_err(err, STRATA_E_ARG,
                          "conversation cache: verify of stage %d", stage);
    if (img->owner->skip_checksums)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "conversation cache: checksums are off");
    int first = stage < 0 ? 0 : stage;
    int last = stage < 0 ? img->owner->n_stages - 1 : stage;
    for (int st = first; st <= last; st++)
        for (int i = 0; i < img->n_spans; i++) {
            const span *s = img->spans[i];
            const span_part *p = &s->part[st];
            uint64_t sum = xxh64(p->data, p->bytes, 0);
            if (!p->sealed || sum != p->sum)
                return strata_err(err, STRATA_E_FORMAT,
                                  "conversation image of %d tokens: stage %d, "
                                  "tokens %d..%d: checksum %016llx, expected "
                                  "%016llx", img->n_tokens, st, (int)s->t0,
                                  (int)s->t1, (unsigned long long)sum,
                                  (unsigned long long)p->sum);
        }
    return 0;
}

/* ---- accounting --------------------------------------------------------- */

void convcache_get_stats(const convcache *c, convcache_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!c)
        return;
    st->bytes_used = c->bytes_used;
    st->bytes_max = c->max_bytes;
    st->images = c->n_images;
    st->images_max = c->max_images;
    st->captures = c->n_captures;
    for (const convcache_image *it = c->newest; it; it = it->older)
        st->pinned += it->pins > 0;
    st->hits = c->hits;
    st->misses = c->misses;
    st->evictions = c->evictions;
    st->commits = c->commits;
    st->aborts = c->aborts;
    st->bytes_reused = c->bytes_reused;
}
