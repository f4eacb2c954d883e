/* jinja_parse.c: tokens to a syntax tree: the parser's helpers and the
 * statements (for, if, set, macro, break/continue, generation), by
 * recursive descent; expressions are in jinja_parse_expr.c, in the order
 * of jinja2's own parser so precedence matches it.  Unknown tags, filters
 * and tests are refused here, before any rendering, with their line. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/jinja_parser.h"

_Noreturn void jp_fail(parser *p, int line, int code, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    strata_err(p->err, code, "chat template line %d: %s", line, why);
    longjmp(p->fail, 1);
}

void *jp_alloc(parser *p, size_t n)
{
    void *r = ja_alloc(p->a, n);
    if (!r)
        jp_fail(p, p->t[p->i].line, STRATA_E_NOMEM, "out of memory parsing the template");
    return r;
}

const jtok *jp_cur(parser *p) { return &p->t[p->i]; }
int jp_line(parser *p) { return p->t[p->i].line; }

bool jp_is_op(parser *p, const char *op)
{
    const jtok *t = jp_cur(p);
    return t->k == JT_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}

bool jp_is_name(parser *p, const char *name)
{
    const jtok *t = jp_cur(p);
    return t->k == JT_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}

bool jp_accept_op(parser *p, const char *op)
{
    if (!jp_is_op(p, op))
        return false;
    p->i++;
    return true;
}

bool jp_accept_name(parser *p, const char *name)
{
    if (!jp_is_name(p, name))
        return false;
    p->i++;
    return true;
}

const char *jp_describe(const jtok *t, char *buf, size_t n)
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

void jp_expect_op(parser *p, const char *op)
{
    char b[64];
    if (!jp_accept_op(p, op))
        jp_fail(p, jp_line(p), STRATA_E_FORMAT, "expected '%s', found %s", op,
              jp_describe(jp_cur(p), b, sizeof b));
}

const char *jp_expect_name(parser *p)
{
    char b[64];
    const jtok *t = jp_cur(p);
    if (t->k != JT_NAME)
        jp_fail(p, t->line, STRATA_E_FORMAT, "expected a name, found %s",
              jp_describe(t, b, sizeof b));
    char *s = jp_alloc(p, t->n + 1);
    memcpy(s, t->p, t->n);
    p->i++;
    return s;
}

void jp_expect_kind(parser *p, jtok_kind k, const char *what)
{
    char b[64];
    if (jp_cur(p)->k != k)
        jp_fail(p, jp_line(p), STRATA_E_FORMAT, "expected %s, found %s", what,
              jp_describe(jp_cur(p), b, sizeof b));
    p->i++;
}

jnode *jp_node(parser *p, jnode_kind k, int ln)
{
    jnode *n = jp_alloc(p, sizeof *n);
    n->k = k;
    n->line = ln;
    return n;
}

void jp_push(parser *p, jp_vec *v, jnode *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4;
        jnode **nvv = jp_alloc(p, cap * sizeof *nvv);
        if (v->n)
            memcpy(nvv, v->v, v->n * sizeof *nvv);
        v->v = nvv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

void jp_enter(parser *p)
{
    if (++p->depth > p->max_depth)
        jp_fail(p, jp_line(p), STRATA_E_LIMIT, "nested deeper than %d", p->max_depth);
}

/* ---- statements ---------------------------------------------------------- */
static void parse_body(parser *p, jp_vec *out, const char *const *ends, const char *opener,
                       int open_line);

static bool at_end_tag(parser *p, const char *const *ends)
{
    if (jp_cur(p)->k != JT_BLOCK_BEGIN || !ends)
        return false;
    const jtok *t = &p->t[p->i + 1];
    for (; *ends; ends++)
        if (t->k == JT_NAME && t->n == strlen(*ends) && memcmp(t->p, *ends, t->n) == 0)
            return true;
    return false;
}

static void block_end(parser *p)
{
    jp_expect_kind(p, JT_BLOCK_END, "'%}'");
}

static jnode **fix(parser *p, jp_vec *v, size_t *n)
{
    (void)p;
    *n = v->n;
    return v->v;
}

