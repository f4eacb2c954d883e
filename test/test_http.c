/* test_http.c: suite "http": serve/http_parse.c and serve/http.c.
 *
 *   - heads parse the same whole and fed a byte at a time (0 = need more
 *     until the blank line), with CRLF or bare LF;
 *   - keep-alive follows the version and Connection;
 *   - each refusal has its status: malformed request line or field, obs-
 *     fold, stray CR, no Host (400), Transfer-Encoding (501), HTTP/2 (505),
 *     a head over the limit or 65 fields (431), a body over the limit (413);
 *   - over a socket pair: pipelined requests come out one by one with their
 *     bodies, a trickling client gets 408 once the request deadline passes
 *     (the slow-loris bound), Expect: 100-continue is answered, and a
 *     chunked SSE stream is framed exactly. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/http.h"

static const http_limits LIM = {.max_head = 1024, .max_body = 100};

static long parse(const char *s, http_request *req, int *status)
{
    strata_error err = {0};
    long r = http_parse_head(s, strlen(s), &LIM, req, status, &err);
    if (r < 0)
        ck_assert_msg(err.msg[0], "no message for status %d", *status);
    return r;
}

START_TEST(http_parses_heads)
{
    const char *s = "\r\nPOST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\n"
                    "Content-Type:  application/json \r\nContent-Length: 5\r\n"
                    "X-Empty:\r\n\r\nhello";
    http_request req;
    int st;
    long hl = parse(s, &req, &st);
    ck_assert_int_eq(hl, (long)(strlen(s) - 5));
    ck_assert_str_eq(req.method, "POST");
    ck_assert_str_eq(req.target, "/v1/chat/completions?x=1");
    ck_assert_int_eq(req.minor, 1);
    ck_assert_int_eq(req.n_fields, 4);
    ck_assert_str_eq(http_field_get(&req, "content-type"), "application/json");
    ck_assert_str_eq(http_field_get(&req, "x-empty"), "");
    ck_assert_int_eq(req.content_length, 5);
    ck_assert_int_eq(req.keep_alive, 1);
    http_request_free(&req);
    /* byte by byte: incomplete until the last byte of the head */
    for (size_t n = 0; n < (size_t)hl; n++) {
        strata_error err = {0};
        long r = http_parse_head(s, n, &LIM, &req, &st, &err);
        ck_assert_msg(r == 0, "prefix of %zu bytes gave %ld (%s)", n, r, err.msg);
    }
    /* keep-alive rules; bare LF line ends */
    struct { const char *s; int ka; } cases[] = {
        {"GET / HTTP/1.1\nHost: a\n\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, close\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(parse(cases[i].s, &req, &st) > 0, "%s refused", cases[i].s);
        ck_assert_msg(req.keep_alive == cases[i].ka, "%s: keep_alive %d", cases[i].s,
                      req.keep_alive);
        http_request_free(&req);
    }
}
END_TEST

