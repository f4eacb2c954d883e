/* tokenizer_impl.h: what tokenizer.c, tokenizer_bpe.c, tokenizer_spm.c and
 * pretokenize.c share.  Not part of the public API (tokenizer.h). */
#ifndef STRATA_TOKENIZER_IMPL_H
#define STRATA_TOKENIZER_IMPL_H

#include "text/tokenizer.h"
#include "text/unicode.h"

/* Token text -> id: open addressing over a power-of-two table of ids. */
typedef struct tok_strmap {
    int32_t *slots; /* -1 = empty */
    size_t mask;
} tok_strmap;

/* (left id, right id) -> merge rank and merged id, for BPE. */
typedef struct tok_pair {
    uint64_t key;   /* left << 32 | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t id;
} tok_pair;
typedef struct tok_pairmap {
    tok_pair *slots;
    size_t mask;
} tok_pairmap;

struct tokenizer {
    enum tok_model model;
    enum tok_pre pre;
    int32_t n_vocab;
    char **text;          /* [n_vocab] NUL-terminated vocabulary text */
    uint32_t *text_len;   /* [n_vocab] */
    uint8_t *type;        /* [n_vocab] enum token_type */
    float *score;         /* [n_vocab] SPM scores (0 when absent) */
    char **bytes;         /* [n_vocab] decoded bytes (see token_bytes) */
    uint32_t *bytes_len;  /* [n_vocab] */
    size_t max_bytes;
    char *arena;          /* owns every text[i] */
    char *byte_arena;     /* owns every bytes[i] */
    tok_strmap vocab;
    tok_pairmap merges;
    int32_t byte_id[256]; /* BPE: token of the mapped byte; SPM: <0xNN>; -1 */
    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    bool nfc;             /* NFC-normalize text between special tokens */
    int32_t *stop;        /* stop tokens, n_stop of them */
    size_t n_stop;
    int32_t *special;     /* ids matched in text, longest text first */
    size_t n_special;
};

/* ---- hash maps (tokenizer.c) ---- */
int32_t tok_strmap_get(const tokenizer *t, const char *s, size_t len);
const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t l, int32_t r);

/* ---- pre-tokenizer (pretokenize.c) ---- */

/* One character of a segment: where it is and its class. */
typedef struct tok_char {
    uint32_t cp;   /* code point, UNICODE_INVALID for a stray byte */
    uint32_t off;  /* byte offset in the segment */
    uint8_t len;   /* bytes */
    uint8_t cls;   /* enum unicode_class */
} tok_char;

/* Called once per piece, in order; nonzero return stops the split. */
typedef int (*tok_piece_fn)(void *ctx, const char *piece, size_t len);

/* Split text[0..len) into pieces by the rule `pre`.  Returns 0, the first
 * nonzero value emit returned, or STRATA_E_NOMEM. */
int pretokenize(enum tok_pre pre, const char *text, size_t len,
                tok_piece_fn emit, void *ctx);

/* ---- algorithms ---- */

/* The BPE byte <-> symbol mapping of doc/formats.md §5.2 step 3. */
uint32_t bpe_byte_to_cp(uint8_t b);
int bpe_cp_to_byte(uint32_t cp); /* -1 if cp is not one of the 256 */

/* Encode one pre-tokenized piece (raw bytes) with byte-level BPE. */
int bpe_encode_piece(const tokenizer *t, const char *piece, size_t len,
                     tok_ids *out);
/* Encode one text segment (no special tokens inside) with SPM. */
int spm_encode_segment(const tokenizer *t, const char *text, size_t len,
                       bool first, tok_ids *out);

#endif
