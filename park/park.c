/* park.c: capture, restore and the slot shuttle as per-stage bodies on the
 * stage pool (see park.h for the image layout and the contract).
 *
 * Each operation has the same three steps:
 *   1. on the orchestration thread: look up / reserve (cache bytes, KV
 *      pages) everything the bodies will write, so a body allocates nothing
 *      and touches nothing another stage touches;
 *   2. stagepool_for_each: every stage issues its copies on its own copy
 *      stream (backend_copier), synchronises once, seals or verifies its part;
 *   3. on the orchestration thread: commit, or undo everything when any
 *      stage failed (convcache_abort, seq reset): nothing torn remains.
 *
 * The copies of one (layer, buffer) are planned by copy_lb: a run of
 * physically consecutive full pages is one copy, a partly filled page one
 * strided copy of only its tokens per head.  A fresh 100K-token capture
 * from a pool that handed out consecutive pages is therefore one copy per
 * (layer, buffer): 4 x layers copies per stage, each tens of MiB, which is
 * what a PCIe copy engine needs to run at its limit. */
#include "park/park.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/arena.h"
#include "engine/backend.h"
#include "engine/engine_internal.h"
#include "park/hostmem.h"
#include "park/park_internal.h"
#include "park/persist.h"
#include "engine/generate.h"

int park_fail_stage = -1;
int park_arena_on_cpu = 0;


/* The calling thread's copier for a stage's pool (engine/backend.h). */
static int get_copier(const strata_engine *e, int stage, backend_copier *c, strata_error *err)
{
    return e->be->copier(e, stage, c, err);
}

/* ---- planning the copies of one (layer, buffer) ------------------------------ */

/* One side of a copy: a sequence's pages in a pool, or a span of an image
 * (the bytes of tokens [lt0, lt1) of one stage, layout in park.h). */
typedef struct side {
    const kv_pool *pool;     /* page side when non-NULL */
    const int32_t *pages;
    char *lin;               /* span side: the stage's bytes of the span */
    int32_t lt0, lt1;
} side;

static size_t row_bytes(const kv_pool *pool, int b)
{
    return kv_page_buf_bytes(pool, b) / ((size_t)pool->n_kv_head * KV_PAGE);
}

/* Per head, the bytes of one token across all (layer, buffer) pairs that
 * come before (l, b) in the span layout. */
static size_t row_bytes_before(const kv_pool *pool, int l, int b)
{
    size_t per_layer = 0, s = 0;
    for (int i = 0; i < 4; i++)
        per_layer += row_bytes(pool, i);
    for (int i = 0; i < b; i++)
        s += row_bytes(pool, i);
    return (size_t)l * per_layer + s;
}

/* Address of token p0 + a (in page k = p0 / KV_PAGE) of head 0, and the
 * distance between heads. */
static char *side_addr(const side *sd, const kv_pool *shape, int l, int b, int32_t k, int32_t a,
                       size_t *pitch)
{
    size_t row = row_bytes(shape, b);
    if (sd->pool) {
        *pitch = (size_t)KV_PAGE * row;
        return (char *)kv_page_ptr(sd->pool, l, b, sd->pages[k]) + (size_t)a * row;
    }
    int32_t p0 = k * KV_PAGE;
    int32_t s0 = sd->lt0 > p0 ? sd->lt0 : p0;                         /* stored from */
    int32_t s1 = sd->lt1 < p0 + KV_PAGE ? sd->lt1 : p0 + KV_PAGE;     /* stored to */
    size_t H = (size_t)shape->n_kv_head;
    size_t span = (size_t)(sd->lt1 - sd->lt0);
    *pitch = (size_t)(s1 - s0) * row;
    return sd->lin + span * H * row_bytes_before(shape, l, b) + (size_t)(s0 - sd->lt0) * H * row +
           (size_t)(p0 + a - s0) * row;
}

/* Are pages k..k+m of this side one run of consecutive memory? */
static int side_consecutive(const side *sd, int32_t k, int m)
{
    return !sd->pool || sd->pages[k + m] == sd->pages[k] + m;
}

