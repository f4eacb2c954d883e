/* jinja_parse.c: tokens to a syntax tree, by recursive descent in the
 * order of jinja2's own parser (so precedence matches it: `a if c else b`,
 * or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +,
 * then a primary with its postfixes, filters `|f` and tests `is t`).
 * Unknown tags, filters and tests are refused here, before any rendering,
 * with the line they are on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/jinja_impl.h"

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth, max_depth, loops;
    strata_error *err;
    jmp_buf fail;
} parser;

static _Noreturn void pfail(parser *p, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static _Noreturn void pfail(parser *p, int line, int code, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    strata_err(p->err, code, "chat template line %d: %s", line, why);
    longjmp(p->fail, 1);
}

static void *palloc(parser *p, size_t n)
{
    void *r = ja_alloc(p->a, n);
    if (!r)
        pfail(p, p->t[p->i].line, STRATA_E_NOMEM, "out of memory parsing the template");
    return r;
}

static const jtok *cur(parser *p) { return &p->t[p->i]; }
static int line(parser *p) { return p->t[p->i].line; }

static bool is_op(parser *p, const char *op)
{
    const jtok *t = cur(p);
    return t->k == JT_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}

static bool is_name(parser *p, const char *name)
{
    const jtok *t = cur(p);
    return t->k == JT_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}

static bool accept_op(parser *p, const char *op)
{
    if (!is_op(p, op))
        return false;
    p->i++;
    return true;
}

static bool accept_name(parser *p, const char *name)
{
    if (!is_name(p, name))
        return false;
    p->i++;
    return true;
}

static const char *describe(const jtok *t, char *buf, size_t n)
{
    switch (t->k) {
    case JT_EOF: return "the end of the template";
    case JT_TEXT: return "text";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_END: return "'%}'";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_STRING: return "a string";
    default:
        snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return buf;
    }
}

static void expect_op(parser *p, const char *op)
{
    char b[64];
    if (!accept_op(p, op))
        pfail(p, line(p), STRATA_E_FORMAT, "expected '%s', found %s", op,
              describe(cur(p), b, sizeof b));
}

static const char *expect_name(parser *p)
{
    char b[64];
    const jtok *t = cur(p);
    if (t->k != JT_NAME)
        pfail(p, t->line, STRATA_E_FORMAT, "expected a name, found %s",
              describe(t, b, sizeof b));
    char *s = palloc(p, t->n + 1);
    memcpy(s, t->p, t->n);
    p->i++;
    return s;
}

static void expect_kind(parser *p, jtok_kind k, const char *what)
{
    char b[64];
    if (cur(p)->k != k)
        pfail(p, line(p), STRATA_E_FORMAT, "expected %s, found %s", what,
              describe(cur(p), b, sizeof b));
    p->i++;
}

static jnode *node(parser *p, jnode_kind k, int ln)
{
    jnode *n = palloc(p, sizeof *n);
    n->k = k;
    n->line = ln;
    return n;
}

/* A growing array of node pointers, then fixed in the arena. */
typedef struct nvec { jnode **v; size_t n, cap; } nvec;
static void nv_push(parser *p, nvec *v, jnode *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4;
        jnode **nvv = palloc(p, cap * sizeof *nvv);
        if (v->n)
            memcpy(nvv, v->v, v->n * sizeof *nvv);
        v->v = nvv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void enter(parser *p)
{
    if (++p->depth > p->max_depth)
        pfail(p, line(p), STRATA_E_LIMIT, "nested deeper than %d", p->max_depth);
}

/* ---- expressions --------------------------------------------------------- */
static jnode *parse_expr(parser *p, bool condexpr);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);

/* (args) of a call, filter or test: positional, then name=value. */
static void parse_args(parser *p, jnode *n)
{
    nvec v = {0};
    expect_op(p, "(");
    while (!accept_op(p, ")")) {
        if (v.n)
            expect_op(p, ",");
        if (accept_op(p, ")"))
            break;
        if (is_op(p, "*") || is_op(p, "**"))
            pfail(p, line(p), STRATA_E_UNSUPPORTED, "*args and **kwargs are not supported");
        if (cur(p)->k == JT_NAME && p->t[p->i + 1].k == JT_OP && p->t[p->i + 1].n == 1 &&
            p->t[p->i + 1].p[0] == '=') {
            jnode *kw = node(p, JN_KWARG, line(p));
            kw->name = expect_name(p);
            p->i++;
            kw->a = parse_expr(p, true);
            nv_push(p, &v, kw);
        } else {
            nv_push(p, &v, parse_expr(p, true));
        }
    }
    n->v = v.v;
    n->nv = v.n;
}

