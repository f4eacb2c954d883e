/* jinja_eval.c: running a parsed template (see jinja.h): scopes, the
 * statements, expressions with Python's semantics, macros, and the limits
 * every render runs under.  Errors longjmp to jinja_render_chat, which
 * frees the render's arena whole. */
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_impl.h"

/* A scope: the globals, one for-loop turn, or one macro call.  `if` makes
 * none, as in Jinja, so `set` inside an `if` is seen after it, and a `set`
 * in a loop body is not seen after the loop (hence namespace()). */
struct jframe {
    jframe *parent;
    const char **names;
    jv *vals;
    size_t n, cap;
};

static jframe *frame_new(jstate *s, jframe *parent)
{
    jframe *f = js_alloc(s, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(jstate *s, jframe *f, const char *name, jv v)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        const char **nn = js_alloc(s, cap * sizeof *nn);
        jv *nv = js_alloc(s, cap * sizeof *nv);
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static bool frame_get(const jframe *f, const char *name, jv *out)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (strcmp(f->names[i], name) == 0) {
                *out = f->vals[i];
                return true;
            }
    return false;
}

static void step(jstate *s, int line)
{
    if (++s->steps > s->lim.max_steps)
        jfail(s, line, STRATA_E_LIMIT, "more than %llu steps (a loop too long?)",
              (unsigned long long)s->lim.max_steps);
}

static jv eval(jstate *s, const jnode *n, jframe *f);
static void exec_body(jstate *s, jnode *const *body, size_t n, jframe *f);

/* ---- attribute and item access ------------------------------------------- */
static jv loop_attr(jstate *s, int line, const jloop *l, const char *name)
{
    size_t n = l->items->n, i = l->i;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "previtem")) return i ? l->items->v[i - 1] : jv_undef();
    if (!strcmp(name, "nextitem")) return i + 1 < n ? l->items->v[i + 1] : jv_undef();
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    (void)s, (void)line;
    return jv_undef();
}

static jv get_attr(jstate *s, int line, jv obj, const char *name)
{
    switch (obj.k) {
    case JV_UNDEF:
        jfail(s, line, STRATA_E_ARG, "cannot read '%s' of an undefined value", name);
    case JV_DICT: {
        jv r;
        return jd_get(obj.u.d, jv_str(name, strlen(name)), &r) ? r : jv_undef();
    }
    case JV_LOOP: return loop_attr(s, line, obj.u.loop, name);
    default: return jv_undef();
    }
}

static bool as_index(jv v, int64_t *i)
{
    if (v.k == JV_INT) { *i = v.u.i; return true; }
    if (v.k == JV_BOOL) { *i = v.u.b; return true; }
    return false;
}

static jv get_item(jstate *s, int line, jv obj, jv key)
{
    int64_t i;
    switch (obj.k) {
    case JV_UNDEF:
        jfail(s, line, STRATA_E_ARG, "cannot index an undefined value");
    case JV_DICT: {
        jv r;
        return jd_get(obj.u.d, key, &r) ? r : jv_undef();
    }
    case JV_LIST:
        if (!as_index(key, &i))
            return jv_undef();
        if (i < 0)
            i += (int64_t)obj.u.l->n;
        return i >= 0 && (uint64_t)i < obj.u.l->n ? obj.u.l->v[i] : jv_undef();
    case JV_STR: {
        if (!as_index(key, &i))
            return jv_undef();
        size_t n = utf8_count(obj.u.s.p, obj.u.s.n);
        if (i < 0)
            i += (int64_t)n;
        if (i < 0 || (uint64_t)i >= n)
            return jv_undef();
        size_t a = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
        size_t b = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
        return jv_str(obj.u.s.p + a, b - a);
    }
    case JV_LOOP:
        return key.k == JV_STR ? get_attr(s, line, obj, jv_to_str(s, key).u.s.p) : jv_undef();
    default: return jv_undef();
    }
}

