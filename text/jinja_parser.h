/* jinja_parser.h: the parser's state and helpers, shared by
 * jinja_parse.c (statements) and jinja_parse_expr.c (expressions).
 * Private to those two files.  Errors longjmp to jinja_parse_tokens. */
#ifndef STRATA_JINJA_PARSER_H
#define STRATA_JINJA_PARSER_H

#include <setjmp.h>

#include "text/jinja_impl.h"

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth, max_depth, loops;
    strata_error *err;
    jmp_buf fail;
} parser;

/* A growing array of node pointers, then fixed in the arena. */
typedef struct jp_vec { jnode **v; size_t n, cap; } jp_vec;

_Noreturn void jp_fail(parser *p, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *jp_alloc(parser *p, size_t n);
const jtok *jp_cur(parser *p);
int jp_line(parser *p);
bool jp_is_op(parser *p, const char *op);
bool jp_is_name(parser *p, const char *name);
bool jp_accept_op(parser *p, const char *op);
bool jp_accept_name(parser *p, const char *name);
const char *jp_describe(const jtok *t, char *buf, size_t n);
void jp_expect_op(parser *p, const char *op);
const char *jp_expect_name(parser *p);
void jp_expect_kind(parser *p, jtok_kind k, const char *what);
jnode *jp_node(parser *p, jnode_kind k, int ln);
void jp_push(parser *p, jp_vec *v, jnode *x);
void jp_enter(parser *p); /* one nesting level deeper, or fail */

/* jinja_parse_expr.c */
jnode *jp_lit(parser *p, int ln, jv v);
jnode *jp_expr(parser *p, bool condexpr);  /* condexpr: `a if c else b` allowed */
jnode *jp_tuple(parser *p, bool condexpr); /* an expression or a bare tuple `a, b` */

#endif
