/* kvcache.c: the resident KV pool (see kvcache.h). */
#include "cache/kvcache.h"

#include <stdlib.h>
#include <string.h>

kv_row_bytes kv_row_size(int type, int head_dim)
{
    kv_row_bytes r;
    if (type == KV_F16) {
        r.kq = r.vq = (size_t)head_dim * 2;
        r.kd = r.vd = 0;
    } else {
        r.kq = (size_t)head_dim;          /* int8 */
        r.kd = (size_t)head_dim / 32 * 2; /* fp16 per 32 */
        r.vq = (size_t)head_dim / 2;      /* two nibbles per byte */
        r.vd = (size_t)head_dim / 32 * 2;
    }
    return r;
}

static size_t row_bytes_of(const kv_pool *p, int b)
{
    kv_row_bytes r = kv_row_size(p->type, p->head_dim);
    size_t v[4] = {r.kq, r.kd, r.vq, r.vd};
    return v[b];
}

size_t kv_page_buf_bytes(const kv_pool *p, int b)
{
    return row_bytes_of(p, b) * (size_t)p->n_kv_head * KV_PAGE;
}

size_t kv_page_bytes(const kv_pool *p)
{
    size_t s = 0;
    for (int b = 0; b < 4; b++)
        s += kv_page_buf_bytes(p, b);
    return s * (size_t)p->n_layer;
}

void *kv_page_ptr(const kv_pool *p, int l, int b, int32_t page)
{
    char *base = p->buf[l * 4 + b];
    return base ? base + (size_t)page * kv_page_buf_bytes(p, b) : NULL;
}

static void *host_alloc(size_t n, void *ctx)
{
    (void)ctx;
    return malloc(n);
}

static void host_free(void *q, void *ctx)
{
    (void)ctx;
    free(q);
}

int kv_pool_new(kv_pool **out, int type, int n_layer, int n_kv_head, int head_dim,
                int n_pages, const kv_allocator *a, strata_error *err)
{
    *out = NULL;
    if (n_layer < 0 || n_kv_head <= 0 || head_dim <= 0 || head_dim % 32 || n_pages <= 0)
        return strata_err(err, STRATA_E_ARG, "kv pool: bad shape (layers %d, kv heads %d, "
                          "head_dim %d, pages %d)", n_layer, n_kv_head, head_dim, n_pages);
    kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return strata_err(err, STRATA_E_NOMEM, "kv pool: out of memory");
    p->type = type;
    p->n_layer = n_layer;
    p->n_kv_head = n_kv_head;
    p->head_dim = head_dim;
    p->n_pages = n_pages;
    if (a)
        p->a = *a;
    else
        p->a = (kv_allocator){host_alloc, host_free, NULL};
    p->buf = calloc((size_t)n_layer * 4 + 1, sizeof *p->buf);
    p->free_list = malloc((size_t)n_pages * sizeof *p->free_list);
    if (!p->buf || !p->free_list) {
        kv_pool_free(p);
        return strata_err(err, STRATA_E_NOMEM, "kv pool: out of memory");
    }
    for (int l = 0; l < n_layer; l++) {
        for (int b = 0; b < 4; b++) {
            size_t bytes = kv_page_buf_bytes(p, b) * (size_t)n_pages;
            if (!bytes)
                continue;
            p->buf[l * 4 + b] = p->a.alloc(bytes, p->a.ctx);
            if (!p->buf[l * 4 + b]) {
                size_t total = kv_page_bytes(p) * (size_t)n_pages;
                kv_pool_free(p);
                return strata_err(err, STRATA_E_NOMEM,
                                  "kv pool: cannot allocate %zu bytes (%d pages of %d tokens, "
                                  "%zu bytes in all)", bytes, n_pages, KV_PAGE, total);
            }
        }
    }
    /* Hand out low page ids first: pop from the end of a descending stack. */
    for (int i = 0; i < n_pages; i++)
        p->free_list[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    *out = p;
    return 0;
}

void kv_pool_free(kv_pool *p)
{
    if (!p)
        return;
    if (p->buf)
        for (int i = 0; i < p->n_layer * 4; i++)
            if (p->buf[i])
                p->a.free(p->buf[i], p->a.ctx);
    free(p->buf);
    free(p->free_list);
    free(p);
}

kv_view kv_pool_view(const kv_pool *p, int l, const int32_t *pages)
{
    kv_view v;
    memset(&v, 0, sizeof v);
    v.type = p->type;
    v.n_kv_head = p->n_kv_head;
    v.head_dim = p->head_dim;
    v.pages = pages;
    if (p->type == KV_F16) {
        v.kh = p->buf[l * 4 + 0];
        v.vh = p->buf[l * 4 + 2];
    } else {
        v.kq = p->buf[l * 4 + 0];
        v.kd = p->buf[l * 4 + 1];
        v.vq = p->buf[l * 4 + 2];
        v.vd = p->buf[l * 4 + 3];
    }
    return v;
}

int kv_seq_reserve(kv_seq *s, kv_pool *p, int32_t n_tokens, strata_error *err)
{
    int need = (int)((n_tokens + KV_PAGE - 1) / KV_PAGE);
    if (need <= s->n_pages)
        return 0;
    if (need - s->n_pages > p->n_free)
        return strata_err(err, STRATA_E_LIMIT,
                          "KV pool full: %d tokens need %d pages, %d free of %d "
                          "(raise --kv-resident)", n_tokens, need - s->n_pages, p->n_free,
                          p->n_pages);
    if (need > s->cap) {
        int cap = s->cap ? s->cap : 4;
        while (cap < need)
            cap *= 2;
        int32_t *np = realloc(s->pages, (size_t)cap * sizeof *np);
        if (!np)
            return strata_err(err, STRATA_E_NOMEM, "kv page table: out of memory");
        s->pages = np;
        s->cap = cap;
    }
    while (s->n_pages < need)
        s->pages[s->n_pages++] = p->free_list[--p->n_free];
    return 0;
}

void kv_seq_truncate(kv_seq *s, kv_pool *p, int32_t n_tokens)
{
    int keep = (int)((n_tokens + KV_PAGE - 1) / KV_PAGE);
    while (s->n_pages > keep)
        p->free_list[p->n_free++] = s->pages[--s->n_pages];
}

void kv_seq_release(kv_seq *s, kv_pool *p)
{
    if (p)
        kv_seq_truncate(s, p, 0);
    free(s->pages);
    s->pages = NULL;
    s->n_pages = s->cap = 0;
}
