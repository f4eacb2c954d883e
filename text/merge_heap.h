/* merge_heap.h: a min-heap of candidate merges, the one data structure the
 * two merge loops share: byte-level BPE (text/tokenizer_bpe.c, key = merge
 * rank) and SPM (text/tokenizer_spm.c, key = -score).  Ties go to the
 * leftmost pair, as both references do.  Its own file so that neither
 * tokenizer depends on the other. */
#ifndef STRATA_MERGE_HEAP_H
#define STRATA_MERGE_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct merge_cand {
    double key;
    int32_t left, right;   /* symbol indices */
    uint32_t left_len, right_len; /* lengths when queued: stale check */
} merge_cand;
typedef struct merge_heap {
    merge_cand *a;
    size_t n, cap;
} merge_heap;

/* 0, or STRATA_E_NOMEM (the heap is unchanged). */
int merge_heap_push(merge_heap *h, merge_cand c);
/* The smallest candidate; the heap must not be empty. */
merge_cand merge_heap_pop(merge_heap *h);
void merge_heap_free(merge_heap *h);

#endif