/* Python's slice indices for a sequence of n items. */
static jv slice(jstate *s, int line, jv obj, jv a, jv b, jv c)
{
    int64_t n, st = 1, lo, hi;
    if (obj.k == JV_LIST) n = (int64_t)obj.u.l->n;
    else if (obj.k == JV_STR) n = (int64_t)utf8_count(obj.u.s.p, obj.u.s.n);
    else if (obj.k == JV_UNDEF) jfail(s, line, STRATA_E_ARG, "cannot slice an undefined value");
    else jfail(s, line, STRATA_E_TYPE, "cannot slice a %s", jv_type_name(obj));
    jv parts[3] = {a, b, c};
    for (int k = 0; k < 3; k++)
        if (parts[k].k != JV_NONE && parts[k].k != JV_UNDEF && !as_index(parts[k], &lo))
            jfail(s, line, STRATA_E_TYPE, "slice indices must be integers, not %s",
                  jv_type_name(parts[k]));
    if (c.k != JV_NONE && c.k != JV_UNDEF) {
        as_index(c, &st);
        if (st == 0)
            jfail(s, line, STRATA_E_ARG, "slice step cannot be zero");
    }
    int64_t dlo = st < 0 ? n - 1 : 0, dhi = st < 0 ? -1 : n;
    if (!as_index(a, &lo)) lo = dlo;
    else {
        if (lo < 0) lo += n;
        if (lo < 0) lo = st < 0 ? -1 : 0;
        if (lo >= n) lo = st < 0 ? n - 1 : n;
    }
    if (!as_index(b, &hi)) hi = dhi;
    else {
        if (hi < 0) hi += n;
        if (hi < 0) hi = st < 0 ? -1 : 0;
        if (hi >= n) hi = st < 0 ? n - 1 : n;
    }
    if (obj.k == JV_LIST) {
        jlist *l = jl_new(s, 0);
        l->tuple = obj.u.l->tuple;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
            jl_push(s, l, obj.u.l->v[i]);
        jv r = {JV_LIST, {.l = l}};
        return r;
    }
    jbuf out = jb_new(s);
    const char *p = obj.u.s.p;
    size_t len = obj.u.s.n;
    bool ascii = (int64_t)len == n;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
        size_t x = ascii ? (size_t)i : utf8_offset(p, len, (size_t)i);
        size_t y = ascii ? (size_t)i + 1 : utf8_offset(p, len, (size_t)i + 1);
        if (st == 1 && !ascii) { /* one copy for the common forward slice */
            y = utf8_offset(p, len, (size_t)hi);
            jw(s, &out, p + x, y - x);
            break;
        }
        jw(s, &out, p + x, y - x);
    }
    return jb_value(s, &out);
}

/* ---- operators ----------------------------------------------------------- */
static bool is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }
static bool is_numeric(jv v) { return is_intlike(v) || v.k == JV_FLOAT; }
static double fval(jv v) { return v.k == JV_FLOAT ? v.u.f : (double)ival(v); }

static _Noreturn void bad_operands(jstate *s, int line, const char *op, jv a, jv b)
{
    jfail(s, line, STRATA_E_TYPE, "unsupported operand types for %s: %s and %s", op,
          jv_type_name(a), jv_type_name(b));
}

static jv repeat(jstate *s, int line, jv seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if ((seq.k == JV_STR && !seq.u.s.n) || (seq.k == JV_LIST && !seq.u.l->n))
        times = 0; /* nothing to repeat: do not loop a huge count for it */
    js_charge(s, (uint64_t)times);
    if (seq.k == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > s->lim.max_memory / seq.u.s.n)
            jfail(s, line, STRATA_E_LIMIT, "string repetition past the memory limit");
        jbuf b = jb_new(s);
        for (int64_t i = 0; i < times; i++)
            jw(s, &b, seq.u.s.p, seq.u.s.n);
        return jb_value(s, &b);
    }
    if (seq.u.l->n && (uint64_t)times > s->lim.max_memory / (seq.u.l->n * sizeof(jv)))
        jfail(s, line, STRATA_E_LIMIT, "list repetition past the memory limit");
    jlist *l = jl_new(s, 0);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++)
            jl_push(s, l, seq.u.l->v[k]);
    jv r = {JV_LIST, {.l = l}};
    return r;
}

