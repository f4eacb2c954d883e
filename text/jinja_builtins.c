/* jinja_builtins.c: the filters, tests, string and dict methods and global
 * functions a chat template may use (doc/chat-templates.md lists them).
 * Each follows its Python/jinja2 original; upper/lower/title/capitalize
 * change ASCII letters only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_impl.h"


/* The argument at position pos (counting positional ones) or named name. */
static bool arg(jv *a, const char **kw, size_t na, size_t pos, const char *name, jv *out)
{
    size_t p = 0;
    for (size_t i = 0; i < na; i++) {
        if (kw && kw[i]) {
            if (name && !strcmp(kw[i], name)) {
                *out = a[i];
                return true;
            }
        } else if (p++ == pos) {
            *out = a[i];
            return true;
        }
    }
    return false;
}

static jv arg_or(jv *a, const char **kw, size_t na, size_t pos, const char *name, jv dflt)
{
    jv v;
    return arg(a, kw, na, pos, name, &v) ? v : dflt;
}

static bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* ---- tests --------------------------------------------------------------- */
static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=",
    "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "sameas",
    "lower", "upper", NULL};

bool jinja_test_known(const char *name)
{
    for (size_t i = 0; TESTS[i]; i++)
        if (!strcmp(TESTS[i], name))
            return true;
    return false;
}

static bool run_test(jstate *s, int line, const char *t, jv x, jv *a, size_t na)
{
    jv y = na ? a[0] : jv_undef();
    if (!strcmp(t, "defined")) return x.k != JV_UNDEF;
    if (!strcmp(t, "undefined")) return x.k == JV_UNDEF;
    if (!strcmp(t, "none")) return x.k == JV_NONE;
    if (!strcmp(t, "boolean")) return x.k == JV_BOOL;
    if (!strcmp(t, "true")) return x.k == JV_BOOL && x.u.b;
    if (!strcmp(t, "false")) return x.k == JV_BOOL && !x.u.b;
    if (!strcmp(t, "integer")) return x.k == JV_INT;
    if (!strcmp(t, "float")) return x.k == JV_FLOAT;
    if (!strcmp(t, "number")) return x.k == JV_INT || x.k == JV_FLOAT || x.k == JV_BOOL;
    if (!strcmp(t, "string")) return x.k == JV_STR;
    if (!strcmp(t, "mapping")) return x.k == JV_DICT && !x.u.d->ns;
    if (!strcmp(t, "iterable"))
        return x.k == JV_STR || x.k == JV_LIST || (x.k == JV_DICT && !x.u.d->ns) || x.k == JV_UNDEF;
    if (!strcmp(t, "sequence"))
        return x.k == JV_STR || x.k == JV_LIST || (x.k == JV_DICT && !x.u.d->ns);
    if (!strcmp(t, "callable")) return x.k == JV_MACRO || x.k == JV_FUNC;
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (x.k != JV_STR)
            return false;
        bool cased = false;
        for (size_t i = 0; i < x.u.s.n; i++) {
            char c = x.u.s.p[i];
            if (alpha(c)) {
                cased = true;
                if ((t[0] == 'l') != (c >= 'a' && c <= 'z'))
                    return false;
            }
        }
        return cased;
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        int64_t v = js_need_int(s, line, x, t);
        return (v % 2 != 0) == (t[0] == 'o');
    }
    if (!na)
        jfail(s, line, STRATA_E_ARG, "test '%s' needs an argument", t);
    if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==")) return jv_eq(x, y);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_eq(x, y);
    if (!strcmp(t, "lt") || !strcmp(t, "<")) return jv_cmp(s, line, x, y) < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return jv_cmp(s, line, x, y) <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">")) return jv_cmp(s, line, x, y) > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return jv_cmp(s, line, x, y) >= 0;
    if (!strcmp(t, "in")) {
        if (y.k == JV_STR) {
            js_need_str(s, line, x, "test 'in'");
            int64_t c;
            return js_find(y, x, &c) >= 0;
        }
        jlist *l = jv_iterate(s, line, y);
        for (size_t i = 0; i < l->n; i++)
            if (jv_eq(x, l->v[i]))
                return true;
        return false;
    }
    if (!strcmp(t, "sameas")) {
        if (x.k != y.k) return false;
        if (x.k == JV_STR) return x.u.s.p == y.u.s.p && x.u.s.n == y.u.s.n;
        if (x.k == JV_LIST) return x.u.l == y.u.l;
        if (x.k == JV_DICT) return x.u.d == y.u.d;
        return jv_eq(x, y);
    }
    if (!strcmp(t, "divisibleby")) {
        int64_t v = js_need_int(s, line, x, t), d = js_need_int(s, line, y, t);
        if (d == 0)
            jfail(s, line, STRATA_E_ARG, "divisibleby 0");
        return d == -1 || v % d == 0;
    }
    jfail(s, line, STRATA_E_UNSUPPORTED, "unknown test '%s'", t);
}

