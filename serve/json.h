/* json.h: a strict JSON (RFC 8259) parser into a small tree, and a writer.
 *
 * The parser takes exactly the grammar of RFC 8259 and nothing more: no
 * comments, no trailing commas, no leading zeros, no NaN, no bare control
 * characters in strings, whitespace only space/tab/LF/CR, one value and
 * nothing after it.  Strings must be valid UTF-8 (no overlong forms, no
 * encoded surrogates, nothing above U+10FFFF), and \u escapes decode to
 * UTF-8, a high surrogate only with the low one that follows it.  Nesting
 * is limited (JSON_MAX_DEPTH) so a hostile body cannot exhaust the stack.
 * An error names what was wrong and the byte offset where.
 *
 * The writer (jbuf) escapes what JSON requires and replaces any invalid
 * UTF-8 it is handed with U+FFFD, so what it writes always parses. */
#ifndef STRATA_SERVE_JSON_H
#define STRATA_SERVE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define JSON_MAX_DEPTH 64

typedef enum json_type {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json json;
struct json {
    json_type type;
    double num;          /* JSON_NUMBER */
    char *str;           /* JSON_STRING: UTF-8, NUL-terminated; may hold a
                          * NUL from \u0000, so len is the length */
    size_t len;
    json **items;        /* JSON_ARRAY items, JSON_OBJECT values */
    size_t n;
    char **keys;         /* JSON_OBJECT: keys[i] names items[i] */
    size_t *key_lens;
};

/* Parse text[0..n).  0 and *out (free with json_free), or STRATA_E_FORMAT
 * with err saying what and at which byte (STRATA_E_NOMEM out of memory). */
int json_parse(const char *text, size_t n, json **out, strata_error *err);
void json_free(json *v); /* NULL ok */

/* The value of key in an object (the last one when a key repeats), or NULL
 * (also when v is not an object). */
const json *json_get(const json *v, const char *key);
const char *json_type_name(json_type t);
/* 1 if v is a number with an integer value within [lo, hi]; *out gets it. */
int json_int(const json *v, int64_t lo, int64_t hi, int64_t *out);

/* ---- writer ---------------------------------------------------------- */

typedef struct jbuf {
    char *p;
    size_t len, cap;
    int oom;            /* an allocation failed: the text is incomplete */
} jbuf;

void jbuf_free(jbuf *b);
void jbuf_raw(jbuf *b, const char *s, size_t n);
/* s[0..n) without its NUL bytes: an answer's text.  A model may write the
 * byte token for 0x00 (random-weight models do), and a request holding a
 * NUL is refused (serve/request.c), so a client sending the answer back as
 * history would be refused; the conversation index maps the text without
 * them to the ids written, so the next turn still finds those. */
void jbuf_text(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal (quotes included) of s[0..n). */
void jbuf_str(jbuf *b, const char *s, size_t n);
void jbuf_cstr(jbuf *b, const char *s);
/* A number: integers exactly, others with 17 significant digits; a
 * non-finite value (JSON has none) as null. */
void jbuf_num(jbuf *b, double v);
/* The serialization of a tree (compact). */
void jbuf_json(jbuf *b, const json *v);

/* Length of the longest prefix of s[0..n) that is valid, complete UTF-8. */
size_t utf8_valid_prefix(const char *s, size_t n);

#endif
