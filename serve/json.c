/* json.c: the strict parser and the writer of json.h.
 *
 * A recursive descent over the bytes, depth-limited.  Each node is its own
 * allocation; arrays and objects grow by doubling.  Numbers are checked
 * against the RFC grammar first and only then converted with strtod, so
 * strtod's extensions (hex, inf, nan, leading '+') never get in. */
#include "serve/json.h"
#include "text/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const unsigned char *s;
    size_t n, i;
    int depth;
    strata_error *err;
} parser;

static int fail(parser *p, const char *what)
{
    return strata_err(p->err, STRATA_E_FORMAT, "json: %s at byte %zu", what, p->i);
}

static int oom(parser *p)
{
    return strata_err(p->err, STRATA_E_NOMEM, "json: out of memory at byte %zu", p->i);
}

static void skip_ws(parser *p)
{
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->i++;
    }
}

/* Length of the UTF-8 sequence at s[0..n) (1..4), or 0 if it is not a
 * valid one: the ranges of RFC 3629's table, which exclude overlong forms,
 * surrogates and code points above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xBF)
            return 0;
    return len;
}

size_t utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l)
            break;
        i += l;
    }
    return i;
}

static json *node(json_type t)
{
    json *v = calloc(1, sizeof *v);
    if (v)
        v->type = t;
    return v;
}

void json_free(json *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->str);
    free(v);
}

/* A growing byte string for decoding string literals. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static int sb_put(sbuf *b, const void *src, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 16;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int hex4(parser *p, unsigned *out)
{
    if (p->n - p->i < 4)
        return fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = p->s[p->i + k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return fail(p, "bad hex digit in \\u escape");
        v = v * 16 + d;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* A string literal at p->i (the opening quote). */
static int parse_string(parser *p, char **out, size_t *out_len)
{
    sbuf b = {0};
    p->i++;
    int rc = 0;
    for (;;) {
        if (p->i >= p->n) {
            rc = fail(p, "unterminated string");
            break;
        }
        unsigned char c = p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20) {
            rc = fail(p, "control character in string");
            break;
        }
        if (c == '\\') {
            if (p->i + 1 >= p->n) {
                rc = fail(p, "unterminated escape");
                break;
            }
            unsigned char e = p->s[p->i + 1];
            const char *simple = NULL;
            switch (e) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            case 'u': break;
            default:
                rc = fail(p, "invalid escape");
            }
            if (rc)
                break;
            if (simple) {
                p->i += 2;
                if (sb_put(&b, simple, 1)) {
                    rc = oom(p);
                    break;
                }
                continue;
            }
            p->i += 2;
            unsigned cp;
            if ((rc = hex4(p, &cp)))
                break;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                p->i -= 6;
                rc = fail(p, "lone low surrogate in \\u escape");
                break;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                    rc = fail(p, "high surrogate not followed by a low one");
                    break;
                }
                p->i += 2;
                unsigned lo;
                if ((rc = hex4(p, &lo)))
                    break;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    p->i -= 6;
                    rc = fail(p, "high surrogate not followed by a low one");
                    break;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            char u[4];
            if (sb_put(&b, u, utf8_put(cp, u))) {
                rc = oom(p);
                break;
            }
            continue;
        }
        /* a run of plain bytes, validated as UTF-8 */
        size_t start = p->i;
        while (p->i < p->n) {
            c = p->s[p->i];
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            size_t l = utf8_seq(p->s + p->i, p->n - p->i);
            if (!l)
                break;
            p->i += l;
        }
        if (p->i < p->n && p->s[p->i] >= 0x80 && p->s[p->i] != '"' && p->s[p->i] != '\\' &&
            !utf8_seq(p->s + p->i, p->n - p->i)) {
            rc = fail(p, "invalid UTF-8 in string");
            break;
        }
        if (sb_put(&b, p->s + start, p->i - start)) {
            rc = oom(p);
            break;
        }
    }
    if (rc) {
        free(b.p);
        return rc;
    }
    if (!b.p && sb_put(&b, "", 0))
        return oom(p);
    *out = b.p;
    *out_len = b.len;
    return 0;
}

