/* jinja_value.c: the arena, buffers and values of the Jinja interpreter:
 * truth, equality and order as Python has them, str()/repr() as Jinja
 * prints values, and Hugging Face's tojson (json.dumps with
 * ensure_ascii=False). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

/* ---- arena --------------------------------------------------------------- */
struct jarena_chunk {
    jarena_chunk *next;
    size_t used, size;
    max_align_t data[];
};

void *ja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (a->cap && (n > a->cap || a->used > a->cap - n))
        return NULL;
    jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->size = size;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(jarena *a)
{
    for (jarena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- buffers ------------------------------------------------------------- */
void jb_add(jbuf *b, const char *s, size_t n)
{
    if (b->over || b->oom)
        return;
    if (b->max && n > b->max - b->n) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = ja_alloc(b->ar, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jb_str(jbuf *b, const char *s) { jb_add(b, s, strlen(s)); }

jbuf jb_new(jstate *s)
{
    jbuf b = {0};
    b.ar = &s->ar;
    return b;
}

void jw(jstate *s, jbuf *b, const char *p, size_t n)
{
    jb_add(b, p, n);
    if (b->over)
        jfail(s, s->line, STRATA_E_LIMIT, "output longer than %zu bytes", b->max);
    if (b->oom)
        jfail(s, s->line, STRATA_E_LIMIT, "uses more than %zu bytes of memory",
              s->lim.max_memory);
}

jv jb_value(jstate *s, jbuf *b)
{
    (void)s;
    return jv_str(b->p ? b->p : "", b->n);
}

void *js_alloc(jstate *s, size_t n)
{
    void *p = ja_alloc(&s->ar, n);
    if (!p)
        jfail(s, s->line, STRATA_E_LIMIT, "uses more than %zu bytes of memory",
              s->lim.max_memory);
    return p;
}

_Noreturn void jfail(jstate *s, int line, int code, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (line > 0)
        strata_err(s->err, code, "chat template line %d: %s", line, why);
    else
        strata_err(s->err, code, "chat template: %s", why);
    longjmp(s->fail, 1);
}

/* ---- UTF-8 and Python's whitespace --------------------------------------- */
size_t utf8_count(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

size_t utf8_offset(const char *p, size_t n, size_t cp)
{
    size_t i = 0;
    for (size_t c = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80 && c++ == cp)
            return i;
    return n;
}

/* str.isspace(): ASCII \t..\r, \x1c..\x1f and space, and the Unicode
 * separators U+0085 U+00A0 U+1680 U+2000..200A U+2028 U+2029 U+202F U+205F
 * U+3000. */
static bool py_space_cp(unsigned c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Decode one code point at p (n bytes left); *len its bytes (1 for a bad byte). */
static unsigned utf8_dec(const unsigned char *p, size_t n, size_t *len)
{
    unsigned c = p[0];
    size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k > n)
        k = 1;
    *len = k;
    if (k == 1)
        return c;
    c &= 0x3F >> (k - 1);
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            *len = 1;
            return p[0];
        }
        c = (c << 6) | (p[i] & 0x3F);
    }
    return c;
}

size_t py_space_at(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    size_t len;
    unsigned c = utf8_dec((const unsigned char *)p, n, &len);
    return py_space_cp(c) ? len : 0;
}

size_t py_space_before(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    size_t k = n - 1;
    while (k > 0 && n - k < 4 && ((unsigned char)p[k] & 0xC0) == 0x80)
        k--;
    size_t got = py_space_at(p + k, n - k);
    return got == n - k ? got : 0;
}

/* ---- values -------------------------------------------------------------- */
const char *jv_type_name(jv v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "str",
                                        "list", "dict", "loop", "macro", "function"};
    if (v.k == JV_LIST && v.u.l->tuple)
        return "tuple";
    if (v.k == JV_DICT && v.u.d->ns)
        return "namespace";
    return names[v.k];
}

bool jv_truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0 || v.u.d->ns;
    default: return true;
    }
}

static bool is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num(jv v)
{
    return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : (double)v.u.b;
}

