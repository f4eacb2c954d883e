/* test_park_util.c: park_testutil.h (no suite of its own). */
#include "park_testutil.h"

#include <stdlib.h>
#include <string.h>

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