bool jinja_test(jstate *s, const jnode *n, jv x, jv *args, size_t na)
{
    return run_test(s, n->line, n->name, x, args, na);
}

/* ---- filters ------------------------------------------------------------- */
static const char *const FILTERS[] = {
    "trim", "length", "count", "tojson", "first", "last", "join", "default", "d", "upper",
    "lower", "capitalize", "title", "items", "string", "int", "float", "list", "selectattr",
    "rejectattr", "select", "reject", "map", "reverse", "replace", "safe", "indent", "abs",
    "unique", "sum", "min", "max", "wordcount", NULL};

bool jinja_filter_known(const char *name)
{
    for (size_t i = 0; FILTERS[i]; i++)
        if (!strcmp(FILTERS[i], name))
            return true;
    return false;
}

/* An attribute path "a.b" of an item, as selectattr and map read it. */
static jv item_attr(jstate *s, jv x, jv attr)
{
    const char *p = attr.u.s.p;
    size_t n = attr.u.s.n;
    while (n) {
        const char *dot = memchr(p, '.', n);
        size_t k = dot ? (size_t)(dot - p) : n;
        jv key = jv_str(p, k), r;
        if (x.k == JV_DICT && jd_get(x.u.d, key, &r))
            x = r;
        else if (x.k == JV_LIST && k && k < 19) {
            char buf[20];
            memcpy(buf, p, k);
            buf[k] = '\0';
            char *end;
            long long i = strtoll(buf, &end, 10);
            x = *end == '\0' && i >= 0 && (size_t)i < x.u.l->n ? x.u.l->v[i] : jv_undef();
        } else
            return jv_undef();
        p += k + (dot != NULL);
        n -= k + (dot != NULL);
    }
    (void)s;
    return x;
}

/* select/reject/selectattr/rejectattr: keep items whose (attribute) test
 * passes (want) or fails. */
static jv select_items(jstate *s, int line, jv seq, jv *a, const char **kw, size_t na,
                       bool by_attr, bool want)
{
    jlist *in = jv_iterate(s, line, seq), *out = jl_new(s, 0);
    jv attr = jv_undef(), test = jv_undef();
    size_t first = 0;
    if (by_attr) {
        if (!arg(a, kw, na, 0, NULL, &attr) || attr.k != JV_STR)
            jfail(s, line, STRATA_E_ARG, "selectattr/rejectattr need an attribute name");
        first = 1;
    }
    bool has_test = arg(a, kw, na, first, NULL, &test);
    if (has_test && test.k != JV_STR)
        jfail(s, line, STRATA_E_ARG, "select: the test name must be a string");
    char tname[32] = "";
    if (has_test) {
        snprintf(tname, sizeof tname, "%.*s", (int)test.u.s.n, test.u.s.p);
        if (!jinja_test_known(tname))
            jfail(s, line, STRATA_E_UNSUPPORTED, "unknown test '%s'", tname);
    }
    jv *targs = na > first + 1 ? a + first + 1 : NULL;
    size_t ntargs = na > first + 1 ? na - first - 1 : 0;
    for (size_t i = 0; i < in->n; i++) {
        jv x = by_attr ? item_attr(s, in->v[i], attr) : in->v[i];
        bool ok = has_test ? run_test(s, line, tname, x, targs, ntargs) : jv_truthy(x);
        if (ok == want)
            jl_push(s, out, in->v[i]);
    }
    return jv_list(out);
}

