/* server.c: listening, one thread per connection, routing, the small
 * endpoints (/health, /v1/models, /metrics) and shutdown (see server.h).
 *
 * A thread per connection keeps each request's code straight-line: it
 * reads the request, submits it to the scheduler, and streams the tokens
 * back as sched_next hands them over, while the scheduler's one thread
 * drives the engine for every connection.  Connections are capped
 * (max_conns); a client that sends slowly holds only its thread (the
 * request reaches the scheduler when complete), and one that reads slowly
 * is cut off after write_timeout, which cancels its request. */
#include "serve/serve_internal.h"
#include "serve/page.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

serve_params serve_params_default(void)
{
    serve_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_queue = 64;
    p.max_body = 16u << 20;
    p.max_conns = 256;
    p.idle_timeout = 30;
    p.request_timeout = 30;
    p.write_timeout = 30;
    p.model_id = "strata";
    p.sampling = sampler_defaults();
    p.max_tokens = -1;
    return p;
}

int serve_port(const serve *s)
{
    return s->port;
}

/* ---- responses ---------------------------------------------------------- */

void serve_count(serve_call *k, int status)
{
    k->status = status;
    if (!k->counted)
        metrics_request(&k->s->m, k->endpoint, status);
    k->counted = 1;
}

int serve_send_json(serve_call *k, int status, const jbuf *body, const char *extra)
{
    serve_count(k, body->oom ? 500 : status);
    if (body->oom)
        return http_respond(k->c, 500, "application/json", NULL,
                            "{\"error\":{\"message\":\"out of memory\"}}", 36,
                            k->req->keep_alive);
    return http_respond(k->c, status, "application/json", extra, body->p, body->len,
                        k->req->keep_alive);
}

int serve_send_error(serve_call *k, int status, const char *type, const char *param,
                     const char *code, const char *extra, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jbuf b = {0};
    jbuf_puts(&b, "{\"error\":{\"message\":");
    jbuf_cstr(&b, msg);
    jbuf_puts(&b, ",\"type\":");
    jbuf_cstr(&b, type);
    jbuf_puts(&b, ",\"param\":");
    if (param)
        jbuf_cstr(&b, param);
    else
        jbuf_puts(&b, "null");
    jbuf_puts(&b, ",\"code\":");
    if (code)
        jbuf_cstr(&b, code);
    else
        jbuf_puts(&b, "null");
    jbuf_puts(&b, "}}");
    int rc = serve_send_json(k, status, &b, extra);
    jbuf_free(&b);
    if (!k->s->p.quiet)
        fprintf(stderr, "strata serve: %s %s -> %d: %s\n", k->req->method, k->req->target, status,
                msg);
    return rc;
}

/* ---- small endpoints ---------------------------------------------------- */

static void get_health(serve_call *k)
{
    jbuf b = {0};
    int ok = atomic_load(&k->s->ready) && !atomic_load(&k->s->stopping);
    jbuf_printf(&b, "{\"status\":\"%s\"}",
                ok ? "ok" : atomic_load(&k->s->stopping) ? "shutting down" : "loading");
    serve_send_json(k, ok ? 200 : 503, &b, ok ? NULL : "Retry-After: 1\r\n");
    jbuf_free(&b);
}

static void get_models(serve_call *k)
{
    jbuf b = {0};
    jbuf_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    jbuf_cstr(&b, k->s->model_id);
    jbuf_printf(&b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"strata\"", k->s->created);
    if (atomic_load(&k->s->ready))
        jbuf_printf(&b, ",\"context_length\":%d", k->s->n_ctx);
    jbuf_puts(&b, "}]}");
    serve_send_json(k, 200, &b, NULL);
    jbuf_free(&b);
}

