/* jinja_impl.h: what the Jinja interpreter's files share (see jinja.h):
 * the arena every value and node lives in, values, tokens, the syntax tree
 * and the render state.  Private to text/jinja_*.c. */
#ifndef STRATA_JINJA_IMPL_H
#define STRATA_JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/jinja.h"

/* ---- arena: bump allocation, freed at once --------------------------------
 * A render allocates every value from one arena and frees it whole, so the
 * values need no ownership rules; the cap is the render's memory limit. */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used, cap; /* bytes handed out; 0 cap: no limit */
} jarena;

void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL past the cap or OOM */
void ja_free_all(jarena *a);

/* ---- values -------------------------------------------------------------- */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_LOOP,  /* the `loop` of a for */
    JV_MACRO,
    JV_FUNC,  /* a global function */
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jnode jnode;
typedef struct jframe jframe;

typedef struct jv {
    jv_kind k;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        jlist *l;
        jdict *d;
        jloop *loop;
        const jnode *macro;
        int fn;
    } u;
} jv;

struct jlist { jv *v; size_t n, cap; bool tuple; int depth; /* of nested lists/dicts */ };
struct jdict { jv *key, *val; size_t n, cap; bool ns; /* namespace(): attributes settable */ int depth; };
struct jloop { const jlist *items; size_t i; };

enum { JFN_RAISE, JFN_NAMESPACE, JFN_RANGE, JFN_STRFTIME, JFN_DICT };

static inline jv jv_undef(void) { jv v = {JV_UNDEF, {0}}; return v; }
static inline jv jv_none(void) { jv v = {JV_NONE, {0}}; return v; }
static inline jv jv_bool(bool b) { jv v = {JV_BOOL, {.b = b}}; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, {.i = i}}; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, {.f = f}}; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {JV_STR, {.s = {p, n}}}; return v; }
static inline jv jv_list(jlist *l) { jv v = {JV_LIST, {.l = l}}; return v; }
static inline jv jv_dict(jdict *d) { jv v = {JV_DICT, {.d = d}}; return v; }

/* ---- growing byte buffer ------------------------------------------------- */
typedef struct jbuf {
    jarena *ar;         /* grows in this arena */
    char *p;
    size_t n, cap, max; /* max 0: no limit */
    bool over, oom;     /* past max; the arena said no */
} jbuf;
void jb_add(jbuf *b, const char *s, size_t n);
void jb_str(jbuf *b, const char *s);

/* ---- tokens -------------------------------------------------------------- */
typedef enum {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF,
} jtok_kind;

