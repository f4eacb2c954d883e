/* jinja_lex.c: template source to tokens, as jinja2's lexer does it with
 * trim_blocks and lstrip_blocks on (Hugging Face's settings):
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`,
 *     `-#}` all whitespace after it (Python's str.isspace set);
 *   - lstrip_blocks: spaces and tabs between a line's start and `{%` or `{#`
 *     go, unless the tag is `{%+`;
 *   - trim_blocks: the one newline right after `%}` or `#}` goes, unless
 *     the tag ends `+%}`.
 * Text and tag boundaries are found first, expression tokens inside a tag
 * after; a `}}` or `%}` inside open brackets does not end the tag. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

typedef struct lexer {
    jarena *a;
    const char *src;
    size_t len;
    size_t line_pos; /* line_at's cursor */
    int line;
    jtok *t;
    size_t n, cap;
    strata_error *err;
    int rc;
} lexer;

static int line_at(lexer *lx, size_t pos)
{
    for (; lx->line_pos < pos && lx->line_pos < lx->len; lx->line_pos++)
        lx->line += lx->src[lx->line_pos] == '\n';
    return lx->line;
}

static int lex_fail(lexer *lx, size_t pos, int code, const char *what)
{
    lx->rc = strata_err(lx->err, code, "chat template line %d: %s", line_at(lx, pos), what);
    return lx->rc;
}

static jtok *push(lexer *lx, jtok_kind k, size_t pos, const char *p, size_t n)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? 2 * lx->cap : 64;
        jtok *t = ja_alloc(lx->a, cap * sizeof *t);
        if (!t) {
            lex_fail(lx, pos, STRATA_E_NOMEM, "out of memory for tokens");
            return NULL;
        }
        if (lx->n)
            memcpy(t, lx->t, lx->n * sizeof *t);
        lx->t = t;
        lx->cap = cap;
    }
    jtok *t = &lx->t[lx->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line_at(lx, pos);
    t->p = p;
    t->n = n;
    return t;
}

static size_t skip_space(const char *s, size_t len, size_t pos)
{
    size_t k;
    while ((k = py_space_at(s + pos, len - pos)) != 0)
        pos += k;
    return pos;
}

