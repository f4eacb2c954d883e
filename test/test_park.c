/* test_park.c: capture, restore and the slot shuttle (park/park.c) on the
 * CPU backend with a four-stage layer split of a small generated llama.
 *
 * Judges: a plain token-by-token reading of the KV pools (the image layout
 * of park.h written out the slow way, and the seq's K/V row by row), and
 * the engine itself: greedy tokens after parking must be those of never
 * having parked; serial and parallel stage bodies must give the same bytes. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/arena.h"
#include "cache/convcache.h"
#include "engine/engine_internal.h"
#include "park/park.h"
#include "test_park.h"
#include "kernels/ops.h"
#include "model/quant.h"

#define N_VOCAB 400

static const char *park_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("park-llama", N_VOCAB, 7);
    return path;
}

static strata_engine *open_engine_kv(const char *split, int kv_resident, int kv_type)
{
    strata_params p = test_params(park_model(), STRATA_BACKEND_CPU);
    p.kv_type = kv_type;
    p.n_ctx = 4096;
    p.n_slots = 2;
    p.kv_resident = kv_resident;
    p.n_chunk = 64;
    p.n_threads = 1;
    p.layer_split = split;
    return test_open(&p);
}

/* The default KV type (k8v4r2 on these models); the image-type cases pass the others
 * themselves. */
static strata_engine *open_engine(const char *split, int kv_resident)
{
    return open_engine_kv(split, kv_resident, STRATA_KV_DEFAULT);
}

static strata_park *open_park(strata_engine *e, size_t mib, int slots)
{
    strata_error err = {0};
    strata_park *p = park_new(e, mib, slots, &err);
    ck_assert_msg(p != NULL, "park_new: %s", err.msg);
    ck_assert_int_eq(park_set_verify(p, 1, NULL), 0);
    return p;
}

/* With the arena (on), every live cache byte is carved from the park's one
 * block: the arena's used bytes (parts rounded up to 64) cover the
 * cache's, and its bookkeeping holds.  Off: no arena at all. */
static void assert_arena_holds_cache(strata_park *pk, int on)
{
    arena *a = park_arena(pk);
    if (!on) {
        ck_assert_ptr_null(a);
        return;
    }
    ck_assert_ptr_nonnull(a);
    convcache_stats cs;
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_uint_ge(arena_used(a), cs.bytes_used);
    ck_assert_uint_le(arena_used(a), cs.bytes_used + 64 * 4 * 64); /* < 64 per part */
    ck_assert_uint_eq(a->bytes, cs.bytes_max);
    const char *why = NULL;
    ck_assert_msg(arena_check(a, &why) == 0, "%s", why);
}

static void rand_tokens(int32_t *t, int n, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++)
        t[i] = 3 + (int32_t)(test_rand_u64(&s) % (N_VOCAB - 3));
}

static strata_seq *new_seq(strata_engine *e)
{
    strata_error err = {0};
    strata_seq *s = strata_seq_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.msg);
    return s;
}

static void feed(strata_seq *s, const int32_t *t, int n, float *logits)
{
    strata_error err = {0};
    int rc = strata_seq_feed(s, t, n, logits, NULL, &err);
    ck_assert_msg(rc == 0, "feed: %s", err.msg);
}

/* n greedy tokens after logits; out receives them. */
static void greedy(strata_seq *s, float *logits, int n, int32_t *out)
{
    strata_error err = {0};
    for (int i = 0; i < n; i++) {
        out[i] = cpu_argmax(logits, N_VOCAB);
        int rc = strata_seq_decode(s, out[i], logits, &err);
        ck_assert_msg(rc == 0, "decode: %s", err.msg);
    }
}

/* ---- plain readers of the pools (test_park.h) -------------------------------- */

static size_t rowb(const kv_pool *p, int b)
{
    return kv_page_buf_bytes(p, b) / ((size_t)p->n_kv_head * KV_PAGE);
}