static jv arith(jstate *s, int line, int op, jv a, jv b)
{
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    const char *on = names[op];
    int64_t r;
    if (op == JOP_CONCAT)
        return jv_cat(s, jv_to_str(s, a), jv_to_str(s, b));
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = ival(a), y = ival(b);
        switch (op) {
        case JOP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case JOP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case JOP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case JOP_DIV:
            if (y == 0) jfail(s, line, STRATA_E_ARG, "division by zero");
            return jv_float((double)x / (double)y);
        case JOP_FLOORDIV: case JOP_MOD: {
            if (y == 0) jfail(s, line, STRATA_E_ARG, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto overflow;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
            return jv_int(op == JOP_MOD ? m : q);
        }
        case JOP_POW:
            if (y < 0)
                return jv_float(pow((double)x, (double)y));
            r = 1; /* by squaring: y can be huge when x is 0, 1 or -1 */
            for (int64_t base = x, e = y;;) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r)) goto overflow;
                e >>= 1;
                if (!e) break;
                if (__builtin_mul_overflow(base, base, &base)) goto overflow;
            }
            return jv_int(r);
        }
    }
    if (is_numeric(a) && is_numeric(b)) {
        double x = fval(a), y = fval(b);
        switch (op) {
        case JOP_ADD: return jv_float(x + y);
        case JOP_SUB: return jv_float(x - y);
        case JOP_MUL: return jv_float(x * y);
        case JOP_DIV:
            if (y == 0) jfail(s, line, STRATA_E_ARG, "float division by zero");
            return jv_float(x / y);
        case JOP_FLOORDIV: case JOP_MOD: {
            if (y == 0) jfail(s, line, STRATA_E_ARG, "float modulo by zero");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_float(op == JOP_MOD ? m : floor((x - m) / y + 0.5));
        }
        case JOP_POW: return jv_float(pow(x, y));
        }
    }
    if (op == JOP_ADD && a.k == JV_STR && b.k == JV_STR)
        return jv_cat(s, a, b);
    if (op == JOP_ADD && a.k == JV_LIST && b.k == JV_LIST) {
        jlist *l = jl_new(s, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) jl_push(s, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jl_push(s, l, b.u.l->v[i]);
        l->tuple = a.u.l->tuple;
        jv v = {JV_LIST, {.l = l}};
        return v;
    }
    if (op == JOP_MUL && (a.k == JV_STR || a.k == JV_LIST) && is_intlike(b))
        return repeat(s, line, a, ival(b));
    if (op == JOP_MUL && (b.k == JV_STR || b.k == JV_LIST) && is_intlike(a))
        return repeat(s, line, b, ival(a));
    if (a.k == JV_UNDEF || b.k == JV_UNDEF)
        jfail(s, line, STRATA_E_ARG, "undefined value used with '%s'", on);
    bad_operands(s, line, on, a, b);
overflow:
    jfail(s, line, STRATA_E_UNSUPPORTED, "integer overflow in '%s' (64-bit integers)", on);
}

static bool contains(jstate *s, int line, jv needle, jv hay)
{
    switch (hay.k) {
    case JV_STR:
        if (needle.k != JV_STR)
            jfail(s, line, STRATA_E_TYPE, "'in <string>' requires a string, not %s",
                  jv_type_name(needle));
        js_charge(s, hay.u.s.n / 64);
        return needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n);
    case JV_LIST:
        js_charge(s, hay.u.l->n);
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(needle, hay.u.l->v[i]))
                return true;
        return false;
    case JV_DICT: {
        jv r;
        js_charge(s, hay.u.d->n);
        return jd_get(hay.u.d, needle, &r);
    }
    case JV_UNDEF: /* jinja2's Undefined iterates as empty */
        return false;
    default:
        jfail(s, line, STRATA_E_TYPE, "argument of type %s is not iterable", jv_type_name(hay));
    }
}