static int parse_number(parser *p, json **out)
{
    size_t st = p->i;
    const unsigned char *s = p->s;
    if (p->i < p->n && s[p->i] == '-')
        p->i++;
    if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '9')
        return fail(p, "expected a digit");
    if (s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
            return fail(p, "leading zero in number");
    } else {
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
            p->i++;
    }
    if (p->i < p->n && s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '9')
            return fail(p, "expected a digit after '.'");
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
            p->i++;
    }
    if (p->i < p->n && (s[p->i] == 'e' || s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (s[p->i] == '+' || s[p->i] == '-'))
            p->i++;
        if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '9')
            return fail(p, "expected a digit in exponent");
        while (p->i < p->n && s[p->i] >= '0' && s[p->i] <= '9')
            p->i++;
    }
    size_t len = p->i - st;
    char tmp[64], *buf = len < sizeof tmp ? tmp : malloc(len + 1);
    if (!buf)
        return oom(p);
    memcpy(buf, s + st, len);
    buf[len] = '\0';
    double v = strtod(buf, NULL); /* out of range: +-HUGE_VAL or 0, kept */
    if (buf != tmp)
        free(buf);
    json *n = node(JSON_NUMBER);
    if (!n)
        return oom(p);
    n->num = v;
    *out = n;
    return 0;
}

static int lit(parser *p, const char *word, json_type t, json **out)
{
    size_t l = strlen(word);
    if (p->n - p->i < l || memcmp(p->s + p->i, word, l))
        return fail(p, "invalid literal");
    p->i += l;
    *out = node(t);
    return *out ? 0 : oom(p);
}

