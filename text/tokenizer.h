/* tokenizer.h: text <-> token ids, from the GGUF tokenizer metadata
 * (doc/formats.md §5).
 *
 * Two algorithms:
 *   - byte-level BPE (`tokenizer.ggml.model = gpt2`: SmolLM2, Qwen, Llama-3):
 *     special tokens, then a hand-written pre-tokenizer (`tokenizer.ggml.pre`:
 *     smollm, qwen2, llama-bpe, gpt-2/default), bytes mapped to symbols, merges
 *     by rank;
 *   - SentencePiece-style BPE (`llama`: Gemma): `▁` for space, merges by
 *     score, `<0xNN>` byte tokens for characters not in the vocabulary.
 *
 * A tokenizer is immutable once built: encode and decode may run from
 * several threads at once.  Streaming decode (tokdec) holds per-stream state.
 * Ids are int32_t; -1 means "none" wherever an id may be absent. */
#ifndef STRATA_TOKENIZER_H
#define STRATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/gguf.h"

/* tokenizer.ggml.token_type values. */
enum token_type {
    TOKEN_TYPE_UNDEFINED = 0,
    TOKEN_TYPE_NORMAL = 1,
    TOKEN_TYPE_UNKNOWN = 2,
    TOKEN_TYPE_CONTROL = 3,
    TOKEN_TYPE_USER_DEFINED = 4,
    TOKEN_TYPE_UNUSED = 5,
    TOKEN_TYPE_BYTE = 6,
};

enum tok_model { TOK_MODEL_BPE = 1, TOK_MODEL_SPM = 2 };

/* Pre-tokenizers (BPE only), doc/formats.md §5.3. */
enum tok_pre {
    TOK_PRE_NONE = 0,   /* SPM: no pre-tokenization */
    TOK_PRE_GPT2,       /* "gpt-2", "default": the GPT-2 rule */
    TOK_PRE_SMOLLM,     /* "smollm": every \p{N} alone, then the GPT-2 rule */
    TOK_PRE_QWEN2,      /* "qwen2", "deepseek-r1-qwen" */
    TOK_PRE_LLAMA3,     /* "llama-bpe", "llama3": qwen2 with digits in 1..3 */
};

typedef struct tokenizer tokenizer;

/* What a tokenizer is built from: the GGUF keys as plain arrays, so a
 * tokenizer can also be made without a file (tests, mkmodel).  Ids use -1
 * for "key absent" and flags -1 for "key absent"; the model's defaults
 * (doc/formats.md §5.1) then apply. */
typedef struct tokenizer_desc {
    const char *name;          /* for error messages (the file path) */
    const char *model;         /* "gpt2" or "llama" */
    const char *pre;           /* NULL: "default" */
    size_t n_vocab;
    const gguf_str *tokens;    /* n_vocab token texts */
    const int32_t *types;      /* n_vocab enum token_type, or NULL (all normal) */
    const float *scores;       /* n_vocab SPM scores, or NULL */
    size_t n_merges;
    const gguf_str *merges;    /* BPE "left right", rank = index */
    int64_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix;
} tokenizer_desc;

/* A desc with every id and flag set to "absent". */
void tokenizer_desc_init(tokenizer_desc *d);

int tokenizer_new(const tokenizer_desc *d, tokenizer **out, strata_error *err);
/* Read tokenizer.ggml.* from an open GGUF file and build the tokenizer. */
int tokenizer_from_gguf(const gguf *g, tokenizer **out, strata_error *err);
void tokenizer_free(tokenizer *t);

/* ---- properties ------------------------------------------------------- */

size_t tokenizer_n_vocab(const tokenizer *t);
enum tok_model tokenizer_model(const tokenizer *t);
enum tok_pre tokenizer_pre(const tokenizer *t);
/* Does encode NFC-normalize plain text first (the qwen2 pre-tokenizers)? */
bool tokenizer_nfc(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);  /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t);
int32_t tokenizer_eot(const tokenizer *t);
bool tokenizer_add_bos(const tokenizer *t); /* prepend bos to a prompt? */
bool tokenizer_add_eos(const tokenizer *t);
/* The ids that end generation: eos, eot, eom, and <|im_end|>,
 * <|endoftext|>, <|eot_id|>, <end_of_turn> when in the vocabulary. */
size_t tokenizer_stop_tokens(const tokenizer *t, const int32_t **ids);
bool tokenizer_is_stop(const tokenizer *t, int32_t id);
enum token_type tokenizer_token_type(const tokenizer *t, int32_t id);
/* The token's vocabulary text (e.g. "Ġthe"), NUL-terminated; NULL if id is
 * out of range. */
const char *tokenizer_token_text(const tokenizer *t, int32_t id);
/* Exact vocabulary lookup of a token text; -1 if absent. */
int32_t tokenizer_find(const tokenizer *t, const char *text, size_t len);
/* The most bytes one token decodes to. */
size_t tokenizer_max_token_bytes(const tokenizer *t);

/* ---- encode ------------------------------------------------------------ */

/* A growable id buffer the caller owns; start zeroed, free with tok_ids_free.
 * Encoding appends, so several pieces can be encoded into one buffer. */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_free(tok_ids *v);
int tok_ids_push(tok_ids *v, int32_t id);

enum tok_encode_flags {
    /* Recognise the text of control tokens (e.g. "<|im_start|>") and emit
     * their ids.  Chat markup needs it; user text should not have it, so a
     * user cannot inject control tokens.  User-defined tokens (type 4) are
     * always recognised, as in llama.cpp. */
    TOK_ENCODE_SPECIAL = 1,
    /* Prepend bos / append eos when the model asks for it (add_bos/eos). */
    TOK_ENCODE_ADD_BOS = 2,
    TOK_ENCODE_ADD_EOS = 4,
};

/* Encode text[0..len) (any bytes; invalid UTF-8 is carried byte by byte)
 * and append the ids to out. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                     int flags, tok_ids *out, strata_error *err);

/* ---- decode ------------------------------------------------------------ */

enum tok_decode_flags {
    /* Render control tokens as their text; otherwise they decode to "". */
    TOK_DECODE_SPECIAL = 1,
};

/* The raw bytes one token stands for (may be part of a UTF-8 character).
 * Control/unknown/unused tokens give their text only with
 * TOK_DECODE_SPECIAL.  Returns NULL with *len = 0 for an id out of range. */
const char *tokenizer_token_bytes(const tokenizer *t, int32_t id, int flags,
                                  size_t *len);

/* Decode ids into a malloc'd NUL-terminated string (*len bytes, raw: may
 * hold invalid UTF-8 if the ids do).  Out-of-range ids are an error. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n,
                     int flags, char **out, size_t *len, strata_error *err);

/* Streaming decoder: feed ids one at a time, get back only complete UTF-8
 * characters, so a caller printing as it goes never prints half a
 * character.  A byte sequence that cannot become valid UTF-8 comes out as
 * U+FFFD. */
typedef struct tokdec tokdec;
int tokdec_new(const tokenizer *t, int flags, tokdec **out, strata_error *err);
void tokdec_free(tokdec *d);
/* Returns the complete text this token finishes (possibly ""), NUL-
 * terminated, valid until the next call; *len its length.  NULL with an
 * error for an out-of-range id. */
const char *tokdec_push(tokdec *d, int32_t id, size_t *len, strata_error *err);
/* End of stream: bytes still pending become U+FFFD each. */
const char *tokdec_flush(tokdec *d, size_t *len);
/* Forget pending bytes (new answer). */
void tokdec_reset(tokdec *d);

#endif