static const char *tok_row(const kv_pool *p, const int32_t *pages, int l, int b, int h, int t)
{
    return (const char *)kv_page_ptr(p, l, b, pages[t / KV_PAGE]) +
           ((size_t)h * KV_PAGE + t % KV_PAGE) * rowb(p, b);
}

char *park_ref_span(const kv_pool *p, const int32_t *pages, int t0, int t1, size_t *bytes)
{
    size_t per_tok = kv_page_bytes(p) / KV_PAGE;
    char *out = malloc(per_tok * (size_t)(t1 - t0) + 1), *w = out;
    for (int l = 0; l < p->n_layer; l++)
        for (int b = 0; b < 4; b++) {
            size_t r = rowb(p, b);
            if (!r)
                continue;
            for (int k = t0 / KV_PAGE; k * KV_PAGE < t1; k++) {
                int a = t0 > k * KV_PAGE ? t0 : k * KV_PAGE;
                int z = t1 < (k + 1) * KV_PAGE ? t1 : (k + 1) * KV_PAGE;
                for (int h = 0; h < p->n_kv_head; h++)
                    for (int t = a; t < z; t++, w += r)
                        memcpy(w, tok_row(p, pages, l, b, h, t), r);
            }
        }
    *bytes = (size_t)(w - out);
    return out;
}

char *park_dump_stage(const kv_pool *p, const int32_t *pages, int n, size_t *bytes)
{
    char *out = malloc(kv_page_bytes(p) / KV_PAGE * (size_t)n + 1), *w = out;
    for (int l = 0; l < p->n_layer; l++)
        for (int b = 0; b < 4; b++) {
            size_t r = rowb(p, b);
            if (!r)
                continue; /* f16 pools have no scale buffers (NULL) */
            for (int h = 0; h < p->n_kv_head; h++)
                for (int t = 0; t < n; t++) {
                    memcpy(w, tok_row(p, pages, l, b, h, t), r);
                    w += r;
                }
        }
    *bytes = (size_t)(w - out);
    return out;
}

static void reader_release(const park_pool_reader *rd, kv_pool *p)
{
    if (rd->release)
        rd->release(p);
}

void park_assert_span_matches(const park_pool_reader *rd, strata_park *pk, const strata_seq *s,
                              int t0)
{
    convcache_image *img = NULL;
    int n = s->n_tokens;
    ck_assert_int_eq(convcache_find(park_cache(pk), s->tokens, n, &img), n);
    strata_error err = {0};
    ck_assert_msg(convcache_verify(img, -1, &err) == 0, "%s", err.msg);
    int last = convcache_image_n_spans(img) - 1;
    for (int i = 0; i < s->e->n_stages; i++) {
        convcache_span sp;
        ck_assert_int_eq(convcache_image_span(img, i, last, &sp, &err), 0);
        ck_assert_int_eq(sp.t0, t0);
        ck_assert_int_eq(sp.t1, n);
        kv_pool *p = rd->get(s->e, i);
        size_t nb;
        char *ref = park_ref_span(p, s->kv[i].pages, t0, n, &nb);
        reader_release(rd, p);
        ck_assert_uint_eq(sp.bytes, nb);
        ck_assert_msg(!memcmp(sp.data, ref, nb), "stage %d: span [%d, %d) differs", i, t0, n);
        free(ref);
    }
}

void park_assert_same_kv(const park_pool_reader *rd, const strata_seq *a, const strata_seq *b,
                         int n)
{
    for (int i = 0; i < a->e->n_stages; i++) {
        kv_pool *p = rd->get(a->e, i);
        size_t na, nb;
        char *x = park_dump_stage(p, a->kv[i].pages, n, &na);
        char *y = park_dump_stage(p, b->kv[i].pages, n, &nb);
        reader_release(rd, p);
        ck_assert_uint_eq(na, nb);
        ck_assert_msg(!memcmp(x, y, na), "stage %d: K/V differs", i);
        free(x);
        free(y);
    }
}

static kv_pool *host_pool(const strata_engine *e, int stage)
{
    return e->stages[stage].kv;   /* CPU backend: the pool is host memory */
}

