/* http.c: connections — reading requests under deadlines, writing
 * responses and streamed bodies (see http.h).
 *
 * Slow clients: a connection waits idle_timeout for a request's first
 * byte, then the whole request (head and body) must arrive within
 * request_timeout, however it trickles in; writes give up after
 * write_timeout.  A connection thread is all a slow client can hold: a
 * request reaches the scheduler (and a slot) only once it is complete. */
#include "serve/http.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void http_conn_free(http_conn *c)
{
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

/* Read more bytes, waiting until the deadline (checking *stop each 100 ms
 * when stop_ok).  1 read, 0 closed, -1 timeout or stop, -2 error. */
static int fill(http_conn *c, double deadline, int stop_ok)
{
    if (c->cap - c->len < 4096) {
        size_t nc = c->cap ? c->cap * 2 : 16384;
        char *nb = realloc(c->buf, nc + 1);
        if (!nb)
            return -2;
        c->buf = nb;
        c->cap = nc;
    }
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0 || (stop_ok && c->stop && atomic_load(c->stop)) ||
            (c->abort && atomic_load(c->abort)))
            return -1;
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno != EINTR)
            return -2;
        if (r <= 0)
            continue;
        ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return -2;
        if (k == 0)
            return 0;
        c->len += (size_t)k;
        return 1;
    }
}

int http_read_request(http_conn *c, const http_limits *lim, http_request *req, int *status,
                      strata_error *err)
{
    memset(req, 0, sizeof *req);
    double deadline = 0;
    long hl;
    for (;;) {
        if (c->len && !deadline)
            deadline = now_s() + c->request_timeout;
        hl = c->len ? http_parse_head(c->buf, c->len, lim, req, status, err) : 0;
        if (hl < 0)
            return HTTP_READ_ERROR;
        if (hl > 0)
            break;
        int idle = !c->len;
        int r = fill(c, idle ? now_s() + c->idle_timeout : deadline, idle);
        if (r == 1)
            continue;
        if (r == -1 && !idle) {
            *status = 408;
            strata_err(err, STRATA_E_LIMIT, "http: request not complete within %.0f s",
                       c->request_timeout);
            return HTTP_READ_ERROR;
        }
        return HTTP_READ_CLOSED;
    }
    size_t need = (size_t)hl + (size_t)req->content_length;
    if (req->expect_continue && c->len < need) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (http_write(c, cont, sizeof cont - 1)) {
            http_request_free(req);
            return HTTP_READ_CLOSED;
        }
    }
    while (c->len < need) {
        int r = fill(c, deadline, 0);
        if (r == 1)
            continue;
        http_request_free(req);
        if (r == -1) {
            *status = 408;
            strata_err(err, STRATA_E_LIMIT, "http: body not complete within %.0f s",
                       c->request_timeout);
            return HTTP_READ_ERROR;
        }
        return HTTP_READ_CLOSED;
    }
    req->body = malloc((size_t)req->content_length + 1);
    if (!req->body) {
        http_request_free(req);
        *status = 500;
        strata_err(err, STRATA_E_NOMEM, "http: out of memory for the body");
        return HTTP_READ_ERROR;
    }
    memcpy(req->body, c->buf + hl, (size_t)req->content_length);
    req->body[req->content_length] = '\0';
    req->body_len = (size_t)req->content_length;
    /* the request's bytes leave the buffer; a pipelined next one stays */
    memmove(c->buf, c->buf + need, c->len - need);
    c->len -= need;
    return HTTP_READ_OK;
}

int http_peer_closed(http_conn *c)
{
    struct pollfd pf = {c->fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pf, 1, 0) <= 0)
        return 0;
    if (pf.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return 1;
    if (pf.revents & POLLIN) {
        char b;
        ssize_t k = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0;
    }
    return 0;
}

int http_write(http_conn *c, const char *p, size_t n)
{
    double deadline = now_s() + c->write_timeout;
    while (n) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        double left = deadline - now_s();
        if (left <= 0)
            return -1;
        struct pollfd pf = {c->fd, POLLOUT, 0};
        if (poll(&pf, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

static int head_out(http_conn *c, int status, const char *content_type, const char *extra,
                    const char *framing, int keep_alive, int minor)
{
    char h[1024];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.%d %d %s\r\nServer: strata\r\nContent-Type: %s\r\n%s%s"
                     "Connection: %s\r\n\r\n",
                     minor, status, http_reason(status), content_type, framing,
                     extra ? extra : "", keep_alive ? "keep-alive" : "close");
    if (n < 0 || (size_t)n >= sizeof h)
        return -1;
    return http_write(c, h, (size_t)n);
}

int http_respond(http_conn *c, int status, const char *content_type, const char *extra,
                 const char *body, size_t len, int keep_alive)
{
    char framing[64];
    snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", len);
    if (head_out(c, status, content_type, extra, framing, keep_alive, 1))
        return -1;
    return len ? http_write(c, body, len) : 0;
}

int http_stream_begin(http_stream *s, http_conn *c, int minor, int status,
                      const char *content_type, int keep_alive)
{
    s->c = c;
    s->chunked = minor >= 1;
    s->failed = 0;
    if (head_out(c, status, content_type, "Cache-Control: no-cache\r\n",
                 s->chunked ? "Transfer-Encoding: chunked\r\n" : "",
                 s->chunked && keep_alive, minor))
        s->failed = 1;
    return s->failed ? -1 : 0;
}

int http_stream_write(http_stream *s, const char *p, size_t n)
{
    if (s->failed)
        return -1;
    if (!n)
        return 0; /* an empty chunk would end a chunked body */
    if (s->chunked) {
        char h[32];
        int hl = snprintf(h, sizeof h, "%zx\r\n", n);
        if (http_write(s->c, h, (size_t)hl) || http_write(s->c, p, n) ||
            http_write(s->c, "\r\n", 2))
            s->failed = 1;
    } else if (http_write(s->c, p, n)) {
        s->failed = 1;
    }
    return s->failed ? -1 : 0;
}

int http_sse_data(http_stream *s, const char *data, size_t n)
{
    /* one write per event: one chunk, one packet */
    size_t tot = n + 8;
    char small[4096], *b = tot <= sizeof small ? small : malloc(tot);
    if (!b) {
        s->failed = 1;
        return -1;
    }
    memcpy(b, "data: ", 6);
    memcpy(b + 6, data, n);
    memcpy(b + 6 + n, "\n\n", 2);
    int rc = http_stream_write(s, b, tot);
    if (b != small)
        free(b);
    return rc;
}

int http_stream_end(http_stream *s)
{
    if (!s->failed && s->chunked && http_write(s->c, "0\r\n\r\n", 5))
        s->failed = 1;
    return s->failed ? -1 : 0;
}