bool jv_eq(jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT)
            return (a.k == JV_INT ? a.u.i : a.u.b) == (b.k == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.k != b.k)
        return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->ns || b.u.d->ns)
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv o;
            if (!jd_get(b.u.d, a.u.d->key[i], &o) || !jv_eq(a.u.d->val[i], o))
                return false;
        }
        return true;
    case JV_LOOP: return a.u.loop == b.u.loop;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

int jv_cmp(jstate *s, int line, jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.k == JV_INT && b.k == JV_INT)
            return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, n); /* UTF-8 byte order is code point order */
        return c ? c : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return jv_cmp(s, line, a.u.l->v[i], b.u.l->v[i]);
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jfail(s, line, STRATA_E_TYPE, "cannot order %s and %s", jv_type_name(a), jv_type_name(b));
}

jv jv_strdup(jstate *s, const char *p, size_t n)
{
    char *q = js_alloc(s, n + 1);
    memcpy(q, p, n);
    return jv_str(q, n);
}

jv jv_cat(jstate *s, jv a, jv b)
{
    if (a.u.s.n > SIZE_MAX / 2 || b.u.s.n > SIZE_MAX / 2)
        jfail(s, s->line, STRATA_E_LIMIT, "string too long");
    char *q = js_alloc(s, a.u.s.n + b.u.s.n + 1);
    memcpy(q, a.u.s.p, a.u.s.n);
    memcpy(q + a.u.s.n, b.u.s.p, b.u.s.n);
    return jv_str(q, a.u.s.n + b.u.s.n);
}

jlist *jl_new(jstate *s, size_t cap)
{
    jlist *l = js_alloc(s, sizeof *l);
    if (cap) {
        if (cap > s->lim.max_memory / sizeof(jv))
            jfail(s, s->line, STRATA_E_LIMIT, "uses more than %zu bytes of memory",
                  s->lim.max_memory);
        l->v = js_alloc(s, cap * sizeof(jv));
        l->cap = cap;
    }
    return l;
}

/* Lists and dicts nest at most MAX_NEST deep (namespaces, the only
 * mutable values, are not counted through: they compare by identity), so
 * comparing and printing values cannot run out of stack. */
enum { MAX_NEST = 200 };

static void note_depth(jstate *s, int *depth, jv v)
{
    int d = v.k == JV_LIST ? v.u.l->depth + 1 : v.k == JV_DICT && !v.u.d->ns ? v.u.d->depth + 1 : 0;
    if (d > *depth) {
        if (d > MAX_NEST)
            jfail(s, s->line, STRATA_E_LIMIT, "lists and dicts nested deeper than %d", MAX_NEST);
        *depth = d;
    }
}

void js_charge(jstate *s, uint64_t units)
{
    if (units > s->lim.max_steps - s->steps)
        jfail(s, s->line, STRATA_E_LIMIT, "more than %llu steps (a string or list too long "
              "for the work asked?)", (unsigned long long)s->lim.max_steps);
    s->steps += units;
}

void jl_push(jstate *s, jlist *l, jv v)
{
    note_depth(s, &l->depth, v);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        if (cap > s->lim.max_memory / sizeof(jv))
            jfail(s, s->line, STRATA_E_LIMIT, "uses more than %zu bytes of memory",
                  s->lim.max_memory);
        jv *nv = js_alloc(s, cap * sizeof(jv));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jdict *jd_new(jstate *s) { return js_alloc(s, sizeof(jdict)); }

bool jd_get(const jdict *d, jv key, jv *out)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->key[i], key)) {
            *out = d->val[i];
            return true;
        }
    return false;
}

void jd_set(jstate *s, jdict *d, jv key, jv val)
{
    if (!d->ns) {
        note_depth(s, &d->depth, key);
        note_depth(s, &d->depth, val);
    }
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->key[i], key)) {
            d->val[i] = val;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        jv *k = js_alloc(s, cap * sizeof(jv)), *v = js_alloc(s, cap * sizeof(jv));
        if (d->n) {
            memcpy(k, d->key, d->n * sizeof(jv));
            memcpy(v, d->val, d->n * sizeof(jv));
        }
        d->key = k;
        d->val = v;
        d->cap = cap;
    }
    d->key[d->n] = key;
    d->val[d->n++] = val;
}