static const park_pool_reader HOST = {host_pool, NULL};

static void assert_same_kv(const strata_seq *a, const strata_seq *b, int n)
{
    park_assert_same_kv(&HOST, a, b, n);
}

static void assert_span_matches(strata_park *pk, const strata_seq *s, int t0)
{
    park_assert_span_matches(&HOST, pk, s, t0);
}

static void capture(strata_park *pk, strata_seq *s, int want_kind)
{
    strata_error err = {0};
    int kind = -1;
    int rc = park_capture(pk, s, -1, 0, &kind, &err);
    ck_assert_msg(rc == 0, "capture: %s", err.msg);
    ck_assert_int_eq(kind, want_kind);
}

/* ---- round trip ------------------------------------------------------------ */

START_TEST(park_roundtrip_fresh_and_reused)
{
    park_arena_on_cpu = _i; /* 1: the cache in one block, as on CUDA */
    strata_engine *e = open_engine("1,2,3", 4096);
    strata_park *pk = open_park(e, 64, 16);
    int32_t t[1100];
    rand_tokens(t, 1100, 1);
    strata_seq *a = new_seq(e), *c = new_seq(e), *b = new_seq(e);
    /* interleave a and c so a's pages are not consecutive: [0,1] then 4 */
    feed(a, t, 300, NULL);
    feed(c, t + 700, 300, NULL);
    feed(a, t + 300, 400, NULL);
    ck_assert_int_eq(a->kv[0].n_pages, 3);
    ck_assert_int_ne(a->kv[0].pages[2], a->kv[0].pages[1] + 1);

    /* fresh: a capture of c (one partial last page) and of a's first turn */
    capture(pk, c, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, c, 0);
    strata_seq_truncate(a, 300);
    capture(pk, a, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, a, 0);
    /* reused: the second turn copies only [300, 700) (starts mid-page) */
    feed(a, t + 300, 400, NULL);
    capture(pk, a, PARK_CAPTURE_REUSED);
    assert_span_matches(pk, a, 300);
    capture(pk, a, PARK_CAPTURE_CACHED);
    convcache_stats cs;
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_int_eq(cs.images, 3);
    size_t tb = 0;
    for (int i = 0; i < e->n_stages; i++)
        tb += park_token_bytes(pk, i);
    ck_assert_uint_eq(cs.bytes_used, tb * (300 + 300 + 400));

    /* restore a's 700 tokens into b: the same K/V on every stage */
    strata_error err = {0};
    int got = -1;
    ck_assert_int_eq(park_restore(pk, b, t, 701, &got, &err), 0);
    ck_assert_int_eq(got, 700);
    ck_assert_int_eq(strata_seq_len(b), 700);
    ck_assert(!memcmp(strata_seq_tokens(b), t, 700 * sizeof *t));
    assert_same_kv(a, b, 700);
    /* the exact image: all but the last token, which the caller feeds */
    strata_seq *d = new_seq(e);
    ck_assert_int_eq(park_restore(pk, d, t, 700, &got, &err), 0);
    ck_assert_int_eq(got, 699);
    assert_same_kv(a, d, 699);
    /* b already holds more than any image of this shorter query: kept */
    ck_assert_int_eq(park_restore(pk, b, t, 650, &got, &err), 0);
    ck_assert_int_eq(got, 649);
    /* a miss */
    int32_t other[10];
    rand_tokens(other, 10, 99);
    other[0] = t[0] == 3 ? 4 : 3;
    ck_assert_int_eq(park_restore(pk, d, other, 10, &got, &err), 0);
    ck_assert_int_eq(got, 0);
    ck_assert_int_eq(strata_seq_len(d), 0);
    ck_assert_int_eq(convcache_check(park_cache(pk), &err), 0);
    assert_arena_holds_cache(pk, _i);

    strata_seq_free(a);
    strata_seq_free(b);
    strata_seq_free(c);
    strata_seq_free(d);
    park_free(pk);
    strata_close(e);
    park_arena_on_cpu = 0;
}
END_TEST