static void get_metrics(serve_call *k)
{
    serve *s = k->s;
    metrics_gauges g = {0};
    g.loading = !atomic_load(&s->ready);
    g.slots = s->n_slots;
    g.slots_busy = atomic_load(&s->slots_busy);
    g.queued = atomic_load(&s->queued);
    pthread_mutex_lock(&s->mu);
    g.in_flight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    if (s->sched) {
        sched_cache_stats st;
        sched_get_cache_stats(s->sched, &st);
        g.parks = st.parks;
        g.cache_restores = st.restores;
    }
    if (s->idx)
        g.convindex_entries = (uint64_t)convindex_entries(s->idx);
    /* this request counts itself before the text is written */
    serve_count(k, 200);
    jbuf b = {0};
    metrics_write(&s->m, &g, &b);
    http_respond(k->c, 200, "text/plain; version=0.0.4", NULL, b.p ? b.p : "", b.len,
                 k->req->keep_alive);
    jbuf_free(&b);
}

/* ---- routing ------------------------------------------------------------ */

/* Constant-time comparison: the key check should not tell a client how
 * many leading bytes of its guess were right. */
static int key_ok(const serve *s, const http_request *req)
{
    const char *a = http_field_get(req, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7))
        return 0;
    a += 7;
    while (*a == ' ')
        a++;
    size_t la = strlen(a), lk = strlen(s->api_key);
    unsigned char d = la != lk;
    for (size_t i = 0; i < lk; i++)
        d |= (unsigned char)(s->api_key[i] ^ (i < la ? a[i] : 0));
    return d == 0;
}

static void route(serve_call *k)
{
    serve *s = k->s;
    const http_request *req = k->req;
    char path[256];
    size_t pl = strcspn(req->target, "?#");
    if (pl >= sizeof path)
        pl = sizeof path - 1;
    memcpy(path, req->target, pl);
    path[pl] = '\0';
    struct { const char *path, *method; int ep, gen; } routes[] = {
        {"/v1/chat/completions", "POST", EP_CHAT, 1},
        {"/v1/completions", "POST", EP_COMPLETIONS, 1},
        {"/v1/models", "GET", EP_MODELS, 0},
        {"/health", "GET", EP_HEALTH, 0},
        {"/metrics", "GET", EP_METRICS, 0},
        {"/", "GET", EP_PAGE, 0},
    };
    int r = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(path, routes[i].path))
            r = (int)i;
    if (r < 0) {
        k->endpoint = EP_OTHER;
        serve_send_error(k, 404, "not_found_error", NULL, NULL, NULL, "no endpoint %s", path);
        return;
    }
    k->endpoint = routes[r].ep;
    if (strcmp(req->method, routes[r].method)) {
        char allow[64];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", routes[r].method);
        serve_send_error(k, 405, "invalid_request_error", NULL, NULL, allow,
                         "%s takes %s, not %s", path, routes[r].method, req->method);
        return;
    }
    if (k->endpoint == EP_PAGE) {
        /* the page holds no data: its requests carry the key */
        size_t len;
        const char *page = serve_page(&len);
        serve_count(k, 200);
        http_respond(k->c, 200, "text/html; charset=utf-8", NULL, page, len, req->keep_alive);
        return;
    }
    if (s->api_key && k->endpoint != EP_HEALTH && !key_ok(s, req)) {
        serve_send_error(k, 401, "invalid_request_error", NULL, "invalid_api_key",
                         "WWW-Authenticate: Bearer\r\n",
                         "missing or wrong API key (send Authorization: Bearer KEY)");
        return;
    }
    switch (k->endpoint) {
    case EP_HEALTH:
        get_health(k);
        return;
    case EP_MODELS:
        get_models(k);
        return;
    case EP_METRICS:
        get_metrics(k);
        return;
    default:
        break;
    }
    if (atomic_load(&s->stopping)) {
        serve_send_error(k, 503, "server_error", NULL, NULL, "Retry-After: 5\r\n",
                         "the server is shutting down");
        return;
    }
    if (!atomic_load(&s->ready)) {
        serve_send_error(k, 503, "server_error", NULL, NULL, "Retry-After: 1\r\n",
                         "the model is still loading");
        return;
    }
    serve_generate(k, routes[r].ep == EP_CHAT);
}

/* ---- connections -------------------------------------------------------- */

typedef struct conn_arg {
    serve *s;
    int fd;
} conn_arg;

