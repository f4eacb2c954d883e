/* pretokenize.c: the pre-tokenizer rules of doc/formats.md §5.3, hand-written.
 *
 * Each rule is the regular expression llama.cpp and Hugging Face use, turned
 * into a function that, given the characters of a segment and a start
 * position, returns how many characters the regex's first matching
 * alternative takes there.  The regexes (\p{L} letter, \p{N} number, \s
 * whitespace):
 *
 *   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
 *           |\s+(?!\S)|\s+
 *   qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   llama3: qwen2 with \p{N}{1,3} in place of \p{N}
 *   smollm: every \p{N} is a piece of its own, then gpt2 on the rest.
 *
 * `\s+(?!\S)` is the one subtle part: a whitespace run followed by a
 * non-space gives back its last character, so " word" keeps its space. */
#include <stdlib.h>

#include "text/tokenizer_impl.h"

static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* Index one past the run of characters of class cls starting at i. */
static size_t run_of(const tok_char *c, size_t n, size_t i, int cls)
{
    while (i < n && c[i].cls == cls)
        i++;
    return i;
}

/* 's 't 'm 'd 're 've 'll at i: length 2 or 3, else 0. */
static size_t contraction(const tok_char *c, size_t n, size_t i, int fold)
{
    if (c[i].cp != '\'' || i + 1 >= n)
        return 0;
    uint32_t a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
    if (fold) { /* ASCII case folding is all (?i) changes here */
        if (a >= 'A' && a <= 'Z') a |= 0x20;
        if (b >= 'A' && b <= 'Z') b |= 0x20;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* \s+(?!\S) then \s+, at a whitespace character i. */
static size_t space_run(const tok_char *c, size_t n, size_t i)
{
    size_t k = run_of(c, n, i, UNICODE_SPACE);
    if (k == n || k - i == 1)
        return k - i; /* ends the segment, or a lone one: \s+ */
    return k - i - 1; /* give the last one back to the next piece */
}

static size_t match_gpt2(const tok_char *c, size_t n, size_t i)
{
    size_t m = contraction(c, n, i, 0);
    if (m)
        return m;
    size_t j = i + (c[i].cp == ' ' && i + 1 < n && c[i + 1].cls != UNICODE_SPACE);
    if (c[j].cls != UNICODE_SPACE) /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
        return run_of(c, n, j, c[j].cls) - i;
    return space_run(c, n, i);
}

static size_t match_qwen2(const tok_char *c, size_t n, size_t i, size_t max_digits)
{
    size_t m = contraction(c, n, i, 1);
    if (m)
        return m;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c[i].cls == UNICODE_LETTER)
        return run_of(c, n, i, UNICODE_LETTER) - i;
    if (c[i].cls != UNICODE_NUMBER && !is_crlf(c[i].cp) && i + 1 < n &&
        c[i + 1].cls == UNICODE_LETTER)
        return run_of(c, n, i + 1, UNICODE_LETTER) - i;
    /* \p{N} or \p{N}{1,3} */
    if (c[i].cls == UNICODE_NUMBER) {
        size_t k = i;
        while (k < n && k - i < max_digits && c[k].cls == UNICODE_NUMBER)
            k++;
        return k - i;
    }
    /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    size_t j = i + (c[i].cp == ' ' && i + 1 < n && c[i + 1].cls == UNICODE_OTHER);
    if (c[j].cls == UNICODE_OTHER) {
        size_t k = run_of(c, n, j, UNICODE_OTHER);
        while (k < n && is_crlf(c[k].cp))
            k++;
        return k - i;
    }
    /* Only whitespace is left.  \s*[\r\n]+ : up to the run's last CR/LF. */
    size_t k = run_of(c, n, i, UNICODE_SPACE), last = n;
    for (size_t q = i; q < k; q++)
        if (is_crlf(c[q].cp))
            last = q;
    if (last != n)
        return last + 1 - i;
    return space_run(c, n, i);
}

/* Apply one regex rule over c[0..n) and emit the pieces. */
static int split_rule(enum tok_pre pre, const char *text, const tok_char *c,
                      size_t n, tok_piece_fn emit, void *ctx)
{
    size_t i = 0;
    while (i < n) {
        size_t m = pre == TOK_PRE_GPT2 || pre == TOK_PRE_SMOLLM
                       ? match_gpt2(c, n, i)
                       : match_qwen2(c, n, i, pre == TOK_PRE_LLAMA3 ? 3 : 1);
        size_t end = i + m;
        size_t off = c[i].off;
        size_t bytes = c[end - 1].off + c[end - 1].len - off;
        int rc = emit(ctx, text + off, bytes);
        if (rc)
            return rc;
        i = end;
    }
    return 0;
}

int pretokenize(enum tok_pre pre, const char *text, size_t len,
                tok_piece_fn emit, void *ctx)
{
    if (len == 0)
        return 0;
    if (pre == TOK_PRE_NONE)
        return emit(ctx, text, len);
    tok_char *c = malloc(len * sizeof *c); /* at most one per byte */
    if (!c)
        return STRATA_E_NOMEM;
    size_t n = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t off = 0; off < len;) {
        uint32_t cp;
        size_t l = utf8_next(s + off, len - off, &cp);
        c[n++] = (tok_char){cp, (uint32_t)off, (uint8_t)l, (uint8_t)unicode_classify(cp)};
        off += l;
    }
    int rc = 0;
    if (pre == TOK_PRE_SMOLLM) {
        /* Pass (a): each number alone; pass (b) sees only what lies between,
         * so its lookahead never crosses a digit. */
        size_t start = 0;
        for (size_t i = 0; i <= n && !rc; i++) {
            if (i < n && c[i].cls != UNICODE_NUMBER)
                continue;
            if (i > start) /* offsets in c are absolute: no re-basing */
                rc = split_rule(pre, text, c + start, i - start, emit, ctx);
            if (!rc && i < n)
                rc = emit(ctx, text + c[i].off, c[i].len);
            start = i + 1;
        }
    } else {
        rc = split_rule(pre, text, c, n, emit, ctx);
    }
    free(c);
    return rc;
}