static jv to_int(jstate *s, jv x, jv dflt)
{
    switch (x.k) {
    case JV_INT: return x;
    case JV_BOOL: return jv_int(x.u.b);
    case JV_FLOAT:
        if (x.u.f != x.u.f || x.u.f >= 9.2e18 || x.u.f <= -9.2e18)
            return dflt;
        return jv_int((int64_t)x.u.f);
    case JV_STR: {
        jv t = js_strip(s, x, jv_none(), true, true);
        char buf[64];
        if (t.u.s.n == 0 || t.u.s.n >= sizeof buf)
            return dflt;
        memcpy(buf, t.u.s.p, t.u.s.n);
        buf[t.u.s.n] = '\0';
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (*end == '\0' && errno == 0)
            return jv_int(v);
        /* int(float(s)) as jinja2 falls back to; C's strtod also reads hex
         * and "inf", Python's float() no hex, so only decimal text. */
        if (strspn(buf, "0123456789+-.eE") != t.u.s.n)
            return dflt;
        double d = strtod(buf, &end);
        if (*end == '\0' && d == d && d < 9.2e18 && d > -9.2e18)
            return jv_int((int64_t)d);
        (void)s;
        return dflt;
    }
    default: return dflt;
    }
}

static jv indent(jstate *s, int line, jv v, jv width, bool first, bool blank)
{
    jv ind = width.k == JV_STR ? width : jv_undef();
    if (ind.k == JV_UNDEF) {
        int64_t w = js_need_int(s, line, width, "indent");
        if (w < 0) w = 0;
        if (w > 1024) jfail(s, line, STRATA_E_LIMIT, "indent wider than 1024");
        char *p = js_alloc(s, (size_t)w + 1);
        memset(p, ' ', (size_t)w);
        ind = jv_str(p, (size_t)w);
    }
    /* splitlines() of s + "\n" (lines end at \n, \r\n or \r) */
    jlist *lines = jl_new(s, 0);
    const char *p = v.u.s.p;
    size_t n = v.u.s.n, st = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\n' || p[i] == '\r') {
            jl_push(s, lines, jv_str(p + st, i - st));
            if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n')
                i++;
            st = i + 1;
        }
    jl_push(s, lines, jv_str(p + st, n - st));
    jbuf b = jb_new(s);
    if (first)
        jw(s, &b, ind.u.s.p, ind.u.s.n);
    for (size_t i = 0; i < lines->n; i++) {
        jv l = lines->v[i];
        if (i) {
            jw(s, &b, "\n", 1);
            if (blank || l.u.s.n)
                jw(s, &b, ind.u.s.p, ind.u.s.n);
        }
        jw(s, &b, l.u.s.p, l.u.s.n);
    }
    return jb_value(s, &b);
}

static jv minmax(jstate *s, int line, jv seq, bool max)
{
    jlist *l = jv_iterate(s, line, seq);
    if (!l->n)
        return jv_undef();
    jv best = l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        int c = jv_cmp(s, line, l->v[i], best);
        if (max ? c > 0 : c < 0)
            best = l->v[i];
    }
    return best;
}