/* ---- greedy continuation, serial vs parallel ------------------------------------ */

typedef struct run_out {
    int32_t ref[8], parked[8], turn2[8];
    char *img;          /* every span of every stage of the final image */
    size_t img_bytes;
} run_out;

/* Two turns; between them the conversation is parked, dropped, restored. */
static void park_scenario(int serial, run_out *o)
{
    strata_engine *e = open_engine("1,2,3", 4096);
    if (e->pool)
        stagepool_set_serial(e->pool, serial);
    strata_park *pk = open_park(e, 64, 16);
    int32_t t[700];
    rand_tokens(t, 700, 2);
    float *lg = malloc(sizeof(float) * N_VOCAB);
    strata_error err = {0};

    /* never parked */
    strata_seq *r = new_seq(e);
    feed(r, t, 280, lg);
    greedy(r, lg, 8, o->ref);
    strata_seq_free(r);

    /* parked after turn 1, restored for turn 2 */
    strata_seq *s = new_seq(e);
    feed(s, t, 280, lg);
    capture(pk, s, PARK_CAPTURE_FRESH);
    strata_seq_free(s);
    s = new_seq(e);
    int got = -1;
    ck_assert_int_eq(park_restore(pk, s, t, 280, &got, &err), 0);
    ck_assert_int_eq(got, 279);
    feed(s, t + 279, 1, lg);
    greedy(s, lg, 8, o->parked);
    /* turn 2 extends the history (with the generated tokens) */
    int n1 = strata_seq_len(s);
    int32_t hist[700];
    memcpy(hist, strata_seq_tokens(s), (size_t)n1 * sizeof *hist);
    memcpy(hist + n1, t + 300, 200 * sizeof *hist);
    feed(s, t + 300, 200, NULL);
    capture(pk, s, PARK_CAPTURE_REUSED);
    strata_seq_free(s);
    s = new_seq(e);
    ck_assert_int_eq(park_restore(pk, s, hist, n1 + 200, &got, &err), 0);
    ck_assert_int_eq(got, n1 + 199);
    feed(s, hist + n1 + 199, 1, lg);
    greedy(s, lg, 8, o->turn2);

    convcache_image *img = NULL;
    ck_assert_int_eq(convcache_find(park_cache(pk), hist, n1 + 200, &img), n1 + 200);
    o->img = NULL;
    o->img_bytes = 0;
    for (int i = 0; i < e->n_stages; i++)
        for (int k = 0; k < convcache_image_n_spans(img); k++) {
            convcache_span sp;
            ck_assert_int_eq(convcache_image_span(img, i, k, &sp, &err), 0);
            o->img = realloc(o->img, o->img_bytes + sp.bytes);
            memcpy(o->img + o->img_bytes, sp.data, sp.bytes);
            o->img_bytes += sp.bytes;
        }
    strata_seq_free(s);
    free(lg);
    park_free(pk);
    strata_close(e);
}

START_TEST(park_continue_greedy_serial_parallel)
{
    run_out par, ser;
    park_scenario(0, &par);
    park_scenario(1, &ser);
    ck_assert(!memcmp(par.ref, par.parked, sizeof par.ref));
    ck_assert(!memcmp(ser.ref, ser.parked, sizeof ser.ref));
    ck_assert(!memcmp(par.parked, ser.parked, sizeof par.parked));
    ck_assert(!memcmp(par.turn2, ser.turn2, sizeof par.turn2));
    ck_assert_uint_eq(par.img_bytes, ser.img_bytes);
    ck_assert(par.img_bytes > 0);
    ck_assert_msg(!memcmp(par.img, ser.img, par.img_bytes), "captured bytes differ");
    free(par.img);
    free(ser.img);
}
END_TEST

