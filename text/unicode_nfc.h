/* unicode_nfc.h: Unicode Normalization Form C, for the tokenizers whose
 * Hugging Face definition normalizes text before splitting it (Qwen2's;
 * doc/tokenizer.md, "NFC").
 *
 * NFC = the full canonical decomposition of every character, the canonical
 * ordering of each run of combining marks by combining class, then canonical
 * composition of each mark with the last starter it is not blocked from.
 * Hangul syllables decompose and compose by arithmetic; everything else comes
 * from tables generated from Python's unicodedata by
 * scripts/gen_unicode_nfc.py (the Unicode version of unicode_tables.c). */
#ifndef STRATA_UNICODE_NFC_H
#define STRATA_UNICODE_NFC_H

#include <stddef.h>
#include <stdint.h>

typedef struct unicode_ccc_range {
    uint32_t first, last; /* inclusive */
    uint8_t ccc;          /* canonical combining class, 1..254 */
} unicode_ccc_range;

typedef struct unicode_decomp {
    uint32_t cp;
    uint16_t off; /* into unicode_decomp_pool */
    uint8_t len;  /* 1..UNICODE_DECOMP_MAX */
} unicode_decomp;

typedef struct unicode_pair {
    uint32_t first, second, composite;
} unicode_pair;

/* The longest full canonical decomposition (the generator checks it). */
#define UNICODE_DECOMP_MAX 4

/* the Unicode version the tables were generated from ("14.0.0") */
extern const char unicode_nfc_version[];
extern const unicode_ccc_range unicode_ccc[];
extern const size_t unicode_ccc_count;
extern const uint32_t unicode_decomp_pool[];
extern const unicode_decomp unicode_decomps[];
extern const size_t unicode_decomp_count;
extern const unicode_pair unicode_compose[];
extern const size_t unicode_compose_count;

/* Canonical combining class of cp (0 for starters and unassigned cp). */
int unicode_ccc_of(uint32_t cp);

/* The primary composite of (a, b), Hangul included; 0 if there is none. */
uint32_t unicode_compose_pair(uint32_t a, uint32_t b);

/* NFC of text[0..len).  Sets *out to NULL when the text is already NFC (the
 * caller keeps using text), else to a malloc'ed, NUL-terminated normalized
 * copy of *out_len bytes that the caller frees.  Bytes that are not valid
 * UTF-8 pass through unchanged and block composition across them, as any
 * starter would.  Returns 0, or STRATA_E_NOMEM. */
int unicode_nfc(const char *text, size_t len, char **out, size_t *out_len);

#endif