static void put_utf8(char *o, size_t *n, unsigned c)
{
    if (c < 0x80) {
        o[(*n)++] = (char)c;
    } else if (c < 0x800) {
        o[(*n)++] = (char)(0xC0 | c >> 6);
        o[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        o[(*n)++] = (char)(0xE0 | c >> 12);
        o[(*n)++] = (char)(0x80 | (c >> 6 & 0x3F));
        o[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else {
        o[(*n)++] = (char)(0xF0 | c >> 18);
        o[(*n)++] = (char)(0x80 | (c >> 12 & 0x3F));
        o[(*n)++] = (char)(0x80 | (c >> 6 & 0x3F));
        o[(*n)++] = (char)(0x80 | (c & 0x3F));
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal at pos (quote included); Python's escapes (jinja2
 * decodes literals with "unicode-escape"); an unknown escape stays as
 * written.  Returns the position after the closing quote, 0 on error. */
static size_t lex_string(lexer *lx, size_t pos)
{
    const char *s = lx->src;
    char q = s[pos];
    size_t i = pos + 1;
    while (i < lx->len && s[i] != q)
        i += s[i] == '\\' && i + 1 < lx->len ? 2 : 1;
    if (i >= lx->len) {
        lex_fail(lx, pos, STRATA_E_FORMAT, "unterminated string literal");
        return 0;
    }
    char *o = ja_alloc(lx->a, i - pos + 1);
    if (!o) {
        lex_fail(lx, pos, STRATA_E_NOMEM, "out of memory for a string");
        return 0;
    }
    size_t n = 0;
    for (size_t j = pos + 1; j < i; j++) {
        if (s[j] != '\\') {
            o[n++] = s[j];
            continue;
        }
        char c = s[++j];
        int w = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        switch (c) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case '\\': o[n++] = '\\'; break;
        case '\'': o[n++] = '\''; break;
        case '"': o[n++] = '"'; break;
        case 'a': o[n++] = '\a'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case '\n': break; /* a backslash-newline continues the line */
        case 'N':
            lex_fail(lx, j, STRATA_E_UNSUPPORTED, "\\N{...} escapes are not supported");
            return 0;
        default:
            if (c >= '0' && c <= '7') {
                unsigned v = 0;
                int k = 0;
                for (; k < 3 && j < i && s[j] >= '0' && s[j] <= '7'; k++, j++)
                    v = v * 8 + (unsigned)(s[j] - '0');
                j--;
                put_utf8(o, &n, v);
            } else if (w) {
                unsigned v = 0;
                for (int k = 1; k <= w; k++) {
                    int h = j + (size_t)k < i ? hexval(s[j + (size_t)k]) : -1;
                    if (h < 0) {
                        lex_fail(lx, j, STRATA_E_FORMAT, "truncated \\x, \\u or \\U escape");
                        return 0;
                    }
                    v = v * 16 + (unsigned)h;
                }
                if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                    lex_fail(lx, j, STRATA_E_UNSUPPORTED, "escape is not a Unicode scalar value");
                    return 0;
                }
                j += (size_t)w;
                put_utf8(o, &n, v);
            } else {
                o[n++] = '\\';
                o[n++] = c;
            }
        }
    }
    jtok *t = push(lx, JT_STRING, pos, o, n);
    return t ? i + 1 : 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%",
                                  "~", "(", ")", "[", "]", "{", "}", ".", ":", ",", "|",
                                  "=", "<", ">"};

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* A number at pos: digits (with '_' between), an optional fraction, an
 * optional exponent.  Returns the position after it, 0 on error. */
/* 0x1f, 0o17, 0b101 (with '_' between digits), as jinja2 3 reads them. */
static size_t lex_radix(lexer *lx, size_t pos)
{
    const char *s = lx->src;
    char r = (char)(s[pos + 1] | 0x20);
    int base = r == 'x' ? 16 : r == 'o' ? 8 : 2;
    size_t i = pos + 2;
    uint64_t v = 0;
    int digits = 0;
    for (; i < lx->len; i++) {
        if (s[i] == '_' && digits)
            continue;
        int d = hexval(s[i]);
        if (d < 0 || d >= base)
            break;
        if (v > (uint64_t)INT64_MAX / (uint64_t)base) {
            lex_fail(lx, pos, STRATA_E_UNSUPPORTED, "integer literal out of 64-bit range");
            return 0;
        }
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > (uint64_t)INT64_MAX) {
            lex_fail(lx, pos, STRATA_E_UNSUPPORTED, "integer literal out of 64-bit range");
            return 0;
        }
        digits++;
    }
    if (!digits) { /* "0x" alone: the 0, then the name */
        jtok *t = push(lx, JT_INT, pos, s + pos, 1);
        return t ? pos + 1 : 0;
    }
    jtok *t = push(lx, JT_INT, pos, s + pos, i - pos);
    if (!t)
        return 0;
    t->i = (int64_t)v;
    return i;
}

static size_t lex_number(lexer *lx, size_t pos)
{
    const char *s = lx->src;
    size_t i = pos;
    if (s[pos] == '0' && pos + 1 < lx->len && strchr("xXoObB", s[pos + 1]) && s[pos + 1])
        return lex_radix(lx, pos);
    char buf[64];
    size_t nb = 0;
    bool is_float = false;
    while (i < lx->len && (is_digit(s[i]) || (s[i] == '_' && i + 1 < lx->len && is_digit(s[i + 1])))) {
        if (s[i] != '_' && nb < sizeof buf - 1)
            buf[nb++] = s[i];
        i++;
    }
    if (i + 1 < lx->len && s[i] == '.' && is_digit(s[i + 1])) {
        is_float = true;
        buf[nb < sizeof buf - 1 ? nb++ : nb] = '.';
        for (i++; i < lx->len && (is_digit(s[i]) || s[i] == '_'); i++)
            if (s[i] != '_' && nb < sizeof buf - 1)
                buf[nb++] = s[i];
    }
    if (i < lx->len && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->len && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < lx->len && is_digit(s[j])) {
            is_float = true;
            for (; i < j; i++)
                if (nb < sizeof buf - 1)
                    buf[nb++] = s[i];
            for (; i < lx->len && is_digit(s[i]); i++)
                if (nb < sizeof buf - 1)
                    buf[nb++] = s[i];
        }
    }
    if (nb >= sizeof buf - 1) {
        lex_fail(lx, pos, STRATA_E_UNSUPPORTED, "number literal too long");
        return 0;
    }
    buf[nb] = '\0';
    jtok *t = push(lx, is_float ? JT_FLOAT : JT_INT, pos, s + pos, i - pos);
    if (!t)
        return 0;
    errno = 0;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            lex_fail(lx, pos, STRATA_E_UNSUPPORTED, "integer literal out of 64-bit range");
            return 0;
        }
    }
    return i;
}

/* The tokens inside a tag whose opening ended at pos; returns the position
 * after the closing tag and whether it asked to strip (-) or keep (+). */