static bool compare(jstate *s, int line, int op, jv a, jv b)
{
    switch (op) {
    case JOP_EQ: return jv_eq(a, b);
    case JOP_NE: return !jv_eq(a, b);
    case JOP_IN: return contains(s, line, a, b);
    case JOP_NOTIN: return !contains(s, line, a, b);
    case JOP_LT: return jv_cmp(s, line, a, b) < 0;
    case JOP_LE: return jv_cmp(s, line, a, b) <= 0;
    case JOP_GT: return jv_cmp(s, line, a, b) > 0;
    default: return jv_cmp(s, line, a, b) >= 0;
    }
}

/* ---- calls --------------------------------------------------------------- */
typedef struct jargs {
    jv *v;
    const char **kw; /* NULL entries: positional */
    size_t n;
} jargs;

static jargs eval_args(jstate *s, const jnode *n, jframe *f)
{
    jargs a = {0};
    if (!n->nv)
        return a;
    a.v = js_alloc(s, n->nv * sizeof *a.v);
    a.kw = js_alloc(s, n->nv * sizeof *a.kw);
    for (size_t i = 0; i < n->nv; i++) {
        const jnode *x = n->v[i];
        if (x->k == JN_KWARG) {
            a.kw[i] = x->name;
            a.v[i] = eval(s, x->a, f);
        } else {
            a.v[i] = eval(s, x, f);
        }
    }
    a.n = n->nv;
    return a;
}

static jv call_macro(jstate *s, int line, const jnode *m, jargs a)
{
    if (s->depth >= s->lim.max_depth)
        jfail(s, line, STRATA_E_LIMIT, "macro calls nested deeper than %d", s->lim.max_depth);
    jframe *f = frame_new(s, s->globals);
    jv *vals = js_alloc(s, (m->nnames ? m->nnames : 1) * sizeof *vals);
    bool *set = js_alloc(s, (m->nnames ? m->nnames : 1) * sizeof *set);
    size_t pos = 0;
    for (size_t i = 0; i < a.n; i++) {
        if (!a.kw[i]) {
            if (pos >= m->nnames)
                jfail(s, line, STRATA_E_ARG, "macro '%s' takes at most %zu arguments", m->name,
                      m->nnames);
            vals[pos] = a.v[i];
            set[pos++] = true;
            continue;
        }
        size_t k = 0;
        while (k < m->nnames && strcmp(m->names[k], a.kw[i]))
            k++;
        if (k == m->nnames)
            jfail(s, line, STRATA_E_ARG, "macro '%s' has no parameter '%s'", m->name, a.kw[i]);
        vals[k] = a.v[i];
        set[k] = true;
    }
    for (size_t k = 0; k < m->nnames; k++)
        frame_set(s, f, m->names[k],
                  set[k] ? vals[k] : m->w[k] ? eval(s, m->w[k], f) : jv_undef());
    jbuf out = jb_new(s), *saved = s->out;
    out.max = s->lim.max_output;
    s->out = &out;
    s->depth++;
    exec_body(s, m->v, m->nv, f);
    s->depth--;
    s->out = saved;
    return jb_value(s, &out);
}

static const struct { const char *name; int fn; } FUNCS[] = {
    {"raise_exception", JFN_RAISE}, {"namespace", JFN_NAMESPACE}, {"range", JFN_RANGE},
    {"strftime_now", JFN_STRFTIME}, {"dict", JFN_DICT},
};

static jv eval_call(jstate *s, const jnode *n, jframe *f)
{
    const jnode *c = n->a;
    if (c->k == JN_ATTR) { /* obj.method(...) */
        jv obj = eval(s, c->a, f);
        if (obj.k == JV_STR || obj.k == JV_LIST || (obj.k == JV_DICT && !obj.u.d->ns)) {
            jargs a = eval_args(s, n, f);
            return jinja_method(s, n->line, obj, c->name, a.v, a.kw, a.n);
        }
        jv callee = get_attr(s, c->line, obj, c->name);
        if (callee.k == JV_MACRO) {
            jargs a = eval_args(s, n, f);
            return call_macro(s, n->line, callee.u.macro, a);
        }
        jfail(s, n->line, STRATA_E_TYPE, "%s has no method '%s'", jv_type_name(obj), c->name);
    }
    jv callee = eval(s, c, f);
    jargs a = eval_args(s, n, f);
    if (callee.k == JV_MACRO)
        return call_macro(s, n->line, callee.u.macro, a);
    if (callee.k == JV_FUNC)
        return jinja_call_func(s, n->line, callee.u.fn, a.v, a.kw, a.n);
    if (callee.k == JV_UNDEF && c->k == JN_NAME)
        jfail(s, n->line, STRATA_E_UNSUPPORTED, "'%s' is undefined (not a function strata "
              "provides)", c->name);
    jfail(s, n->line, STRATA_E_TYPE, "a %s is not callable", jv_type_name(callee));
}

