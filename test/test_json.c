/* test_json.c: suite "json": serve/json.c, the strict parser and the writer.
 *
 *   - RFC 8259's grammar is accepted, and every near miss (trailing comma,
 *     leading zero, bare control character, single quotes, NaN, comments,
 *     trailing data) is refused with the byte offset in the message;
 *   - \u escapes decode to UTF-8, surrogate pairs to one code point, and a
 *     lone surrogate is refused; raw UTF-8 is validated (overlong forms,
 *     encoded surrogates, > U+10FFFF, truncated sequences refused);
 *   - nesting is limited to JSON_MAX_DEPTH;
 *   - what the writer writes parses back to the same tree, for random trees
 *     with random bytes in the strings (invalid UTF-8 becomes U+FFFD). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/json.h"

static json *parse_ok(const char *s)
{
    json *v = NULL;
    strata_error err = {0};
    int rc = json_parse(s, strlen(s), &v, &err);
    ck_assert_msg(rc == 0, "refused %s: %s", s, err.msg);
    return v;
}

static void parse_bad(const char *s, size_t n, const char *want)
{
    json *v = NULL;
    strata_error err = {0};
    int rc = json_parse(s, n, &v, &err);
    ck_assert_msg(rc == STRATA_E_FORMAT, "accepted %.*s", (int)n, s);
    ck_assert_ptr_null(v);
    ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "at byte"),
                  "%.*s: message '%s' lacks '%s'", (int)n, s, err.msg, want);
}

START_TEST(json_accepts_rfc_grammar)
{
    json *v = parse_ok(" {\"a\": [1, -0, 2.5e3, -1E-2, 0.25, true, false, null], \"b\": {},"
                       " \"c\": [], \"d\": \"x\\ty\\u00e9\\ud83d\\ude00\\/\"}\r\n");
    ck_assert_int_eq(v->type, JSON_OBJECT);
    ck_assert_int_eq(v->n, 4);
    const json *a = json_get(v, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->n, 8);
    ck_assert(a->items[0]->num == 1 && a->items[2]->num == 2500);
    ck_assert(fabs(a->items[3]->num + 0.01) < 1e-15);
    ck_assert_int_eq(a->items[5]->type, JSON_TRUE);
    ck_assert_int_eq(a->items[7]->type, JSON_NULL);
    const json *d = json_get(v, "d");
    ck_assert_int_eq(d->len, strlen("x\ty\xc3\xa9\xf0\x9f\x98\x80/"));
    ck_assert_mem_eq(d->str, "x\ty\xc3\xa9\xf0\x9f\x98\x80/", d->len);
    ck_assert_ptr_null(json_get(v, "e"));
    int64_t k;
    ck_assert(json_int(a->items[0], 0, 10, &k) && k == 1);
    ck_assert(!json_int(a->items[2], 0, 10, &k));
    ck_assert(!json_int(a->items[4], 0, 10, &k));
    json_free(v);
    /* scalars at top level, \u0000 inside a string, a repeated key */
    v = parse_ok("\"a\\u0000b\"");
    ck_assert_int_eq(v->len, 3);
    ck_assert_int_eq(v->str[1], 0);
    json_free(v);
    v = parse_ok("{\"k\":1,\"k\":2}");
    ck_assert(json_get(v, "k")->num == 2);
    json_free(v);
    v = parse_ok("-12345678901234567890");
    ck_assert(v->num < -1.2e19);
    json_free(v);
}
END_TEST

START_TEST(json_refuses_near_misses)
{
#define BAD(s, want) parse_bad(s, sizeof(s) - 1, want)
    BAD("", "unexpected end");
    BAD("   ", "unexpected end");
    BAD("[1,]", "unexpected character");
    BAD("{\"a\":1,}", "expected a string key");
    BAD("01", "leading zero");
    BAD("-", "expected a digit");
    BAD("1.", "after '.'");
    BAD(".5", "unexpected character");
    BAD("1e", "exponent");
    BAD("+1", "unexpected character");
    BAD("NaN", "unexpected character");
    BAD("Infinity", "unexpected character");
    BAD("'a'", "unexpected character");
    BAD("[1] 2", "trailing data");
    BAD("[1] //c", "trailing data");
    BAD("{\"a\" 1}", "expected ':'");
    BAD("{a:1}", "expected a string key");
    BAD("[1 2]", "expected ',' or ']'");
    BAD("{\"a\":1 \"b\":2}", "expected ',' or '}'");
    BAD("tru", "invalid literal");
    BAD("nul", "invalid literal");
    BAD("\"abc", "unterminated string");
    BAD("\"a\nb\"", "control character");
    BAD("\"a\tb\"", "control character");
    BAD("\"\\x\"", "invalid escape");
    BAD("\"\\u12zz\"", "bad hex digit");
    BAD("\"\\u12", "truncated");
    BAD("\"\\ud800\"", "high surrogate");
    BAD("\"\\ud800\\u0041\"", "high surrogate");
    BAD("\"\\udc00\"", "lone low surrogate");
    BAD("\"\xc0\xaf\"", "invalid UTF-8");         /* overlong '/' */
    BAD("\"\xe0\x80\xaf\"", "invalid UTF-8");     /* overlong */
    BAD("\"\xed\xa0\x80\"", "invalid UTF-8");     /* encoded surrogate */
    BAD("\"\xf4\x90\x80\x80\"", "invalid UTF-8"); /* > U+10FFFF */
    BAD("\"\xe2\x82\"", "invalid UTF-8");         /* truncated */
    BAD("\"\xff\"", "invalid UTF-8");
    BAD("\"\x80\"", "invalid UTF-8");
    BAD("[1]\x00", "trailing data");
    BAD("\xef\xbb\xbf[]", "unexpected character"); /* a BOM is not JSON */
#undef BAD
}
END_TEST

