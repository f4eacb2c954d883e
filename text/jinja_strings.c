/* jinja_strings.c: the string work of the Jinja interpreter's builtins,
 * each as Python does it: strip (Python's whitespace, or a set of
 * characters), case changes (ASCII letters only), replace, split, prefix
 * and suffix tests, find/count (linear: memmem) and join. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

jv js_need_str(jstate *s, int line, jv v, const char *what)
{
    if (v.k != JV_STR)
        jfail(s, line, STRATA_E_TYPE, "%s needs a string, not %s", what, jv_type_name(v));
    return v;
}

int64_t js_need_int(jstate *s, int line, jv v, const char *what)
{
    if (v.k == JV_INT) return v.u.i;
    if (v.k == JV_BOOL) return v.u.b;
    jfail(s, line, STRATA_E_TYPE, "%s needs an integer, not %s", what, jv_type_name(v));
}

/* ---- strings ------------------------------------------------------------- */
static bool in_chars(const char *p, size_t n, jv chars)
{
    if (chars.k != JV_STR)
        return false;
    for (size_t i = 0; i + n <= chars.u.s.n; i++) {
        size_t k = 1;
        while (i + k < chars.u.s.n && ((unsigned char)chars.u.s.p[i + k] & 0xC0) == 0x80)
            k++;
        if (k == n && memcmp(chars.u.s.p + i, p, n) == 0)
            return true;
        i += k - 1;
    }
    return false;
}

static size_t cp_len(const char *p, size_t n)
{
    size_t k = 1;
    while (k < n && ((unsigned char)p[k] & 0xC0) == 0x80)
        k++;
    return k;
}

