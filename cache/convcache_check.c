/* convcache_check.c: convcache_check, the cache's consistency check (the
 * tests call it after every operation): images well formed, keys equal to
 * their tokens' hash, spans contiguous, reference counts equal to the
 * references, bytes and counts equal to the budgets' accounting. */
#include "cache/convcache.h"
#include "cache/convcache_internal.h"

static int check_image(const convcache *c, const convcache_image *img,
                       int committed, strata_error *err)
{
    if (img->owner != c || img->committed != committed)
        return strata_err(err, STRATA_E_FORMAT, "image owner/state wrong");
    if (img->key != convcache_token_hash(img->tokens, 0, img->n_tokens, CONVCACHE_HASH_SEED))
        return strata_err(err, STRATA_E_FORMAT, "image key does not match tokens");
    int32_t t = 0;
    for (int i = 0; i < img->n_spans; i++) {
        if (img->spans[i]->t0 != t || img->spans[i]->t1 < t)
            return strata_err(err, STRATA_E_FORMAT,
                              "image of %d tokens: span %d covers %d..%d, "
                              "expected to start at %d", img->n_tokens, i,
                              (int)img->spans[i]->t0, (int)img->spans[i]->t1,
                              (int)t);
        t = img->spans[i]->t1;
    }
    if (t != img->n_tokens)
        return strata_err(err, STRATA_E_FORMAT,
                          "image of %d tokens: spans end at %d", img->n_tokens,
                          (int)t);
    return 0;
}

/* Apply fn to every span of every image and capture. */
static void each_span(convcache *c, void (*fn)(convcache *, span *))
{
    for (convcache_image *it = c->newest; it; it = it->older)
        for (int i = 0; i < it->n_spans; i++)
            fn(c, it->spans[i]);
    for (convcache_capture *cap = c->captures; cap; cap = cap->next)
        for (int i = 0; i < cap->img->n_spans; i++)
            fn(c, cap->img->spans[i]);
}

static void span_reset_seen(convcache *c, span *s)
{
    (void)c;
    s->seen = 0;
}

static void span_count_seen(convcache *c, span *s)
{
    (void)c;
    s->seen++;
}

static int check_refs(const convcache_image *img, strata_error *err)
{
    for (int i = 0; i < img->n_spans; i++) {
        const span *s = img->spans[i];
        if (s->seen != s->refs)
            return strata_err(err, STRATA_E_FORMAT,
                              "span %d..%d: %d references, %d held",
                              (int)s->t0, (int)s->t1, s->refs, s->seen);
    }
    return 0;
}

int convcache_check(convcache *c, strata_error *err)
{
    if (!c)
        return strata_err(err, STRATA_E_ARG, "conversation cache: NULL");
    int n = 0;
    const convcache_image *newer = NULL;
    for (convcache_image *it = c->newest; it; it = it->older, n++) {
        if (it->newer != newer)
            return strata_err(err, STRATA_E_FORMAT, "LRU list link broken at %d", n);
        int rc = check_image(c, it, 1, err);
        if (rc)
            return rc;
        newer = it;
    }
    if (c->oldest != newer || n != c->n_images)
        return strata_err(err, STRATA_E_FORMAT,
                          "LRU list holds %d images, count says %d", n, c->n_images);
    int n_cap = 0;
    for (convcache_capture *cap = c->captures; cap; cap = cap->next, n_cap++) {
        int rc = check_image(c, cap->img, 0, err);
        if (rc)
            return rc;
        if (cap->fresh != cap->img->spans[cap->img->n_spans - 1])
            return strata_err(err, STRATA_E_FORMAT, "capture's new span misplaced");
    }
    if (n_cap != c->n_captures)
        return strata_err(err, STRATA_E_FORMAT,
                          "%d captures listed, count says %d", n_cap, c->n_captures);

    /* Reference counts and unique bytes. */
    each_span(c, span_reset_seen);
    each_span(c, span_count_seen);
    c->epoch++;
    size_t bytes = 0;
    for (convcache_image *it = c->newest; it; it = it->older)
        bytes += convcache_mark_image(c, it);
    for (convcache_capture *cap = c->captures; cap; cap = cap->next)
        bytes += convcache_mark_image(c, cap->img);
    for (convcache_image *it = c->newest; it; it = it->older) {
        int rc = check_refs(it, err);
        if (rc)
            return rc;
    }
    for (convcache_capture *cap = c->captures; cap; cap = cap->next) {
        int rc = check_refs(cap->img, err);
        if (rc)
            return rc;
    }
    if (bytes != c->bytes_used)
        return strata_err(err, STRATA_E_FORMAT,
                          "spans hold %zu bytes, count says %zu", bytes,
                          c->bytes_used);
    if (c->bytes_used > c->max_bytes)
        return strata_err(err, STRATA_E_FORMAT, "%zu bytes used over a budget of %zu",
                          c->bytes_used, c->max_bytes);
    if (c->n_images + c->n_captures > c->max_images)
        return strata_err(err, STRATA_E_FORMAT, "%d images + %d captures over a "
                          "budget of %d", c->n_images, c->n_captures, c->max_images);
    return 0;
}
