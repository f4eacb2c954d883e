/* metrics.h: the server's counters, written as Prometheus text (GET
 * /metrics).  Connection threads count; a mutex keeps it simple (a count
 * per request and one per streamed token are far below contention). */
#ifndef STRATA_SERVE_METRICS_H
#define STRATA_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "serve/json.h"

#define METRICS_MAX_STATUS 24
#define HIST_MAX 16

typedef struct histogram {
    const double *bounds;       /* upper bounds, ascending */
    int n;
    uint64_t counts[HIST_MAX];  /* per bucket (not cumulative) */
    uint64_t over;              /* above the last bound */
    double sum;
} histogram;

typedef struct serve_metrics {
    pthread_mutex_t mu;
    struct { int endpoint, status; uint64_t n; } by_status[METRICS_MAX_STATUS];
    int n_status;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t cached_slot, cached_cache; /* prompt tokens kept in a slot /
                                         * restored from the conversation cache */
    uint64_t disconnects;               /* requests cancelled by a client leaving */
    histogram ttft, token_latency;
} serve_metrics;

enum serve_endpoint {
    EP_CHAT, EP_COMPLETIONS, EP_MODELS, EP_HEALTH, EP_METRICS, EP_PAGE, EP_OTHER, EP_COUNT
};
const char *serve_endpoint_name(int ep);

void metrics_init(serve_metrics *m);
void metrics_free(serve_metrics *m);
void metrics_request(serve_metrics *m, int endpoint, int status);
void metrics_tokens(serve_metrics *m, int prompt, int generated, int slot, int cache);
void metrics_ttft(serve_metrics *m, double s);
void metrics_token_gap(serve_metrics *m, double s);
void metrics_disconnect(serve_metrics *m);

/* Gauges and scheduler counters the server reads when asked. */
typedef struct metrics_gauges {
    int slots, slots_busy, queued, in_flight, loading;
    uint64_t parks;
    uint64_t cache_restores;
    uint64_t convindex_entries;
} metrics_gauges;
/* The whole exposition into b. */
void metrics_write(serve_metrics *m, const metrics_gauges *g, jbuf *b);

#endif
