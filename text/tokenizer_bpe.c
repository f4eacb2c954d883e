/* tokenizer_bpe.c: byte-level BPE on one pre-tokenized piece (doc/formats.md
 * §5.2 steps 3-5).
 *
 * Symbols are token ids in a doubly linked list over an array; candidate
 * merges of neighbours sit in a min-heap keyed by merge rank (ties: the
 * leftmost pair).  A popped candidate is stale when either side has changed
 * since it was queued (different length or no longer neighbours); it is then
 * dropped.  Each merge queues at most two new candidates, so a piece of n
 * bytes costs O(n log n), not the O(n^2) of rescanning for the best pair. */
#include <stdlib.h>

#include "text/merge_heap.h"
#include "text/tokenizer_impl.h"

uint32_t bpe_byte_to_cp(uint8_t b)
{
    /* Printable bytes keep their code point; the 68 others are numbered
     * from U+0100 in increasing byte order. */
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
            k++;
    return 0x100 + k;
}

int bpe_cp_to_byte(uint32_t cp)
{
    static int16_t inverse[0x144];
    static int ready;
    if (!ready) { /* idempotent, so a race only repeats the same writes */
        for (int i = 0; i < 0x144; i++)
            inverse[i] = -1;
        for (int b = 0; b < 256; b++)
            inverse[bpe_byte_to_cp((uint8_t)b)] = (int16_t)b;
        ready = 1;
    }
    return cp < 0x144 ? inverse[cp] : -1;
}

typedef struct bpe_sym {
    int32_t id;        /* token id, -1 for a byte with no token */
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;      /* bytes of the piece it covers; 0 once merged away */
} bpe_sym;

static int queue_pair(const tokenizer *t, merge_heap *h, const bpe_sym *s,
                      int32_t left)
{
    if (left < 0)
        return 0;
    int32_t right = s[left].next;
    if (right < 0 || s[left].id < 0 || s[right].id < 0)
        return 0;
    const tok_pair *p = tok_pairmap_get(&t->merges, s[left].id, s[right].id);
    if (!p)
        return 0;
    /* Key: rank, then position, so equal ranks resolve leftmost first. */
    merge_cand c = {(double)p->rank * 4294967296.0 + (double)left, left, right,
                    s[left].len, s[right].len};
    return merge_heap_push(h, c);
}

int bpe_encode_piece(const tokenizer *t, const char *piece, size_t len,
                     tok_ids *out)
{
    /* No shortcut for a piece that is itself a token: BPE does not always
     * reach such a token through its merges, and the reference tokenizers
     * (HF, llama.cpp for these models) do not take it either. */
    bpe_sym *s = malloc(len * sizeof *s);
    merge_heap h = {0};
    int rc = 0;
    if (!s)
        return STRATA_E_NOMEM;
    for (size_t i = 0; i < len; i++)
        s[i] = (bpe_sym){t->byte_id[(uint8_t)piece[i]], (int32_t)i - 1,
                         i + 1 < len ? (int32_t)i + 1 : -1, 1};
    for (size_t i = 0; i + 1 < len && !rc; i++)
        rc = queue_pair(t, &h, s, (int32_t)i);
    while (h.n > 0 && !rc) {
        merge_cand c = merge_heap_pop(&h);
        bpe_sym *l = &s[c.left], *r = &s[c.right];
        if (l->len != c.left_len || r->len != c.right_len || l->next != c.right)
            continue; /* stale: one side merged since this was queued */
        const tok_pair *p = tok_pairmap_get(&t->merges, l->id, r->id);
        l->id = p->id;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = c.left;
        r->len = 0;
        rc = queue_pair(t, &h, s, l->prev);
        if (!rc)
            rc = queue_pair(t, &h, s, c.left);
    }
    for (int32_t i = 0; i >= 0 && !rc; i = s[i].next) {
        int32_t id = s[i].id >= 0 ? s[i].id : t->unk;
        if (id >= 0) /* a byte with no token and no unk is dropped */
            rc = tok_ids_push(out, id);
    }
    merge_heap_free(&h);
    free(s);
    return rc;
}