/* Turn 2 after parking gives the tokens of a conversation never parked. */
START_TEST(park_turn2_matches_unparked)
{
    run_out o;
    park_scenario(0, &o);
    /* the same two turns without parking */
    strata_engine *e = open_engine("1,2,3", 4096);
    int32_t t[700], out[8], tmp[8];
    rand_tokens(t, 700, 2);
    float *lg = malloc(sizeof(float) * N_VOCAB);
    strata_seq *s = new_seq(e);
    feed(s, t, 280, lg);
    greedy(s, lg, 8, tmp);
    feed(s, t + 300, 200, lg);
    greedy(s, lg, 8, out);
    ck_assert(!memcmp(out, o.turn2, sizeof out));
    strata_seq_free(s);
    free(lg);
    free(o.img);
    strata_close(e);
}
END_TEST

/* ---- budgets ------------------------------------------------------------------ */

START_TEST(park_eviction_respects_budgets)
{
    park_arena_on_cpu = _i; /* 1: the cache in one block, as on CUDA */
    strata_engine *e = open_engine("1,2,3", 4096);
    size_t tb = 0;
    int32_t t[600];
    strata_error err = {0};
    /* image budget: 3 slots, plenty of bytes */
    strata_park *pk = open_park(e, 64, 3);
    for (int i = 0; i < e->n_stages; i++)
        tb += park_token_bytes(pk, i);
    for (int k = 0; k < 5; k++) {
        strata_seq *s = new_seq(e);
        rand_tokens(t, 100, 10 + (uint64_t)k);
        feed(s, t, 100, NULL);
        capture(pk, s, PARK_CAPTURE_FRESH);
        convcache_stats cs;
        convcache_get_stats(park_cache(pk), &cs);
        ck_assert_int_le(cs.images, 3);
        ck_assert_int_eq(convcache_check(park_cache(pk), &err), 0);
        strata_seq_free(s);
    }
    convcache_stats cs;
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_int_eq(cs.images, 3);
    ck_assert_uint_eq(cs.evictions, 2);
    park_free(pk);

    /* byte budget: 1 MiB holds two images of 1000 tokens, not three */
    ck_assert_uint_gt(tb * 1000 * 3, 1u << 20);
    ck_assert_uint_le(tb * 1000 * 2, 1u << 20);
    pk = open_park(e, 1, 100);
    for (int k = 0; k < 4; k++) {
        strata_seq *s = new_seq(e);
        rand_tokens(t, 600, 20 + (uint64_t)k);
        feed(s, t, 600, NULL);
        /* second turn of the same conversation reuses the first */
        capture(pk, s, PARK_CAPTURE_FRESH);
        int32_t more[400];
        rand_tokens(more, 400, 40 + (uint64_t)k);
        feed(s, more, 400, NULL);
        capture(pk, s, PARK_CAPTURE_REUSED);
        convcache_get_stats(park_cache(pk), &cs);
        ck_assert_uint_le(cs.bytes_used, 1u << 20);
        ck_assert_int_eq(convcache_check(park_cache(pk), &err), 0);
        strata_seq_free(s);
    }
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_uint_le(cs.bytes_used, 1u << 20);
    ck_assert_uint_gt(cs.evictions, 0);
    ck_assert_uint_gt(cs.bytes_reused, 0);
    /* a conversation larger than the whole budget: refused, nothing evicted */
    int before = cs.images;
    strata_seq *big = new_seq(e);
    int32_t bt[2600];
    rand_tokens(bt, 2600, 77);
    feed(big, bt, 2600, NULL);
    ck_assert_uint_gt(tb * 2600, 1u << 20);
    ck_assert_int_eq(park_capture(pk, big, -1, 0, NULL, &err), STRATA_E_LIMIT);
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_int_eq(cs.images, before);
    assert_arena_holds_cache(pk, _i);
    strata_seq_free(big);
    park_free(pk);
    strata_close(e);
    park_arena_on_cpu = 0;
}
END_TEST

/* ---- failure -------------------------------------------------------------------- */

