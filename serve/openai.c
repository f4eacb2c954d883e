/* openai.c: POST /v1/chat/completions and /v1/completions.
 *
 * A request is checked field by field (a wrong type or value is a 400
 * naming the field), its prompt made into ids (chat: the messages through
 * the model's chat format; both: the ids of a past conversation its text
 * begins with, from the conversation index, and the rest encoded), and
 * submitted to the scheduler in queue mode: this connection's thread reads
 * the tokens with sched_next, decodes them (never half a character), cuts
 * at a stop string (holding back text that may be the start of one), and
 * writes them out, whole or as Server-Sent Events.  Between tokens it
 * checks the client is still there: one that hangs up cancels its
 * request, which frees its slot at the scheduler's next step. */
#include "serve/serve_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/generate.h"

#define MAX_STOP 4

typedef struct gen {
    int chat;
    char *text;                 /* the prompt as text (chat: rendered) */
    size_t text_len;
    sampler_params sp;
    int max_tokens;
    char *stop[MAX_STOP];
    size_t stop_len[MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int seed_set;               /* else the server's seed + the request's id */
} gen;

static void gen_free(gen *g)
{
    free(g->text);
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
}

/* A request error: 400 unless said otherwise. */
typedef struct perr {
    char msg[512];
    const char *param, *code;
    char param_buf[64];
} perr;

static int bad(perr *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (param && param != e->param_buf) {
        snprintf(e->param_buf, sizeof e->param_buf, "%s", param);
    }
    e->param = param ? e->param_buf : NULL;
    return -1;
}

static int is_null(const json *v)
{
    return !v || v->type == JSON_NULL;
}

/* An optional number within [lo, hi]; *set = 1 when given. */
static int opt_number(const json *root, const char *key, double lo, double hi, double *out,
                      int *set, perr *e)
{
    const json *v = json_get(root, key);
    *set = 0;
    if (is_null(v))
        return 0;
    if (v->type != JSON_NUMBER)
        return bad(e, key, "'%s' must be a number, not %s", key, json_type_name(v->type));
    if (!(v->num >= lo && v->num <= hi))
        return bad(e, key, "'%s' is %g; it must lie in [%g, %g]", key, v->num, lo, hi);
    *out = v->num;
    *set = 1;
    return 0;
}

static int opt_int(const json *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   int *set, perr *e)
{
    const json *v = json_get(root, key);
    *set = 0;
    if (is_null(v))
        return 0;
    if (v->type != JSON_NUMBER)
        return bad(e, key, "'%s' must be an integer, not %s", key, json_type_name(v->type));
    if (!json_int(v, lo, hi, out))
        return bad(e, key, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo,
                   (long long)hi);
    *set = 1;
    return 0;
}

static int opt_bool(const json *root, const char *key, int *out, perr *e)
{
    const json *v = json_get(root, key);
    if (is_null(v))
        return 0;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE)
        return bad(e, key, "'%s' must be a boolean, not %s", key, json_type_name(v->type));
    *out = v->type == JSON_TRUE;
    return 0;
}

static int no_nul(const json *v, const char *what, perr *e)
{
    if (strlen(v->str) != v->len)
        return bad(e, what, "'%s' holds a NUL character", what);
    return 0;
}