/* Python's repr of a float: the shortest digits that read back the same. */
static void write_float(jstate *s, jbuf *b, double f)
{
    char t[40];
    if (isnan(f)) {
        jw(s, b, "nan", 3);
        return;
    }
    if (isinf(f)) {
        jw(s, b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
        return;
    }
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(t, sizeof t, "%.*e", prec - 1, f);
        if (strtod(t, NULL) == f)
            break;
    }
    snprintf(t, sizeof t, "%.*e", prec - 1, f);
    int exp = atoi(strchr(t, 'e') + 1);
    if (exp >= -4 && exp < 16) { /* fixed notation, at least one decimal */
        int dec = prec - 1 - exp;
        snprintf(t, sizeof t, "%.*f", dec > 0 ? dec : 0, f);
        if (dec <= 0) {
            size_t n = strlen(t);
            snprintf(t + n, sizeof t - n, ".0");
        }
    } else { /* Python: mantissa without trailing ".", exponent of two digits or more */
        char m[40];
        snprintf(m, sizeof m, "%.*e", prec - 1, f);
        *strchr(m, 'e') = '\0';
        int ax = exp < 0 ? -exp : exp;
        snprintf(t, sizeof t, "%.24se%c%02d", m, exp < 0 ? '-' : '+', ax % 1000);
    }
    jw(s, b, t, strlen(t));
}

/* repr() of a string: Python's quote choice and escapes. */
static void write_repr_str(jstate *s, jbuf *b, const char *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jw(s, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char t[8];
        if (c == (unsigned char)q || c == '\\') {
            t[0] = '\\', t[1] = (char)c;
            jw(s, b, t, 2);
        } else if (c == '\n') {
            jw(s, b, "\\n", 2);
        } else if (c == '\r') {
            jw(s, b, "\\r", 2);
        } else if (c == '\t') {
            jw(s, b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(t, sizeof t, "\\x%02x", c);
            jw(s, b, t, 4);
        } else {
            jw(s, b, (const char *)&p[i], 1);
        }
    }
    jw(s, b, &q, 1);
}

static void write_value(jstate *s, jbuf *b, jv v, bool repr, int level)
{
    if (level > 2 * MAX_NEST) /* only through namespaces holding themselves */
        jfail(s, s->line, STRATA_E_LIMIT, "value nested deeper than %d to print", 2 * MAX_NEST);
    char t[32];
    switch (v.k) {
    case JV_UNDEF: break;
    case JV_NONE: jw(s, b, "None", 4); break;
    case JV_BOOL: jw(s, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5); break;
    case JV_INT:
        snprintf(t, sizeof t, "%lld", (long long)v.u.i);
        jw(s, b, t, strlen(t));
        break;
    case JV_FLOAT: write_float(s, b, v.u.f); break;
    case JV_STR:
        if (repr)
            write_repr_str(s, b, v.u.s.p, v.u.s.n);
        else
            jw(s, b, v.u.s.p, v.u.s.n);
        break;
    case JV_LIST: {
        bool tup = v.u.l->tuple;
        jw(s, b, tup ? "(" : "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jw(s, b, ", ", 2);
            write_value(s, b, v.u.l->v[i], true, level + 1);
        }
        if (tup && v.u.l->n == 1)
            jw(s, b, ",", 1);
        jw(s, b, tup ? ")" : "]", 1);
        break;
    }
    case JV_DICT:
        if (v.u.d->ns) {
            jw(s, b, "<Namespace ", 11);
        }
        jw(s, b, "{", 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                jw(s, b, ", ", 2);
            write_value(s, b, v.u.d->key[i], true, level + 1);
            jw(s, b, ": ", 2);
            write_value(s, b, v.u.d->val[i], true, level + 1);
        }
        jw(s, b, "}", 1);
        if (v.u.d->ns)
            jw(s, b, ">", 1);
        break;
    case JV_LOOP: jw(s, b, "<LoopContext>", 13); break;
    case JV_MACRO: jw(s, b, "<Macro>", 7); break;
    case JV_FUNC: jw(s, b, "<function>", 10); break;
    }
}

void jv_write(jstate *s, jbuf *b, jv v, bool repr) { write_value(s, b, v, repr, 0); }

jv jv_to_str(jstate *s, jv v)
{
    if (v.k == JV_STR)
        return v;
    if (v.k == JV_UNDEF)
        return jv_str("", 0);
    jbuf b = jb_new(s);
    jv_write(s, &b, v, false);
    return jb_value(s, &b);
}

static void json_str(jstate *s, jbuf *b, const char *p, size_t n)
{
    jw(s, b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char t[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(t, sizeof t, "\\u%04x", c);
                esc = t;
            }
        }
        if (esc) {
            jw(s, b, p + i - run, run);
            run = 0;
            jw(s, b, esc, strlen(esc));
        } else {
            run++;
        }
    }
    jw(s, b, p + n - run, run);
    jw(s, b, "\"", 1);
}

