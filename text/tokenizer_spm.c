/* tokenizer_spm.c: SentencePiece-style BPE (`tokenizer.ggml.model = llama`,
 * doc/formats.md §5.4), as llama.cpp's llm_tokenizer_spm does it.
 *
 * Spaces become U+2581 "▁" (one prefixed when add_space_prefix), the text is
 * split into UTF-8 characters, and adjacent symbols whose concatenation is a
 * token are merged, highest score first (leftmost on ties).  A symbol that
 * is not a token at the end (only single characters can be: merges always
 * make tokens) is emitted as <0xNN> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "text/merge_heap.h"
#include "text/tokenizer_impl.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

typedef struct spm_sym {
    uint32_t off, len;  /* bytes in the escaped text; len 0 once merged */
    int32_t prev, next;
} spm_sym;

static int queue_pair(const tokenizer *t, merge_heap *h, const spm_sym *s,
                      const char *text, int32_t left)
{
    if (left < 0 || s[left].next < 0)
        return 0;
    int32_t right = s[left].next;
    int32_t id = tok_strmap_get(t, text + s[left].off, s[left].len + s[right].len);
    if (id < 0)
        return 0;
    merge_cand c = {-(double)t->score[id], left, right, s[left].len, s[right].len};
    return merge_heap_push(h, c);
}

/* The escaped text: spaces as ▁, optionally one in front. */
static char *spm_escape(const char *text, size_t len, bool prefix, size_t *out_len)
{
    char *e = malloc(3 * len + 4);
    size_t n = 0;
    if (!e)
        return NULL;
    if (prefix) {
        memcpy(e, SPACE_MARK, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + n, SPACE_MARK, 3);
            n += 3;
        } else {
            e[n++] = text[i];
        }
    }
    *out_len = n;
    return e;
}

static int emit_symbol(const tokenizer *t, const char *p, size_t len, tok_ids *out)
{
    int32_t id = tok_strmap_get(t, p, len);
    if (id >= 0)
        return tok_ids_push(out, id);
    for (size_t i = 0; i < len; i++) {
        int32_t b = t->byte_id[(uint8_t)p[i]];
        int rc = tok_ids_push(out, b >= 0 ? b : t->unk);
        if (rc)
            return rc;
        if (b < 0) /* no byte tokens: one unk for the whole character */
            break;
    }
    return 0;
}

int spm_encode_segment(const tokenizer *t, const char *text, size_t len,
                       bool first, tok_ids *out)
{
    size_t n;
    char *e = spm_escape(text, len, first && t->add_space_prefix, &n);
    spm_sym *s = e ? malloc((n + 1) * sizeof *s) : NULL;
    merge_heap h = {0};
    int rc = 0;
    if (!s) {
        free(e);
        return STRATA_E_NOMEM;
    }
    int32_t count = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cp;
        size_t l = utf8_next((const unsigned char *)e + off, n - off, &cp);
        s[count] = (spm_sym){(uint32_t)off, (uint32_t)l, count - 1, -1};
        if (count > 0)
            s[count - 1].next = count;
        count++;
        off += l;
    }
    for (int32_t i = 0; i + 1 < count && !rc; i++)
        rc = queue_pair(t, &h, s, e, i);
    while (h.n > 0 && !rc) {
        merge_cand c = merge_heap_pop(&h);
        spm_sym *l = &s[c.left], *r = &s[c.right];
        if (l->len != c.left_len || r->len != c.right_len || l->next != c.right)
            continue;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = c.left;
        r->len = 0;
        rc = queue_pair(t, &h, s, e, l->prev);
        if (!rc)
            rc = queue_pair(t, &h, s, e, c.left);
    }
    for (int32_t i = count > 0 ? 0 : -1; i >= 0 && !rc; i = s[i].next)
        rc = emit_symbol(t, e + s[i].off, s[i].len, out);
    merge_heap_free(&h);
    free(s);
    free(e);
    return rc;
}