static jnode *lit(parser *p, int ln, jv v)
{
    jnode *n = node(p, JN_LIT, ln);
    n->lit = v;
    return n;
}

static jnode *parse_primary(parser *p)
{
    const jtok *t = cur(p);
    int ln = t->line;
    char b[64];
    enter(p);
    jnode *n;
    if (t->k == JT_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        size_t k = 0;
        for (; k < 6; k++)
            if (is_name(p, consts[k]))
                break;
        if (k < 6) {
            p->i++;
            n = lit(p, ln, k < 2 ? jv_bool(true) : k < 4 ? jv_bool(false) : jv_none());
        } else {
            n = node(p, JN_NAME, ln);
            n->name = expect_name(p);
        }
    } else if (t->k == JT_STRING) { /* adjacent literals join, as in Python */
        size_t total = 0, j = p->i;
        for (; p->t[j].k == JT_STRING; j++)
            total += p->t[j].n;
        char *s = palloc(p, total + 1);
        size_t o = 0;
        for (; p->i < j; p->i++) {
            memcpy(s + o, p->t[p->i].p, p->t[p->i].n);
            o += p->t[p->i].n;
        }
        n = lit(p, ln, jv_str(s, total));
    } else if (t->k == JT_INT) {
        p->i++;
        n = lit(p, ln, jv_int(t->i));
    } else if (t->k == JT_FLOAT) {
        p->i++;
        n = lit(p, ln, jv_float(t->f));
    } else if (accept_op(p, "(")) {
        if (accept_op(p, ")")) {
            n = node(p, JN_TUPLE, ln);
        } else {
            jnode *first = parse_expr(p, true);
            if (is_op(p, ",")) {
                nvec v = {0};
                nv_push(p, &v, first);
                while (accept_op(p, ",") && !is_op(p, ")"))
                    nv_push(p, &v, parse_expr(p, true));
                n = node(p, JN_TUPLE, ln);
                n->v = v.v;
                n->nv = v.n;
            } else {
                n = first;
            }
            expect_op(p, ")");
        }
    } else if (accept_op(p, "[")) {
        nvec v = {0};
        while (!accept_op(p, "]")) {
            if (v.n)
                expect_op(p, ",");
            if (accept_op(p, "]"))
                break;
            nv_push(p, &v, parse_expr(p, true));
        }
        n = node(p, JN_LIST, ln);
        n->v = v.v;
        n->nv = v.n;
    } else if (accept_op(p, "{")) {
        nvec k = {0}, v = {0};
        while (!accept_op(p, "}")) {
            if (k.n)
                expect_op(p, ",");
            if (accept_op(p, "}"))
                break;
            nv_push(p, &k, parse_expr(p, true));
            expect_op(p, ":");
            nv_push(p, &v, parse_expr(p, true));
        }
        n = node(p, JN_DICT, ln);
        n->v = k.v;
        n->nv = k.n;
        n->w = v.v;
        n->nw = v.n;
    } else {
        pfail(p, ln, STRATA_E_FORMAT, "unexpected %s in an expression",
              describe(t, b, sizeof b));
    }
    p->depth--;
    return n;
}