static void conn_done(serve *s)
{
    pthread_mutex_lock(&s->mu);
    s->n_conns--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* After an error answered before the request was read (413 on a body
 * still coming): stop writing, then read and drop what the client still
 * sends, for at most a second and 16 MiB.  Closing with unread bytes makes the kernel send a
 * reset, which can destroy the answer before the client reads it. */
static void linger_drain(http_conn *c)
{
    shutdown(c->fd, SHUT_WR);
    char buf[16384];
    size_t total = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double dt = (double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (dt > 1.0 || total >= (16u << 20))
            break;
        struct pollfd pf = {c->fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t k = recv(c->fd, buf, sizeof buf, 0);
        if (k <= 0)
            break;
        total += (size_t)k;
    }
}

static void *conn_main(void *arg)
{
    conn_arg a = *(conn_arg *)arg;
    free(arg);
    serve *s = a.s;
    http_conn c = {.fd = a.fd,
                   .idle_timeout = s->p.idle_timeout,
                   .request_timeout = s->p.request_timeout,
                   .write_timeout = s->p.write_timeout,
                   .stop = &s->stopping,
                   .abort = &s->abort_all};
    http_limits lim = {.max_head = 16384, .max_body = s->p.max_body};
    for (;;) {
        http_request req;
        int status = 0;
        strata_error err = {0};
        int r = http_read_request(&c, &lim, &req, &status, &err);
        if (r == HTTP_READ_CLOSED)
            break;
        if (r == HTTP_READ_ERROR) {
            /* answer, then close: after a framing error the stream cannot
             * be trusted to hold a next request where we think it does */
            http_request dummy = {.method = "?", .target = "?"};
            serve_call k = {s, &c, &dummy, EP_OTHER, 0, 1, 0};
            serve_send_error(&k, status, "invalid_request_error", NULL, NULL, NULL, "%s",
                             err.msg);
            linger_drain(&c);
            break;
        }
        serve_call k = {s, &c, &req, EP_OTHER, 0, 0, 0};
        route(&k);
        if (k.status > 0)
            serve_count(&k, k.status); /* an answer that did not count itself */
        int keep = req.keep_alive && !atomic_load(&s->stopping) && !k.close;
        http_request_free(&req);
        if (!keep)
            break;
    }
    shutdown(a.fd, SHUT_WR);
    close(a.fd);
    http_conn_free(&c);
    conn_done(s);
    return NULL;
}

static void *accept_main(void *arg)
{
    serve *s = arg;
    while (!atomic_load(&s->stopping)) {
        struct pollfd pf = {s->listen_fd, POLLIN, 0};
        int r = poll(&pf, 1, 100);
        if (r <= 0)
            continue;
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        int full = s->n_conns >= s->p.max_conns;
        if (!full)
            s->n_conns++;
        pthread_mutex_unlock(&s->mu);
        if (full) {
#define BUSY_BODY "{\"error\":{\"message\":\"too many connections\",\"type\":\"server_error\"}}"
            char busy[320];
            int n = snprintf(busy, sizeof busy,
                             "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                             "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                             "Connection: close\r\n\r\n%s",
                             sizeof BUSY_BODY - 1, BUSY_BODY);
            http_conn c = {.fd = fd, .write_timeout = 0.5};
            metrics_request(&s->m, EP_OTHER, 503);
            http_write(&c, busy, (size_t)n);
            close(fd);
            continue;
        }
        conn_arg *a = malloc(sizeof *a);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!a || (a->s = s, a->fd = fd, pthread_create(&th, &at, conn_main, a))) {
            free(a);
            close(fd);
            conn_done(s);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

int serve_start(const serve_params *p, serve **out, strata_error *err)
{
    *out = NULL;
    serve *s = calloc(1, sizeof *s);
    if (!s)
        return strata_err(err, STRATA_E_NOMEM, "serve: out of memory");
    s->p = *p;
    snprintf(s->host, sizeof s->host, "%s", p->host ? p->host : "127.0.0.1");
    snprintf(s->model_id, sizeof s->model_id, "%s", p->model_id ? p->model_id : "strata");
    s->api_key = p->api_key && *p->api_key ? strdup(p->api_key) : NULL;
    s->p.host = s->host;
    s->p.model_id = s->model_id;
    s->p.api_key = s->api_key;
    s->listen_fd = -1;
    s->created = (long)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    metrics_init(&s->m);
    int rc = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai) {
        rc = strata_err(err, STRATA_E_ARG, "serve: --host %s: %s", s->host, gai_strerror(gai));
        goto fail;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        rc = strata_err(err, STRATA_E_IO, "serve: cannot listen on %s port %d: %s", s->host,
                        p->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        goto fail;
    }
    freeaddrinfo(ai);
    s->listen_fd = fd;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    s->port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    if (pthread_create(&s->accept_thread, NULL, accept_main, s)) {
        rc = strata_err(err, STRATA_E_NOMEM, "serve: cannot start the accept thread");
        goto fail;
    }
    s->accept_started = 1;
    *out = s;
    return 0;
fail:
    serve_free(s);
    return rc;
}

static void on_step(const sched_step *st, void *user)
{
    serve *s = user;
    atomic_store(&s->slots_busy, st->n_active);
    atomic_store(&s->queued, st->n_queued);
}

/* An image loaded from --conversation-save's directory: the index from text
 * to ids did not survive the restart, so it is rebuilt from the image's
 * ids and its pending token (the entry openai.c made held it too), and a
 * client resending that conversation's history as text finds the same ids
 * again (convindex_add_ids). */
static void on_load(const int32_t *tokens, int n, int32_t pending, void *user)
{
    serve *s = user;
    s->n_loaded++;
    s->n_load_indexed += convindex_add_ids(s->idx, s->tok, tokens, (size_t)n, pending) > 0;
}

int serve_attach(serve *s, strata_engine *e, const sched_params *sp, strata_error *err)
{
    sched_params p = *sp;
    p.on_step = on_step;
    p.step_user = s;
    p.on_load = on_load;
    p.load_user = s;
    s->e = e;
    s->tok = strata_tokenizer(e);
    s->n_ctx = strata_n_ctx(e);
    strata_error ferr = {0};
    s->have_fmt = chat_template_from_gguf(&s->fmt, strata_model(e)->g, sp->chat_template,
                                          &ferr) == 0;
    if (!s->have_fmt)
        snprintf(s->fmt_err, sizeof s->fmt_err, "%s", ferr.msg);
    s->idx = convindex_new(4096, 64u << 20);
    if (!s->idx)
        return strata_err(err, STRATA_E_NOMEM, "serve: out of memory");
    s->sched = sched_new(e, &p, err);
    if (!s->sched)
        return err->code ? err->code : STRATA_E_NOMEM;
    s->n_slots = sched_n_slots(s->sched);
    if (sp->save_dir && !s->p.quiet)
        fprintf(stderr, "strata serve: %d conversations loaded from %s, %d of them found by "
                        "text\n", s->n_loaded, sp->save_dir, s->n_load_indexed);
    atomic_store(&s->ready, 1);
    return 0;
}

void serve_shutdown(serve *s, double drain_s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    if (s->accept_started) {
        pthread_join(s->accept_thread, NULL);
        s->accept_started = 0;
    }
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    /* answers in flight finish within the drain; then they are cancelled
     * (their clients get what was generated and a finish_reason) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double until = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + drain_s;
    pthread_mutex_lock(&s->mu);
    while (s->n_conns > 0) {
        clock_gettime(CLOCK_REALTIME, &ts);
        double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
        if (now >= until)
            atomic_store(&s->abort_all, 1);
        double wake = now + 0.1;
        struct timespec w = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        pthread_cond_timedwait(&s->cv, &s->mu, &w);
    }
    pthread_mutex_unlock(&s->mu);
}

void serve_free(serve *s)
{
    if (!s)
        return;
    serve_shutdown(s, 0);
    sched_free(s->sched);
    convindex_free(s->idx);
    if (s->have_fmt)
        chat_template_free(&s->fmt);
    metrics_free(&s->m);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->api_key);
    free(s);
}