static size_t cp_len_before(const char *p, size_t n)
{
    size_t k = 1;
    while (k < n && ((unsigned char)p[n - k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* str.strip/lstrip/rstrip(chars): Python's whitespace without chars. */
jv js_strip(jstate *s, jv v, jv chars, bool left, bool right)
{
    /* each character tested against chars costs a look through them */
    uint64_t per = chars.k == JV_STR ? chars.u.s.n / 16 + 1 : 0;
    const char *p = v.u.s.p;
    size_t n = v.u.s.n;
    bool ws = chars.k != JV_STR;
    while (left && n) {
        size_t k = ws ? py_space_at(p, n) : in_chars(p, cp_len(p, n), chars) ? cp_len(p, n) : 0;
        if (per)
            js_charge(s, per);
        if (!k)
            break;
        p += k;
        n -= k;
    }
    while (right && n) {
        size_t k = ws ? py_space_before(p, n)
                      : in_chars(p + n - cp_len_before(p, n), cp_len_before(p, n), chars)
                            ? cp_len_before(p, n) : 0;
        if (per)
            js_charge(s, per);
        if (!k)
            break;
        n -= k;
    }
    return jv_str(p, n);
}

static char up(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }
static char low(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }
static bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

jv js_case(jstate *s, jv v, int how)
{
    char *q = js_alloc(s, v.u.s.n + 1);
    bool start = true;
    for (size_t i = 0; i < v.u.s.n; i++) {
        char c = v.u.s.p[i];
        switch (how) {
        case CASE_UPPER: q[i] = up(c); break;
        case CASE_LOWER: q[i] = low(c); break;
        case CASE_CAPITALIZE: q[i] = i == 0 ? up(c) : low(c); break;
        case CASE_TITLE_METHOD: /* str.title(): a letter after a non-letter starts a word */
            q[i] = start ? up(c) : low(c);
            start = !alpha(c) && ((unsigned char)c < 0x80);
            break;
        default: /* jinja2's title: words begin after runs of - whitespace ( { [ < */
            q[i] = start ? up(c) : low(c);
            start = strchr("-({[< \t\n\r\f\v", c) != NULL && c != '\0';
        }
    }
    return jv_str(q, v.u.s.n);
}

jv js_replace(jstate *s, int line, jv v, jv old, jv new_, int64_t count)
{
    js_need_str(s, line, old, "replace");
    js_need_str(s, line, new_, "replace");
    jbuf b = jb_new(s);
    const char *p = v.u.s.p;
    size_t n = v.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) { /* Python inserts new between every character */
        while (i <= n) {
            if (count >= 0 && done >= count) {
                jw(s, &b, p + i, n - i);
                break;
            }
            jw(s, &b, new_.u.s.p, new_.u.s.n);
            done++;
            if (i == n)
                break;
            size_t k = cp_len(p + i, n - i);
            jw(s, &b, p + i, k);
            i += k;
        }
        return jb_value(s, &b);
    }
    while (i < n) {
        const char *at = count < 0 || done < count
                             ? memmem(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!at) {
            jw(s, &b, p + i, n - i);
            break;
        }
        jw(s, &b, p + i, (size_t)(at - (p + i)));
        jw(s, &b, new_.u.s.p, new_.u.s.n);
        i = (size_t)(at - p) + old.u.s.n;
        done++;
    }
    return jb_value(s, &b);
}

jv js_split(jstate *s, int line, jv v, jv sep, int64_t maxsplit)
{
    jlist *l = jl_new(s, 0);
    const char *p = v.u.s.p;
    size_t n = v.u.s.n, i = 0;
    if (sep.k == JV_NONE || sep.k == JV_UNDEF) { /* runs of whitespace, none at the ends */
        for (;;) {
            size_t k;
            while (i < n && (k = py_space_at(p + i, n - i)))
                i += k;
            if (i >= n)
                break;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                jv rest = js_strip(s, jv_str(p + i, n - i), jv_none(), false, true);
                jl_push(s, l, rest);
                break;
            }
            size_t st = i;
            while (i < n && !py_space_at(p + i, n - i))
                i++;
            jl_push(s, l, jv_str(p + st, i - st));
        }
        return jv_list(l);
    }
    js_need_str(s, line, sep, "split");
    if (sep.u.s.n == 0)
        jfail(s, line, STRATA_E_ARG, "split: empty separator");
    size_t st = 0;
    while (maxsplit < 0 || (int64_t)l->n < maxsplit) {
        const char *at = memmem(p + st, n - st, sep.u.s.p, sep.u.s.n);
        if (!at)
            break;
        jl_push(s, l, jv_str(p + st, (size_t)(at - (p + st))));
        st = (size_t)(at - p) + sep.u.s.n;
    }
    jl_push(s, l, jv_str(p + st, n - st));
    return jv_list(l);
}

bool js_affix(jstate *s, int line, jv v, jv what, bool start)
{
    if (what.k == JV_LIST) {
        for (size_t i = 0; i < what.u.l->n; i++)
            if (js_affix(s, line, v, what.u.l->v[i], start))
                return true;
        return false;
    }
    js_need_str(s, line, what, start ? "startswith" : "endswith");
    if (what.u.s.n > v.u.s.n)
        return false;
    return memcmp(start ? v.u.s.p : v.u.s.p + v.u.s.n - what.u.s.n, what.u.s.p,
                  what.u.s.n) == 0;
}

int64_t js_find(jv v, jv sub, int64_t *count)
{
    int64_t first = -1;
    *count = 0;
    if (sub.u.s.n == 0) {
        *count = (int64_t)utf8_count(v.u.s.p, v.u.s.n) + 1;
        return 0;
    }
    for (size_t i = 0; i + sub.u.s.n <= v.u.s.n;) {
        const char *at = memmem(v.u.s.p + i, v.u.s.n - i, sub.u.s.p, sub.u.s.n);
        if (!at)
            break;
        i = (size_t)(at - v.u.s.p);
        if (first < 0)
            first = (int64_t)utf8_count(v.u.s.p, i);
        ++*count;
        i += sub.u.s.n;
    }
    return first;
}

jv js_join(jstate *s, int line, jv seq, jv sep, jv attr)
{
    jlist *l = jv_iterate(s, line, seq);
    jv sp = jv_to_str(s, sep);
    jbuf b = jb_new(s);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            jw(s, &b, sp.u.s.p, sp.u.s.n);
        jv x = l->v[i];
        if (attr.k == JV_STR)
            x = x.k == JV_DICT ? (jd_get(x.u.d, attr, &x) ? x : jv_undef()) : jv_undef();
        jv_write(s, &b, x, false);
    }
    return jb_value(s, &b);
}
