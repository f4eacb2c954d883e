/* merge_heap.c: the min-heap of candidate merges (see merge_heap.h). */
#include <stdlib.h>

#include "base/error.h"
#include "text/merge_heap.h"

static int cand_less(const merge_cand *a, const merge_cand *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->left < b->left;
}

int merge_heap_push(merge_heap *h, merge_cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        merge_cand *a = realloc(h->a, cap * sizeof *a);
        if (!a)
            return STRATA_E_NOMEM;
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
    return 0;
}

merge_cand merge_heap_pop(merge_heap *h)
{
    merge_cand top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= h->n)
            break;
        if (k + 1 < h->n && cand_less(&h->a[k + 1], &h->a[k]))
            k++;
        if (!cand_less(&h->a[k], &last))
            break;
        h->a[i] = h->a[k];
        i = k;
    }
    if (h->n > 0)
        h->a[i] = last;
    return top;
}

void merge_heap_free(merge_heap *h)
{
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}
