/* kvcache.h: a stage's resident KV pool and the sequences' page tables.
 *
 * One pool per stage holds, for each of the stage's layers, KV pages of
 * KV_PAGE tokens (layout in kernels/ops.h).  A page index means the same
 * page in every layer, so a sequence needs one page table per stage.  Pages
 * come from a free list: conversations of different lengths share the pool
 * without fragmentation, and a full pool is a clear STRATA_E_LIMIT, never a
 * write into another conversation's page.
 *
 * Memory comes from an allocator the caller passes (host malloc for the CPU
 * backend, cudaMalloc on the stage's card for CUDA). */
#ifndef STRATA_KVCACHE_H
#define STRATA_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "base/error.h"

typedef struct kv_allocator {
    void *(*alloc)(size_t bytes, void *ctx); /* NULL on failure */
    void (*free)(void *p, void *ctx);
    void *ctx;
} kv_allocator;

/* The per-token bytes of each of a layer's buffers. */
typedef struct kv_row_bytes {
    size_t kq, kd, vq, vd; /* k8v4 (kh/vh: kq/vq hold the f16 sizes, kd=vd=0) */
} kv_row_bytes;

typedef struct kv_pool {
    int type;                  /* enum kv_type */
    int n_layer, n_kv_head, head_dim;
    int n_pages;
    kv_allocator a;
    /* Per layer: four buffers (kq, kd, vq, vd) or two (kh, vh) of
     * n_pages * n_kv_head * KV_PAGE rows each. */
    void **buf;                /* n_layer * 4 */
    int32_t *free_list;        /* stack of free page ids */
    int n_free;
} kv_pool;

int kv_pool_new(kv_pool **out, int type, int n_layer, int n_kv_head, int head_dim,
                int n_pages, const kv_allocator *a, strata_error *err);
void kv_pool_free(kv_pool *p);

kv_row_bytes kv_row_size(int type, int head_dim);
/* Bytes of one page of one buffer b (0..3) of one layer. */
size_t kv_page_buf_bytes(const kv_pool *p, int b);
/* Bytes of one page across all layers and buffers. */
size_t kv_page_bytes(const kv_pool *p);
/* Pointer to page `page` of buffer b of layer l (device or host memory). */
void *kv_page_ptr(const kv_pool *p, int l, int b, int32_t page);

/* The view the kernels read for layer l with a page table. */
kv_view kv_pool_view(const kv_pool *p, int l, const int32_t *pages);

/* A sequence's pages in one pool. */
typedef struct kv_seq {
    int32_t *pages;
    int n_pages, cap;
} kv_seq;

/* Make sure the sequence can hold n_tokens; takes pages from the pool. */
int kv_seq_reserve(kv_seq *s, kv_pool *p, int32_t n_tokens, strata_error *err);
/* Return every page to the pool. */
void kv_seq_release(kv_seq *s, kv_pool *p);
/* Keep only the pages needed for n_tokens. */
void kv_seq_truncate(kv_seq *s, kv_pool *p, int32_t n_tokens);

#endif