static void json_nl(jstate *s, jbuf *b, int indent, int level)
{
    jw(s, b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        jw(s, b, " ", 1);
}

/* json.dumps(v, ensure_ascii=False, indent=indent or None). */
void jv_tojson(jstate *s, int line, jbuf *b, jv v, int indent, int level)
{
    if (level > s->lim.max_depth)
        jfail(s, line, STRATA_E_LIMIT, "tojson: nesting deeper than %d", s->lim.max_depth);
    switch (v.k) {
    case JV_NONE: jw(s, b, "null", 4); break;
    case JV_BOOL: jw(s, b, v.u.b ? "true" : "false", v.u.b ? 4 : 5); break;
    case JV_INT: jv_write(s, b, v, false); break;
    case JV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f))
            jw(s, b, isnan(v.u.f) ? "NaN" : v.u.f < 0 ? "-Infinity" : "Infinity",
               isnan(v.u.f) ? 3 : v.u.f < 0 ? 9 : 8);
        else
            jv_write(s, b, v, false);
        break;
    case JV_STR: json_str(s, b, v.u.s.p, v.u.s.n); break;
    case JV_LIST:
        jw(s, b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jw(s, b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
            if (indent >= 0)
                json_nl(s, b, indent, level + 1);
            jv_tojson(s, line, b, v.u.l->v[i], indent, level + 1);
        }
        if (indent >= 0 && v.u.l->n)
            json_nl(s, b, indent, level);
        jw(s, b, "]", 1);
        break;
    case JV_DICT:
        jw(s, b, "{", 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                jw(s, b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
            if (indent >= 0)
                json_nl(s, b, indent, level + 1);
            jv k = v.u.d->key[i];
            if (k.k == JV_STR)
                json_str(s, b, k.u.s.p, k.u.s.n);
            else if (k.k == JV_INT || k.k == JV_FLOAT) {
                jw(s, b, "\"", 1);
                jv_write(s, b, k, false);
                jw(s, b, "\"", 1);
            } else if (k.k == JV_BOOL || k.k == JV_NONE) {
                jw(s, b, "\"", 1);
                jv_tojson(s, line, b, k, -1, level + 1);
                jw(s, b, "\"", 1);
            } else {
                jfail(s, line, STRATA_E_TYPE, "tojson: keys must be str, not %s",
                      jv_type_name(k));
            }
            jw(s, b, ": ", 2);
            jv_tojson(s, line, b, v.u.d->val[i], indent, level + 1);
        }
        if (indent >= 0 && v.u.d->n)
            json_nl(s, b, indent, level);
        jw(s, b, "}", 1);
        break;
    default:
        jfail(s, line, STRATA_E_TYPE, "tojson: object of type %s is not JSON serializable",
              jv_type_name(v));
    }
}

jlist *jv_iterate(jstate *s, int line, jv v)
{
    switch (v.k) {
    case JV_UNDEF: return jl_new(s, 0);
    case JV_LIST: return v.u.l;
    case JV_DICT: {
        jlist *l = jl_new(s, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            jl_push(s, l, v.u.d->key[i]);
        return l;
    }
    case JV_STR: {
        jlist *l = jl_new(s, 0);
        const char *p = v.u.s.p;
        size_t n = v.u.s.n;
        for (size_t i = 0; i < n;) {
            size_t k = 1;
            while (i + k < n && ((unsigned char)p[i + k] & 0xC0) == 0x80)
                k++;
            jl_push(s, l, jv_str(p + i, k));
            i += k;
        }
        return l;
    }
    default:
        jfail(s, line, STRATA_E_TYPE, "%s object is not iterable", jv_type_name(v));
    }
}