/* What both endpoints share: sampling, limits, stop, stream. */
static int parse_common(serve *s, const json *root, gen *g, perr *e)
{
    const json *v = json_get(root, "model");
    if (v && v->type != JSON_STRING)
        return bad(e, "model", "'model' must be a string");
    g->sp = s->p.sampling;
    g->max_tokens = s->p.max_tokens;
    double d;
    int64_t n;
    int set;
    if (opt_number(root, "temperature", 0, 2, &d, &set, e))
        return -1;
    if (set)
        g->sp.temp = (float)d;
    if (opt_number(root, "top_p", 0, 1, &d, &set, e))
        return -1;
    if (set)
        g->sp.top_p = (float)d;
    if (opt_number(root, "min_p", 0, 1, &d, &set, e))
        return -1;
    if (set)
        g->sp.min_p = (float)d;
    if (opt_int(root, "top_k", 0, 1 << 30, &n, &set, e))
        return -1;
    if (set)
        g->sp.top_k = (int)n;
    if (opt_int(root, "seed", INT64_MIN / 2, INT64_MAX / 2, &n, &set, e))
        return -1;
    g->sp.seed = (uint64_t)n;
    g->seed_set = set;
    const char *limits[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        if (opt_int(root, limits[i], 1, 1 << 30, &n, &set, e))
            return -1;
        if (set)
            g->max_tokens = (int)n;
    }
    const char *penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        if (opt_number(root, penalties[i], -2, 2, &d, &set, e))
            return -1;
        if (set && d != 0)
            return bad(e, penalties[i], "'%s' is not supported (only 0)", penalties[i]);
    }
    if (opt_int(root, "n", 1, 1, &n, &set, e))
        return bad(e, "n", "'n' must be 1 (one choice per request)");
    int lp = 0;
    if (opt_bool(root, "logprobs", &lp, e))
        return -1;
    if (lp || !is_null(json_get(root, "top_logprobs")))
        return bad(e, "logprobs", "logprobs are not supported");
    const char *unsupported[] = {"tools", "functions", "tool_choice", "function_call", "suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!is_null(json_get(root, unsupported[i])))
            return bad(e, unsupported[i], "'%s' is not supported", unsupported[i]);
    v = json_get(root, "logit_bias");
    if (!is_null(v) && (v->type != JSON_OBJECT || v->n))
        return bad(e, "logit_bias", "'logit_bias' is not supported");
    v = json_get(root, "response_format");
    if (!is_null(v)) {
        const json *t = json_get(v, "type");
        if (!t || t->type != JSON_STRING || strcmp(t->str, "text"))
            return bad(e, "response_format", "only response_format {\"type\": \"text\"} is "
                                             "supported");
    }
    int echo = 0;
    if (opt_bool(root, "echo", &echo, e))
        return -1;
    if (echo)
        return bad(e, "echo", "'echo' is not supported");
    if (opt_int(root, "best_of", 1, 1, &n, &set, e))
        return bad(e, "best_of", "'best_of' must be 1");
    v = json_get(root, "stop");
    if (!is_null(v)) {
        const json *one[1] = {v};
        const json *const *items = one;
        size_t cnt = 1;
        if (v->type == JSON_ARRAY) {
            items = (const json *const *)v->items;
            cnt = v->n;
        }
        if (cnt > MAX_STOP)
            return bad(e, "stop", "'stop' holds %zu strings; at most %d", cnt, MAX_STOP);
        for (size_t i = 0; i < cnt; i++) {
            if (items[i]->type != JSON_STRING)
                return bad(e, "stop", "'stop' must be a string or a list of strings");
            if (!items[i]->len)
                return bad(e, "stop", "'stop' strings must not be empty");
            g->stop[g->n_stop] = malloc(items[i]->len + 1);
            if (!g->stop[g->n_stop])
                return bad(e, NULL, "out of memory");
            memcpy(g->stop[g->n_stop], items[i]->str, items[i]->len + 1);
            g->stop_len[g->n_stop++] = items[i]->len;
        }
    }
    if (opt_bool(root, "stream", &g->stream, e))
        return -1;
    v = json_get(root, "stream_options");
    if (!is_null(v)) {
        if (v->type != JSON_OBJECT)
            return bad(e, "stream_options", "'stream_options' must be an object");
        if (opt_bool(v, "include_usage", &g->include_usage, e))
            return bad(e, "stream_options.include_usage",
                       "'stream_options.include_usage' must be a boolean");
    }
    return 0;
}