jv jinja_filter(jstate *s, const jnode *n, jv x, jv *a, const char **kw, size_t na)
{
    const char *f = n->name;
    int line = n->line;
    if (!strcmp(f, "safe")) return x;
    if (!strcmp(f, "trim"))
        return js_strip(s, js_need_str(s, line, jv_to_str(s, x), "trim"),
                        arg_or(a, kw, na, 0, "chars", jv_none()), true, true);
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (x.k) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)utf8_count(x.u.s.p, x.u.s.n));
        case JV_LIST: return jv_int((int64_t)x.u.l->n);
        case JV_DICT: return jv_int((int64_t)x.u.d->n);
        default: jfail(s, line, STRATA_E_TYPE, "a %s has no length", jv_type_name(x));
        }
    }
    if (!strcmp(f, "tojson")) {
        jv ind = arg_or(a, kw, na, 0, "indent", jv_none());
        int indent = -1;
        if (ind.k != JV_NONE) {
            int64_t w = js_need_int(s, line, ind, "tojson indent");
            indent = w < 0 ? 0 : w > 64 ? 64 : (int)w;
        }
        jbuf b = jb_new(s);
        jv_tojson(s, line, &b, x, indent, 0);
        return jb_value(s, &b);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (x.k == JV_UNDEF)
            return jv_undef();
        jlist *l = jv_iterate(s, line, x);
        return l->n ? l->v[f[0] == 'f' ? 0 : l->n - 1] : jv_undef();
    }
    if (!strcmp(f, "join"))
        return js_join(s, line, x, arg_or(a, kw, na, 0, "d", jv_str("", 0)),
                    arg_or(a, kw, na, 1, "attribute", jv_none()));
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv dflt = arg_or(a, kw, na, 0, "default_value", jv_str("", 0));
        bool boolean = jv_truthy(arg_or(a, kw, na, 1, "boolean", jv_bool(false)));
        return x.k == JV_UNDEF || (boolean && !jv_truthy(x)) ? dflt : x;
    }
    if (!strcmp(f, "upper")) return js_case(s, jv_to_str(s, x), CASE_UPPER);
    if (!strcmp(f, "lower")) return js_case(s, jv_to_str(s, x), CASE_LOWER);
    if (!strcmp(f, "capitalize")) return js_case(s, jv_to_str(s, x), CASE_CAPITALIZE);
    if (!strcmp(f, "title")) return js_case(s, jv_to_str(s, x), CASE_TITLE_FILTER);
    if (!strcmp(f, "string")) return jv_to_str(s, x);
    if (!strcmp(f, "items")) {
        jlist *l = jl_new(s, 0);
        if (x.k == JV_UNDEF)
            return jv_list(l);
        if (x.k != JV_DICT)
            jfail(s, line, STRATA_E_TYPE, "items needs a mapping, not %s", jv_type_name(x));
        for (size_t i = 0; i < x.u.d->n; i++) {
            jlist *pair = jl_new(s, 2);
            pair->tuple = true;
            jl_push(s, pair, x.u.d->key[i]);
            jl_push(s, pair, x.u.d->val[i]);
            jl_push(s, l, jv_list(pair));
        }
        return jv_list(l);
    }
    if (!strcmp(f, "int")) return to_int(s, x, arg_or(a, kw, na, 0, "default", jv_int(0)));
    if (!strcmp(f, "float")) {
        if (x.k == JV_FLOAT) return x;
        if (x.k == JV_INT || x.k == JV_BOOL) return jv_float((double)(x.k == JV_INT ? x.u.i : x.u.b));
        if (x.k == JV_STR) {
            jv t = js_strip(s, x, jv_none(), true, true);
            char buf[64], *end;
            if (t.u.s.n && t.u.s.n < sizeof buf) {
                memcpy(buf, t.u.s.p, t.u.s.n);
                buf[t.u.s.n] = '\0';
                double d = strtod(buf, &end);
                if (*end == '\0' && strspn(buf, "0123456789+-.eE") == t.u.s.n)
                    return jv_float(d);
            }
        }
        return arg_or(a, kw, na, 0, "default", jv_float(0));
    }
    if (!strcmp(f, "list")) {
        jlist *src = jv_iterate(s, line, x), *l = jl_new(s, src->n);
        for (size_t i = 0; i < src->n; i++)
            jl_push(s, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(f, "selectattr")) return select_items(s, line, x, a, kw, na, true, true);
    if (!strcmp(f, "rejectattr")) return select_items(s, line, x, a, kw, na, true, false);
    if (!strcmp(f, "select")) return select_items(s, line, x, a, kw, na, false, true);
    if (!strcmp(f, "reject")) return select_items(s, line, x, a, kw, na, false, false);
    if (!strcmp(f, "map")) {
        jlist *in = jv_iterate(s, line, x), *out = jl_new(s, in->n);
        jv attr, fname;
        if (arg(a, kw, na, 99, "attribute", &attr)) {
            if (attr.k != JV_STR)
                jfail(s, line, STRATA_E_ARG, "map: attribute must be a string");
            jv dflt = arg_or(a, kw, na, 99, "default", jv_undef());
            for (size_t i = 0; i < in->n; i++) {
                jv v = item_attr(s, in->v[i], attr);
                jl_push(s, out, v.k == JV_UNDEF ? dflt : v);
            }
            return jv_list(out);
        }
        if (!arg(a, kw, na, 0, NULL, &fname) || fname.k != JV_STR)
            jfail(s, line, STRATA_E_ARG, "map needs attribute= or a filter name");
        jnode sub = *n;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)fname.u.s.n, fname.u.s.p);
        if (!jinja_filter_known(name))
            jfail(s, line, STRATA_E_UNSUPPORTED, "unknown filter '%s'", name);
        sub.name = name;
        for (size_t i = 0; i < in->n; i++)
            jl_push(s, out, jinja_filter(s, &sub, in->v[i], a + 1, kw ? kw + 1 : NULL, na - 1));
        return jv_list(out);
    }
    if (!strcmp(f, "reverse")) {
        if (x.k == JV_STR) {
            jlist *chars = jv_iterate(s, line, x);
            jbuf b = jb_new(s);
            for (size_t i = chars->n; i-- > 0;)
                jw(s, &b, chars->v[i].u.s.p, chars->v[i].u.s.n);
            return jb_value(s, &b);
        }
        jlist *src = jv_iterate(s, line, x), *l = jl_new(s, src->n);
        for (size_t i = src->n; i-- > 0;)
            jl_push(s, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(f, "replace")) {
        jv old, new_;
        if (!arg(a, kw, na, 0, "old", &old) || !arg(a, kw, na, 1, "new", &new_))
            jfail(s, line, STRATA_E_ARG, "replace needs old and new");
        jv cnt = arg_or(a, kw, na, 2, "count", jv_none());
        return js_replace(s, line, jv_to_str(s, x), old, new_,
                       cnt.k == JV_NONE ? -1 : js_need_int(s, line, cnt, "replace count"));
    }
    if (!strcmp(f, "indent"))
        return indent(s, line, jv_to_str(s, x), arg_or(a, kw, na, 0, "width", jv_int(4)),
                      jv_truthy(arg_or(a, kw, na, 1, "first", jv_bool(false))),
                      jv_truthy(arg_or(a, kw, na, 2, "blank", jv_bool(false))));
    if (!strcmp(f, "abs")) {
        if (x.k == JV_INT) {
            if (x.u.i == INT64_MIN)
                jfail(s, line, STRATA_E_UNSUPPORTED, "integer overflow in abs");
            return jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
        }
        if (x.k == JV_FLOAT) return jv_float(x.u.f < 0 ? -x.u.f : x.u.f);
        if (x.k == JV_BOOL) return jv_int(x.u.b);
        jfail(s, line, STRATA_E_TYPE, "bad operand type for abs: %s", jv_type_name(x));
    }
    if (!strcmp(f, "unique")) {
        jlist *src = jv_iterate(s, line, x), *l = jl_new(s, 0);
        for (size_t i = 0; i < src->n; i++) {
            js_charge(s, l->n + 1);
            bool seen = false;
            for (size_t k = 0; k < l->n && !seen; k++)
                seen = jv_eq(l->v[k], src->v[i]);
            if (!seen)
                jl_push(s, l, src->v[i]);
        }
        return jv_list(l);
    }
    if (!strcmp(f, "sum")) {
        jlist *src = jv_iterate(s, line, x);
        jv acc = arg_or(a, kw, na, 1, "start", jv_int(0));
        for (size_t i = 0; i < src->n; i++) {
            jv v = src->v[i];
            if (!((v.k == JV_INT || v.k == JV_BOOL) && acc.k == JV_INT))
                jfail(s, line, STRATA_E_UNSUPPORTED, "sum: integers only");
            int64_t r;
            if (__builtin_add_overflow(acc.u.i, v.k == JV_INT ? v.u.i : v.u.b, &r))
                jfail(s, line, STRATA_E_UNSUPPORTED, "integer overflow in sum");
            acc = jv_int(r);
        }
        return acc;
    }
    if (!strcmp(f, "min") || !strcmp(f, "max")) return minmax(s, line, x, f[1] == 'a');
    if (!strcmp(f, "wordcount")) {
        jv w = js_split(s, line, jv_to_str(s, x), jv_none(), -1);
        return jv_int((int64_t)w.u.l->n);
    }
    jfail(s, line, STRATA_E_UNSUPPORTED, "unknown filter '%s'", f);
}