static size_t lex_tag(lexer *lx, size_t start, size_t pos, bool block, char *ctl)
{
    const char *s = lx->src;
    char close = block ? '%' : '}';
    char stack[64];
    int depth = 0;
    for (;;) {
        pos = skip_space(s, lx->len, pos);
        if (pos >= lx->len) {
            lex_fail(lx, start, STRATA_E_FORMAT, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
            return 0;
        }
        if (depth == 0) {
            if (s[pos] == '-' && pos + 2 < lx->len && s[pos + 1] == close && s[pos + 2] == '}') {
                *ctl = '-';
                return pos + 3;
            }
            if (block && s[pos] == '+' && pos + 2 < lx->len && s[pos + 1] == '%' && s[pos + 2] == '}') {
                *ctl = '+';
                return pos + 3;
            }
            if (s[pos] == close && pos + 1 < lx->len && s[pos + 1] == '}') {
                *ctl = 0;
                return pos + 2;
            }
        }
        char c = s[pos];
        if (c == '\'' || c == '"') {
            if (!(pos = lex_string(lx, pos)))
                return 0;
        } else if (is_digit(c)) {
            if (!(pos = lex_number(lx, pos)))
                return 0;
        } else if (is_name_start(c)) {
            size_t e = pos;
            while (e < lx->len && (is_name_start(s[e]) || is_digit(s[e])))
                e++;
            if (!push(lx, JT_NAME, pos, s + pos, e - pos))
                return 0;
            pos = e;
        } else {
            size_t k = 0;
            for (; k < sizeof OPS / sizeof OPS[0]; k++)
                if (strncmp(s + pos, OPS[k], strlen(OPS[k])) == 0)
                    break;
            if (k == sizeof OPS / sizeof OPS[0]) {
                char what[64];
                snprintf(what, sizeof what, "unexpected character '%c' (0x%02x)",
                         (unsigned char)c >= 0x20 && (unsigned char)c < 0x7F ? c : '?',
                         (unsigned char)c);
                lex_fail(lx, pos, STRATA_E_FORMAT, what);
                return 0;
            }
            size_t n = strlen(OPS[k]);
            if (n == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth == (int)sizeof stack) {
                    lex_fail(lx, pos, STRATA_E_LIMIT, "brackets nested too deep");
                    return 0;
                }
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
                if (depth == 0 || stack[depth - 1] != c) {
                    char what[48];
                    snprintf(what, sizeof what, "unexpected '%c'", c);
                    lex_fail(lx, pos, STRATA_E_FORMAT, what);
                    return 0;
                }
                depth--;
            }
            if (!push(lx, JT_OP, pos, s + pos, n))
                return 0;
            pos += n;
        }
    }
}

int jinja_lex(jarena *a, const char *src, size_t len, jtok **out, size_t *n,
              strata_error *err)
{
    lexer lx = {.a = a, .src = src, .len = len, .line = 1, .err = err};
    size_t pos = 0;
    bool line_starting = true;
    while (pos < len) {
        size_t ts = pos;
        while (ts + 1 < len && !(src[ts] == '{' && (src[ts + 1] == '{' || src[ts + 1] == '%' ||
                                                    src[ts + 1] == '#')))
            ts++;
        if (ts + 1 >= len) {
            if (!push(&lx, JT_TEXT, pos, src + pos, len - pos))
                return lx.rc;
            break;
        }
        char kind = src[ts + 1];
        char ctl = ts + 2 < len ? src[ts + 2] : 0;
        size_t te = ts; /* end of the text before the tag */
        if (ctl == '-') {
            size_t k;
            while ((k = py_space_before(src + pos, te - pos)) != 0)
                te -= k;
        } else if (ctl != '+' && kind != '{') { /* lstrip_blocks */
            size_t l = te;
            while (l > pos && src[l - 1] != '\n')
                l--;
            if (l > pos || line_starting) {
                size_t k = l;
                while (k < te && py_space_at(src + k, te - k))
                    k += py_space_at(src + k, te - k);
                if (k == te)
                    te = l;
            }
        }
        if (te > pos && !push(&lx, JT_TEXT, pos, src + pos, te - pos))
            return lx.rc;
        size_t p = ts + 2 + (ctl == '-' || ctl == '+');
        char ectl = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = p; i + 1 < len; i++)
                if (src[i] == '#' && src[i + 1] == '}') {
                    e = src + i;
                    break;
                }
            if (!e)
                return lex_fail(&lx, ts, STRATA_E_FORMAT, "unclosed comment '{#'");
            size_t ei = (size_t)(e - src);
            if (ei > p && (src[ei - 1] == '-' || src[ei - 1] == '+'))
                ectl = src[ei - 1];
            pos = ei + 2;
        } else {
            if (!push(&lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, ts, src + ts, 2))
                return lx.rc;
            pos = lex_tag(&lx, ts, p, kind == '%', &ectl);
            if (!pos)
                return lx.rc;
            if (!push(&lx, kind == '%' ? JT_BLOCK_END : JT_VAR_END, pos - 2, src + pos - 2, 2))
                return lx.rc;
        }
        if (ectl == '-')
            pos = skip_space(src, len, pos);
        else if (ectl != '+' && kind != '{' && pos < len && src[pos] == '\n')
            pos++; /* trim_blocks */
        line_starting = src[pos - 1] == '\n';
    }
    if (!push(&lx, JT_EOF, len, src + len, 0))
        return lx.rc;
    *out = lx.t;
    *n = lx.n;
    return 0;
}