/* A message's content: a string, null (an assistant turn with none), or
 * a list of {"type":"text","text":...} parts, joined.  malloc'd. */
static int content_text(const json *c, size_t i, char **out, perr *e)
{
    char name[64];
    snprintf(name, sizeof name, "messages[%zu].content", i);
    if (is_null(c)) {
        *out = strdup("");
        return *out ? 0 : bad(e, NULL, "out of memory");
    }
    if (c->type == JSON_STRING) {
        if (no_nul(c, name, e))
            return -1;
        *out = strdup(c->str);
        return *out ? 0 : bad(e, NULL, "out of memory");
    }
    if (c->type != JSON_ARRAY)
        return bad(e, name, "'%s' must be a string or a list of text parts", name);
    jbuf b = {0};
    jbuf_raw(&b, "", 0);
    for (size_t k = 0; k < c->n; k++) {
        const json *t = json_get(c->items[k], "type"), *x = json_get(c->items[k], "text");
        if (!t || t->type != JSON_STRING || strcmp(t->str, "text") || !x ||
            x->type != JSON_STRING) {
            jbuf_free(&b);
            return bad(e, name, "'%s' parts must be {\"type\": \"text\", \"text\": ...} "
                                "(only text is supported)", name);
        }
        if (no_nul(x, name, e)) {
            jbuf_free(&b);
            return -1;
        }
        jbuf_raw(&b, x->str, x->len);
    }
    if (b.oom) {
        jbuf_free(&b);
        return bad(e, NULL, "out of memory");
    }
    *out = b.p;
    return 0;
}

static int parse_chat(serve *s, const json *root, gen *g, perr *e)
{
    const json *m = json_get(root, "messages");
    if (!m)
        return bad(e, "messages", "'messages' is required");
    if (m->type != JSON_ARRAY || !m->n)
        return bad(e, "messages", "'messages' must be a non-empty list");
    if (!s->have_fmt) {
        e->code = "unsupported";
        return bad(e, "messages", "this model has no chat format strata knows (%s); use "
                                  "/v1/completions, or start the server with --chat-template",
                   s->fmt_err);
    }
    chat_msg *msgs = calloc(m->n, sizeof *msgs);
    char **texts = calloc(m->n, sizeof *texts);
    int rc = msgs && texts ? 0 : bad(e, NULL, "out of memory");
    for (size_t i = 0; !rc && i < m->n; i++) {
        const json *it = m->items[i];
        char name[64];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (it->type != JSON_OBJECT) {
            rc = bad(e, name, "'%s' must be an object", name);
            break;
        }
        const json *role = json_get(it, "role");
        snprintf(name, sizeof name, "messages[%zu].role", i);
        if (!role || role->type != JSON_STRING) {
            rc = bad(e, name, "'%s' must be a string", name);
            break;
        }
        if (!strcmp(role->str, "developer"))
            msgs[i].role = "system"; /* OpenAI's newer name for it */
        else if (!strcmp(role->str, "system") || !strcmp(role->str, "user") ||
                 !strcmp(role->str, "assistant"))
            msgs[i].role = role->str;
        else {
            rc = bad(e, name, "'%s' is '%.32s'; system, user and assistant are supported", name,
                     role->str);
            break;
        }
        const json *content = json_get(it, "content");
        if (!content && strcmp(msgs[i].role, "assistant")) {
            snprintf(name, sizeof name, "messages[%zu].content", i);
            rc = bad(e, name, "'%s' is required", name);
            break;
        }
        rc = content_text(content, i, &texts[i], e);
        msgs[i].content = texts[i];
    }
    strata_error err = {0};
    if (!rc && chat_render(&s->fmt, msgs, m->n, true, &g->text, &err))
        rc = bad(e, "messages", "%s", err.msg);
    if (!rc)
        g->text_len = strlen(g->text);
    for (size_t i = 0; texts && i < m->n; i++)
        free(texts[i]);
    free(texts);
    free(msgs);
    return rc;
}