/* ---- methods ------------------------------------------------------------- */
jv jinja_method(jstate *s, int line, jv obj, const char *m, jv *a, const char **kw, size_t na)
{
    if (obj.k == JV_STR) {
        jv none = jv_none();
        if (!strcmp(m, "strip")) return js_strip(s, obj, arg_or(a, kw, na, 0, NULL, none), true, true);
        if (!strcmp(m, "lstrip")) return js_strip(s, obj, arg_or(a, kw, na, 0, NULL, none), true, false);
        if (!strcmp(m, "rstrip")) return js_strip(s, obj, arg_or(a, kw, na, 0, NULL, none), false, true);
        if (!strcmp(m, "upper")) return js_case(s, obj, CASE_UPPER);
        if (!strcmp(m, "lower")) return js_case(s, obj, CASE_LOWER);
        if (!strcmp(m, "title")) return js_case(s, obj, CASE_TITLE_METHOD);
        if (!strcmp(m, "capitalize")) return js_case(s, obj, CASE_CAPITALIZE);
        if (!strcmp(m, "split")) {
            jv ms = arg_or(a, kw, na, 1, "maxsplit", jv_int(-1));
            return js_split(s, line, obj, arg_or(a, kw, na, 0, "sep", none),
                         js_need_int(s, line, ms, "split maxsplit"));
        }
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            jv w;
            if (!arg(a, kw, na, 0, NULL, &w))
                jfail(s, line, STRATA_E_ARG, "%s needs an argument", m);
            return jv_bool(js_affix(s, line, obj, w, m[0] == 's'));
        }
        if (!strcmp(m, "replace")) {
            jv old, new_;
            if (!arg(a, kw, na, 0, NULL, &old) || !arg(a, kw, na, 1, NULL, &new_))
                jfail(s, line, STRATA_E_ARG, "replace needs old and new");
            jv cnt = arg_or(a, kw, na, 2, "count", jv_int(-1));
            return js_replace(s, line, obj, old, new_, js_need_int(s, line, cnt, "replace count"));
        }
        if (!strcmp(m, "find") || !strcmp(m, "count")) {
            jv sub;
            if (!arg(a, kw, na, 0, NULL, &sub))
                jfail(s, line, STRATA_E_ARG, "%s needs an argument", m);
            int64_t c, at = js_find(obj, js_need_str(s, line, sub, m), &c);
            return jv_int(m[0] == 'f' ? at : c);
        }
        if (!strcmp(m, "join")) {
            jv seq;
            if (!arg(a, kw, na, 0, NULL, &seq))
                jfail(s, line, STRATA_E_ARG, "join needs an argument");
            jlist *l = jv_iterate(s, line, seq);
            for (size_t i = 0; i < l->n; i++)
                js_need_str(s, line, l->v[i], "str.join");
            return js_join(s, line, seq, obj, none);
        }
    } else if (obj.k == JV_DICT) {
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = jl_new(s, obj.u.d->n);
            for (size_t i = 0; i < obj.u.d->n; i++) {
                if (m[0] == 'k') {
                    jl_push(s, l, obj.u.d->key[i]);
                } else if (m[0] == 'v') {
                    jl_push(s, l, obj.u.d->val[i]);
                } else {
                    jlist *pair = jl_new(s, 2);
                    pair->tuple = true;
                    jl_push(s, pair, obj.u.d->key[i]);
                    jl_push(s, pair, obj.u.d->val[i]);
                    jl_push(s, l, jv_list(pair));
                }
            }
            return jv_list(l);
        }
        if (!strcmp(m, "get")) {
            jv key, r;
            if (!arg(a, kw, na, 0, NULL, &key))
                jfail(s, line, STRATA_E_ARG, "get needs a key");
            return jd_get(obj.u.d, key, &r) ? r : arg_or(a, kw, na, 1, NULL, jv_none());
        }
    }
    jfail(s, line, STRATA_E_UNSUPPORTED, "%s has no method '%s' (or strata does not provide it)",
          jv_type_name(obj), m);
}