/* Copy tokens [t0, t1) of layer l, buffer b from src to dst. */
static int copy_lb(const backend_copier *c, const side *dst, const side *src, const kv_pool *shape,
                   int l, int b, int32_t t0, int32_t t1, uint64_t *bytes, strata_error *err)
{
    size_t row = row_bytes(shape, b), H = (size_t)shape->n_kv_head;
    if (!row)
        return 0;   /* f16 pools have no scale buffers */
    int32_t k = t0 / KV_PAGE;
    while ((int64_t)k * KV_PAGE < t1) {
        int32_t p0 = k * KV_PAGE;
        int32_t a = (t0 > p0 ? t0 : p0) - p0, z = (t1 < p0 + KV_PAGE ? t1 : p0 + KV_PAGE) - p0;
        size_t dp, sp;
        char *d = side_addr(dst, shape, l, b, k, a, &dp);
        char *s = side_addr(src, shape, l, b, k, a, &sp);
        int rc;
        if (a == 0 && z == KV_PAGE) {
            /* whole pages: one copy for the run of them both sides store
             * back to back */
            int m = 1;
            while ((int64_t)(k + m + 1) * KV_PAGE <= t1 && side_consecutive(dst, k, m) &&
                   side_consecutive(src, k, m))
                m++;
            size_t n = (size_t)m * H * KV_PAGE * row;
            rc = c->copy2d(c->ctx, d, n, s, n, n, 1, err);
            *bytes += n;
            k += m;
        } else {
            /* a partly filled page: only its tokens, head by head */
            rc = c->copy2d(c->ctx, d, dp, s, sp, (size_t)(z - a) * row, H, err);
            *bytes += (size_t)(z - a) * row * H;
            k++;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Copy tokens [t0, t1) of every layer and buffer of one stage. */
static int copy_stage(const backend_copier *c, const side *dst, const side *src,
                      const kv_pool *shape, int32_t t0, int32_t t1, uint64_t *bytes,
                      strata_error *err)
{
    for (int l = 0; l < shape->n_layer; l++)
        for (int b = 0; b < 4; b++) {
            int rc = copy_lb(c, dst, src, shape, l, b, t0, t1, bytes, err);
            if (rc)
                return rc;
        }
    return 0;
}

static int injected(int stage, strata_error *err)
{
    if (stage != park_fail_stage)
        return 0;
    return strata_err(err, STRATA_E_DEVICE, "injected failure (park_fail_stage = %d)", stage);
}

/* ---- sequences: pages and history --------------------------------------------- */

/* Forget s's history and return every page, also pages reserved beyond its
 * length (strata_seq_reset stops at the length, so pages a failed copy had
 * reserved would stay taken). */
static void seq_drop(strata_seq *s)
{
    s->n_tokens = 0;
    for (int i = 0; i < s->e->n_stages; i++)
        kv_seq_truncate(&s->kv[i], s->e->stages[i].kv, 0);
}

/* Reserve the pages of n tokens on every stage (s is empty). */
static int seq_take_pages(strata_seq *s, int n, strata_error *err)
{
    strata_engine *e = s->e;
    if (n > e->n_ctx)
        return strata_err(err, STRATA_E_LIMIT, "a conversation of %d tokens does not fit the "
                          "context of %d", n, e->n_ctx);
    for (int i = 0; i < e->n_stages; i++) {
        int rc = kv_seq_reserve(&s->kv[i], e->stages[i].kv, n, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* After the K/V of tokens[0..n) is in s's pages: make it s's history. */
static int seq_set_history(strata_seq *s, const int32_t *tokens, int n, strata_error *err)
{
    if (n > s->cap) {
        int32_t *t = realloc(s->tokens, (size_t)n * sizeof *t);
        if (!t)
            return strata_err(err, STRATA_E_NOMEM, "out of memory for the token history");
        s->tokens = t;
        s->cap = n;
    }
    if (s->tokens != tokens)
        memmove(s->tokens, tokens, (size_t)n * sizeof *tokens);
    s->n_tokens = n;
    return s->e->be->seq_sync(s->e, s, err);
}

/* ---- life cycle ------------------------------------------------------------------ */

size_t park_token_bytes(const strata_park *p, int stage)
{
    return kv_page_bytes(p->e->stages[stage].kv) / KV_PAGE;
}

/* ---- the cache's memory ------------------------------------------------------ */

static void staging_free(strata_park *p, void *buf);

static void *arena_part_alloc(size_t bytes, void *ctx)
{
    return arena_alloc(ctx, bytes);
}

static void arena_part_free(void *ptr, void *ctx)
{
    /* -1 would be a part the cache never got from this arena: a bug in
     * the cache, and nothing to undo here */
    (void)arena_free(ctx, ptr);
}

/* The block for the arena: pinned on CUDA (once: engine/cuda/copy_cuda.c
 * says why), page-aligned host memory under the CPU test hook. */
static int block_take(strata_park *p, size_t bytes, strata_error *err)
{
    return p->e->be->host_block(bytes, &p->block, err);
}

/* Per-part allocation from the backend's host memory (the fallback when
 * the block cannot be had).  When even a part cannot be pinned the part
 * comes from malloc, pageable (its copies run at a fraction of the pinned
 * rate, but correctly: doc/convcache.md, "Pinning failures"), with one
 * warning.  A 64-byte tag before the part says which, for the free. */
#define PART_TAG 64
static void *host_part_alloc(size_t bytes, void *ctx)
{
    strata_park *p = ctx;
    char *b = p->e->be->host_alloc(bytes + PART_TAG);
    int pinned = b != NULL;
    if (!b)
        b = malloc(bytes + PART_TAG);
    if (!b)
        return NULL;
    if (!pinned && !p->pageable_warned) {
        char why[256];
        park_memlock_note(why, sizeof why);
        fprintf(stderr, "strata: warning: conversation cache: cannot pin %zu bytes (%s); using "
                        "pageable memory for the parts that cannot be pinned (slower copies)\n",
                bytes, why);
        p->pageable_warned = 1;
    }
    b[0] = (char)pinned;
    return b + PART_TAG;
}

static void host_part_free(void *ptr, void *ctx)
{
    strata_park *p = ctx;
    char *b = (char *)ptr - PART_TAG;
    if (b[0])
        p->e->be->host_free(b);
    else
        free(b);
}

/* Where the cache's parts come from: the arena over one block of the whole
 * byte budget (CUDA, or the CPU test hook), else per part (pinned on CUDA,
 * malloc on the CPU).  The arena is exactly the budget: convcache evicts
 * and retries when it is fragmented (doc/convcache.md, "Memory"). */
static convcache_allocator cache_allocator(strata_park *p, size_t bytes)
{
    convcache_allocator al = {NULL, NULL, NULL};   /* malloc */
    int on_cuda = p->e->be->pins_host;
    if (on_cuda)
        al = (convcache_allocator){host_part_alloc, host_part_free, p};
    if (!on_cuda && !park_arena_on_cpu)
        return al;
    strata_error why = {0};
    if (block_take(p, bytes, &why) == 0) {
        if (arena_init(&p->block_arena, p->block, bytes) == 0)
            return (convcache_allocator){arena_part_alloc, arena_part_free, &p->block_arena};
        staging_free(p, p->block);
        p->block = NULL;
        strata_err(&why, STRATA_E_NOMEM, "the arena's bookkeeping: out of memory");
    }
    /* A warning, not an info line, so printed even when quiet: every
     * capture will be slower, and the bench must not be read without it. */
    char lim[256] = "";
    if (on_cuda)
        park_memlock_note(lim, sizeof lim);
    fprintf(stderr, "strata: conversation cache: cannot take one block of %zu MiB (%s%s%s); "
                    "allocating%s each capture's parts instead\n", bytes >> 20, why.msg,
            on_cuda ? "; " : "", lim, on_cuda ? " and pinning" : "");
    return al;
}

/* Checksums of the parts (written at capture, verified at restore): in
 * debug builds (make DEBUG=1, make asan) and with STRATA_PARK_VERIFY=1,
 * not by default.  Hashing every byte on the host made an H200 capture
 * 6.5x the PCIe copy's floor; without it the capture runs at 1.02x
 * (doc/convcache.md, "Checksums"). */
static int verify_default(void)
{
#ifdef STRATA_DEBUG
    return 1;
#else
    const char *v = getenv("STRATA_PARK_VERIFY");
    return v && *v && strcmp(v, "0") != 0;
#endif
}

static int warm_body(int stage, void *ctx)
{
    backend_copier c;
    return get_copier(ctx, stage, &c, stagepool_stage_error());
}

/* Each stage pool worker makes its copy state now (on CUDA a stream of its
 * own on its stage's card), so the first capture does not pay for it. */
static int warm_workers(strata_park *p, strata_error *err)
{
    if (!p->e->pool)
        return 0;
    return stagepool_run(p->e->pool, warm_body, p->e, err);
}

strata_park *park_new(strata_engine *e, size_t cache_mib, int cache_slots, strata_error *err)
{
    if (!cache_mib || cache_slots <= 0) {
        strata_err(err, STRATA_E_ARG, "conversation cache: %zu MiB and %d slots (both must be "
                   "> 0)", cache_mib, cache_slots);
        return NULL;
    }
    strata_park *p = calloc(1, sizeof *p);
    if (p) {
        p->e = e;   /* before any park_free below: it reads e->n_stages */
        p->stage_buf = calloc((size_t)e->n_stages, sizeof *p->stage_buf);
        p->stage_cap = calloc((size_t)e->n_stages, sizeof *p->stage_cap);
    }
    if (!p || !p->stage_buf || !p->stage_cap) {
        park_free(p);
        strata_err(err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    p->e = e;
    p->verify = verify_default();
    convcache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_stages = e->n_stages;
    cfg.max_bytes = cache_mib << 20;
    cfg.max_images = cache_slots;
    cfg.skip_checksums = !p->verify;
    cfg.format = e->p.kv_type; /* the images' bytes: k8v4r's are rotated */
    /* pinned on CUDA: pageable memory copies at 8-14 GB/s against 55 GB/s
     * pinned (doc/BENCHMARKS.md, "Reference figures") */
    cfg.allocator = cache_allocator(p, cfg.max_bytes);
    p->cache = convcache_new(&cfg, err);
    if (!p->cache || warm_workers(p, err)) {
        park_free(p);
        return NULL;
    }
    return p;
}

static void staging_free(strata_park *p, void *buf)
{
    p->e->be->host_free(buf);
}

void park_free(strata_park *p)
{
    if (!p)
        return;
    persist_free(p->persist);   /* writes what is queued, unpins */
    convcache_free(p->cache);   /* gives every part back to the arena */
    if (p->block) {
        arena_fini(&p->block_arena);
        staging_free(p, p->block);
    }
    for (int i = 0; p->stage_buf && i < p->e->n_stages; i++)
        if (p->stage_buf[i])
            staging_free(p, p->stage_buf[i]);
    free(p->stage_buf);
    free(p->stage_cap);
    /* serial runs made copy state on this thread; the workers' goes when
     * they exit */
    p->e->be->thread_fini();
    free(p);
}

int park_set_verify(strata_park *p, int on, strata_error *err)
{
    int rc = convcache_set_checksums(p->cache, on, err);
    if (!rc)
        p->verify = on;
    return rc;
}
convcache *park_cache(strata_park *p) { return p->cache; }
arena *park_arena(strata_park *p) { return p->block ? &p->block_arena : NULL; }
void park_get_stats(const strata_park *p, park_stats *st)
{
    *st = p->st;
    if (p->persist)
        persist_get_stats(p->persist, &st->persist);
}

void park_set_observer(strata_park *p, park_observer fn, void *user)
{
    p->observe = fn;
    p->observe_user = user;
}

/* Tell the observer about an operation that began at t0. */
static void observed(strata_park *p, int op, int kind, int flags, int tokens, int n_tokens,
                     const uint64_t *bytes, double t0)
{
    if (!p->observe)
        return;
    park_event ev = {op, kind, flags, tokens, n_tokens, 0, strata_now() - t0};
    for (int i = 0; i < p->e->n_stages; i++)
        ev.bytes += bytes[i];
    p->observe(&ev, p->observe_user);
}

/* ---- capture ----------------------------------------------------------------- */

typedef struct capture_job {
    strata_park *p;
    strata_seq *s;
    convcache_capture *cap;
    int32_t t0, t1;
    uint64_t bytes[STAGEPOOL_MAX_STAGES];
} capture_job;

static int capture_body(int stage, void *ctx)
{
    capture_job *j = ctx;
    strata_error *err = stagepool_stage_error();
    const kv_pool *pool = j->p->e->stages[stage].kv;
    backend_copier c;
    int rc = get_copier(j->p->e, stage, &c, err);
    if (rc)
        return rc;
    side src = {pool, j->s->kv[stage].pages, NULL, 0, 0};
    side dst = {NULL, NULL, convcache_capture_part(j->cap, stage), j->t0, j->t1};
    rc = copy_stage(&c, &dst, &src, pool, j->t0, j->t1, &j->bytes[stage], err);
    /* sync even after a failed issue: nothing may still write the part
     * when the capture is aborted */
    int rs = c.sync(c.ctx, rc ? NULL : err);
    rc = rc ? rc : rs;
    rc = rc ? rc : injected(stage, err);
    if (!rc)
        convcache_capture_seal(j->cap, stage);
    return rc;
}

int park_capture(strata_park *p, strata_seq *s, int32_t pending, int flags, int *kind,
                 strata_error *err)
{
    strata_engine *e = p->e;
    if (s->e != e)
        return strata_err(err, STRATA_E_ARG, "park_capture: the sequence belongs to another engine");
    int n = s->n_tokens;
    if (n <= 0)
        return strata_err(err, STRATA_E_ARG, "park_capture: the conversation is empty");
    persist_reap(p->persist);
    double t0 = strata_now();
    convcache_image *prefix = NULL;
    int have = convcache_find(p->cache, s->tokens, n, &prefix);
    if (have == n) {
        if (kind)
            *kind = PARK_CAPTURE_CACHED;
        p->st.captures[PARK_CAPTURE_CACHED]++;
        return 0;
    }
    size_t new_bytes[STAGEPOOL_MAX_STAGES], need = 0;
    for (int i = 0; i < e->n_stages; i++) {
        new_bytes[i] = (size_t)(n - have) * park_token_bytes(p, i);
        need += new_bytes[i];
    }
    if (!(flags & PARK_CAPTURE_DRY)) {
        int rf = park_floor_room(p, need, have ? prefix : NULL, err);
        if (rf)
            return rf;
    }
    capture_job *j = calloc(1, sizeof *j);
    if (!j)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    *j = (capture_job){.p = p, .s = s, .t0 = have, .t1 = n};
    int rc = convcache_begin(p->cache, s->tokens, n, n, have ? prefix : NULL, new_bytes, &j->cap,
                             err);
    if (!rc) {
        convcache_capture_set_pending(j->cap, pending);
        rc = stagepool_for_each(e->pool, e->n_stages, capture_body, j, err);
    }
    if (!rc) {
        for (int i = 0; i < e->n_stages; i++)
            p->st.bytes_d2h += j->bytes[i];
    }
    if (j->cap) {
        convcache_image *img = NULL;
        if (rc || (flags & PARK_CAPTURE_DRY))
            convcache_abort(p->cache, j->cap);
        else
            rc = convcache_commit(p->cache, j->cap, &img, err);
        if (!rc && img && p->persist)
            persist_enqueue(p->persist, img, have);
    }
    if (!rc) {
        int k = have ? PARK_CAPTURE_REUSED : PARK_CAPTURE_FRESH;
        if (kind)
            *kind = k;
        p->st.captures[k]++;
        observed(p, PARK_OP_CAPTURE, k, flags, n - have, n, j->bytes, t0);
    }
    free(j);
    return rc;
}

/* ---- restore ------------------------------------------------------------------ */

typedef struct restore_job {
    strata_park *p;
    strata_seq *s;
    const convcache_image *img;
    int32_t n;               /* restore tokens [0, n) */
    uint64_t bytes[STAGEPOOL_MAX_STAGES];
} restore_job;

static int restore_body(int stage, void *ctx)
{
    restore_job *j = ctx;
    strata_error *err = stagepool_stage_error();
    const kv_pool *pool = j->p->e->stages[stage].kv;
    if (j->p->verify) {
        int rc = convcache_verify(j->img, stage, err);
        if (rc)
            return rc;
    }
    backend_copier c;
    int rc = get_copier(j->p->e, stage, &c, err);
    if (rc)
        return rc;
    side dst = {pool, j->s->kv[stage].pages, NULL, 0, 0};
    int n_spans = convcache_image_n_spans(j->img);
    for (int i = 0; i < n_spans && !rc; i++) {
        convcache_span sp;
        rc = convcache_image_span(j->img, stage, i, &sp, err);
        if (rc || sp.t0 >= j->n)
            break;
        side src = {NULL, NULL, (char *)sp.data, sp.t0, sp.t1};
        rc = copy_stage(&c, &dst, &src, pool, sp.t0, sp.t1 < j->n ? sp.t1 : j->n,
                        &j->bytes[stage], err);
    }
    int rs = c.sync(c.ctx, rc ? NULL : err);
    rc = rc ? rc : rs;
    return rc ? rc : injected(stage, err);
}

int park_restore(strata_park *p, strata_seq *s, const int32_t *tokens, int n, int *restored,
                 strata_error *err)
{
    strata_engine *e = p->e;
    *restored = 0;
    if (s->e != e)
        return strata_err(err, STRATA_E_ARG, "park_restore: the sequence belongs to another engine");
    if (n <= 0)
        return 0;
    persist_reap(p->persist);
    double t0 = strata_now();
    /* what s already holds of tokens: its common prefix with them */
    int cur = 0, lim = s->n_tokens < n - 1 ? s->n_tokens : n - 1;
    while (cur < lim && s->tokens[cur] == tokens[cur])
        cur++;
    convcache_image *img = NULL;
    int have = p->partial ? convcache_find_common(p->cache, tokens, n, &img)
                          : convcache_find(p->cache, tokens, n, &img);
    int use = have < n - 1 ? have : n - 1;
    if (use <= cur) {
        strata_seq_truncate(s, cur);
        *restored = cur;
        return 0;
    }
    if (use > 0 && convcache_image_format(img) != e->p.kv_type)
        return strata_err(err, STRATA_E_ARG, "park_restore: the image holds KV of type %s, the "
                          "engine's is %s", strata_kv_name(convcache_image_format(img)),
                          strata_kv_name(e->p.kv_type));
    seq_drop(s);
    if (use <= 0)
        return 0;
    restore_job *j = calloc(1, sizeof *j);
    if (!j)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    *j = (restore_job){.p = p, .s = s, .img = img, .n = use};
    convcache_pin(img);
    int rc = seq_take_pages(s, use, err);
    if (!rc)
        rc = stagepool_for_each(e->pool, e->n_stages, restore_body, j, err);
    if (!rc)
        rc = seq_set_history(s, tokens, use, err);
    convcache_unpin(img);
    if (!rc) {
        for (int i = 0; i < e->n_stages; i++)
            p->st.bytes_h2d += j->bytes[i];
        p->st.restores++;
        *restored = use;
        observed(p, PARK_OP_RESTORE, 0, 0, use, use, j->bytes, t0);
    } else {
        seq_drop(s);
    }
    free(j);
    return rc;
}

/* ---- the slot shuttle ------------------------------------------------------------- */

typedef struct shuttle_job {
    strata_park *p;
    strata_seq *from, *to;
    int via_host;
    int32_t n;
    uint64_t bytes[STAGEPOOL_MAX_STAGES];
} shuttle_job;

static int shuttle_body(int stage, void *ctx)
{
    shuttle_job *j = ctx;
    strata_error *err = stagepool_stage_error();
    strata_engine *ef = j->from->e, *et = j->to->e;
    const kv_pool *pf = ef->stages[stage].kv, *pt = et->stages[stage].kv;
    side src = {pf, j->from->kv[stage].pages, NULL, 0, 0};
    side dst = {pt, j->to->kv[stage].pages, NULL, 0, 0};
    backend_copier c;
    int rc = get_copier(ef, stage, &c, err);
    if (rc)
        return rc;
    if (!j->via_host) {
        /* both sides in this stage's pool on its card: a device-to-device
         * copy, whole runs of pages at a time */
        rc = copy_stage(&c, &dst, &src, pf, 0, j->n, &j->bytes[stage], err);
        int rs = c.sync(c.ctx, rc ? NULL : err);
        rc = rc ? rc : rs;
        return rc ? rc : injected(stage, err);
    }
    /* the host round trip: the whole conversation of this stage down into
     * its pinned staging buffer, then up into the other card */
    side host = {NULL, NULL, j->p->stage_buf[stage], 0, j->n};
    rc = copy_stage(&c, &host, &src, pf, 0, j->n, &j->bytes[stage], err);
    int rs = c.sync(c.ctx, rc ? NULL : err);
    rc = rc ? rc : rs;
    if (!rc)
        rc = get_copier(et, stage, &c, err);
    if (!rc) {
        rc = copy_stage(&c, &dst, &host, pt, 0, j->n, &j->bytes[stage], err);
        rs = c.sync(c.ctx, rc ? NULL : err);
        rc = rc ? rc : rs;
    }
    return rc ? rc : injected(stage, err);
}

/* Can the K/V of a's stages be copied page for page into b's? */
static int same_shape(const strata_engine *a, const strata_engine *b, strata_error *err)
{
    if (a->n_stages != b->n_stages)
        return strata_err(err, STRATA_E_ARG, "shuttle: %d stages on one side, %d on the other",
                          a->n_stages, b->n_stages);
    if (a->p.kv_type != b->p.kv_type) /* k8v4 and k8v4r pools have the same shape */
        return strata_err(err, STRATA_E_ARG, "shuttle: KV type %s on one side, %s on the other",
                          strata_kv_name(a->p.kv_type), strata_kv_name(b->p.kv_type));
    for (int i = 0; i < a->n_stages; i++) {
        const kv_pool *x = a->stages[i].kv, *y = b->stages[i].kv;
        if (x->type != y->type || x->n_layer != y->n_layer || x->n_kv_head != y->n_kv_head ||
            x->head_dim != y->head_dim)
            return strata_err(err, STRATA_E_ARG, "shuttle: stage %d's KV differs between the "
                              "engines (type %d/%d, layers %d/%d, kv heads %d/%d, head dim %d/%d)",
                              i, x->type, y->type, x->n_layer, y->n_layer, x->n_kv_head,
                              y->n_kv_head, x->head_dim, y->head_dim);
    }
    return 0;
}

static int staging_reserve(strata_park *p, int n, strata_error *err)
{
    for (int i = 0; i < p->e->n_stages; i++) {
        size_t need = (size_t)n * park_token_bytes(p, i);
        if (need <= p->stage_cap[i])
            continue;
        if (p->stage_buf[i])
            staging_free(p, p->stage_buf[i]);
        p->stage_buf[i] = NULL;
        p->stage_cap[i] = 0;
        p->stage_buf[i] = p->e->be->host_alloc(need);
        if (!p->stage_buf[i])
            return strata_err(err, STRATA_E_NOMEM, "shuttle: cannot allocate %zu bytes of "
                              "staging for stage %d", need, i);
        p->stage_cap[i] = need;
    }
    return 0;
}

int park_shuttle(strata_park *p, strata_seq *from, strata_seq *to, int flags, strata_error *err)
{
    strata_engine *e = p->e;
    if (from == to)
        return strata_err(err, STRATA_E_ARG, "shuttle: a sequence onto itself");
    if (from->e != e)
        return strata_err(err, STRATA_E_ARG, "shuttle: the source belongs to another engine");
    int via_host = (flags & PARK_SHUTTLE_VIA_HOST) || to->e != e;
    int rc = to->e != e ? same_shape(e, to->e, err) : 0;
    if (rc)
        return rc;
    int n = from->n_tokens;
    double t0 = strata_now();
    seq_drop(to);
    if (n == 0)
        goto done;
    shuttle_job *j = calloc(1, sizeof *j);
    if (!j)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    *j = (shuttle_job){.p = p, .from = from, .to = to, .via_host = via_host, .n = n};
    rc = seq_take_pages(to, n, err);
    if (!rc && via_host)
        rc = staging_reserve(p, n, err);
    if (!rc)
        rc = stagepool_for_each(e->pool, e->n_stages, shuttle_body, j, err);
    if (!rc)
        rc = seq_set_history(to, from->tokens, n, err);
    if (!rc) {
        for (int i = 0; i < e->n_stages; i++) {
            if (via_host) {
                p->st.bytes_d2h += j->bytes[i] / 2;
                p->st.bytes_h2d += j->bytes[i] / 2;
            } else {
                p->st.bytes_d2d += j->bytes[i];
            }
        }
        /* the copy itself: the source's pages go back below, after it */
        observed(p, PARK_OP_SHUTTLE, 0, flags, n, n, j->bytes, t0);
    }
    free(j);
    if (rc) {
        seq_drop(to);
        return rc;
    }
done:
    if (via_host)
        p->st.shuttles_host++;
    else
        p->st.shuttles_d2d++;
    if (!(flags & PARK_SHUTTLE_KEEP))
        seq_drop(from);
    return 0;
}