static void fail_scenario(int serial)
{
    strata_engine *e = open_engine("1,2,3", 4096);
    if (e->pool)
        stagepool_set_serial(e->pool, serial);
    strata_park *pk = open_park(e, 64, 16);
    int32_t t[600];
    rand_tokens(t, 600, 3);
    strata_seq *s = new_seq(e), *r = new_seq(e);
    feed(s, t, 300, NULL);
    strata_error err = {0};

    /* a fresh capture failing on stage 2 leaves nothing */
    park_fail_stage = 2;
    ck_assert_int_eq(park_capture(pk, s, -1, 0, NULL, &err), STRATA_E_DEVICE);
    ck_assert_msg(strstr(err.msg, "stage 2:") == err.msg && strstr(err.msg, "injected"), "%s",
                  err.msg);
    convcache_stats cs;
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_int_eq(cs.images, 0);
    ck_assert_int_eq(cs.captures, 0);
    ck_assert_uint_eq(cs.bytes_used, 0);
    ck_assert_uint_eq(cs.aborts, 1);
    convcache_image *img = NULL;
    ck_assert_int_eq(convcache_find(park_cache(pk), t, 300, &img), 0);

    /* an extending capture failing on stage 0 leaves the prefix as it was */
    park_fail_stage = -1;
    capture(pk, s, PARK_CAPTURE_FRESH);
    convcache_get_stats(park_cache(pk), &cs);
    size_t used = cs.bytes_used;
    feed(s, t + 300, 300, NULL);
    park_fail_stage = 0;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(park_capture(pk, s, -1, 0, NULL, &err), STRATA_E_DEVICE);
    ck_assert_msg(strstr(err.msg, "stage 0:") == err.msg, "%s", err.msg);
    convcache_get_stats(park_cache(pk), &cs);
    ck_assert_int_eq(cs.images, 1);
    ck_assert_uint_eq(cs.bytes_used, used);
    ck_assert_int_eq(convcache_find(park_cache(pk), t, 600, &img), 300);
    ck_assert_int_eq(convcache_check(park_cache(pk), &err), 0);

    /* a restore failing on stage 3 leaves the sequence empty */
    park_fail_stage = 3;
    int got = -1;
    ck_assert_int_eq(park_restore(pk, r, t, 600, &got, &err), STRATA_E_DEVICE);
    ck_assert_msg(strstr(err.msg, "stage 3:") == err.msg, "%s", err.msg);
    ck_assert_int_eq(got, 0);
    ck_assert_int_eq(strata_seq_len(r), 0);
    ck_assert_int_eq(r->kv[0].n_pages, 0);

    /* a shuttle failing on stage 1 leaves the source intact */
    park_fail_stage = 1;
    ck_assert_int_eq(park_shuttle(pk, s, r, 0, &err), STRATA_E_DEVICE);
    ck_assert_int_eq(strata_seq_len(s), 600);
    ck_assert_int_eq(strata_seq_len(r), 0);
    park_fail_stage = -1;

    /* and afterwards everything works */
    capture(pk, s, PARK_CAPTURE_REUSED);
    ck_assert_int_eq(park_restore(pk, r, t, 601, &got, &err), 0);
    ck_assert_int_eq(got, 600);
    assert_same_kv(s, r, 600);
    strata_seq_free(s);
    strata_seq_free(r);
    park_free(pk);
    strata_close(e);
}

START_TEST(park_stage_failure_no_torn_image)
{
    fail_scenario(0);
    fail_scenario(1);
    park_fail_stage = -1;
}
END_TEST

/* ---- the slot shuttle ------------------------------------------------------------ */