/* ---- expressions --------------------------------------------------------- */
static jv eval(jstate *s, const jnode *n, jframe *f)
{
    step(s, n->line);
    jv a, b;
    switch (n->k) {
    case JN_LIT: return n->lit;
    case JN_NAME:
        if (frame_get(f, n->name, &a))
            return a;
        for (size_t k = 0; k < sizeof FUNCS / sizeof FUNCS[0]; k++)
            if (!strcmp(FUNCS[k].name, n->name)) {
                a.k = JV_FUNC;
                a.u.fn = FUNCS[k].fn;
                return a;
            }
        return jv_undef();
    case JN_ATTR: return get_attr(s, n->line, eval(s, n->a, f), n->name);
    case JN_ITEM:
        a = eval(s, n->a, f);
        return get_item(s, n->line, a, eval(s, n->b, f));
    case JN_SLICE: {
        jv obj = eval(s, n->a, f);
        a = n->b ? eval(s, n->b, f) : jv_none();
        b = n->c ? eval(s, n->c, f) : jv_none();
        jv c = n->w[0] ? eval(s, n->w[0], f) : jv_none();
        return slice(s, n->line, obj, a, b, c);
    }
    case JN_CALL: return eval_call(s, n, f);
    case JN_FILTER: {
        a = eval(s, n->a, f);
        jargs x = eval_args(s, n, f);
        return jinja_filter(s, n, a, x.v, x.kw, x.n);
    }
    case JN_TEST: {
        a = eval(s, n->a, f);
        jargs x = eval_args(s, n, f);
        bool r = jinja_test(s, n, a, x.v, x.n);
        return jv_bool(n->op ? !r : r);
    }
    case JN_BINOP:
        a = eval(s, n->a, f);
        return arith(s, n->line, n->op, a, eval(s, n->b, f));
    case JN_NEG: case JN_POS:
        a = eval(s, n->a, f);
        if (is_intlike(a)) {
            if (n->k == JN_NEG && ival(a) == INT64_MIN)
                jfail(s, n->line, STRATA_E_UNSUPPORTED, "integer overflow in unary '-'");
            return jv_int(n->k == JN_NEG ? -ival(a) : ival(a));
        }
        if (a.k == JV_FLOAT)
            return jv_float(n->k == JN_NEG ? -a.u.f : a.u.f);
        jfail(s, n->line, STRATA_E_TYPE, "bad operand type for unary %s: %s",
              n->k == JN_NEG ? "-" : "+", jv_type_name(a));
    case JN_NOT: return jv_bool(!jv_truthy(eval(s, n->a, f)));
    case JN_AND:
        a = eval(s, n->a, f);
        return jv_truthy(a) ? eval(s, n->b, f) : a;
    case JN_OR:
        a = eval(s, n->a, f);
        return jv_truthy(a) ? a : eval(s, n->b, f);
    case JN_COND:
        if (jv_truthy(eval(s, n->a, f)))
            return eval(s, n->b, f);
        return n->c ? eval(s, n->c, f) : jv_undef();
    case JN_COMPARE:
        a = eval(s, n->v[0], f);
        for (size_t i = 1; i < n->nv; i++) {
            b = eval(s, n->v[i], f);
            if (!compare(s, n->line, n->ops[i - 1], a, b))
                return jv_bool(false);
            a = b;
        }
        return jv_bool(true);
    case JN_LIST: case JN_TUPLE: {
        jlist *l = jl_new(s, n->nv);
        l->tuple = n->k == JN_TUPLE;
        for (size_t i = 0; i < n->nv; i++)
            jl_push(s, l, eval(s, n->v[i], f));
        jv r = {JV_LIST, {.l = l}};
        return r;
    }
    case JN_DICT: {
        jdict *d = jd_new(s);
        for (size_t i = 0; i < n->nv; i++) {
            a = eval(s, n->v[i], f);
            jd_set(s, d, a, eval(s, n->w[i], f));
        }
        jv r = {JV_DICT, {.d = d}};
        return r;
    }
    default:
        jfail(s, n->line, STRATA_E_FORMAT, "internal: node %d is not an expression", (int)n->k);
    }
}

