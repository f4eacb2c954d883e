/* server.h: `strata-cli serve` — an OpenAI-compatible HTTP server on the
 * scheduler (sched/scheduler.h).  doc/server.md describes the API subset,
 * the limits and the defaults.
 *
 * Life of a server: serve_start binds and listens at once, so /health
 * answers 503 while the model loads; serve_attach hands it the engine and
 * starts the scheduler on it; serve_shutdown stops taking requests, lets
 * the answers in flight finish for at most drain_s seconds, cancels the
 * rest, and waits for every connection to end; serve_free frees it all
 * (the scheduler too; the engine stays the caller's). */
#ifndef STRATA_SERVE_SERVER_H
#define STRATA_SERVE_SERVER_H

#include <stddef.h>

#include "engine/sample.h"
#include "engine/strata.h"
#include "sched/scheduler.h"

typedef struct serve_params {
    const char *host;           /* address to bind (default 127.0.0.1) */
    int port;                   /* 0: any free port (serve_port says which) */
    const char *api_key;        /* NULL: no key; else "Authorization: Bearer KEY" */
    int max_queue;              /* requests waiting beyond the slots; more: 503 */
    size_t max_body;            /* request body bytes; more: 413 */
    int max_conns;              /* open connections; more: 503 and close */
    double idle_timeout;        /* s a kept-alive connection waits for a request */
    double request_timeout;     /* s from a request's first byte to its last */
    double write_timeout;       /* s a write may wait for a slow reader */
    const char *model_id;       /* the name /v1/models reports */
    sampler_params sampling;    /* defaults for what a request leaves out */
    int max_tokens;             /* default max_tokens; <= 0: until stop/context */
    int quiet;                  /* 1: no log line per request on stderr */
} serve_params;

serve_params serve_params_default(void);

typedef struct serve serve;

int serve_start(const serve_params *p, serve **out, strata_error *err);
int serve_port(const serve *s);
/* The engine is ready: start the scheduler (sp) on it and serve. */
int serve_attach(serve *s, strata_engine *e, const sched_params *sp, strata_error *err);
void serve_shutdown(serve *s, double drain_s);
void serve_free(serve *s); /* NULL ok */

#endif