typedef struct jtok {
    jtok_kind k;
    int line;
    const char *p; /* TEXT, NAME, OP: into the source; STRING: decoded, in the arena */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Split normalized source into tokens (arena-allocated array ending in
 * JT_EOF).  Applies whitespace control and trim_blocks/lstrip_blocks. */
int jinja_lex(jarena *a, const char *src, size_t len, jtok **out, size_t *n,
              strata_error *err);

/* ---- syntax tree --------------------------------------------------------- */
typedef enum {
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_ATTR, JN_SET_BLOCK, JN_MACRO,
    JN_BREAK, JN_CONTINUE,
    /* expressions */
    JN_LIT, JN_NAME, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_BINOP, JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_COND, JN_COMPARE,
    JN_LIST, JN_TUPLE, JN_DICT, JN_KWARG,
} jnode_kind;

enum { JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
       JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN };

struct jnode {
    jnode_kind k;
    int line;
    int op;            /* JOP_*; JN_TEST: 1 when negated */
    const char *name;  /* NAME, ATTR, FILTER, TEST, KWARG, SET, MACRO: NUL-terminated */
    jv lit;
    jnode *a, *b, *c;  /* operands; FOR: a iter, b filter; IF: a cond */
    jnode **v;         /* args / items / body */
    size_t nv;
    jnode **w;         /* FOR, IF: else body; DICT: values; MACRO: defaults (NULL entries) */
    size_t nw;
    const char **names; /* FOR targets, MACRO params */
    size_t nnames;
    int *ops;          /* COMPARE: the operators between v[i] and v[i+1] */
};

struct jinja_template {
    jarena ar;
    jnode **body;
    size_t n;
};

int jinja_parse_tokens(jarena *a, const jtok *toks, size_t n, int max_depth, jnode ***body,
                       size_t *nbody, strata_error *err);
bool jinja_filter_known(const char *name);
bool jinja_test_known(const char *name);

/* ---- render state -------------------------------------------------------- */
typedef struct jstate {
    jarena ar;
    jbuf *out;
    jframe *globals;
    jinja_limits lim;
    uint64_t steps;
    int depth;
    int brk; /* 1 break, 2 continue pending */
    int line; /* of the statement being run, for errors without a node */
    int64_t now;
    strata_error *err;
    jmp_buf fail; /* every error longjmps here after filling err */
} jstate;

/* Fill err with "chat template line N: ..." and leave the render. */
_Noreturn void jfail(jstate *s, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* value helpers (jinja_value.c) */
bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
int jv_cmp(jstate *s, int line, jv a, jv b); /* <0, 0, >0; fails on mixed types */
const char *jv_type_name(jv v);
jv jv_strdup(jstate *s, const char *p, size_t n);
jv jv_cat(jstate *s, jv a, jv b);      /* two strings */
jlist *jl_new(jstate *s, size_t cap);
void jl_push(jstate *s, jlist *l, jv v);
jdict *jd_new(jstate *s);
void jd_set(jstate *s, jdict *d, jv key, jv val);
bool jd_get(const jdict *d, jv key, jv *out);
jv jv_to_str(jstate *s, jv v);         /* Python's str() as Jinja prints */
void jv_write(jstate *s, jbuf *b, jv v, bool repr);
void jv_tojson(jstate *s, int line, jbuf *b, jv v, int indent, int level);
jbuf jb_new(jstate *s);               /* a buffer in the render's arena */
void jw(jstate *s, jbuf *b, const char *p, size_t n); /* append or fail the render */
jv jb_value(jstate *s, jbuf *b);       /* the buffer as a string value */
void *js_alloc(jstate *s, size_t n);   /* fails the render past the memory cap */
void js_charge(jstate *s, uint64_t units); /* work a builtin does, against the step budget */
size_t utf8_count(const char *p, size_t n);
size_t utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of code point cp */
size_t py_space_at(const char *p, size_t n);  /* bytes of a Python whitespace char at p, or 0 */
size_t py_space_before(const char *p, size_t n); /* same, for the char that ends at p+n */
jlist *jv_iterate(jstate *s, int line, jv v); /* list of items, keys, chars */

/* string work (jinja_strings.c) */
jv js_need_str(jstate *s, int line, jv v, const char *what);     /* v, or fail */
int64_t js_need_int(jstate *s, int line, jv v, const char *what); /* int or bool, or fail */
jv js_strip(jstate *s, jv v, jv chars, bool left, bool right); /* chars not a str: whitespace */
enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_METHOD, CASE_TITLE_FILTER };
jv js_case(jstate *s, jv v, int how);
jv js_replace(jstate *s, int line, jv v, jv old, jv new_, int64_t count); /* count < 0: all */
jv js_split(jstate *s, int line, jv v, jv sep, int64_t maxsplit); /* sep none: whitespace */
bool js_affix(jstate *s, int line, jv v, jv what, bool start);    /* what: str or list of str */
int64_t js_find(jv v, jv sub, int64_t *count); /* first index in code points or -1; count */
jv js_join(jstate *s, int line, jv seq, jv sep, jv attr);

/* builtins (jinja_builtins.c) */
jv jinja_filter(jstate *s, const jnode *n, jv x, jv *args, const char **kw, size_t na);
bool jinja_test(jstate *s, const jnode *n, jv x, jv *args, size_t na);
jv jinja_method(jstate *s, int line, jv obj, const char *name, jv *args, const char **kw,
                size_t na);
jv jinja_call_func(jstate *s, int line, int fn, jv *args, const char **kw, size_t na);

#endif