/* ---- statements ---------------------------------------------------------- */
static void bind_targets(jstate *s, const jnode *n, jframe *f, jv item)
{
    if (n->nnames == 1) {
        frame_set(s, f, n->names[0], item);
        return;
    }
    if (item.k != JV_LIST || item.u.l->n != n->nnames)
        jfail(s, n->line, STRATA_E_TYPE, "cannot unpack a %s into %zu loop variables",
              jv_type_name(item), n->nnames);
    for (size_t k = 0; k < n->nnames; k++)
        frame_set(s, f, n->names[k], item.u.l->v[k]);
}

static void exec_for(jstate *s, const jnode *n, jframe *f)
{
    jlist *items = jv_iterate(s, n->line, eval(s, n->a, f));
    if (n->b) { /* `for x in xs if cond`: loop.length counts what passes */
        jlist *kept = jl_new(s, 0);
        for (size_t i = 0; i < items->n; i++) {
            step(s, n->line);
            jframe *tf = frame_new(s, f);
            bind_targets(s, n, tf, items->v[i]);
            if (jv_truthy(eval(s, n->b, tf)))
                jl_push(s, kept, items->v[i]);
        }
        items = kept;
    }
    jloop *lp = js_alloc(s, sizeof *lp);
    lp->items = items;
    jv lv = {JV_LOOP, {.loop = lp}};
    jframe *it = frame_new(s, f); /* emptied each turn: nothing keeps a frame */
    for (size_t i = 0; i < items->n; i++) {
        step(s, n->line);
        lp->i = i;
        it->n = 0;
        frame_set(s, it, "loop", lv);
        bind_targets(s, n, it, items->v[i]);
        exec_body(s, n->v, n->nv, it);
        int brk = s->brk;
        s->brk = 0;
        if (brk == 1)
            break;
    }
    if (items->n == 0 && n->nw)
        exec_body(s, n->w, n->nw, frame_new(s, f));
}

static void exec_body(jstate *s, jnode *const *body, size_t nb, jframe *f)
{
    for (size_t k = 0; k < nb && !s->brk; k++) {
        const jnode *n = body[k];
        s->line = n->line;
        step(s, n->line);
        switch (n->k) {
        case JN_TEXT: jw(s, s->out, n->lit.u.s.p, n->lit.u.s.n); break;
        case JN_OUTPUT: {
            jv v = eval(s, n->a, f);
            s->line = n->line;
            jv_write(s, s->out, v, false);
            break;
        }
        case JN_IF:
            if (jv_truthy(eval(s, n->a, f)))
                exec_body(s, n->v, n->nv, f);
            else
                exec_body(s, n->w, n->nw, f);
            break;
        case JN_FOR: exec_for(s, n, f); break;
        case JN_SET: frame_set(s, f, n->name, eval(s, n->a, f)); break;
        case JN_SET_ATTR: {
            jv ns = eval(s, n->b, f);
            if (ns.k != JV_DICT || !ns.u.d->ns)
                jfail(s, n->line, STRATA_E_TYPE, "cannot set '%s' on a %s (only on a "
                      "namespace())", n->name, jv_type_name(ns));
            jd_set(s, ns.u.d, jv_str(n->name, strlen(n->name)), eval(s, n->a, f));
            break;
        }
        case JN_SET_BLOCK: {
            jbuf out = jb_new(s), *saved = s->out;
            out.max = s->lim.max_output;
            s->out = &out;
            exec_body(s, n->v, n->nv, f);
            s->out = saved;
            frame_set(s, f, n->name, jb_value(s, &out));
            break;
        }
        case JN_MACRO: {
            jv m = {JV_MACRO, {.macro = n}};
            frame_set(s, f, n->name, m);
            break;
        }
        case JN_BREAK: s->brk = 1; break;
        case JN_CONTINUE: s->brk = 2; break;
        default:
            jfail(s, n->line, STRATA_E_FORMAT, "internal: node %d is not a statement", (int)n->k);
        }
    }
}

