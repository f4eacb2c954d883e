/* unicode.h: the little Unicode the tokenizer needs.
 *
 * UTF-8 decoding that never fails (an invalid byte is reported as one
 * 1-byte character so byte-level BPE can still carry it), UTF-8 encoding, and
 * the three character classes of the pre-tokenizer rules (doc/formats.md §5.3):
 * letter \p{L}, number \p{N}, whitespace \s.  The classes are range tables
 * generated from Python's unicodedata by scripts/gen_unicode_tables.py. */
#ifndef STRATA_UNICODE_H
#define STRATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct unicode_range {
    uint32_t first, last; /* inclusive */
} unicode_range;

extern const unicode_range unicode_letter[];
extern const size_t unicode_letter_count;
extern const unicode_range unicode_number[];
extern const size_t unicode_number_count;
extern const unicode_range unicode_space[];
extern const size_t unicode_space_count;

/* Marks a byte that does not start a valid UTF-8 sequence (see utf8_next). */
#define UNICODE_INVALID 0xFFFFFFFFu

/* Decode the character at s[0..len) (len >= 1).  Returns its length in bytes
 * (1..4) and stores the code point in *cp; for an invalid or truncated
 * sequence, overlong form or surrogate, returns 1 and *cp = UNICODE_INVALID. */
size_t utf8_next(const unsigned char *s, size_t len, uint32_t *cp);

/* Length (1..4) of the sequence a lead byte announces, 0 for a byte that
 * cannot start one (continuation byte, 0xC0, 0xC1, 0xF5..0xFF). */
size_t utf8_seq_len(unsigned char lead);

/* Encode cp (<= 0x10FFFF) into out[0..4); returns the byte count. */
size_t utf8_put(uint32_t cp, char *out);

int unicode_is_letter(uint32_t cp);
int unicode_is_number(uint32_t cp);
int unicode_is_space(uint32_t cp);

/* Character classes as one small number, computed once per character. */
enum unicode_class {
    UNICODE_OTHER = 0,
    UNICODE_LETTER = 1,
    UNICODE_NUMBER = 2,
    UNICODE_SPACE = 3,
};
enum unicode_class unicode_classify(uint32_t cp);

#endif
