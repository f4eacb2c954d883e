/* test_park_util.c: park_testutil.h (no suite of its own). */
#include "park_testutil.h"

#include <stdlib.h>
#include <string.h>

#include "cache/convcache.h"
#include "testutil.h"

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
        for (int b = 0; b < 4; b++)
            for (int h = 0; h < p->n_kv_head; h++)
                for (int t = 0; t < n; t++) {
                    size_t r = rowb(p, b);
                    memcpy(w, tok_row(p, pages, l, b, h, t), r);
                    w += r;
                }
    *bytes = (size_t)(w - out);
    return out;
}

static void release(const park_pool_reader *rd, kv_pool *p)
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
        release(rd, p);
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
        release(rd, p);
        ck_assert_uint_eq(na, nb);
        ck_assert_msg(!memcmp(x, y, na), "stage %d: K/V differs", i);
        free(x);
        free(y);
    }
}
