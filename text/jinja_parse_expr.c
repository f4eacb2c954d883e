/* jinja_parse_expr.c: expressions, by recursive descent in the order of
 * jinja2's own parser (see jinja_parse.c): conditional, or, and, not,
 * comparisons, + -, ~, * / // %, **, unary, then a primary with its
 * postfixes, filters and tests.  Filters and tests are checked here. */
#include <stdio.h>
#include <string.h>

#include "text/jinja_parser.h"

static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);

/* (args) of a call, filter or test: positional, then name=value. */
static void parse_args(parser *p, jnode *n)
{
    jp_vec v = {0};
    jp_expect_op(p, "(");
    while (!jp_accept_op(p, ")")) {
        if (v.n)
            jp_expect_op(p, ",");
        if (jp_accept_op(p, ")"))
            break;
        if (jp_is_op(p, "*") || jp_is_op(p, "**"))
            jp_fail(p, jp_line(p), STRATA_E_UNSUPPORTED, "*args and **kwargs are not supported");
        if (jp_cur(p)->k == JT_NAME && p->t[p->i + 1].k == JT_OP && p->t[p->i + 1].n == 1 &&
            p->t[p->i + 1].p[0] == '=') {
            jnode *kw = jp_node(p, JN_KWARG, jp_line(p));
            kw->name = jp_expect_name(p);
            p->i++;
            kw->a = jp_expr(p, true);
            jp_push(p, &v, kw);
        } else {
            jp_push(p, &v, jp_expr(p, true));
        }
    }
    n->v = v.v;
    n->nv = v.n;
}

jnode *jp_lit(parser *p, int ln, jv v)
{
    jnode *n = jp_node(p, JN_LIT, ln);
    n->lit = v;
    return n;
}

