/* convindex.c: text -> ids of past conversations (see convindex.h).
 *
 * A list in LRU order, searched linearly: a few hundred entries of a few
 * kilobytes each compare in microseconds, against a prompt read that
 * costs milliseconds per token. */
#include "serve/convindex.h"

#include <pthread.h>
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
