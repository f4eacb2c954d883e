/* unicode_nfc.c: Unicode Normalization Form C (see unicode_nfc.h).
 *
 * The three steps of the standard (UAX #15) over one code point buffer:
 *   1. decompose every character fully (tables, Hangul by arithmetic);
 *   2. sort each run of non-zero combining classes by class, stably;
 *   3. walk the buffer, composing each character with the last starter when
 *      nothing between them blocks it (a character of class 0 or of a class
 *      not below its own), in place.
 * Text whose bytes are all below 0xCC holds only code points below U+0300:
 * none of those is a mark or the second half of a pair (the generator checks
 * it), so such text, which is most text, is returned as it is at once. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/unicode.h"
#include "text/unicode_nfc.h"

/* Hangul syllables: S = SBASE + (L * VCOUNT + V) * TCOUNT + T (Unicode §3.12). */
enum {
    SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
    LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT,
    SCOUNT = LCOUNT * NCOUNT,
};

/* A byte that does not start valid UTF-8 travels as STRAY | byte: above every
 * code point, so no table matches it, and written back as the byte. */
#define STRAY 0x80000000u

int unicode_ccc_of(uint32_t cp)
{
    if (cp < 0x300 || cp >= STRAY)
        return 0;
    size_t lo = 0, hi = unicode_ccc_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_ccc[mid].first)
            hi = mid;
        else if (cp > unicode_ccc[mid].last)
            lo = mid + 1;
        else
            return unicode_ccc[mid].ccc;
    }
    return 0;
}

static const unicode_decomp *find_decomp(uint32_t cp)
{
    if (cp < 0xC0 || cp >= STRAY)
        return NULL;
    size_t lo = 0, hi = unicode_decomp_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_decomps[mid].cp)
            hi = mid;
        else if (cp > unicode_decomps[mid].cp)
            lo = mid + 1;
        else
            return &unicode_decomps[mid];
    }
    return NULL;
}

uint32_t unicode_compose_pair(uint32_t a, uint32_t b)
{
    if (b < 0x300 || a >= STRAY || b >= STRAY)
        return 0;
    if (a - LBASE < LCOUNT && b - VBASE < VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a - SBASE < SCOUNT && (a - SBASE) % TCOUNT == 0 && b - TBASE - 1 < TCOUNT - 1)
        return a + (b - TBASE);
    size_t lo = 0, hi = unicode_compose_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const unicode_pair *p = &unicode_compose[mid];
        if (a < p->first || (a == p->first && b < p->second))
            hi = mid;
        else if (a > p->first || b > p->second)
            lo = mid + 1;
        else
            return p->composite;
    }
    return 0;
}

/* Step 1: the full canonical decomposition of s[0..len) into cp[], classes
 * into cc[]; returns the count. */
static size_t decompose(const unsigned char *s, size_t len, uint32_t *cp, uint8_t *cc)
{
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        uint32_t c;
        size_t l = utf8_next(s + off, len - off, &c);
        if (c == UNICODE_INVALID) {
            c = STRAY | s[off];
        } else if (c - SBASE < SCOUNT) {
            uint32_t si = c - SBASE;
            cp[n] = LBASE + si / NCOUNT;
            cc[n++] = 0;
            cp[n] = VBASE + (si % NCOUNT) / TCOUNT;
            cc[n++] = 0;
            if (si % TCOUNT == 0) {
                off += l;
                continue;
            }
            c = TBASE + si % TCOUNT;
        } else {
            const unicode_decomp *d = find_decomp(c);
            if (d) {
                for (size_t k = 0; k + 1 < d->len; k++) {
                    cp[n] = unicode_decomp_pool[d->off + k];
                    cc[n] = (uint8_t)unicode_ccc_of(cp[n]);
                    n++;
                }
                c = unicode_decomp_pool[d->off + d->len - 1];
            }
        }
        cp[n] = c;
        cc[n++] = (uint8_t)unicode_ccc_of(c);
        off += l;
    }
    return n;
}

/* Step 2: canonical ordering.  Insertion sort moving a mark back past marks
 * of a higher class only: stable, and runs of marks are short. */
static void reorder(uint32_t *cp, uint8_t *cc, size_t n)
{
    for (size_t k = 1; k < n; k++) {
        uint8_t c = cc[k];
        if (c == 0 || cc[k - 1] <= c)
            continue;
        uint32_t x = cp[k];
        size_t j = k;
        while (j > 0 && cc[j - 1] > c) {
            cp[j] = cp[j - 1];
            cc[j] = cc[j - 1];
            j--;
        }
        cp[j] = x;
        cc[j] = c;
    }
}

/* Step 3: canonical composition in place; returns the new count. */
static size_t compose(uint32_t *cp, uint8_t *cc, size_t n)
{
    size_t m = 0, starter = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
        uint32_t c = cp[k];
        uint8_t cls = cc[k];
        /* Not blocked: right after the starter, or every character between
         * (canonically ordered, so the last is the highest) has a class
         * above 0 and below this one's. */
        if (starter != SIZE_MAX && (m - 1 == starter || (cc[m - 1] != 0 && cc[m - 1] < cls))) {
            uint32_t comp = unicode_compose_pair(cp[starter], c);
            if (comp) {
                cp[starter] = comp;
                continue;
            }
        }
        if (cls == 0)
            starter = m;
        cp[m] = c;
        cc[m++] = cls;
    }
    return m;
}

int unicode_nfc(const char *text, size_t len, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len && s[i] < 0xCC)
        i++;
    if (i == len)
        return 0;
    /* One byte decomposes into at most UNICODE_DECOMP_MAX code points, each
     * of which takes at most 4 bytes. */
    if (len > SIZE_MAX / (UNICODE_DECOMP_MAX * 4 * sizeof(uint32_t)))
        return STRATA_E_NOMEM;
    uint32_t *cp = malloc(len * UNICODE_DECOMP_MAX * sizeof *cp);
    uint8_t *cc = malloc(len * UNICODE_DECOMP_MAX);
    char *o = NULL;
    int rc = STRATA_E_NOMEM;
    if (!cp || !cc)
        goto done;
    size_t n = decompose(s, len, cp, cc);
    reorder(cp, cc, n);
    n = compose(cp, cc, n);
    if (!(o = malloc(4 * n + 1)))
        goto done;
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (cp[j] >= STRAY)
            o[k++] = (char)(cp[j] & 0xFF);
        else
            k += utf8_put(cp[j], o + k);
    }
    o[k] = '\0';
    rc = 0;
    if (k == len && memcmp(o, text, len) == 0) { /* was NFC already */
        free(o);
        o = NULL;
        k = 0;
    }
    *out = o;
    *out_len = k;
done:
    free(cp);
    free(cc);
    return rc;
}
