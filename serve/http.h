/* http.h: HTTP/1.1 for the server — a request parser that works on a
 * buffer (no sockets: tests and the fuzzer feed it bytes), a connection
 * reader with limits and deadlines, responses, and streamed bodies
 * (Server-Sent Events) chunked or close-delimited.
 *
 * What the parser takes: a request line "METHOD SP target SP HTTP/1.x",
 * header fields "name: value" (token names, no obsolete line folding),
 * lines ending in CRLF (a bare LF is accepted, as RFC 9112 allows), and a
 * body whose length is given by Content-Length.  Transfer-Encoding on a
 * request is refused (501): no client of this API needs it, and accepting
 * one of two framings is how request smuggling starts.  Limits: the head
 * (request line and fields) at most max_head bytes (431), 64 fields, the
 * body at most max_body bytes (413). */
#ifndef STRATA_SERVE_HTTP_H
#define STRATA_SERVE_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define HTTP_MAX_FIELDS 64

typedef struct http_field {
    const char *name, *value;   /* NUL-terminated, inside the request's copy
                                 * of its head; value without surrounding
                                 * whitespace */
} http_field;

typedef struct http_request {
    char *head;                 /* malloc'd copy of the head, split in place */
    const char *method, *target;
    int minor;                  /* HTTP/1.minor */
    http_field fields[HTTP_MAX_FIELDS];
    int n_fields;
    int64_t content_length;     /* 0 when absent */
    int keep_alive;             /* the connection may serve another request */
    int expect_continue;        /* Expect: 100-continue */
    char *body;                 /* the body (NUL-terminated), set by the reader */
    size_t body_len;
} http_request;

typedef struct http_limits {
    size_t max_head;            /* bytes of request line + fields */
    size_t max_body;            /* bytes of body */
} http_limits;

/* Parse the head at buf[0..n).  Returns the head's length (through its
 * blank line) when it is complete and valid, 0 when more bytes are needed,
 * or -1 with *status (400, 413, 431, 501, 505) and err saying why.  On
 * success req holds the fields (free with http_request_free). */
long http_parse_head(const char *buf, size_t n, const http_limits *lim, http_request *req,
                     int *status, strata_error *err);
void http_request_free(http_request *req);
/* A field's value by name (case-insensitive), or NULL. */
const char *http_field_get(const http_request *req, const char *name);
/* "Bad Request" etc. for a status code. */
const char *http_reason(int status);

/* ---- connections ------------------------------------------------------ */

typedef struct http_conn {
    int fd;
    char *buf;                  /* bytes read and not yet consumed */
    size_t len, cap;
    double idle_timeout;        /* s to wait for a request's first byte */
    double request_timeout;     /* s from its first byte to its whole body */
    double write_timeout;       /* s a write may wait for the client */
    atomic_int *stop;           /* when set, an idle wait ends (or NULL) */
    atomic_int *abort;          /* when set, any wait ends (or NULL) */
} http_conn;

enum {
    HTTP_READ_OK = 0,
    HTTP_READ_CLOSED = 1,       /* the client closed, or idle timeout/stop */
    HTTP_READ_ERROR = 2,        /* *status (400, 408, 413, ...) to answer */
};
/* Read the next request (head and body).  HTTP_READ_OK with req filled;
 * HTTP_READ_CLOSED: close quietly; HTTP_READ_ERROR: answer *status with
 * err's message, then close.  Sends "100 Continue" when asked for.  The
 * request's bytes leave c's buffer; a pipelined next request stays. */
int http_read_request(http_conn *c, const http_limits *lim, http_request *req, int *status,
                      strata_error *err);
void http_conn_free(http_conn *c);
/* 1 when the client has hung up (checked without consuming input). */
int http_peer_closed(http_conn *c);

/* Write all of p[0..n) within the write timeout; 0 or -1. */
int http_write(http_conn *c, const char *p, size_t n);
/* A whole response.  extra: further header lines, each ending in CRLF, or
 * NULL. */
int http_respond(http_conn *c, int status, const char *content_type, const char *extra,
                 const char *body, size_t len, int keep_alive);

/* A streamed body: chunked for HTTP/1.1, close-delimited for 1.0. */
typedef struct http_stream {
    http_conn *c;
    int chunked;
    int failed;                 /* a write failed: the client is gone */
} http_stream;
int http_stream_begin(http_stream *s, http_conn *c, int minor, int status,
                      const char *content_type, int keep_alive);
int http_stream_write(http_stream *s, const char *p, size_t n);
/* One Server-Sent Event "data: ...\n\n" (data must hold no newline). */
int http_sse_data(http_stream *s, const char *data, size_t n);
int http_stream_end(http_stream *s);

#endif
