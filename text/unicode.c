/* unicode.c: UTF-8 decode/encode and character classes (see unicode.h). */
#include "text/unicode.h"

size_t utf8_seq_len(unsigned char lead)
{
    if (lead < 0x80) return 1;
    if (lead < 0xC2) return 0; /* continuation byte, or overlong C0/C1 */
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    if (lead < 0xF5) return 4;
    return 0;
}

size_t utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
    size_t n = utf8_seq_len(s[0]);
    if (n == 1) {
        *cp = s[0];
        return 1;
    }
    if (n == 0 || n > len)
        goto invalid;
    uint32_t c = s[0] & (0xFF >> (n + 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            goto invalid;
        c = (c << 6) | (s[i] & 0x3F);
    }
    /* Reject overlong forms, surrogates and values past U+10FFFF, the way
     * every strict decoder (and Python's) does. */
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        goto invalid;
    *cp = c;
    return n;
invalid:
    *cp = UNICODE_INVALID;
    return 1;
}

size_t utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Binary search over sorted inclusive ranges. */
static int in_ranges(const unicode_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int unicode_is_letter(uint32_t cp)
{
    if (cp < 0x80) /* the common case, without a search */
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(unicode_letter, unicode_letter_count, cp);
}

int unicode_is_number(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return in_ranges(unicode_number, unicode_number_count, cp);
}

int unicode_is_space(uint32_t cp)
{
    return in_ranges(unicode_space, unicode_space_count, cp);
}

enum unicode_class unicode_classify(uint32_t cp)
{
    if (cp == UNICODE_INVALID)
        return UNICODE_OTHER;
    if (unicode_is_letter(cp)) return UNICODE_LETTER;
    if (unicode_is_number(cp)) return UNICODE_NUMBER;
    if (unicode_is_space(cp)) return UNICODE_SPACE;
    return UNICODE_OTHER;
}