/* ---- global functions ---------------------------------------------------- */
jv jinja_call_func(jstate *s, int line, int fn, jv *a, const char **kw, size_t na)
{
    switch (fn) {
    case JFN_RAISE: {
        jv msg = jv_to_str(s, arg_or(a, kw, na, 0, NULL, jv_str("", 0)));
        jfail(s, line, STRATA_E_ARG, "raise_exception: %.*s",
              (int)(msg.u.s.n > 300 ? 300 : msg.u.s.n), msg.u.s.p);
    }
    case JFN_NAMESPACE: case JFN_DICT: {
        jdict *d = jd_new(s);
        d->ns = fn == JFN_NAMESPACE;
        for (size_t i = 0; i < na; i++) {
            if (kw[i]) {
                jd_set(s, d, jv_str(kw[i], strlen(kw[i])), a[i]);
            } else if (a[i].k == JV_DICT) {
                for (size_t k = 0; k < a[i].u.d->n; k++)
                    jd_set(s, d, a[i].u.d->key[k], a[i].u.d->val[k]);
            } else {
                jfail(s, line, STRATA_E_ARG, "%s takes keyword arguments or a mapping",
                      fn == JFN_DICT ? "dict" : "namespace");
            }
        }
        return jv_dict(d);
    }
    case JFN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (na < 1 || na > 3)
            jfail(s, line, STRATA_E_ARG, "range takes 1 to 3 arguments");
        for (size_t i = 0; i < na; i++)
            v[na == 1 ? 1 : i] = js_need_int(s, line, a[i], "range");
        if (v[2] == 0)
            jfail(s, line, STRATA_E_ARG, "range step cannot be zero");
        /* The length first (in unsigned arithmetic: no overflow), so a
         * range past the step budget fails before it allocates. */
        uint64_t span = v[2] > 0 ? (v[1] > v[0] ? (uint64_t)v[1] - (uint64_t)v[0] : 0)
                                 : (v[0] > v[1] ? (uint64_t)v[0] - (uint64_t)v[1] : 0);
        uint64_t st = v[2] > 0 ? (uint64_t)v[2] : 0 - (uint64_t)v[2];
        uint64_t count = span / st + (span % st != 0);
        if (count > s->lim.max_steps - s->steps)
            jfail(s, line, STRATA_E_LIMIT, "more than %llu steps (range of %llu items)",
                  (unsigned long long)s->lim.max_steps, (unsigned long long)count);
        s->steps += count;
        jlist *l = jl_new(s, (size_t)count);
        for (uint64_t k = 0; k < count; k++)
            jl_push(s, l, jv_int((int64_t)((uint64_t)v[0] + k * (uint64_t)v[2])));
        return jv_list(l);
    }
    case JFN_STRFTIME: {
        jv fmt = js_need_str(s, line, arg_or(a, kw, na, 0, NULL, jv_undef()), "strftime_now");
        if (fmt.u.s.n > 200)
            jfail(s, line, STRATA_E_LIMIT, "strftime_now: format longer than 200 bytes");
        char f[208], out[1024];
        memcpy(f, fmt.u.s.p, fmt.u.s.n);
        f[fmt.u.s.n] = '\0';
        time_t now = s->now ? (time_t)s->now : time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        size_t n = strftime(out, sizeof out, f, &tm);
        return jv_strdup(s, out, n);
    }
    default:
        jfail(s, line, STRATA_E_UNSUPPORTED, "internal: unknown function %d", fn);
    }
}
