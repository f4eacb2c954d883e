/* http_parse.c: the request-head parser of http.h, on a buffer.  No I/O
 * here, so the tests and the fuzzer drive it with bytes. */
#include "serve/http.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* RFC 9110 tchar */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

void http_request_free(http_request *req)
{
    free(req->head);
    free(req->body);
    memset(req, 0, sizeof *req);
}

const char *http_field_get(const http_request *req, const char *name)
{
    for (int i = 0; i < req->n_fields; i++)
        if (!strcasecmp(req->fields[i].name, name))
            return req->fields[i].value;
    return NULL;
}

static long bad(int *status, int code, strata_error *err, const char *what)
{
    *status = code;
    strata_err(err, STRATA_E_FORMAT, "http: %s", what);
    return -1;
}

/* Does the comma-separated list v hold token t (case-insensitive)? */
static int list_has(const char *v, const char *t)
{
    size_t tl = strlen(t);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *te = e;
        while (te > v && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        if ((size_t)(te - v) == tl && !strncasecmp(v, t, tl))
            return 1;
        v = e;
    }
    return 0;
}

/* Split the request line (NUL-terminated, no CR/LF) in place. */
static long request_line(char *l, http_request *req, int *status, strata_error *err)
{
    char *p = l;
    while (is_tchar((unsigned char)*p))
        p++;
    if (p == l || *p != ' ')
        return bad(status, 400, err, "malformed request line (method)");
    *p++ = '\0';
    req->method = l;
    char *t = p;
    while ((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        p++;
    if (p == t || *p != ' ')
        return bad(status, 400, err, "malformed request line (target)");
    *p++ = '\0';
    req->target = t;
    if (strncmp(p, "HTTP/", 5) || !(p[5] >= '0' && p[5] <= '9') || p[6] != '.' ||
        !(p[7] >= '0' && p[7] <= '9') || p[8])
        return bad(status, 400, err, "malformed request line (version)");
    if (p[5] != '1')
        return bad(status, 505, err, "only HTTP/1.x is served");
    req->minor = p[7] - '0';
    return 0;
}

static long field_line(char *l, http_request *req, int *status, strata_error *err)
{
    if (*l == ' ' || *l == '\t')
        return bad(status, 400, err, "obsolete line folding in a header field");
    char *p = l;
    while (is_tchar((unsigned char)*p))
        p++;
    if (p == l || *p != ':')
        return bad(status, 400, err, "malformed header field name");
    *p++ = '\0';
    while (*p == ' ' || *p == '\t')
        p++;
    char *v = p, *end = p;
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 ? c != '\t' : c == 0x7f)
            return bad(status, 400, err, "control character in a header field value");
        if (c != ' ' && c != '\t')
            end = p + 1;
    }
    *end = '\0';
    if (req->n_fields >= HTTP_MAX_FIELDS)
        return bad(status, 431, err, "more than 64 header fields");
    req->fields[req->n_fields++] = (http_field){l, v};
    return 0;
}

/* The framing and connection fields, once all are read. */
static long semantics(http_request *req, const http_limits *lim, int *status, strata_error *err)
{
    int have_len = 0, host = 0;
    for (int i = 0; i < req->n_fields; i++) {
        const http_field *f = &req->fields[i];
        if (!strcasecmp(f->name, "Transfer-Encoding"))
            return bad(status, 501, err, "Transfer-Encoding on a request is not supported "
                                         "(send Content-Length)");
        if (!strcasecmp(f->name, "Host"))
            host++;
        if (!strcasecmp(f->name, "Content-Length")) {
            const char *v = f->value;
            if (!*v)
                return bad(status, 400, err, "empty Content-Length");
            int64_t n = 0;
            for (; *v; v++) {
                if (*v < '0' || *v > '9')
                    return bad(status, 400, err, "Content-Length is not a number");
                if (n > (INT64_MAX - 9) / 10)
                    return bad(status, 413, err, "Content-Length too large");
                n = n * 10 + (*v - '0');
            }
            if (have_len && n != req->content_length)
                return bad(status, 400, err, "conflicting Content-Length fields");
            have_len = 1;
            req->content_length = n;
        }
    }
    if (req->minor >= 1 && host != 1)
        return bad(status, 400, err, host ? "more than one Host field" : "no Host field");
    if (req->content_length > 0 && (uint64_t)req->content_length > lim->max_body) {
        *status = 413;
        strata_err(err, STRATA_E_LIMIT, "http: body of %lld bytes is over the limit of %zu "
                   "(--max-body-mib)", (long long)req->content_length, lim->max_body);
        return -1;
    }
    const char *conn = http_field_get(req, "Connection");
    if (req->minor >= 1)
        req->keep_alive = !(conn && list_has(conn, "close"));
    else
        req->keep_alive = conn && list_has(conn, "keep-alive");
    const char *exp = http_field_get(req, "Expect");
    if (exp) {
        if (strcasecmp(exp, "100-continue"))
            return bad(status, 417, err, "unsupported Expect");
        req->expect_continue = req->minor >= 1;
    }
    return 0;
}

long http_parse_head(const char *buf, size_t n, const http_limits *lim, http_request *req,
                     int *status, strata_error *err)
{
    memset(req, 0, sizeof *req);
    *status = 0;
    /* Empty lines before a request line are skipped (RFC 9112 2.2): some
     * clients send a CRLF after a body. */
    size_t start = 0;
    while (start < n && (buf[start] == '\r' || buf[start] == '\n')) {
        if (buf[start] == '\r' && (start + 1 >= n || buf[start + 1] != '\n'))
            break;
        start++;
    }
    /* Find the blank line that ends the head. */
    size_t end = 0;
    for (size_t i = start; i < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < n && buf[i + 1] == '\n') {
            end = i + 2;
            break;
        }
        if (i + 2 < n && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
            end = i + 3;
            break;
        }
        if (i - start + 1 > lim->max_head)
            break;
    }
    if (!end || end - start > lim->max_head) {
        if (n - start > lim->max_head || (end && end - start > lim->max_head))
            return bad(status, 431, err, "request head over the limit");
        return 0;
    }
    size_t hl = end - start;
    req->head = malloc(hl + 1);
    if (!req->head)
        return bad(status, 500, err, "out of memory");
    memcpy(req->head, buf + start, hl);
    req->head[hl] = '\0';
    if (memchr(req->head, '\0', hl)) {
        free(req->head);
        req->head = NULL;
        return bad(status, 400, err, "NUL byte in the request head");
    }
    /* Split into lines in place; a CR must be followed by LF. */
    char *p = req->head;
    int first = 1;
    long rc = 0;
    while (*p) {
        char *nl = strchr(p, '\n');
        char *e = nl;
        if (e > p && e[-1] == '\r')
            e--;
        *e = '\0';
        if (memchr(p, '\r', (size_t)(e - p)) || strlen(p) != (size_t)(e - p)) {
            rc = bad(status, 400, err, "stray CR or NUL in the request head");
            break;
        }
        if (e == p)
            break; /* the blank line */
        rc = first ? request_line(p, req, status, err) : field_line(p, req, status, err);
        if (rc)
            break;
        first = 0;
        p = nl + 1;
    }
    if (!rc && !req->method)
        rc = bad(status, 400, err, "no request line");
    if (!rc)
        rc = semantics(req, lim, status, err);
    if (rc) {
        free(req->head);
        req->head = NULL;
        return -1;
    }
    return (long)end;
}
