/* test_gguf.h: what the GGUF suites share (test_gguf.c, test_gguf_write.c):
 * a growing byte buffer, to build files byte by byte and to collect text. */
#ifndef STRATA_TEST_GGUF_H
#define STRATA_TEST_GGUF_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

/* Append n bytes of p to b (the caller frees b->p). */
static inline void put(buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

#endif