START_TEST(http_refuses_with_status)
{
    char many[2048] = "GET / HTTP/1.1\r\nHost: a\r\n";
    for (int i = 0; i < 64; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "X%d: y\r\n", i);
    strcat(many, "\r\n");
    char big[1200] = "GET /";
    memset(big + 5, 'a', 1100);
    strcpy(big + 1105, " HTTP/1.1\r\n");
    struct { const char *s; int status; } cases[] = {
        {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n\r\n", 400},                       /* no Host */
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n", 400},    /* space before ':' */
        {"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", 400}, /* obs-fold */
        {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},           /* stray CR */
        {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n", 413},
        {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
        {many, 431},
        {big, 431},    /* no blank line yet, but already over the limit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_request req;
        int st = 0;
        long r = parse(cases[i].s, &req, &st);
        ck_assert_msg(r < 0 && st == cases[i].status, "case %zu: %ld, status %d, want %d", i, r,
                      st, cases[i].status);
    }
}
END_TEST

typedef struct writer_arg {
    int fd;
    const char *parts[4];
    int delay_ms;
} writer_arg;

static void *writer(void *p)
{
    writer_arg *a = p;
    for (int i = 0; i < 4 && a->parts[i]; i++) {
        if (i)
            usleep((useconds_t)a->delay_ms * 1000);
        ck_assert_int_eq(write(a->fd, a->parts[i], strlen(a->parts[i])),
                         (ssize_t)strlen(a->parts[i]));
    }
    return NULL;
}

static http_conn conn_on(int fd)
{
    http_conn c = {.fd = fd, .idle_timeout = 2, .request_timeout = 2, .write_timeout = 2};
    return c;
}

START_TEST(http_reads_pipelined_requests)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    writer_arg a = {sv[1],
                    {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nab",
                     "cGET /b HTTP/1.1\r\nHost: x\r\n\r\nPOST /c HTTP/1.1\r\nHo",
                     "st: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
                    20};
    pthread_t th;
    pthread_create(&th, NULL, writer, &a);
    http_conn c = conn_on(sv[0]);
    http_request req;
    int st;
    strata_error err = {0};
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_OK);
    ck_assert_str_eq(req.target, "/a");
    ck_assert_int_eq(req.body_len, 3);
    ck_assert_str_eq(req.body, "abc");
    http_request_free(&req);
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_OK);
    ck_assert_str_eq(req.target, "/b");
    ck_assert_int_eq(req.body_len, 0);
    http_request_free(&req);
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_OK);
    ck_assert_str_eq(req.target, "/c");
    ck_assert_int_eq(req.keep_alive, 0);
    http_request_free(&req);
    pthread_join(th, NULL);
    close(sv[1]);
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_CLOSED);
    http_conn_free(&c);
    close(sv[0]);
}
END_TEST

START_TEST(http_slow_client_times_out)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* a byte every 100 ms: each read is prompt, the request never ends */
    writer_arg a = {sv[1], {"GET / HTTP/1.1\r\n", "Host", ": x", "\r\n"}, 150};
    pthread_t th;
    pthread_create(&th, NULL, writer, &a);
    http_conn c = conn_on(sv[0]);
    c.request_timeout = 0.3;
    http_request req;
    int st = 0;
    strata_error err = {0};
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_ERROR);
    ck_assert_int_eq(st, 408);
    pthread_join(th, NULL);
    http_conn_free(&c);
    close(sv[0]);
    close(sv[1]);
    /* idle: no byte at all within idle_timeout closes quietly */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    c = conn_on(sv[0]);
    c.idle_timeout = 0.1;
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_CLOSED);
    http_conn_free(&c);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static char *read_all(int fd)
{
    size_t cap = 65536, len = 0;
    char *b = malloc(cap);
    ssize_t k;
    while ((k = read(fd, b + len, cap - len - 1)) > 0)
        len += (size_t)k;
    b[len] = 0;
    return b;
}

START_TEST(http_streams_and_continues)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    writer_arg a = {sv[1],
                    {"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     "Content-Length: 2\r\n\r\n", "{}"},
                    50};
    pthread_t th;
    pthread_create(&th, NULL, writer, &a);
    http_conn c = conn_on(sv[0]);
    http_request req;
    int st;
    strata_error err = {0};
    ck_assert_int_eq(http_read_request(&c, &LIM, &req, &st, &err), HTTP_READ_OK);
    ck_assert_str_eq(req.body, "{}");
    pthread_join(th, NULL);
    http_stream s;
    ck_assert_int_eq(http_stream_begin(&s, &c, req.minor, 200, "text/event-stream", 1), 0);
    ck_assert_int_eq(http_sse_data(&s, "{\"a\":1}", 7), 0);
    ck_assert_int_eq(http_stream_write(&s, "", 0), 0); /* writes no empty chunk */
    ck_assert_int_eq(http_sse_data(&s, "[DONE]", 6), 0);
    ck_assert_int_eq(http_stream_end(&s), 0);
    http_request_free(&req);
    shutdown(sv[0], SHUT_WR);
    char *out = read_all(sv[1]);
    ck_assert_msg(!strncmp(out, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 42), "%s", out);
    ck_assert_msg(strstr(out, "Transfer-Encoding: chunked\r\n"), "%s", out);
    const char *body = strstr(out, "\r\n\r\n" "f\r\n");
    ck_assert_msg(body, "%s", out);
    ck_assert_str_eq(body + 4, "f\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    free(out);
    http_conn_free(&c);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_add_test(tc, http_parses_heads);
    tcase_add_test(tc, http_refuses_with_status);
    tcase_add_test(tc, http_reads_pipelined_requests);
    tcase_add_test(tc, http_slow_client_times_out);
    tcase_add_test(tc, http_streams_and_continues);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(http_suite)