/* ---- entry points -------------------------------------------------------- */
jinja_limits jinja_default_limits(void)
{
    jinja_limits l = {16u << 20, 256u << 20, 20000000, 64};
    return l;
}

enum { PARSE_DEPTH = 200 };

int jinja_parse(const char *src, size_t len, jinja_template **out, strata_error *err)
{
    *out = NULL;
    jinja_template *t = calloc(1, sizeof *t);
    char *norm = t ? ja_alloc(&t->ar, len + 1) : NULL;
    if (!norm) {
        if (t)
            ja_free_all(&t->ar);
        free(t);
        return strata_err(err, STRATA_E_NOMEM, "out of memory for a chat template");
    }
    /* As jinja2 reads a template: \r\n and \r become \n, and one trailing
     * newline is dropped (keep_trailing_newline is off). */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n')
        n--;
    norm[n] = '\0';
    jtok *toks;
    size_t nt;
    int rc = jinja_lex(&t->ar, norm, n, &toks, &nt, err);
    if (!rc)
        rc = jinja_parse_tokens(&t->ar, toks, nt, PARSE_DEPTH, &t->body, &t->n, err);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void jinja_free(jinja_template *t)
{
    if (!t)
        return;
    ja_free_all(&t->ar);
    free(t);
}

static jv str_or_undef(const char *p)
{
    return p ? jv_str(p, strlen(p)) : jv_undef();
}

int jinja_render_chat(const jinja_template *t, const jinja_chat_ctx *ctx,
                      const jinja_limits *lim, char **out, size_t *out_len,
                      strata_error *err)
{
    strata_error e = {0};
    jstate *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return strata_err(err, STRATA_E_NOMEM, "out of memory rendering the chat template");
    s->lim = lim ? *lim : jinja_default_limits();
    s->ar.cap = s->lim.max_memory;
    s->err = &e;
    s->now = ctx->now;
    if (setjmp(s->fail)) {
        int rc = e.code ? e.code : STRATA_E_FORMAT;
        if (err)
            *err = e;
        ja_free_all(&s->ar);
        free(s);
        return rc;
    }
    s->globals = frame_new(s, NULL);
    jlist *msgs = jl_new(s, ctx->n_messages);
    for (size_t i = 0; i < ctx->n_messages; i++) {
        jdict *d = jd_new(s);
        jd_set(s, d, jv_str("role", 4), str_or_undef(ctx->messages[i].role));
        jd_set(s, d, jv_str("content", 7), str_or_undef(ctx->messages[i].content));
        jv dv = {JV_DICT, {.d = d}};
        jl_push(s, msgs, dv);
    }
    jv mv = {JV_LIST, {.l = msgs}};
    frame_set(s, s->globals, "messages", mv);
    frame_set(s, s->globals, "add_generation_prompt", jv_bool(ctx->add_generation_prompt));
    if (ctx->bos_token)
        frame_set(s, s->globals, "bos_token", str_or_undef(ctx->bos_token));
    if (ctx->eos_token)
        frame_set(s, s->globals, "eos_token", str_or_undef(ctx->eos_token));
    jbuf o = jb_new(s);
    o.max = s->lim.max_output;
    s->out = &o;
    exec_body(s, t->body, t->n, s->globals);
    char *r = malloc(o.n + 1);
    if (!r) {
        ja_free_all(&s->ar);
        free(s);
        return strata_err(err, STRATA_E_NOMEM, "out of memory for the rendered chat");
    }
    if (o.n)
        memcpy(r, o.p, o.n);
    r[o.n] = '\0';
    if (out_len)
        *out_len = o.n;
    *out = r;
    ja_free_all(&s->ar);
    free(s);
    return 0;
}