static int parse_completion(const json *root, gen *g, perr *e)
{
    const json *p = json_get(root, "prompt");
    if (!p)
        return bad(e, "prompt", "'prompt' is required");
    if (p->type == JSON_ARRAY && p->n == 1 && p->items[0]->type == JSON_STRING)
        p = p->items[0];
    if (p->type != JSON_STRING)
        return bad(e, "prompt", "'prompt' must be a string (or a list of one string)");
    if (!p->len)
        return bad(e, "prompt", "'prompt' is empty");
    if (no_nul(p, "prompt", e))
        return -1;
    g->text = malloc(p->len + 1);
    if (!g->text)
        return bad(e, NULL, "out of memory");
    memcpy(g->text, p->str, p->len + 1);
    g->text_len = p->len;
    return 0;
}

/* ---- stop strings ------------------------------------------------------- */

/* The earliest stop string in out[from..len): its offset, or -1. */
static long find_stop(const gen *g, const char *out, size_t len, size_t from)
{
    long best = -1;
    for (int i = 0; i < g->n_stop; i++) {
        if (len < g->stop_len[i])
            continue;
        const char *p = memmem(out + from, len - from, g->stop[i], g->stop_len[i]);
        if (p && (best < 0 || p - out < best))
            best = p - out;
    }
    return best;
}

/* Bytes at the end of out that may begin a stop string: not sent yet. */
static size_t holdback(const gen *g, const char *out, size_t len)
{
    size_t hold = 0;
    for (int i = 0; i < g->n_stop; i++) {
        size_t l = g->stop_len[i] - 1 < len ? g->stop_len[i] - 1 : len;
        for (; l > hold; l--)
            if (!memcmp(out + len - l, g->stop[i], l)) {
                hold = l;
                break;
            }
    }
    return hold;
}

/* ---- output ------------------------------------------------------------- */

typedef struct call_out {
    serve_call *k;
    gen *g;
    uint64_t id;
    http_stream st;
} call_out;

static void obj_head(call_out *o, jbuf *b, int chunk)
{
    jbuf_printf(b, "{\"id\":\"%s-%llu\",\"object\":\"%s\",\"created\":%ld,\"model\":",
                o->g->chat ? "chatcmpl" : "cmpl", (unsigned long long)o->id,
                o->g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion",
                o->k->s->created);
    jbuf_cstr(b, o->k->s->model_id);
}

static void usage_obj(jbuf *b, const sched_result *r)
{
    jbuf_printf(b, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                   "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
                r->n_prompt, r->n_gen, r->n_prompt + r->n_gen, r->n_resident + r->n_restored);
}

/* One streamed chunk: text (may be NULL: none) and a finish reason (NULL:
 * not yet).  The first chat chunk carries the role. */
static void send_chunk(call_out *o, const char *text, size_t len, int first, const char *finish)
{
    jbuf b = {0};
    obj_head(o, &b, 1);
    jbuf_puts(&b, ",\"choices\":[{\"index\":0,");
    if (o->g->chat) {
        jbuf_puts(&b, "\"delta\":{");
        if (first)
            jbuf_puts(&b, "\"role\":\"assistant\"");
        if (text) {
            jbuf_puts(&b, first ? ",\"content\":" : "\"content\":");
            jbuf_str(&b, text, len);
        }
        jbuf_puts(&b, "}");
    } else {
        jbuf_puts(&b, "\"text\":");
        jbuf_str(&b, text ? text : "", text ? len : 0);
    }
    jbuf_puts(&b, ",\"logprobs\":null,\"finish_reason\":");
    if (finish)
        jbuf_cstr(&b, finish);
    else
        jbuf_puts(&b, "null");
    jbuf_puts(&b, "}]");
    if (o->g->include_usage)
        jbuf_puts(&b, ",\"usage\":null");
    jbuf_puts(&b, "}");
    if (!b.oom)
        http_sse_data(&o->st, b.p, b.len);
    jbuf_free(&b);
}