/* Append child (and its key) to a container. */
static int push(json *c, json *child, char *key, size_t klen)
{
    if ((c->n & (c->n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to double */
        size_t cap = c->n ? c->n * 2 : 1;
        json **ni = realloc(c->items, cap * sizeof *ni);
        if (!ni)
            return -1;
        c->items = ni;
        if (c->type == JSON_OBJECT) {
            char **nk = realloc(c->keys, cap * sizeof *nk);
            if (!nk)
                return -1;
            c->keys = nk;
            size_t *nl = realloc(c->key_lens, cap * sizeof *nl);
            if (!nl)
                return -1;
            c->key_lens = nl;
        }
    }
    c->items[c->n] = child;
    if (c->type == JSON_OBJECT) {
        c->keys[c->n] = key;
        c->key_lens[c->n] = klen;
    }
    c->n++;
    return 0;
}

static int parse_value(parser *p, json **out);

static int parse_container(parser *p, json **out)
{
    int obj = p->s[p->i] == '{';
    char close = obj ? '}' : ']';
    if (++p->depth > JSON_MAX_DEPTH)
        return fail(p, "nesting deeper than 64");
    p->i++;
    json *c = node(obj ? JSON_OBJECT : JSON_ARRAY);
    if (!c)
        return oom(p);
    int rc = 0;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        goto done;
    }
    for (;;) {
        char *key = NULL;
        size_t klen = 0;
        skip_ws(p);
        if (obj) {
            if (p->i >= p->n || p->s[p->i] != '"') {
                rc = fail(p, "expected a string key");
                break;
            }
            if ((rc = parse_string(p, &key, &klen)))
                break;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                rc = fail(p, "expected ':'");
                break;
            }
            p->i++;
            skip_ws(p);
        }
        json *v = NULL;
        if ((rc = parse_value(p, &v))) {
            free(key);
            break;
        }
        if (push(c, v, key, klen)) {
            json_free(v);
            free(key);
            rc = oom(p);
            break;
        }
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            break;
        }
        rc = fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
done:
    p->depth--;
    if (rc) {
        json_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int parse_value(parser *p, json **out)
{
    skip_ws(p);
    if (p->i >= p->n)
        return fail(p, "unexpected end of input");
    unsigned char c = p->s[p->i];
    switch (c) {
    case '{':
    case '[':
        return parse_container(p, out);
    case '"': {
        json *v = node(JSON_STRING);
        if (!v)
            return oom(p);
        int rc = parse_string(p, &v->str, &v->len);
        if (rc) {
            free(v);
            return rc;
        }
        *out = v;
        return 0;
    }
    case 't':
        return lit(p, "true", JSON_TRUE, out);
    case 'f':
        return lit(p, "false", JSON_FALSE, out);
    case 'n':
        return lit(p, "null", JSON_NULL, out);
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return parse_number(p, out);
        return fail(p, "unexpected character");
    }
}

int json_parse(const char *text, size_t n, json **out, strata_error *err)
{
    parser p = {(const unsigned char *)text, n, 0, 0, err};
    *out = NULL;
    json *v = NULL;
    int rc = parse_value(&p, &v);
    if (rc)
        return rc;
    skip_ws(&p);
    if (p.i != n) {
        json_free(v);
        return fail(&p, "trailing data after the value");
    }
    *out = v;
    return 0;
}

const json *json_get(const json *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = v->n; i-- > 0;)
        if (v->key_lens[i] == kl && !memcmp(v->keys[i], key, kl))
            return v->items[i];
    return NULL;
}

const char *json_type_name(json_type t)
{
    static const char *names[] = {"null", "boolean", "boolean", "number", "string", "array",
                                  "object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

int json_int(const json *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v || v->type != JSON_NUMBER || !isfinite(v->num) || v->num != floor(v->num))
        return 0;
    if (v->num < (double)lo || v->num > (double)hi)
        return 0;
    *out = (int64_t)v->num;
    return 1;
}

/* ---- writer ---------------------------------------------------------- */

void jbuf_free(jbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void jbuf_raw(jbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void jbuf_text(jbuf *b, const char *s, size_t n)
{
    while (n) {
        const char *nul = memchr(s, '\0', n);
        size_t run = nul ? (size_t)(nul - s) : n;
        jbuf_raw(b, s, run);
        run += nul != NULL;
        s += run;
        n -= run;
    }
}

void jbuf_puts(jbuf *b, const char *s)
{
    jbuf_raw(b, s, strlen(s));
}

void jbuf_printf(jbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        jbuf_raw(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jbuf_raw(b, big, (size_t)n);
    free(big);
}

void jbuf_str(jbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    jbuf_raw(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        /* copy runs of bytes that need no escape */
        while (run < n && u[run] >= 0x20 && u[run] != '"' && u[run] != '\\' && u[run] < 0x80)
            run++;
        if (run > i) {
            jbuf_raw(b, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = u[i];
        if (c >= 0x80) {
            size_t l = utf8_seq(u + i, n - i);
            if (l) {
                jbuf_raw(b, s + i, l);
                i += l;
            } else {
                jbuf_raw(b, "\xEF\xBF\xBD", 3); /* U+FFFD for a bad byte */
                i++;
            }
            continue;
        }
        char esc[8];
        switch (c) {
        case '"': jbuf_raw(b, "\\\"", 2); break;
        case '\\': jbuf_raw(b, "\\\\", 2); break;
        case '\n': jbuf_raw(b, "\\n", 2); break;
        case '\r': jbuf_raw(b, "\\r", 2); break;
        case '\t': jbuf_raw(b, "\\t", 2); break;
        case '\b': jbuf_raw(b, "\\b", 2); break;
        case '\f': jbuf_raw(b, "\\f", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jbuf_raw(b, esc, 6);
        }
        i++;
    }
    jbuf_raw(b, "\"", 1);
}

void jbuf_cstr(jbuf *b, const char *s)
{
    jbuf_str(b, s, strlen(s));
}

void jbuf_num(jbuf *b, double v)
{
    if (!isfinite(v)) {
        jbuf_puts(b, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        jbuf_printf(b, "%lld", (long long)v);
    else
        jbuf_printf(b, "%.17g", v);
}

void jbuf_json(jbuf *b, const json *v)
{
    switch (v->type) {
    case JSON_NULL: jbuf_puts(b, "null"); break;
    case JSON_FALSE: jbuf_puts(b, "false"); break;
    case JSON_TRUE: jbuf_puts(b, "true"); break;
    case JSON_NUMBER: jbuf_num(b, v->num); break;
    case JSON_STRING: jbuf_str(b, v->str, v->len); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        jbuf_raw(b, v->type == JSON_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                jbuf_raw(b, ",", 1);
            if (v->type == JSON_OBJECT) {
                jbuf_str(b, v->keys[i], v->key_lens[i]);
                jbuf_raw(b, ":", 1);
            }
            jbuf_json(b, v->items[i]);
        }
        jbuf_raw(b, v->type == JSON_ARRAY ? "]" : "}", 1);
        break;
    }
}