START_TEST(json_depth_is_limited)
{
    char buf[2 * (JSON_MAX_DEPTH + 1) + 1];
    for (int d = JSON_MAX_DEPTH; d <= JSON_MAX_DEPTH + 1; d++) {
        memset(buf, '[', (size_t)d);
        memset(buf + d, ']', (size_t)d);
        json *v = NULL;
        strata_error err = {0};
        int rc = json_parse(buf, 2 * (size_t)d, &v, &err);
        if (d == JSON_MAX_DEPTH) {
            ck_assert_msg(rc == 0, "depth %d refused: %s", d, err.msg);
            json_free(v);
        } else {
            ck_assert_int_eq(rc, STRATA_E_FORMAT);
            ck_assert_msg(strstr(err.msg, "nesting"), "%s", err.msg);
        }
    }
    /* a megabyte of '[' fails cleanly, without recursing a million deep */
    size_t n = 1 << 20;
    char *big = malloc(n);
    memset(big, '[', n);
    json *v = NULL;
    ck_assert_int_eq(json_parse(big, n, &v, NULL), STRATA_E_FORMAT);
    free(big);
}
END_TEST

static json *random_tree(uint64_t *rs, int depth)
{
    json *v = calloc(1, sizeof *v);
    int kind = (int)(test_rand_u64(rs) % (depth < 4 ? 7 : 5));
    v->type = (json_type)kind;
    if (kind == JSON_NUMBER) {
        uint64_t r = test_rand_u64(rs);
        v->num = (r & 1) ? (double)(int64_t)(r >> 12) - (double)(1ull << 51)
                         : test_rand_normal(rs) * pow(10, (double)(r % 40) - 20);
    } else if (kind == JSON_STRING) {
        v->len = test_rand_u64(rs) % 12;
        v->str = malloc(v->len + 1);
        for (size_t i = 0; i < v->len; i++)
            v->str[i] = (char)(test_rand_u64(rs) % 256);
        v->str[v->len] = 0;
    } else if (kind == JSON_ARRAY || kind == JSON_OBJECT) {
        v->n = test_rand_u64(rs) % 5;
        v->items = calloc(v->n + 1, sizeof *v->items);
        if (kind == JSON_OBJECT) {
            v->keys = calloc(v->n + 1, sizeof *v->keys);
            v->key_lens = calloc(v->n + 1, sizeof *v->key_lens);
        }
        for (size_t i = 0; i < v->n; i++) {
            v->items[i] = random_tree(rs, depth + 1);
            if (kind == JSON_OBJECT) {
                v->keys[i] = strdup("k\"\\\x01\xe2\x82\xac");
                v->key_lens[i] = strlen(v->keys[i]);
            }
        }
    }
    return v;
}

/* The tree a written string parses back to: invalid UTF-8 bytes replaced. */
static int same_tree(const json *a, const json *b)
{
    if (a->type != b->type || a->n != b->n)
        return 0;
    if (a->type == JSON_NUMBER)
        return a->num == b->num;
    if (a->type == JSON_STRING) {
        jbuf w = {0};
        jbuf_str(&w, a->str, a->len); /* the writer's own replacement */
        json *t = NULL;
        int ok = json_parse(w.p, w.len, &t, NULL) == 0 && t->len == b->len &&
                 !memcmp(t->str, b->str, b->len);
        json_free(t);
        jbuf_free(&w);
        return ok && utf8_valid_prefix(b->str, b->len) == b->len;
    }
    for (size_t i = 0; i < a->n; i++) {
        if (a->type == JSON_OBJECT &&
            (a->key_lens[i] != b->key_lens[i] || memcmp(a->keys[i], b->keys[i], a->key_lens[i])))
            return 0;
        if (!same_tree(a->items[i], b->items[i]))
            return 0;
    }
    return 1;
}

START_TEST(json_writer_round_trips)
{
    uint64_t rs = 0x5eed;
    for (int it = 0; it < 2000; it++) {
        json *t = random_tree(&rs, 0);
        jbuf b = {0};
        jbuf_json(&b, t);
        ck_assert(!b.oom);
        json *back = NULL;
        strata_error err = {0};
        ck_assert_msg(json_parse(b.p, b.len, &back, &err) == 0, "%s: %s", b.p, err.msg);
        ck_assert_msg(same_tree(t, back), "round trip %d changed %s", it, b.p);
        json_free(back);
        json_free(t);
        jbuf_free(&b);
    }
    /* escapes, exactly */
    jbuf b = {0};
    jbuf_str(&b, "a\"\\\n\x01\x7f\xff\xe2\x82\xac", 10);
    ck_assert_str_eq(b.p, "\"a\\\"\\\\\\n\\u0001\x7f\xef\xbf\xbd\xe2\x82\xac\"");
    jbuf_free(&b);
    jbuf_num(&b, 42);
    jbuf_raw(&b, " ", 1);
    jbuf_num(&b, 0.1);
    jbuf_raw(&b, " ", 1);
    jbuf_num(&b, NAN);
    ck_assert_str_eq(b.p, "42 0.10000000000000001 null");
    jbuf_free(&b);
    /* an answer's text drops its NUL bytes (a request holding one is refused) */
    jbuf_text(&b, "\0a\0\0bc\0", 7);
    jbuf_text(&b, "d", 1);
    jbuf_text(&b, "\0", 1);
    ck_assert_uint_eq(b.len, 4);
    ck_assert_str_eq(b.p, "abcd");
    jbuf_free(&b);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, json_accepts_rfc_grammar);
    tcase_add_test(tc, json_refuses_near_misses);
    tcase_add_test(tc, json_depth_is_limited);
    tcase_add_test(tc, json_writer_round_trips);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(json_suite)