static jnode *parse_primary(parser *p)
{
    const jtok *t = jp_cur(p);
    int ln = t->line;
    char b[64];
    jp_enter(p);
    jnode *n;
    if (t->k == JT_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        size_t k = 0;
        for (; k < 6; k++)
            if (jp_is_name(p, consts[k]))
                break;
        if (k < 6) {
            p->i++;
            n = jp_lit(p, ln, k < 2 ? jv_bool(true) : k < 4 ? jv_bool(false) : jv_none());
        } else {
            n = jp_node(p, JN_NAME, ln);
            n->name = jp_expect_name(p);
        }
    } else if (t->k == JT_STRING) { /* adjacent literals join, as in Python */
        size_t total = 0, j = p->i;
        for (; p->t[j].k == JT_STRING; j++)
            total += p->t[j].n;
        char *s = jp_alloc(p, total + 1);
        size_t o = 0;
        for (; p->i < j; p->i++) {
            memcpy(s + o, p->t[p->i].p, p->t[p->i].n);
            o += p->t[p->i].n;
        }
        n = jp_lit(p, ln, jv_str(s, total));
    } else if (t->k == JT_INT) {
        p->i++;
        n = jp_lit(p, ln, jv_int(t->i));
    } else if (t->k == JT_FLOAT) {
        p->i++;
        n = jp_lit(p, ln, jv_float(t->f));
    } else if (jp_accept_op(p, "(")) {
        if (jp_accept_op(p, ")")) {
            n = jp_node(p, JN_TUPLE, ln);
        } else {
            jnode *first = jp_expr(p, true);
            if (jp_is_op(p, ",")) {
                jp_vec v = {0};
                jp_push(p, &v, first);
                while (jp_accept_op(p, ",") && !jp_is_op(p, ")"))
                    jp_push(p, &v, jp_expr(p, true));
                n = jp_node(p, JN_TUPLE, ln);
                n->v = v.v;
                n->nv = v.n;
            } else {
                n = first;
            }
            jp_expect_op(p, ")");
        }
    } else if (jp_accept_op(p, "[")) {
        jp_vec v = {0};
        while (!jp_accept_op(p, "]")) {
            if (v.n)
                jp_expect_op(p, ",");
            if (jp_accept_op(p, "]"))
                break;
            jp_push(p, &v, jp_expr(p, true));
        }
        n = jp_node(p, JN_LIST, ln);
        n->v = v.v;
        n->nv = v.n;
    } else if (jp_accept_op(p, "{")) {
        jp_vec k = {0}, v = {0};
        while (!jp_accept_op(p, "}")) {
            if (k.n)
                jp_expect_op(p, ",");
            if (jp_accept_op(p, "}"))
                break;
            jp_push(p, &k, jp_expr(p, true));
            jp_expect_op(p, ":");
            jp_push(p, &v, jp_expr(p, true));
        }
        n = jp_node(p, JN_DICT, ln);
        n->v = k.v;
        n->nv = k.n;
        n->w = v.v;
        n->nw = v.n;
    } else {
        jp_fail(p, ln, STRATA_E_FORMAT, "unexpected %s in an expression",
              jp_describe(t, b, sizeof b));
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
        if (!jp_is_op(p, ":") && !jp_is_op(p, "]"))
            parts[k] = jp_expr(p, true);
        if (jp_accept_op(p, ":")) {
            slice = true;
            if (++k == 3)
                jp_fail(p, jp_line(p), STRATA_E_FORMAT, "a slice takes at most three parts");
            continue;
        }
        break;
    }
    jp_expect_op(p, "]");
    if (!slice) {
        if (!parts[0])
            jp_fail(p, ln, STRATA_E_FORMAT, "empty subscript '[]'");
        jnode *n = jp_node(p, JN_ITEM, ln);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = jp_node(p, JN_SLICE, ln);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->w = jp_alloc(p, sizeof *n->w);
    n->w[0] = parts[2];
    n->nw = 1;
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n)
{
    for (;;) {
        int ln = jp_line(p);
        if (jp_accept_op(p, ".")) {
            if (jp_cur(p)->k == JT_INT) {
                jnode *it = jp_node(p, JN_ITEM, ln);
                it->a = n;
                it->b = jp_lit(p, ln, jv_int(jp_cur(p)->i));
                p->i++;
                n = it;
            } else {
                jnode *at = jp_node(p, JN_ATTR, ln);
                at->a = n;
                at->name = jp_expect_name(p);
                n = at;
            }
        } else if (jp_accept_op(p, "[")) {
            n = parse_subscript(p, n, ln);
        } else if (jp_is_op(p, "(")) {
            jnode *c = jp_node(p, JN_CALL, ln);
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
        int ln = jp_line(p);
        if (jp_accept_op(p, "|")) {
            jnode *f = jp_node(p, JN_FILTER, ln);
            f->a = n;
            f->name = jp_expect_name(p);
            if (!jinja_filter_known(f->name))
                jp_fail(p, ln, STRATA_E_UNSUPPORTED, "unknown filter '%s'", f->name);
            if (jp_is_op(p, "("))
                parse_args(p, f);
            n = f;
        } else if (jp_accept_name(p, "is")) {
            jnode *t = jp_node(p, JN_TEST, ln);
            t->a = n;
            t->op = jp_accept_name(p, "not");
            t->name = jp_expect_name(p);
            if (!jinja_test_known(t->name))
                jp_fail(p, ln, STRATA_E_UNSUPPORTED, "unknown test '%s'", t->name);
            const jtok *c = jp_cur(p);
            if (jp_is_op(p, "(")) {
                parse_args(p, t);
            } else if ((c->k == JT_NAME || c->k == JT_STRING || c->k == JT_INT ||
                        c->k == JT_FLOAT || jp_is_op(p, "[") || jp_is_op(p, "{")) &&
                       !jp_is_name(p, "else") && !jp_is_name(p, "or") && !jp_is_name(p, "and")) {
                if (jp_is_name(p, "is"))
                    jp_fail(p, ln, STRATA_E_FORMAT, "tests cannot be chained with 'is'");
                t->v = jp_alloc(p, sizeof *t->v);
                t->v[0] = parse_postfix(p, parse_primary(p));
                t->nv = 1;
            }
            n = t;
        } else if (jp_is_op(p, "(")) {
            jnode *c = jp_node(p, JN_CALL, ln);
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
    int ln = jp_line(p);
    jp_enter(p);
    jnode *n;
    if (jp_accept_op(p, "-")) {
        n = jp_node(p, JN_NEG, ln);
        n->a = parse_unary(p, false);
    } else if (jp_accept_op(p, "+")) {
        n = jp_node(p, JN_POS, ln);
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
    jnode *n = jp_node(p, JN_BINOP, ln);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *p)
{
    jnode *n = parse_unary(p, true);
    for (int ln = jp_line(p); jp_accept_op(p, "**"); ln = jp_line(p))
        n = binop(p, JOP_POW, n, parse_unary(p, true), ln);
    return n;
}

static jnode *parse_math2(parser *p)
{
    jnode *n = parse_pow(p);
    for (;;) {
        int ln = jp_line(p);
        int op = jp_accept_op(p, "*") ? JOP_MUL : jp_accept_op(p, "//") ? JOP_FLOORDIV
               : jp_accept_op(p, "/") ? JOP_DIV : jp_accept_op(p, "%") ? JOP_MOD : 0;
        if (!op)
            return n;
        n = binop(p, op, n, parse_pow(p), ln);
    }
}

static jnode *parse_concat(parser *p)
{
    jnode *n = parse_math2(p);
    for (int ln = jp_line(p); jp_accept_op(p, "~"); ln = jp_line(p))
        n = binop(p, JOP_CONCAT, n, parse_math2(p), ln);
    return n;
}

static jnode *parse_math1(parser *p)
{
    jnode *n = parse_concat(p);
    for (;;) {
        int ln = jp_line(p);
        int op = jp_accept_op(p, "+") ? JOP_ADD : jp_accept_op(p, "-") ? JOP_SUB : 0;
        if (!op)
            return n;
        n = binop(p, op, n, parse_concat(p), ln);
    }
}

static jnode *parse_compare(parser *p)
{
    int ln = jp_line(p);
    jnode *first = parse_math1(p);
    jp_vec v = {0};
    int ops[64];
    size_t nops = 0;
    for (;;) {
        int op = jp_accept_op(p, "==") ? JOP_EQ : jp_accept_op(p, "!=") ? JOP_NE
               : jp_accept_op(p, "<=") ? JOP_LE : jp_accept_op(p, ">=") ? JOP_GE
               : jp_accept_op(p, "<") ? JOP_LT : jp_accept_op(p, ">") ? JOP_GT
               : jp_accept_name(p, "in") ? JOP_IN : 0;
        if (!op && jp_is_name(p, "not") && p->t[p->i + 1].k == JT_NAME &&
            p->t[p->i + 1].n == 2 && memcmp(p->t[p->i + 1].p, "in", 2) == 0) {
            p->i += 2;
            op = JOP_NOTIN;
        }
        if (!op)
            break;
        if (nops == 64)
            jp_fail(p, ln, STRATA_E_LIMIT, "more than 64 comparisons in a chain");
        if (!v.n)
            jp_push(p, &v, first);
        ops[nops++] = op;
        jp_push(p, &v, parse_math1(p));
    }
    if (!nops)
        return first;
    jnode *n = jp_node(p, JN_COMPARE, ln);
    n->v = v.v;
    n->nv = v.n;
    n->ops = jp_alloc(p, nops * sizeof *n->ops);
    memcpy(n->ops, ops, nops * sizeof *ops);
    return n;
}

static jnode *parse_not(parser *p)
{
    int ln = jp_line(p);
    if (jp_accept_name(p, "not")) {
        jp_enter(p);
        jnode *n = jp_node(p, JN_NOT, ln);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p)
{
    jnode *n = parse_not(p);
    for (int ln = jp_line(p); jp_accept_name(p, "and"); ln = jp_line(p)) {
        jnode *a = jp_node(p, JN_AND, ln);
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}

static jnode *parse_or(parser *p)
{
    jnode *n = parse_and(p);
    for (int ln = jp_line(p); jp_accept_name(p, "or"); ln = jp_line(p)) {
        jnode *o = jp_node(p, JN_OR, ln);
        o->a = n;
        o->b = parse_and(p);
        n = o;
    }
    return n;
}

jnode *jp_expr(parser *p, bool condexpr)
{
    jp_enter(p);
    jnode *n = parse_or(p);
    while (condexpr && jp_is_name(p, "if")) {
        int ln = jp_line(p);
        p->i++;
        jnode *c = jp_node(p, JN_COND, ln);
        c->a = parse_or(p);
        c->b = n;
        if (jp_accept_name(p, "else"))
            c->c = jp_expr(p, true);
        n = c;
    }
    p->depth--;
    return n;
}

/* An expression, or a bare tuple `a, b` (jinja2's parse_tuple). */
jnode *jp_tuple(parser *p, bool condexpr)
{
    int ln = jp_line(p);
    jnode *first = jp_expr(p, condexpr);
    if (!jp_is_op(p, ","))
        return first;
    jp_vec v = {0};
    jp_push(p, &v, first);
    while (jp_accept_op(p, ",")) {
        const jtok *t = jp_cur(p);
        if (t->k == JT_VAR_END || t->k == JT_BLOCK_END || jp_is_name(p, "if"))
            break;
        jp_push(p, &v, jp_expr(p, condexpr));
    }
    jnode *n = jp_node(p, JN_TUPLE, ln);
    n->v = v.v;
    n->nv = v.n;
    return n;
}

