/* convindex.c: text -> ids of past conversations (see convindex.h).
 *
 * A list in LRU order, searched linearly: a few hundred entries of a few
 * kilobytes each compare in microseconds, against a prompt read that
 * costs milliseconds per token. */
#include "serve/convindex.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;  /* most recently used first */
    int kind;
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} entry;

struct convindex {
    pthread_mutex_t mu;
    entry *head, *tail;
    int n, max_n;
    size_t bytes, max_bytes;
};

static size_t entry_bytes(const entry *e)
{
    return e->len + e->n_ids * sizeof(int32_t) + sizeof *e;
}

convindex *convindex_new(int max_entries, size_t max_bytes)
{
    convindex *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    pthread_mutex_init(&x->mu, NULL);
    x->max_n = max_entries;
    x->max_bytes = max_bytes;
    return x;
}

static void unlink_entry(convindex *x, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        x->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        x->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(convindex *x, entry *e)
{
    e->next = x->head;
    e->prev = NULL;
    if (x->head)
        x->head->prev = e;
    x->head = e;
    if (!x->tail)
        x->tail = e;
}

static void drop(convindex *x, entry *e)
{
    unlink_entry(x, e);
    x->n--;
    x->bytes -= entry_bytes(e);
    free(e->text);
    free(e->ids);
    free(e);
}

void convindex_free(convindex *x)
{
    if (!x)
        return;
    while (x->head)
        drop(x, x->head);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

size_t convindex_find(convindex *x, int kind, const char *text, size_t n, tok_ids *out)
{
    pthread_mutex_lock(&x->mu);
    entry *best = NULL;
    for (entry *e = x->head; e; e = e->next)
        if (e->kind == kind && e->len <= n && (!best || e->len > best->len) &&
            !memcmp(e->text, text, e->len))
            best = e;
    size_t len = 0;
    if (best) {
        int ok = 1;
        for (size_t i = 0; i < best->n_ids && ok; i++)
            ok = tok_ids_push(out, best->ids[i]) == 0;
        if (ok) {
            len = best->len;
            unlink_entry(x, best);
            push_front(x, best);
        }
    }
    pthread_mutex_unlock(&x->mu);
    return len;
}

int convindex_add(convindex *x, int kind, const char *text, size_t n, const int32_t *ids,
                  size_t n_ids)
{
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->kind = kind;
    e->text = malloc(n + 1);
    e->ids = malloc(n_ids * sizeof *ids + 1);
    if (!e->text || !e->ids) {
        free(e->text);
        free(e->ids);
        free(e);
        return -1;
    }
    memcpy(e->text, text, n);
    e->text[n] = '\0';
    e->len = n;
    memcpy(e->ids, ids, n_ids * sizeof *ids);
    e->n_ids = n_ids;
    pthread_mutex_lock(&x->mu);
    /* The turn before this one stays too: a client that asks again from
     * there (a regenerated answer, an edited last message) still finds it. */
    push_front(x, e);
    x->n++;
    x->bytes += entry_bytes(e);
    while (x->tail && x->tail != e && (x->n > x->max_n || x->bytes > x->max_bytes))
        drop(x, x->tail);
    pthread_mutex_unlock(&x->mu);
    return 0;
}

int convindex_entries(convindex *x)
{
    pthread_mutex_lock(&x->mu);
    int n = x->n;
    pthread_mutex_unlock(&x->mu);
    return n;
}

/* ---- entries rebuilt from ids ------------------------------------------- */

/* Tokens that are not plain text to the encoder: control tokens (read from
 * text only with TOK_ENCODE_SPECIAL) and user-defined ones (always read). */
static int is_marker(const tokenizer *t, int32_t id)
{
    enum token_type ty = tokenizer_token_type(t, id);
    return ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED;
}

static int same_markers(const tokenizer *t, const int32_t *a, size_t na, const int32_t *b,
                        size_t nb)
{
    size_t i = 0, j = 0;
    for (;;) {
        while (i < na && !is_marker(t, a[i]))
            i++;
        while (j < nb && !is_marker(t, b[j]))
            j++;
        if (i == na || j == nb)
            return i == na && j == nb;
        if (a[i++] != b[j++])
            return 0;
    }
}

/* The text the server would have sent for ids: decoded as a stream
 * (openai.c's tokdec), so bytes that do not make a UTF-8 character come
 * out as U+FFFD there as here, with control tokens as their text (the
 * template's markup).  NULL when an id is not this tokenizer's. */
static char *stream_text(const tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    tokdec *d = NULL;
    strata_error err = {0};
    if (tokdec_new(t, TOK_DECODE_SPECIAL, &d, &err))
        return NULL;
    size_t cap = 256, at = 0;
    char *text = malloc(cap);
    for (size_t i = 0; text && i <= n; i++) {
        size_t l = 0;
        const char *piece = i < n ? tokdec_push(d, ids[i], &l, &err) : tokdec_flush(d, &l);
        if (!piece) {
            free(text);
            text = NULL;
            break;
        }
        if (at + l + 1 > cap) {
            while (at + l + 1 > cap)
                cap *= 2;
            char *nt = realloc(text, cap);
            if (!nt) {
                free(text);
                text = NULL;
                break;
            }
            text = nt;
        }
        memcpy(text + at, piece, l);
        at += l;
    }
    tokdec_free(d);
    if (text)
        text[at] = '\0';
    *len = at;
    return text;
}

/* The entries of ids[0..n_ids) as they stand (convindex_add_ids). */
static int add_ids(convindex *x, const tokenizer *t, const int32_t *ids, size_t n_ids)
{
    int32_t bos = tokenizer_bos(t);
    size_t skip = tokenizer_add_bos(t) && bos >= 0 && n_ids && ids[0] == bos ? 1 : 0;
    size_t len = 0;
    char *text = stream_text(t, ids + skip, n_ids - skip, &len);
    if (!text || !len) {
        free(text);
        return 0;
    }
    /* a control token besides the BOS rules out a plain entry: skip its
     * encoding (the whole text's, at start, for every image loaded) */
    int control = 0;
    for (size_t i = skip; i < n_ids && !control; i++)
        control = tokenizer_token_type(t, ids[i]) == TOKEN_TYPE_CONTROL;
    int added = 0;
    strata_error err = {0};
    for (int kind = control; kind < 2; kind++) {
        tok_ids enc = {0};
        int flags = TOK_ENCODE_ADD_BOS | (kind ? TOK_ENCODE_SPECIAL : 0);
        if (!tokenizer_encode(t, text, len, flags, &enc, &err) &&
            same_markers(t, ids, n_ids, enc.ids, enc.n))
            added += convindex_add(x, kind, text, len, ids, n_ids) == 0;
        tok_ids_free(&enc);
    }
    free(text);
    return added;
}

int convindex_add_ids(convindex *x, const tokenizer *t, const int32_t *ids, size_t n_ids,
                      int32_t pending)
{
    if (pending < 0)
        return add_ids(x, t, ids, n_ids);
    int32_t *all = malloc((n_ids + 1) * sizeof *all);
    if (!all)
        return 0;
    memcpy(all, ids, n_ids * sizeof *ids);
    all[n_ids] = pending;
    int added = add_ids(x, t, all, n_ids + 1);
    free(all);
    return added;
}