/* [expr] or [a:b:c] after obj. */
static jnode *parse_subscript(parser *p, jnode *obj, int ln)
{
    jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]"))
            parts[k] = parse_expr(p, true);
        if (accept_op(p, ":")) {
            slice = true;
            if (++k == 3)
                pfail(p, line(p), STRATA_E_FORMAT, "a slice takes at most three parts");
            continue;
        }
        break;
    }
    expect_op(p, "]");
    if (!slice) {
        if (!parts[0])
            pfail(p, ln, STRATA_E_FORMAT, "empty subscript '[]'");
        jnode *n = node(p, JN_ITEM, ln);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = node(p, JN_SLICE, ln);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->w = palloc(p, sizeof *n->w);
    n->w[0] = parts[2];
    n->nw = 1;
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n)
{
    for (;;) {
        int ln = line(p);
        if (accept_op(p, ".")) {
            if (cur(p)->k == JT_INT) {
                jnode *it = node(p, JN_ITEM, ln);
                it->a = n;
                it->b = lit(p, ln, jv_int(cur(p)->i));
                p->i++;
                n = it;
            } else {
                jnode *at = node(p, JN_ATTR, ln);
                at->a = n;
                at->name = expect_name(p);
                n = at;
            }
        } else if (accept_op(p, "[")) {
            n = parse_subscript(p, n, ln);
        } else if (is_op(p, "(")) {
            jnode *c = node(p, JN_CALL, ln);
            c->a = n;
            parse_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *p, jnode *n)
{
    for (;;) {
        int ln = line(p);
        if (accept_op(p, "|")) {
            jnode *f = node(p, JN_FILTER, ln);
            f->a = n;
            f->name = expect_name(p);
            if (!jinja_filter_known(f->name))
                pfail(p, ln, STRATA_E_UNSUPPORTED, "unknown filter '%s'", f->name);
            if (is_op(p, "("))
                parse_args(p, f);
            n = f;
        } else if (accept_name(p, "is")) {
            jnode *t = node(p, JN_TEST, ln);
            t->a = n;
            t->op = accept_name(p, "not");
            t->name = expect_name(p);
            if (!jinja_test_known(t->name))
                pfail(p, ln, STRATA_E_UNSUPPORTED, "unknown test '%s'", t->name);
            const jtok *c = cur(p);
            if (is_op(p, "(")) {
                parse_args(p, t);
            } else if ((c->k == JT_NAME || c->k == JT_STRING || c->k == JT_INT ||
                        c->k == JT_FLOAT || is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is"))
                    pfail(p, ln, STRATA_E_FORMAT, "tests cannot be chained with 'is'");
                t->v = palloc(p, sizeof *t->v);
                t->v[0] = parse_postfix(p, parse_primary(p));
                t->nv = 1;
            }
            n = t;
        } else if (is_op(p, "(")) {
            jnode *c = node(p, JN_CALL, ln);
            c->a = n;
            parse_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *p, bool with_filter)
{
    int ln = line(p);
    enter(p);
    jnode *n;
    if (accept_op(p, "-")) {
        n = node(p, JN_NEG, ln);
        n->a = parse_unary(p, false);
    } else if (accept_op(p, "+")) {
        n = node(p, JN_POS, ln);
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *binop(parser *p, int op, jnode *l, jnode *r, int ln)
{
    jnode *n = node(p, JN_BINOP, ln);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *p)
{
    jnode *n = parse_unary(p, true);
    for (int ln = line(p); accept_op(p, "**"); ln = line(p))
        n = binop(p, JOP_POW, n, parse_unary(p, true), ln);
    return n;
}

static jnode *parse_math2(parser *p)
{
    jnode *n = parse_pow(p);
    for (;;) {
        int ln = line(p);
        int op = accept_op(p, "*") ? JOP_MUL : accept_op(p, "//") ? JOP_FLOORDIV
               : accept_op(p, "/") ? JOP_DIV : accept_op(p, "%") ? JOP_MOD : 0;
        if (!op)
            return n;
        n = binop(p, op, n, parse_pow(p), ln);
    }
}

static jnode *parse_concat(parser *p)
{
    jnode *n = parse_math2(p);
    for (int ln = line(p); accept_op(p, "~"); ln = line(p))
        n = binop(p, JOP_CONCAT, n, parse_math2(p), ln);
    return n;
}

static jnode *parse_math1(parser *p)
{
    jnode *n = parse_concat(p);
    for (;;) {
        int ln = line(p);
        int op = accept_op(p, "+") ? JOP_ADD : accept_op(p, "-") ? JOP_SUB : 0;
        if (!op)
            return n;
        n = binop(p, op, n, parse_concat(p), ln);
    }
}

static jnode *parse_compare(parser *p)
{
    int ln = line(p);
    jnode *first = parse_math1(p);
    nvec v = {0};
    int ops[64];
    size_t nops = 0;
    for (;;) {
        int op = accept_op(p, "==") ? JOP_EQ : accept_op(p, "!=") ? JOP_NE
               : accept_op(p, "<=") ? JOP_LE : accept_op(p, ">=") ? JOP_GE
               : accept_op(p, "<") ? JOP_LT : accept_op(p, ">") ? JOP_GT
               : accept_name(p, "in") ? JOP_IN : 0;
        if (!op && is_name(p, "not") && p->t[p->i + 1].k == JT_NAME &&
            p->t[p->i + 1].n == 2 && memcmp(p->t[p->i + 1].p, "in", 2) == 0) {
            p->i += 2;
            op = JOP_NOTIN;
        }
        if (!op)
            break;
        if (nops == 64)
            pfail(p, ln, STRATA_E_LIMIT, "more than 64 comparisons in a chain");
        if (!v.n)
            nv_push(p, &v, first);
        ops[nops++] = op;
        nv_push(p, &v, parse_math1(p));
    }
    if (!nops)
        return first;
    jnode *n = node(p, JN_COMPARE, ln);
    n->v = v.v;
    n->nv = v.n;
    n->ops = palloc(p, nops * sizeof *n->ops);
    memcpy(n->ops, ops, nops * sizeof *ops);
    return n;
}

static jnode *parse_not(parser *p)
{
    int ln = line(p);
    if (accept_name(p, "not")) {
        enter(p);
        jnode *n = node(p, JN_NOT, ln);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p)
{
    jnode *n = parse_not(p);
    for (int ln = line(p); accept_name(p, "and"); ln = line(p)) {
        jnode *a = node(p, JN_AND, ln);
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}

static jnode *parse_or(parser *p)
{
    jnode *n = parse_and(p);
    for (int ln = line(p); accept_name(p, "or"); ln = line(p)) {
        jnode *o = node(p, JN_OR, ln);
        o->a = n;
        o->b = parse_and(p);
        n = o;
    }
    return n;
}

static jnode *parse_expr(parser *p, bool condexpr)
{
    enter(p);
    jnode *n = parse_or(p);
    while (condexpr && is_name(p, "if")) {
        int ln = line(p);
        p->i++;
        jnode *c = node(p, JN_COND, ln);
        c->a = parse_or(p);
        c->b = n;
        if (accept_name(p, "else"))
            c->c = parse_expr(p, true);
        n = c;
    }
    p->depth--;
    return n;
}

/* An expression, or a bare tuple `a, b` (jinja2's parse_tuple). */
static jnode *parse_tuple(parser *p, bool condexpr)
{
    int ln = line(p);
    jnode *first = parse_expr(p, condexpr);
    if (!is_op(p, ","))
        return first;
    nvec v = {0};
    nv_push(p, &v, first);
    while (accept_op(p, ",")) {
        const jtok *t = cur(p);
        if (t->k == JT_VAR_END || t->k == JT_BLOCK_END || is_name(p, "if"))
            break;
        nv_push(p, &v, parse_expr(p, condexpr));
    }
    jnode *n = node(p, JN_TUPLE, ln);
    n->v = v.v;
    n->nv = v.n;
    return n;
}

/* ---- statements ---------------------------------------------------------- */
static void parse_body(parser *p, nvec *out, const char *const *ends, const char *opener,
                       int open_line);

static bool at_end_tag(parser *p, const char *const *ends)
{
    if (cur(p)->k != JT_BLOCK_BEGIN || !ends)
        return false;
    const jtok *t = &p->t[p->i + 1];
    for (; *ends; ends++)
        if (t->k == JT_NAME && t->n == strlen(*ends) && memcmp(t->p, *ends, t->n) == 0)
            return true;
    return false;
}

static void block_end(parser *p)
{
    expect_kind(p, JT_BLOCK_END, "'%}'");
}

static jnode **fix(parser *p, nvec *v, size_t *n)
{
    (void)p;
    *n = v->n;
    return v->v;
}

static jnode *parse_for(parser *p, int ln)
{
    jnode *n = node(p, JN_FOR, ln);
    const char *names[8];
    size_t k = 0;
    do {
        if (k == 8)
            pfail(p, ln, STRATA_E_UNSUPPORTED, "more than 8 loop variables");
        names[k++] = expect_name(p);
    } while (accept_op(p, ","));
    n->names = palloc(p, k * sizeof *n->names);
    memcpy(n->names, names, k * sizeof *names);
    n->nnames = k;
    if (!accept_name(p, "in"))
        pfail(p, line(p), STRATA_E_FORMAT, "expected 'in' in a for tag");
    n->a = parse_tuple(p, false);
    if (accept_name(p, "if"))
        n->b = parse_expr(p, true);
    if (is_name(p, "recursive"))
        pfail(p, ln, STRATA_E_UNSUPPORTED, "recursive loops are not supported");
    block_end(p);
    static const char *const ends1[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    nvec body = {0}, els = {0};
    p->loops++;
    parse_body(p, &body, ends1, "for", ln);
    p->loops--;
    if (accept_name(p, "else")) {
        block_end(p);
        parse_body(p, &els, ends2, "for", ln);
    }
    p->i++; /* endfor */
    block_end(p);
    n->v = fix(p, &body, &n->nv);
    n->w = fix(p, &els, &n->nw);
    return n;
}

static jnode *parse_if(parser *p, int ln)
{
    jnode *n = node(p, JN_IF, ln);
    n->a = parse_tuple(p, false);
    block_end(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    nvec body = {0}, els = {0};
    parse_body(p, &body, ends, "if", ln);
    n->v = fix(p, &body, &n->nv);
    int eln = line(p);
    if (accept_name(p, "elif")) {
        enter(p);
        nv_push(p, &els, parse_if(p, eln)); /* consumes through endif */
        p->depth--;
        n->w = fix(p, &els, &n->nw);
        return n;
    }
    if (accept_name(p, "else")) {
        block_end(p);
        parse_body(p, &els, ends2, "if", ln);
    }
    p->i++; /* endif */
    block_end(p);
    n->w = fix(p, &els, &n->nw);
    return n;
}

static jnode *parse_set(parser *p, int ln)
{
    const char *name = expect_name(p);
    const char *attr = NULL;
    if (accept_op(p, "."))
        attr = expect_name(p);
    if (is_op(p, ","))
        pfail(p, ln, STRATA_E_UNSUPPORTED, "set with several targets is not supported");
    jnode *n;
    if (accept_op(p, "=")) {
        n = node(p, attr ? JN_SET_ATTR : JN_SET, ln);
        n->a = parse_tuple(p, true);
        block_end(p);
    } else {
        if (attr)
            pfail(p, ln, STRATA_E_FORMAT, "a set block cannot assign an attribute");
        block_end(p);
        static const char *const ends[] = {"endset", NULL};
        nvec body = {0};
        parse_body(p, &body, ends, "set", ln);
        p->i++;
        block_end(p);
        n = node(p, JN_SET_BLOCK, ln);
        n->v = fix(p, &body, &n->nv);
    }
    n->name = attr ? attr : name;
    if (attr) { /* a: the namespace's name */
        jnode *ns = node(p, JN_NAME, ln);
        ns->name = name;
        n->b = ns;
    }
    return n;
}

static jnode *parse_macro(parser *p, int ln)
{
    jnode *n = node(p, JN_MACRO, ln);
    n->name = expect_name(p);
    const char *names[32];
    jnode *defs[32];
    size_t k = 0;
    expect_op(p, "(");
    while (!accept_op(p, ")")) {
        if (k)
            expect_op(p, ",");
        if (accept_op(p, ")"))
            break;
        if (k == 32)
            pfail(p, ln, STRATA_E_UNSUPPORTED, "more than 32 macro parameters");
        names[k] = expect_name(p);
        defs[k] = accept_op(p, "=") ? parse_expr(p, true) : NULL;
        k++;
    }
    block_end(p);
    n->names = palloc(p, (k ? k : 1) * sizeof *n->names);
    n->w = palloc(p, (k ? k : 1) * sizeof *n->w);
    memcpy(n->names, names, k * sizeof *names);
    memcpy(n->w, defs, k * sizeof *defs);
    n->nnames = n->nw = k;
    static const char *const ends[] = {"endmacro", NULL};
    nvec body = {0};
    int loops = p->loops;
    p->loops = 0; /* break inside a macro does not reach a caller's loop */
    parse_body(p, &body, ends, "macro", ln);
    p->loops = loops;
    p->i++;
    block_end(p);
    n->v = fix(p, &body, &n->nv);
    return n;
}

static jnode *parse_stmt(parser *p)
{
    const jtok *t = cur(p);
    int ln = t->line;
    if (t->k == JT_TEXT) {
        p->i++;
        jnode *n = node(p, JN_TEXT, ln);
        n->lit = jv_str(t->p, t->n);
        return n;
    }
    if (t->k == JT_VAR_BEGIN) {
        p->i++;
        jnode *n = node(p, JN_OUTPUT, ln);
        n->a = parse_tuple(p, true);
        expect_kind(p, JT_VAR_END, "'}}'");
        return n;
    }
    char b[64];
    if (t->k != JT_BLOCK_BEGIN)
        pfail(p, ln, STRATA_E_FORMAT, "unexpected %s", describe(t, b, sizeof b));
    p->i++;
    if (cur(p)->k != JT_NAME)
        pfail(p, ln, STRATA_E_FORMAT, "expected a tag name after '{%%', found %s",
              describe(cur(p), b, sizeof b));
    jnode *n;
    enter(p);
    if (accept_name(p, "for")) {
        n = parse_for(p, ln);
    } else if (accept_name(p, "if")) {
        n = parse_if(p, ln);
    } else if (accept_name(p, "set")) {
        n = parse_set(p, ln);
    } else if (accept_name(p, "macro")) {
        n = parse_macro(p, ln);
    } else if (is_name(p, "break") || is_name(p, "continue")) {
        bool brk = is_name(p, "break");
        if (!p->loops)
            pfail(p, ln, STRATA_E_FORMAT, "'%s' outside a loop", brk ? "break" : "continue");
        p->i++;
        block_end(p);
        n = node(p, brk ? JN_BREAK : JN_CONTINUE, ln);
    } else if (accept_name(p, "generation")) {
        /* Hugging Face's marker around assistant text: renders its body. */
        block_end(p);
        static const char *const ends[] = {"endgeneration", NULL};
        nvec body = {0};
        parse_body(p, &body, ends, "generation", ln);
        p->i++;
        block_end(p);
        n = node(p, JN_IF, ln);
        n->a = lit(p, ln, jv_bool(true));
        n->v = fix(p, &body, &n->nv);
    } else {
        const jtok *nt = cur(p);
        static const char *const closers[] = {"endfor", "endif", "else", "elif", "endset",
                                              "endmacro", "endgeneration"};
        for (size_t k = 0; k < sizeof closers / sizeof closers[0]; k++)
            if (is_name(p, closers[k]))
                pfail(p, ln, STRATA_E_FORMAT, "unexpected '{%% %s %%}'", closers[k]);
        pfail(p, ln, STRATA_E_UNSUPPORTED, "unsupported tag '%.*s'",
              (int)(nt->n > 40 ? 40 : nt->n), nt->p);
    }
    p->depth--;
    return n;
}

/* Statements up to (not including) a tag named in ends, or the end of the
 * template when ends is NULL. */
static void parse_body(parser *p, nvec *out, const char *const *ends, const char *opener,
                       int open_line)
{
    for (;;) {
        if (cur(p)->k == JT_EOF) {
            if (ends)
                pfail(p, cur(p)->line, STRATA_E_FORMAT,
                      "'{%% %s %%}' opened on line %d is never closed (no '{%% end%s %%}')",
                      opener, open_line, opener);
            return;
        }
        if (at_end_tag(p, ends)) {
            p->i++; /* the '{%'; the name is left for the caller */
            return;
        }
        nv_push(p, out, parse_stmt(p));
    }
}

int jinja_parse_tokens(jarena *a, const jtok *toks, size_t n, int max_depth, jnode ***body,
                       size_t *nbody, strata_error *err)
{
    parser p = {.a = a, .t = toks, .n = n, .max_depth = max_depth, .err = err};
    if (setjmp(p.fail))
        return err && err->code ? err->code : STRATA_E_FORMAT;
    nvec v = {0};
    parse_body(&p, &v, NULL, NULL, 0);
    *body = fix(&p, &v, nbody);
    return 0;
}
