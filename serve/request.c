/* request.c: the body of a chat or completion request, checked field by
 * field (see request.h).  A wrong type or value is a 400 whose message
 * names the field; a field strata does not support (penalties other than
 * 0, n other than 1, logprobs, tools, ...) is a 400 that says so, rather
 * than an answer that silently ignores it.  Unknown fields are ignored, as
 * OpenAI's API does for forward compatibility. */
#include "serve/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gen_free(gen *g)
{
    free(g->text);
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
}

int perr_set(perr *e, const char *param, const char *fmt, ...)
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
        return perr_set(e, key, "'%s' must be a number, not %s", key, json_type_name(v->type));
    if (!(v->num >= lo && v->num <= hi))
        return perr_set(e, key, "'%s' is %g; it must lie in [%g, %g]", key, v->num, lo, hi);
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
        return perr_set(e, key, "'%s' must be an integer, not %s", key, json_type_name(v->type));
    if (!json_int(v, lo, hi, out))
        return perr_set(e, key, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo,
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
        return perr_set(e, key, "'%s' must be a boolean, not %s", key, json_type_name(v->type));
    *out = v->type == JSON_TRUE;
    return 0;
}

static int no_nul(const json *v, const char *what, perr *e)
{
    if (strlen(v->str) != v->len)
        return perr_set(e, what, "'%s' holds a NUL character", what);
    return 0;
}