static void send_whole(call_out *o, const char *text, size_t len, const char *finish,
                       const sched_result *r)
{
    jbuf b = {0};
    obj_head(o, &b, 0);
    jbuf_puts(&b, ",\"choices\":[{\"index\":0,");
    if (o->g->chat) {
        jbuf_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
        jbuf_str(&b, text, len);
        jbuf_puts(&b, "}");
    } else {
        jbuf_puts(&b, "\"text\":");
        jbuf_str(&b, text, len);
    }
    jbuf_puts(&b, ",\"logprobs\":null,\"finish_reason\":");
    jbuf_cstr(&b, finish);
    jbuf_puts(&b, "}],\"usage\":");
    usage_obj(&b, r);
    jbuf_puts(&b, "}");
    serve_send_json(o->k, 200, &b, NULL);
    jbuf_free(&b);
}

/* ---- the request -------------------------------------------------------- */

static int prompt_ids(serve *s, gen *g, tok_ids *ids, perr *e)
{
    size_t matched = convindex_find(s->idx, g->chat, g->text, g->text_len, ids);
    int flags = g->chat ? TOK_ENCODE_SPECIAL : 0;
    strata_error err = {0};
    int rc = matched ? tokenizer_encode(s->tok, g->text + matched, g->text_len - matched, flags,
                                        ids, &err)
                     : tokenizer_encode(s->tok, g->text, g->text_len, flags | TOK_ENCODE_ADD_BOS,
                                        ids, &err);
    if (rc)
        return bad(e, g->chat ? "messages" : "prompt", "%s", err.msg);
    if (!ids->n)
        return bad(e, g->chat ? "messages" : "prompt", "the prompt is empty");
    if ((int)ids->n >= s->n_ctx) {
        e->code = "context_length_exceeded";
        return bad(e, g->chat ? "messages" : "prompt",
                   "the prompt is %zu tokens; the context holds %d (and one more is needed "
                   "to answer)", ids->n, s->n_ctx);
    }
    return 0;
}