static jnode *parse_for(parser *p, int ln)
{
    jnode *n = jp_node(p, JN_FOR, ln);
    const char *names[8];
    size_t k = 0;
    do {
        if (k == 8)
            jp_fail(p, ln, STRATA_E_UNSUPPORTED, "more than 8 loop variables");
        names[k++] = jp_expect_name(p);
    } while (jp_accept_op(p, ","));
    n->names = jp_alloc(p, k * sizeof *n->names);
    memcpy(n->names, names, k * sizeof *names);
    n->nnames = k;
    if (!jp_accept_name(p, "in"))
        jp_fail(p, jp_line(p), STRATA_E_FORMAT, "expected 'in' in a for tag");
    n->a = jp_tuple(p, false);
    if (jp_accept_name(p, "if"))
        n->b = jp_expr(p, true);
    if (jp_is_name(p, "recursive"))
        jp_fail(p, ln, STRATA_E_UNSUPPORTED, "recursive loops are not supported");
    block_end(p);
    static const char *const ends1[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    jp_vec body = {0}, els = {0};
    p->loops++;
    parse_body(p, &body, ends1, "for", ln);
    p->loops--;
    if (jp_accept_name(p, "else")) {
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
    jnode *n = jp_node(p, JN_IF, ln);
    n->a = jp_tuple(p, false);
    block_end(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    jp_vec body = {0}, els = {0};
    parse_body(p, &body, ends, "if", ln);
    n->v = fix(p, &body, &n->nv);
    int eln = jp_line(p);
    if (jp_accept_name(p, "elif")) {
        jp_enter(p);
        jp_push(p, &els, parse_if(p, eln)); /* consumes through endif */
        p->depth--;
        n->w = fix(p, &els, &n->nw);
        return n;
    }
    if (jp_accept_name(p, "else")) {
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
    const char *name = jp_expect_name(p);
    const char *attr = NULL;
    if (jp_accept_op(p, "."))
        attr = jp_expect_name(p);
    if (jp_is_op(p, ","))
        jp_fail(p, ln, STRATA_E_UNSUPPORTED, "set with several targets is not supported");
    jnode *n;
    if (jp_accept_op(p, "=")) {
        n = jp_node(p, attr ? JN_SET_ATTR : JN_SET, ln);
        n->a = jp_tuple(p, true);
        block_end(p);
    } else {
        if (attr)
            jp_fail(p, ln, STRATA_E_FORMAT, "a set block cannot assign an attribute");
        block_end(p);
        static const char *const ends[] = {"endset", NULL};
        jp_vec body = {0};
        parse_body(p, &body, ends, "set", ln);
        p->i++;
        block_end(p);
        n = jp_node(p, JN_SET_BLOCK, ln);
        n->v = fix(p, &body, &n->nv);
    }
    n->name = attr ? attr : name;
    if (attr) { /* a: the namespace's name */
        jnode *ns = jp_node(p, JN_NAME, ln);
        ns->name = name;
        n->b = ns;
    }
    return n;
}

static jnode *parse_macro(parser *p, int ln)
{
    jnode *n = jp_node(p, JN_MACRO, ln);
    n->name = jp_expect_name(p);
    const char *names[32];
    jnode *defs[32];
    size_t k = 0;
    jp_expect_op(p, "(");
    while (!jp_accept_op(p, ")")) {
        if (k)
            jp_expect_op(p, ",");
        if (jp_accept_op(p, ")"))
            break;
        if (k == 32)
            jp_fail(p, ln, STRATA_E_UNSUPPORTED, "more than 32 macro parameters");
        names[k] = jp_expect_name(p);
        defs[k] = jp_accept_op(p, "=") ? jp_expr(p, true) : NULL;
        k++;
    }
    block_end(p);
    n->names = jp_alloc(p, (k ? k : 1) * sizeof *n->names);
    n->w = jp_alloc(p, (k ? k : 1) * sizeof *n->w);
    memcpy(n->names, names, k * sizeof *names);
    memcpy(n->w, defs, k * sizeof *defs);
    n->nnames = n->nw = k;
    static const char *const ends[] = {"endmacro", NULL};
    jp_vec body = {0};
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
    const jtok *t = jp_cur(p);
    int ln = t->line;
    if (t->k == JT_TEXT) {
        p->i++;
        jnode *n = jp_node(p, JN_TEXT, ln);
        n->lit = jv_str(t->p, t->n);
        return n;
    }
    if (t->k == JT_VAR_BEGIN) {
        p->i++;
        jnode *n = jp_node(p, JN_OUTPUT, ln);
        n->a = jp_tuple(p, true);
        jp_expect_kind(p, JT_VAR_END, "'}}'");
        return n;
    }
    char b[64];
    if (t->k != JT_BLOCK_BEGIN)
        jp_fail(p, ln, STRATA_E_FORMAT, "unexpected %s", jp_describe(t, b, sizeof b));
    p->i++;
    if (jp_cur(p)->k != JT_NAME)
        jp_fail(p, ln, STRATA_E_FORMAT, "expected a tag name after '{%%', found %s",
              jp_describe(jp_cur(p), b, sizeof b));
    jnode *n;
    jp_enter(p);
    if (jp_accept_name(p, "for")) {
        n = parse_for(p, ln);
    } else if (jp_accept_name(p, "if")) {
        n = parse_if(p, ln);
    } else if (jp_accept_name(p, "set")) {
        n = parse_set(p, ln);
    } else if (jp_accept_name(p, "macro")) {
        n = parse_macro(p, ln);
    } else if (jp_is_name(p, "break") || jp_is_name(p, "continue")) {
        bool brk = jp_is_name(p, "break");
        if (!p->loops)
            jp_fail(p, ln, STRATA_E_FORMAT, "'%s' outside a loop", brk ? "break" : "continue");
        p->i++;
        block_end(p);
        n = jp_node(p, brk ? JN_BREAK : JN_CONTINUE, ln);
    } else if (jp_accept_name(p, "generation")) {
        /* Hugging Face's marker around assistant text: renders its body. */
        block_end(p);
        static const char *const ends[] = {"endgeneration", NULL};
        jp_vec body = {0};
        parse_body(p, &body, ends, "generation", ln);
        p->i++;
        block_end(p);
        n = jp_node(p, JN_IF, ln);
        n->a = jp_lit(p, ln, jv_bool(true));
        n->v = fix(p, &body, &n->nv);
    } else {
        const jtok *nt = jp_cur(p);
        static const char *const closers[] = {"endfor", "endif", "else", "elif", "endset",
                                              "endmacro", "endgeneration"};
        for (size_t k = 0; k < sizeof closers / sizeof closers[0]; k++)
            if (jp_is_name(p, closers[k]))
                jp_fail(p, ln, STRATA_E_FORMAT, "unexpected '{%% %s %%}'", closers[k]);
        jp_fail(p, ln, STRATA_E_UNSUPPORTED, "unsupported tag '%.*s'",
              (int)(nt->n > 40 ? 40 : nt->n), nt->p);
    }
    p->depth--;
    return n;
}

/* Statements up to (not including) a tag named in ends, or the end of the
 * template when ends is NULL. */
static void parse_body(parser *p, jp_vec *out, const char *const *ends, const char *opener,
                       int open_line)
{
    for (;;) {
        if (jp_cur(p)->k == JT_EOF) {
            if (ends)
                jp_fail(p, jp_cur(p)->line, STRATA_E_FORMAT,
                      "'{%% %s %%}' opened on line %d is never closed (no '{%% end%s %%}')",
                      opener, open_line, opener);
            return;
        }
        if (at_end_tag(p, ends)) {
            p->i++; /* the '{%'; the name is left for the caller */
            return;
        }
        jp_push(p, out, parse_stmt(p));
    }
}

int jinja_parse_tokens(jarena *a, const jtok *toks, size_t n, int max_depth, jnode ***body,
                       size_t *nbody, strata_error *err)
{
    parser p = {.a = a, .t = toks, .n = n, .max_depth = max_depth, .err = err};
    if (setjmp(p.fail))
        return err && err->code ? err->code : STRATA_E_FORMAT;
    jp_vec v = {0};
    parse_body(&p, &v, NULL, NULL, 0);
    *body = fix(&p, &v, nbody);
    return 0;
}