START_TEST(park_shuttle_session_slot_session)
{
    strata_engine *e = open_engine("1,2,3", 4096);
    strata_park *pk = open_park(e, 64, 16);
    int32_t t[400], ref[8], got_tok[8];
    rand_tokens(t, 400, 4);
    float *lg = malloc(sizeof(float) * N_VOCAB);
    strata_error err = {0};

    strata_seq *r = new_seq(e);
    feed(r, t, 300, lg);
    greedy(r, lg, 8, ref);

    /* session -> slot on the card (D2D), slot -> session through the host */
    strata_seq *session = new_seq(e), *slot = new_seq(e), *filler = new_seq(e);
    feed(session, t, 300, NULL);
    feed(filler, t, 100, NULL);   /* so the slot's pages differ from the session's */
    ck_assert_int_eq(park_shuttle(pk, session, slot, 0, &err), 0);
    ck_assert_int_eq(strata_seq_len(session), 0);
    ck_assert_int_eq(strata_seq_len(slot), 300);
    ck_assert_int_ne(slot->kv[1].pages[0], 0);
    assert_same_kv(r, slot, 300);
    ck_assert_int_eq(park_shuttle(pk, slot, session, PARK_SHUTTLE_VIA_HOST, &err), 0);
    ck_assert_int_eq(strata_seq_len(slot), 0);
    assert_same_kv(r, session, 300);
    /* the last token again, then greedy: the same as never moved */
    strata_seq_truncate(session, 299);
    feed(session, t + 299, 1, lg);
    greedy(session, lg, 8, got_tok);
    ck_assert(!memcmp(ref, got_tok, sizeof ref));
    park_stats st;
    park_get_stats(pk, &st);
    ck_assert_uint_eq(st.shuttles_d2d, 1);
    ck_assert_uint_eq(st.shuttles_host, 1);

    /* to another engine of the same shape (host round trip), and a copy */
    strata_engine *e2 = open_engine("1,2,3", 2048);
    strata_seq *far = strata_seq_new(e2, &err);
    ck_assert_int_eq(park_shuttle(pk, session, far, PARK_SHUTTLE_KEEP, &err), 0);
    ck_assert_int_eq(strata_seq_len(session), strata_seq_len(far));
    assert_same_kv(session, far, strata_seq_len(far));
    strata_seq_free(far);
    strata_close(e2);
    /* a different split is refused */
    strata_engine *e3 = open_engine("2", 2048);
    strata_seq *odd = strata_seq_new(e3, &err);
    ck_assert_int_eq(park_shuttle(pk, session, odd, 0, &err), STRATA_E_ARG);
    strata_seq_free(odd);
    strata_close(e3);

    strata_seq_free(r);
    strata_seq_free(session);
    strata_seq_free(slot);
    strata_seq_free(filler);
    free(lg);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* One stage: no pool, the same results. */
START_TEST(park_one_stage)
{
    strata_engine *e = open_engine(NULL, 4096);
    ck_assert_ptr_null(e->pool);
    strata_park *pk = open_park(e, 64, 16);
    int32_t t[600];
    rand_tokens(t, 600, 5);
    strata_seq *s = new_seq(e), *r = new_seq(e);
    feed(s, t, 513, NULL);
    capture(pk, s, PARK_CAPTURE_FRESH);
    assert_span_matches(pk, s, 0);
    strata_error err = {0};
    int got;
    ck_assert_int_eq(park_restore(pk, r, t, 600, &got, &err), 0);
    ck_assert_int_eq(got, 513);
    assert_same_kv(s, r, 513);
    strata_seq_free(s);
    strata_seq_free(r);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* Checksums are written only when verified (park_set_verify, debug
 * builds): by default a capture hashes nothing, the round trip is the same,
 * and turning them on once something was captured is refused. */
START_TEST(park_checksums_only_when_verified)
{
    strata_engine *e = open_engine("2", 4096);
    strata_error err = {0};
    strata_park *pk = park_new(e, 64, 16, &err);
    ck_assert_msg(pk != NULL, "park_new: %s", err.msg);
    int32_t t[400];
    rand_tokens(t, 400, 8);
    strata_seq *s = new_seq(e), *r = new_seq(e);
    feed(s, t, 300, NULL);
    capture(pk, s, PARK_CAPTURE_FRESH);
    convcache_image *img = NULL;
    ck_assert_int_eq(convcache_find(park_cache(pk), t, 300, &img), 300);
#ifdef STRATA_DEBUG
    ck_assert_int_eq(convcache_verify(img, -1, &err), 0);
#else
    ck_assert_int_eq(convcache_verify(img, -1, &err), STRATA_E_UNSUPPORTED);
#endif
    ck_assert_int_eq(park_set_verify(pk, 1, &err), STRATA_E_ARG);
    int got = -1;
    ck_assert_int_eq(park_restore(pk, r, t, 301, &got, &err), 0);
    ck_assert_int_eq(got, 300);
    assert_same_kv(s, r, 300);
    strata_seq_free(s);
    strata_seq_free(r);
    park_free(pk);
    strata_close(e);
}
END_TEST

/* Each KV type parks and restores as itself: an image records the type
 * it was written in (k8v4, k8v4r and k8v4r2 images have the same size and layout,
 * so nothing else would tell them apart), the restored conversation
 * continues with the tokens of one never parked, and the shuttle refuses
 * to move K/V between engines of different types. */
START_TEST(park_restores_each_kv_type)
{
    static const int types[] = {STRATA_KV_K8V4, STRATA_KV_K8V4R, STRATA_KV_F16, STRATA_KV_K8V4R2};
    enum { NT = sizeof types / sizeof types[0] };
    strata_engine *es[NT];
    strata_seq *keep[NT];
    int32_t t[400], ref[8], got_t[8];
    rand_tokens(t, 400, 31);
    float *lg = malloc(sizeof(float) * N_VOCAB);
    strata_error err = {0};
    for (int k = 0; k < NT; k++) {
        strata_engine *e = es[k] = open_engine_kv("2", 4096, types[k]);
        ck_assert_int_eq(strata_kv_type(e), types[k]);
        strata_seq *s = new_seq(e);
        feed(s, t, 300, lg);
        greedy(s, lg, 8, ref);
        strata_seq_truncate(s, 300);
        strata_park *pk = open_park(e, 64, 16);
        capture(pk, s, PARK_CAPTURE_FRESH);
        convcache_image *img = NULL;
        ck_assert_int_eq(convcache_find(park_cache(pk), t, 300, &img), 300);
        ck_assert_int_eq(convcache_image_format(img), types[k]);
        strata_seq *r = new_seq(e);
        int got = -1;
        ck_assert_int_eq(park_restore(pk, r, t, 301, &got, &err), 0);
        ck_assert_int_eq(got, 300);
        assert_same_kv(s, r, 300);
        strata_seq_truncate(r, 299);
        feed(r, t + 299, 1, lg);
        greedy(r, lg, 8, got_t);
        ck_assert_msg(!memcmp(ref, got_t, sizeof ref), "kv %s: restored greedy differs",
                      strata_kv_name(types[k]));
        strata_seq_free(r);
        park_free(pk);
        keep[k] = s;
    }
    /* the plain and the rotated k8v4 engines do not differ in shape, only
     * in what the bytes mean: the shuttle refuses */
    strata_park *pk = open_park(es[0], 64, 16);
    strata_seq *to = new_seq(es[1]);
    ck_assert_int_eq(park_shuttle(pk, keep[0], to, PARK_SHUTTLE_KEEP, &err), STRATA_E_ARG);
    ck_assert_msg(strstr(err.msg, "k8v4r"), "%s", err.msg);
    strata_seq_free(to);
    park_free(pk);
    for (int k = 0; k < NT; k++) {
        strata_seq_free(keep[k]);
        strata_close(es[k]);
    }
    free(lg);
}
END_TEST

static Suite *park_suite(void)
{
    Suite *s = suite_create("park");
    TCase *tc = tcase_create("park");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, park_roundtrip_fresh_and_reused, 0, 2);
    tcase_add_test(tc, park_continue_greedy_serial_parallel);
    tcase_add_test(tc, park_turn2_matches_unparked);
    tcase_add_loop_test(tc, park_eviction_respects_budgets, 0, 2);
    tcase_add_test(tc, park_stage_failure_no_torn_image);
    tcase_add_test(tc, park_shuttle_session_slot_session);
    tcase_add_test(tc, park_one_stage);
    tcase_add_test(tc, park_checksums_only_when_verified);
    tcase_add_test(tc, park_restores_each_kv_type);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(park_suite)