static void generate(serve_call *k, gen *g)
{
    serve *s = k->s;
    perr e = {0};
    tok_ids ids = {0}, out_ids = {0};
    if (prompt_ids(s, g, &ids, &e)) {
        serve_send_error(k, 400, "invalid_request_error", e.param, e.code, NULL, "%s", e.msg);
        tok_ids_free(&ids);
        return;
    }
    pthread_mutex_lock(&s->mu);
    int full = s->in_flight >= s->n_slots + s->p.max_queue;
    uint64_t id = 0;
    if (!full) {
        s->in_flight++;
        id = ++s->next_id;
    }
    pthread_mutex_unlock(&s->mu);
    if (full) {
        serve_send_error(k, 503, "server_error", NULL, "queue_full", "Retry-After: 1\r\n",
                         "the queue is full (%d requests running or waiting; --max-queue %d)",
                         s->n_slots + s->p.max_queue, s->p.max_queue);
        tok_ids_free(&ids);
        return;
    }
    sched_request r = sched_request_default();
    r.tokens = ids.ids;
    r.n_tokens = (int)ids.n;
    r.sampling = g->sp;
    if (!g->seed_set)
        r.sampling.seed = s->p.sampling.seed + id;
    r.max_tokens = g->max_tokens;
    sched_handle *h = NULL;
    tokdec *dec = NULL;
    strata_error err = {0};
    int rc = sched_submit(s->sched, &r, &h, &err);
    if (!rc)
        rc = tokdec_new(s->tok, 0, &dec, &err);
    if (rc) {
        int st = rc == STRATA_E_LIMIT || rc == STRATA_E_ARG ? 400 : 500;
        serve_send_error(k, st, st == 400 ? "invalid_request_error" : "server_error", NULL,
                         NULL, NULL, "%s", err.msg);
        goto done;
    }
    call_out o = {k, g, id, {0}};
    if (g->stream) {
        k->status = 200;
        /* without chunked framing (HTTP/1.0) the body ends when the
         * connection does */
        if (k->req->minor < 1)
            k->close = 1;
        http_stream_begin(&o.st, k->c, k->req->minor, 200, "text/event-stream",
                          k->req->keep_alive);
        if (g->chat)
            send_chunk(&o, "", 0, 1, NULL);
    }
    jbuf out = {0};
    jbuf_raw(&out, "", 0);
    size_t sent = 0;
    int stop_hit = 0, gone = 0, cancelled = 0;
    double t_last = 0;
    size_t maxstop = 0;
    for (int i = 0; i < g->n_stop; i++)
        if (g->stop_len[i] > maxstop)
            maxstop = g->stop_len[i];
    for (unsigned n_tok = 0;;) {
        if (atomic_load(&s->abort_all) && !cancelled) {
            sched_cancel(h);
            cancelled = 1;
        }
        int32_t tok;
        int nr = sched_next(h, &tok, 0.05);
        if (nr == 0)
            break;
        if (nr == SCHED_TIMEOUT || (++n_tok % 16) == 0) {
            if (!gone && http_peer_closed(k->c)) {
                gone = 1;
                sched_cancel(h);
                metrics_disconnect(&s->m);
            }
            if (nr == SCHED_TIMEOUT)
                continue;
        }
        if (stop_hit || gone)
            continue; /* drain what came before the cancel */
        double now = strata_now();
        if (t_last > 0)
            metrics_token_gap(&s->m, now - t_last);
        t_last = now;
        tok_ids_push(&out_ids, tok);
        size_t len = 0, before = out.len;
        const char *t = tokdec_push(dec, tok, &len, &err);
        if (t && len)
            jbuf_raw(&out, t, len);
        size_t safe = out.len;
        if (g->n_stop) {
            size_t from = before >= maxstop ? before - maxstop + 1 : 0;
            long at = find_stop(g, out.p, out.len, from);
            if (at >= 0) {
                out.len = (size_t)at;
                out.p[at] = '\0';
                stop_hit = 1;
                sched_cancel(h);
                safe = out.len;
            } else {
                safe = out.len - holdback(g, out.p, out.len);
            }
        }
        if (g->stream && safe > sent) {
            send_chunk(&o, out.p + sent, safe - sent, 0, NULL);
            sent = safe;
            if (o.st.failed && !gone) {
                gone = 1;
                sched_cancel(h);
                metrics_disconnect(&s->m);
            }
        }
    }
    sched_result res;
    sched_wait(h, &res);
    if (!stop_hit && !gone) {
        size_t len = 0;
        const char *t = tokdec_flush(dec, &len);
        if (t && len)
            jbuf_raw(&out, t, len);
        long at = g->n_stop ? find_stop(g, out.p, out.len, 0) : -1;
        if (at >= 0) {
            out.len = (size_t)at;
            stop_hit = 1;
        }
    }
    const char *finish = stop_hit || res.finish == SCHED_FINISH_STOP ? "stop" : "length";
    metrics_tokens(&s->m, res.n_prompt, res.n_gen, res.n_resident, res.n_restored);
    if (res.n_gen > 0)
        metrics_ttft(&s->m, res.t_first);
    if (g->stream)  /* counted before the last chunk goes out */
        serve_count(k, res.finish == SCHED_FINISH_ERROR ? 500 : gone ? 499 : 200);
    if (res.finish == SCHED_FINISH_ERROR) {
        if (g->stream) {
            jbuf b = {0};
            jbuf_puts(&b, "{\"error\":{\"message\":");
            jbuf_cstr(&b, res.err.msg);
            jbuf_puts(&b, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
            http_sse_data(&o.st, b.p, b.len);
            jbuf_free(&b);
            http_sse_data(&o.st, "[DONE]", 6);
            http_stream_end(&o.st);
            k->status = 500;
        } else {
            serve_send_error(k, 500, "server_error", NULL, NULL, NULL, "%s", res.err.msg);
        }
    } else if (g->stream) {
        if (!gone) {
            if (out.len > sent)
                send_chunk(&o, out.p + sent, out.len - sent, 0, NULL);
            send_chunk(&o, NULL, 0, 0, finish);
            if (g->include_usage) {
                jbuf b = {0};
                obj_head(&o, &b, 1);
                jbuf_puts(&b, ",\"choices\":[],\"usage\":");
                usage_obj(&b, &res);
                jbuf_puts(&b, "}");
                http_sse_data(&o.st, b.p, b.len);
                jbuf_free(&b);
            }
            http_sse_data(&o.st, "[DONE]", 6);
            http_stream_end(&o.st);
        }
        if (gone || o.st.failed) {
            k->status = 499; /* the client closed the request (nginx's code) */
            k->close = 1;
        }
    } else if (gone) {
        k->status = 499;
        k->close = 1;
    } else {
        send_whole(&o, out.p, out.len, finish, &res);
    }
    /* The conversation as it now stands in the slot (or the cache): its
     * text and the ids the model read and wrote, for the next turn to find
     * by content.  Not after a stop string (the slot holds tokens past the
     * cut) nor a cancel. */
    if ((res.finish == SCHED_FINISH_STOP || res.finish == SCHED_FINISH_LENGTH) && !stop_hit &&
        !gone && !out.oom) {
        jbuf all = {0};
        jbuf_raw(&all, g->text, g->text_len);
        jbuf_raw(&all, out.p, out.len);
        for (size_t i = 0; i < out_ids.n; i++)
            tok_ids_push(&ids, out_ids.ids[i]);
        if (!all.oom)
            convindex_add(s->idx, g->chat, all.p, all.len, ids.ids, ids.n);
        jbuf_free(&all);
    }
    if (!s->p.quiet)
        fprintf(stderr, "strata serve: %s #%llu: prompt %d (%d cached), %d generated, %s, "
                        "first token %.3f s\n",
                serve_endpoint_name(k->endpoint), (unsigned long long)id, res.n_prompt,
                res.n_resident + res.n_restored, res.n_gen,
                res.finish == SCHED_FINISH_ERROR ? "error" : gone ? "client gone" : finish,
                res.t_first);
    jbuf_free(&out);
done:
    sched_handle_free(h);
    tokdec_free(dec);
    tok_ids_free(&ids);
    tok_ids_free(&out_ids);
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    pthread_mutex_unlock(&s->mu);
}

void serve_generate(serve_call *k, int chat)
{
    serve *s = k->s;
    const http_request *req = k->req;
    /* The body is read as JSON whatever Content-Type says: curl -d sends
     * application/x-www-form-urlencoded, and refusing it helps nobody. */
    json *root = NULL;
    strata_error err = {0};
    if (json_parse(req->body ? req->body : "", req->body_len, &root, &err)) {
        serve_send_error(k, 400, "invalid_request_error", NULL, "invalid_json", NULL,
                         "the body is not valid JSON: %s", err.msg);
        return;
    }
    gen g = {0};
    g.chat = chat;
    perr e = {0};
    int rc = root->type != JSON_OBJECT ? bad(&e, NULL, "the body must be a JSON object")
                                       : parse_common(s, root, &g, &e);
    if (!rc)
        rc = chat ? parse_chat(s, root, &g, &e) : parse_completion(root, &g, &e);
    json_free(root);
    if (rc)
        serve_send_error(k, 400, "invalid_request_error", e.param, e.code, NULL, "%s", e.msg);
    else
        generate(k, &g);
    gen_free(&g);
}
