/* serve_internal.h: what the server's files share (server.c: connections
 * and routing; openai.c: the generation endpoints). */
#ifndef STRATA_SERVE_INTERNAL_H
#define STRATA_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "serve/convindex.h"
#include "serve/http.h"
#include "serve/json.h"
#include "serve/metrics.h"
#include "serve/server.h"
#include "text/chat.h"
#include "text/tokenizer.h"

struct serve {
    serve_params p;
    char host[64], model_id[256], *api_key;
    int listen_fd, port;
    pthread_t accept_thread;
    int accept_started;
    atomic_int stopping;        /* no new requests; idle connections close */
    atomic_int abort_all;       /* the drain is over: cancel what still runs */
    atomic_int ready;           /* the engine is attached */
    strata_engine *e;
    strata_sched *sched;
    const tokenizer *tok;
    chat_template fmt;
    int have_fmt;
    char fmt_err[512];          /* why chat is refused when !have_fmt */
    int n_ctx, n_slots;
    convindex *idx;
    int n_loaded, n_load_indexed; /* images loaded from the save directory,
                                     and those the index could rebuild */
    serve_metrics m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_conns;                /* connection threads alive */
    int in_flight;              /* generation requests accepted, not done */
    uint64_t next_id;
    atomic_int slots_busy, queued; /* from the scheduler's step callback */
    long created;               /* unix time the server started */
};

/* One connection's request being answered. */
typedef struct serve_call {
    serve *s;
    http_conn *c;
    http_request *req;
    int endpoint;
    int status;                 /* what was answered (for the metrics) */
    int close;                  /* 1: close the connection after this */
    int counted;                /* the metrics have counted it */
} serve_call;

/* Count the answer's status in the metrics, once, before the last byte of
 * the answer goes out: a client that reads /metrics right after its
 * answer must find it counted. */
void serve_count(serve_call *k, int status);

/* Responses (server.c). */
int serve_send_json(serve_call *k, int status, const jbuf *body, const char *extra);
/* An OpenAI-style error object: {"error":{"message","type","param","code"}}. */
int serve_send_error(serve_call *k, int status, const char *type, const char *param,
                     const char *code, const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* POST /v1/chat/completions and /v1/completions (openai.c). */
void serve_generate(serve_call *k, int chat);

#endif