/* What both endpoints share: sampling, limits, stop, stream. */
static int parse_common(serve *s, const json *root, gen *g, perr *e)
{
    const json *v = json_get(root, "model");
    if (v && v->type != JSON_STRING)
        return perr_set(e, "model", "'model' must be a string");
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
            return perr_set(e, penalties[i], "'%s' is not supported (only 0)", penalties[i]);
    }
    if (opt_int(root, "n", 1, 1, &n, &set, e))
        return perr_set(e, "n", "'n' must be 1 (one choice per request)");
    int lp = 0;
    if (opt_bool(root, "logprobs", &lp, e))
        return -1;
    if (lp || !is_null(json_get(root, "top_logprobs")))
        return perr_set(e, "logprobs", "logprobs are not supported");
    const char *unsupported[] = {"tools", "functions", "tool_choice", "function_call", "suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!is_null(json_get(root, unsupported[i])))
            return perr_set(e, unsupported[i], "'%s' is not supported", unsupported[i]);
    v = json_get(root, "logit_bias");
    if (!is_null(v) && (v->type != JSON_OBJECT || v->n))
        return perr_set(e, "logit_bias", "'logit_bias' is not supported");
    v = json_get(root, "response_format");
    if (!is_null(v)) {
        const json *t = json_get(v, "type");
        if (!t || t->type != JSON_STRING || strcmp(t->str, "text"))
            return perr_set(e, "response_format", "only response_format {\"type\": \"text\"} is "
                            "supported");
    }
    int echo = 0;
    if (opt_bool(root, "echo", &echo, e))
        return -1;
    if (echo)
        return perr_set(e, "echo", "'echo' is not supported");
    if (opt_int(root, "best_of", 1, 1, &n, &set, e))
        return perr_set(e, "best_of", "'best_of' must be 1");
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
            return perr_set(e, "stop", "'stop' holds %zu strings; at most %d", cnt, MAX_STOP);
        for (size_t i = 0; i < cnt; i++) {
            if (items[i]->type != JSON_STRING)
                return perr_set(e, "stop", "'stop' must be a string or a list of strings");
            if (!items[i]->len)
                return perr_set(e, "stop", "'stop' strings must not be empty");
            g->stop[g->n_stop] = malloc(items[i]->len + 1);
            if (!g->stop[g->n_stop])
                return perr_set(e, NULL, "out of memory");
            memcpy(g->stop[g->n_stop], items[i]->str, items[i]->len + 1);
            g->stop_len[g->n_stop++] = items[i]->len;
        }
    }
    if (opt_bool(root, "stream", &g->stream, e))
        return -1;
    v = json_get(root, "stream_options");
    if (!is_null(v)) {
        if (v->type != JSON_OBJECT)
            return perr_set(e, "stream_options", "'stream_options' must be an object");
        if (opt_bool(v, "include_usage", &g->include_usage, e))
            return perr_set(e, "stream_options.include_usage",
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
        return *out ? 0 : perr_set(e, NULL, "out of memory");
    }
    if (c->type == JSON_STRING) {
        if (no_nul(c, name, e))
            return -1;
        *out = strdup(c->str);
        return *out ? 0 : perr_set(e, NULL, "out of memory");
    }
    if (c->type != JSON_ARRAY)
        return perr_set(e, name, "'%s' must be a string or a list of text parts", name);
    jbuf b = {0};
    jbuf_raw(&b, "", 0);
    for (size_t k = 0; k < c->n; k++) {
        const json *t = json_get(c->items[k], "type"), *x = json_get(c->items[k], "text");
        if (!t || t->type != JSON_STRING || strcmp(t->str, "text") || !x ||
            x->type != JSON_STRING) {
            jbuf_free(&b);
            return perr_set(e, name, "'%s' parts must be {\"type\": \"text\", \"text\": ...} "
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
        return perr_set(e, NULL, "out of memory");
    }
    *out = b.p;
    return 0;
}

static int parse_chat(serve *s, const json *root, gen *g, perr *e)
{
    const json *m = json_get(root, "messages");
    if (!m)
        return perr_set(e, "messages", "'messages' is required");
    if (m->type != JSON_ARRAY || !m->n)
        return perr_set(e, "messages", "'messages' must be a non-empty list");
    if (!s->have_fmt) {
        e->code = "unsupported";
        return perr_set(e, "messages", "this model has no chat format strata knows (%s); use "
                        "/v1/completions, or start the server with --chat-template",
                        s->fmt_err);
    }
    chat_msg *msgs = calloc(m->n, sizeof *msgs);
    char **texts = calloc(m->n, sizeof *texts);
    int rc = msgs && texts ? 0 : perr_set(e, NULL, "out of memory");
    for (size_t i = 0; !rc && i < m->n; i++) {
        const json *it = m->items[i];
        char name[64];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (it->type != JSON_OBJECT) {
            rc = perr_set(e, name, "'%s' must be an object", name);
            break;
        }
        const json *role = json_get(it, "role");
        snprintf(name, sizeof name, "messages[%zu].role", i);
        if (!role || role->type != JSON_STRING) {
            rc = perr_set(e, name, "'%s' must be a string", name);
            break;
        }
        if (!strcmp(role->str, "developer"))
            msgs[i].role = "system"; /* OpenAI's newer name for it */
        else if (!strcmp(role->str, "system") || !strcmp(role->str, "user") ||
                 !strcmp(role->str, "assistant"))
            msgs[i].role = role->str;
        else {
            rc = perr_set(e, name, "'%s' is '%.32s'; system, user and assistant are supported",
                          name, role->str);
            break;
        }
        const json *content = json_get(it, "content");
        if (!content && strcmp(msgs[i].role, "assistant")) {
            snprintf(name, sizeof name, "messages[%zu].content", i);
            rc = perr_set(e, name, "'%s' is required", name);
            break;
        }
        rc = content_text(content, i, &texts[i], e);
        msgs[i].content = texts[i];
    }
    strata_error err = {0};
    if (!rc && chat_render(&s->fmt, msgs, m->n, true, &g->text, &err))
        rc = perr_set(e, "messages", "%s", err.msg);
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
        return perr_set(e, "prompt", "'prompt' is required");
    if (p->type == JSON_ARRAY && p->n == 1 && p->items[0]->type == JSON_STRING)
        p = p->items[0];
    if (p->type != JSON_STRING)
        return perr_set(e, "prompt", "'prompt' must be a string (or a list of one string)");
    if (!p->len)
        return perr_set(e, "prompt", "'prompt' is empty");
    if (no_nul(p, "prompt", e))
        return -1;
    g->text = malloc(p->len + 1);
    if (!g->text)
        return perr_set(e, NULL, "out of memory");
    memcpy(g->text, p->str, p->len + 1);
    g->text_len = p->len;
    return 0;
}


int gen_parse(serve *s, const json *root, int chat, gen *g, perr *e)
{
    g->chat = chat;
    if (root->type != JSON_OBJECT)
        return perr_set(e, NULL, "the body must be a JSON object");
    if (parse_common(s, root, g, e))
        return -1;
    return chat ? parse_chat(s, root, g, e) : parse_completion(root, g, e);
}
