/* openai.c: POST /v1/chat/completions and /v1/completions.
 *
 * A request, checked field by field (request.c), has its prompt made into
 * ids (chat: the messages through the model's chat format; both: the ids
 * of a past conversation its text begins with, from the conversation
 * index, and the rest encoded), and is submitted to the scheduler in queue
 * mode: this connection's thread reads the tokens with sched_next, decodes
 * them (never half a character), cuts at a stop string (holding back text
 * that may be the start of one), and writes them out, whole or as
 * Server-Sent Events.  Between tokens it checks the client is still
 * there: one that hangs up cancels its request, which frees its slot at
 * the scheduler's next step. */
#include "serve/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/generate.h"

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
        return perr_set(e, g->chat ? "messages" : "prompt", "%s", err.msg);
    if (!ids->n)
        return perr_set(e, g->chat ? "messages" : "prompt", "the prompt is empty");
    if ((int)ids->n >= s->n_ctx) {
        e->code = "context_length_exceeded";
        return perr_set(e, g->chat ? "messages" : "prompt",
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
            jbuf_text(&out, t, len);
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
            jbuf_text(&out, t, len);
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
    perr e = {0};
    int rc = gen_parse(s, root, chat, &g, &e);
    json_free(root);
    if (rc)
        serve_send_error(k, 400, "invalid_request_error", e.param, e.code, NULL, "%s", e.msg);
    else
        generate(k, &g);
    gen_free(&g);
}
