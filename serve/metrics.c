/* metrics.c: counters and histograms, Prometheus text format 0.0.4. */
#include "serve/metrics.h"

#include <string.h>

static const double TTFT_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double GAP_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};

const char *serve_endpoint_name(int ep)
{
    static const char *n[EP_COUNT] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                      "/health", "/metrics", "/", "other"};
    return ep >= 0 && ep < EP_COUNT ? n[ep] : "other";
}

void metrics_init(serve_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.bounds = TTFT_BOUNDS;
    m->ttft.n = sizeof TTFT_BOUNDS / sizeof TTFT_BOUNDS[0];
    m->token_latency.bounds = GAP_BOUNDS;
    m->token_latency.n = sizeof GAP_BOUNDS / sizeof GAP_BOUNDS[0];
}

void metrics_free(serve_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
}

void metrics_request(serve_metrics *m, int endpoint, int status)
{
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_status; i++)
        if (m->by_status[i].endpoint == endpoint && m->by_status[i].status == status)
            break;
    if (i == m->n_status && m->n_status < METRICS_MAX_STATUS) {
        m->by_status[i].endpoint = endpoint;
        m->by_status[i].status = status;
        m->by_status[i].n = 0;
        m->n_status++;
    }
    if (i < m->n_status)
        m->by_status[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(serve_metrics *m, int prompt, int generated, int slot, int cache)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generated_tokens += (uint64_t)generated;
    m->cached_slot += (uint64_t)slot;
    m->cached_cache += (uint64_t)cache;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histogram *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    if (i < h->n)
        h->counts[i]++;
    else
        h->over++;
    h->sum += v;
}

void metrics_ttft(serve_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, s);
    pthread_mutex_unlock(&m->mu);
}

void metrics_token_gap(serve_metrics *m, double s)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->token_latency, s);
    pthread_mutex_unlock(&m->mu);
}

void metrics_disconnect(serve_metrics *m)
{
    pthread_mutex_lock(&m->mu);
    m->disconnects++;
    pthread_mutex_unlock(&m->mu);
}

static void write_hist(jbuf *b, const char *name, const char *help, const histogram *h)
{
    jbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        jbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->over;
    jbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                (unsigned long long)cum, name, h->sum, name, (unsigned long long)cum);
}

static void counter(jbuf *b, const char *name, const char *help, uint64_t v)
{
    jbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                (unsigned long long)v);
}

static void gauge(jbuf *b, const char *name, const char *help, long v)
{
    jbuf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name, name, v);
}

void metrics_write(serve_metrics *m, const metrics_gauges *g, jbuf *b)
{
    pthread_mutex_lock(&m->mu);
    jbuf_puts(b, "# HELP strata_requests_total HTTP requests answered, by endpoint and status.\n"
                 "# TYPE strata_requests_total counter\n");
    for (int i = 0; i < m->n_status; i++)
        jbuf_printf(b, "strata_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                    serve_endpoint_name(m->by_status[i].endpoint), m->by_status[i].status,
                    (unsigned long long)m->by_status[i].n);
    counter(b, "strata_prompt_tokens_total", "Prompt tokens of answered requests.",
            m->prompt_tokens);
    counter(b, "strata_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    jbuf_printf(b, "# HELP strata_cached_tokens_total Prompt tokens not read: kept in a slot "
                   "or restored from the conversation cache.\n"
                   "# TYPE strata_cached_tokens_total counter\n"
                   "strata_cached_tokens_total{source=\"slot\"} %llu\n"
                   "strata_cached_tokens_total{source=\"conversation_cache\"} %llu\n",
                (unsigned long long)m->cached_slot, (unsigned long long)m->cached_cache);
    counter(b, "strata_client_disconnects_total", "Requests cancelled because the client left.",
            m->disconnects);
    counter(b, "strata_parks_total", "Running requests parked in host memory for KV pages.",
            g->parks);
    counter(b, "strata_cache_restores_total", "Admissions restored from the conversation cache.",
            g->cache_restores);
    gauge(b, "strata_slots", "Batch slots.", g->slots);
    gauge(b, "strata_slots_busy", "Slots running a request.", g->slots_busy);
    gauge(b, "strata_queue_depth", "Requests waiting for a slot.", g->queued);
    gauge(b, "strata_requests_in_flight", "Generation requests accepted and not finished.",
          g->in_flight);
    gauge(b, "strata_conversation_index_entries", "Conversations findable by their text.",
          (long)g->convindex_entries);
    gauge(b, "strata_loading", "1 while the model loads.", g->loading);
    write_hist(b, "strata_time_to_first_token_seconds",
               "From submission to the first generated token.", &m->ttft);
    write_hist(b, "strata_token_latency_seconds", "Between two generated tokens of a request.",
               &m->token_latency);
    pthread_mutex_unlock(&m->mu);
}
