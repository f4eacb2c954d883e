/* test_serve.c: suite "serve": `strata-cli serve` end to end, on
 * 127.0.0.1 on a free port, started and stopped by each test
 * (test_server.h); the server's edges are suite serve_edge.
 *
 *   - the official `openai` Python client: models, chat whole and streamed
 *     (the same greedy text; include_usage), completions, a 400;
 *   - 16 clients hold 2-turn greedy conversations at once (resending the
 *     history as text): every answer equals the one the same conversation
 *     gets alone, every first answer equals `strata-cli run --chat`'s, four
 *     whole conversations equal `strata-cli chat`'s, and every follow-up
 *     reports its whole previous turn as cached tokens;
 *   - the conversation index finds the longest recorded prefix;
 *   - an answer ends before its first stop string, whole and streamed;
 *   - bad command lines exit 2 naming the option;
 *   - the model's own chat template serves chat requests, and one that
 *     raises gets a 400 with its message.
 * The demo model is needed where answers are compared; the tiny generated
 * llama serves the rest. */
#include "testutil.h"
#include "test_jinja.h"
#include "test_server.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serve/convindex.h"
#include "serve/json.h"

/* Under a sanitizer (make asan, make tsan) the demo model runs many times
 * slower: fewer concurrent conversations there, the same checks. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define N_CLIENTS 4
#else
#define N_CLIENTS 16
#endif

START_TEST(serve_openai_client)
{
    NEED_CLI();
    NEED_CURL();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not present (make model)");
    if (!test_have_python("openai"))
        TEST_SKIP("python openai package missing (pip install openai)");
    test_server sv;
    test_server_start(&sv, cli, model, NULL, "-t 2 --quiet");
    char *out = NULL;
    int rc = test_runf(&out, "python3 '%s/test/scripts/serve_client.py' api http://127.0.0.1:%d/v1",
                       test_root(), sv.port);
    ck_assert_msg(rc == 0, "serve_client.py api failed (%d): %s", rc, out);
    json *v = NULL;
    strata_error err = {0};
    ck_assert_msg(json_parse(out, strlen(out), &v, &err) == 0, "%s: %s", err.msg, out);
    const json *chat = json_get(v, "chat"), *stream = json_get(v, "stream");
    const json *cc = json_get(chat, "content"), *sc = json_get(stream, "content");
    ck_assert_msg(cc && sc && cc->len > 0, "%s", out);
    ck_assert_msg(cc->len == sc->len && !memcmp(cc->str, sc->str, cc->len),
                  "streamed answer differs from the whole one: %s", out);
    ck_assert_str_eq(json_get(chat, "finish")->str, "length");
    ck_assert(json_get(chat, "completion_tokens")->num == 8);
    ck_assert(json_get(stream, "completion_tokens")->num == 8);
    ck_assert(json_get(stream, "roles")->num == 1);
    const json *models = json_get(v, "models");
    ck_assert_msg(models->n == 1 && strstr(models->items[0]->str, "SmolLM2"), "%s", out);
    ck_assert_msg(json_get(json_get(v, "completion"), "text")->len > 0, "%s", out);
    ck_assert(json_get(v, "bad_status")->num == 400);
    json_free(v);
    free(out);
    /* the plain endpoints, and what the metrics counted */
    ck_assert_int_eq(test_curl(&sv, &out, "@H/health"), 200);
    ck_assert_str_eq(out, "{\"status\":\"ok\"}");
    free(out);
    ck_assert_int_eq(test_curl(&sv, &out, "@H/metrics"), 200);
    ck_assert_msg(strstr(out, "strata_requests_total{endpoint=\"/v1/chat/completions\","
                              "status=\"200\"} 2") &&
                  strstr(out, "strata_requests_total{endpoint=\"/v1/chat/completions\","
                              "status=\"400\"} 1") &&
                  strstr(out, "strata_generated_tokens_total 22") &&
                  strstr(out, "strata_time_to_first_token_seconds_count 3"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(test_server_stop(&sv), 0);
}
END_TEST

START_TEST(serve_conversations_equal_run)
{
    NEED_CLI();
    NEED_CURL();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not present (make model)");
    if (!test_have_python("openai"))
        TEST_SKIP("python openai package missing (pip install openai)");
    test_server sv;
    test_server_start(&sv, cli, model, NULL, "-t 2 --quiet --batch 8");
    char *out = NULL;
    double t0 = test_now();
    int rc = test_runf(&out, "python3 '%s/test/scripts/serve_client.py' conversations "
                             "http://127.0.0.1:%d/v1 %d 2 8", test_root(), sv.port, N_CLIENTS);
    double dt = test_now() - t0;
    ck_assert_msg(rc == 0, "serve_client.py conversations failed (%d): %s", rc, out);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    json *v = NULL;
    strata_error err = {0};
    ck_assert_msg(json_parse(out, strlen(out), &v, &err) == 0, "%s: %s", err.msg, out);
    const json *conc = json_get(v, "concurrent"), *ser = json_get(v, "serial");
    const json *first = json_get(v, "first");
    ck_assert_int_eq(conc->n, N_CLIENTS);
    int min_cached = 1 << 30;
    for (size_t k = 0; k < N_CLIENTS; k++) {
        for (size_t r = 0; r < 2; r++) {
            const json *a = json_get(conc->items[k]->items[r], "answer");
            const json *b = json_get(ser->items[k]->items[r], "answer");
            ck_assert_msg(a->len == b->len && !memcmp(a->str, b->str, a->len),
                          "client %zu turn %zu: '%s' at once, '%s' alone", k, r + 1, a->str,
                          b->str);
        }
        /* the follow-up found the whole first turn (its prompt and the 8
         * answer tokens, the last one sampled but not read) */
        const json *t1 = conc->items[k]->items[0], *t2 = conc->items[k]->items[1];
        int want = (int)json_get(t1, "prompt")->num + 8 - 1;
        int got = (int)json_get(t2, "cached")->num;
        ck_assert_msg(got >= want, "client %zu: follow-up cached %d tokens, want >= %d", k, got,
                      want);
        ck_assert_int_eq((int)json_get(t1, "cached")->num, 0);
        if (got < min_cached)
            min_cached = got;
    }
    /* the first answers, as `strata-cli run --chat` gives them */
    for (size_t q = 0; q < first->n; q++) {
        char *ans = NULL;
        rc = test_runf(&ans, "'%s' run --chat -m '%s' -p '%s' --temp 0 -n 8 -t 2 2>/dev/null",
                       cli, model, first->items[q]->str);
        ck_assert_int_eq(rc, 0);
        size_t l = strlen(ans);
        if (l && ans[l - 1] == '\n')
            ans[--l] = 0;
        const json *a = json_get(conc->items[q]->items[0], "answer");
        ck_assert_msg(a->len == l && !memcmp(a->str, ans, l), "'%s': run says '%s', serve '%s'",
                      first->items[q]->str, ans, a->str);
        free(ans);
    }
    /* whole conversations, as `strata-cli chat` holds them (it keeps the
     * ids it generated and appends each new turn, as the server's index
     * does): clients 0..3, both turns */
    const json *next = json_get(v, "next");
    for (size_t k = 0; k < 4; k++) {
        const json *q1 = first->items[k % first->n], *q2 = next->items[(k + 1) % next->n];
        char *said = NULL;
        rc = test_runf(&said, "printf '%%s\\n%%s\\n' '%s' '%s' | '%s' chat -m '%s' --temp 0 -n 8 "
                              "-t 2 2>/dev/null", q1->str, q2->str, cli, model);
        ck_assert_int_eq(rc, 0);
        const json *a1 = json_get(conc->items[k]->items[0], "answer");
        const json *a2 = json_get(conc->items[k]->items[1], "answer");
        char *want = malloc(a1->len + a2->len + 3);
        sprintf(want, "%s\n%s\n", a1->str, a2->str);
        ck_assert_msg(!strcmp(said, want), "client %zu: chat says\n%s\nserve says\n%s", k, said,
                      want);
        free(want);
        free(said);
    }
    printf("serve: %d clients x 2 turns at once + alone in %.1f s; follow-ups cached >= %d "
           "tokens\n", N_CLIENTS, dt, min_cached);
    json_free(v);
    free(out);
}
END_TEST

/* The conversation index alone: the longest recorded text that is a
 * prefix wins, kinds stay apart, and the budget drops the least recently
 * used entry first. */
START_TEST(serve_convindex_finds_longest_prefix)
{
    convindex *x = convindex_new(3, 1 << 20);
    ck_assert_ptr_nonnull(x);
    int32_t a[] = {1, 2}, b[] = {1, 2, 3, 4}, c[] = {9};
    ck_assert_int_eq(convindex_add(x, 1, "hello", 5, a, 2), 0);
    ck_assert_int_eq(convindex_add(x, 1, "hello world", 11, b, 4), 0);
    ck_assert_int_eq(convindex_add(x, 0, "hello world", 11, c, 1), 0);
    tok_ids ids = {0};
    ck_assert_int_eq(convindex_find(x, 1, "hello world, again", 18, &ids), 11);
    ck_assert_int_eq(ids.n, 4);
    ck_assert_int_eq(ids.ids[3], 4);
    ids.n = 0;
    ck_assert_int_eq(convindex_find(x, 1, "hello there", 11, &ids), 5);
    ck_assert_int_eq(ids.n, 2);
    ids.n = 0;
    ck_assert_int_eq(convindex_find(x, 0, "hello world", 11, &ids), 11); /* equal counts */
    ck_assert_int_eq(ids.ids[0], 9);
    ids.n = 0;
    ck_assert_int_eq(convindex_find(x, 1, "help", 4, &ids), 0);
    ck_assert_int_eq(ids.n, 0);
    /* a fourth entry drops the least recently used: "hello world" of kind
     * 1 was used before "hello" (kind 1) and "hello world" (kind 0) */
    ck_assert_int_eq(convindex_add(x, 1, "bye", 3, c, 1), 0);
    ck_assert_int_eq(convindex_entries(x), 3);
    ck_assert_int_eq(convindex_find(x, 1, "hello world", 11, &ids), 5);
    tok_ids_free(&ids);
    convindex_free(x);
}
END_TEST

/* The text of a completion answer: whole, or the streamed chunks joined
 * (*finish: the finish_reason seen).  malloc'd; *len its length. */
static char *answer_text(const char *out, int stream, size_t *len, char *finish, size_t fcap,
                         size_t *bounds, int *n_bounds)
{
    int nb = 0;
    jbuf t = {0};
    jbuf_raw(&t, "", 0);
    finish[0] = 0;
    const char *p = out;
    for (;;) {
        const char *obj = p;
        size_t n = strlen(p);
        if (stream) {
            obj = strstr(p, "data: {");
            if (!obj)
                break;
            obj += 6;
            const char *e = strstr(obj, "\n\n");
            n = e ? (size_t)(e - obj) : strlen(obj);
            p = obj + n;
        }
        json *v = NULL;
        ck_assert_msg(json_parse(obj, n, &v, NULL) == 0, "not JSON: %.*s", (int)n, obj);
        const json *ch = json_get(v, "choices");
        ck_assert_msg(ch && ch->type == JSON_ARRAY, "no choices: %.*s", (int)n, obj);
        if (ch->n) {
            const json *x = json_get(ch->items[0], "text"), *f = json_get(ch->items[0],
                                                                         "finish_reason");
            jbuf_raw(&t, x->str, x->len);
            if (bounds && x->len && nb < 64)
                bounds[nb++] = t.len; /* where this chunk ends */
            if (f && f->type == JSON_STRING)
                snprintf(finish, fcap, "%s", f->str);
        }
        json_free(v);
        if (!stream)
            break;
    }
    *len = t.len;
    if (n_bounds)
        *n_bounds = nb;
    return t.p;
}

/* Stop strings: the answer ends before the first one (whole and streamed:
 * the stream never sends text that turns out to begin a stop string), with
 * finish_reason "stop".  Greedy on the tiny llama: the same tokens each
 * time, so the stop string is taken from the answer without one. */
START_TEST(serve_stop_strings)
{
    NEED_CLI();
    NEED_CURL();
    test_server sv;
    test_server_start(&sv, cli, test_server_model(), NULL, "-t 2 --quiet");
    char *out = NULL, fin[32];
    ck_assert_int_eq(test_curl(&sv, &out, "-N -d '{\"prompt\":\"hello\",\"max_tokens\":24,"
                                     "\"temperature\":0,\"stream\":true}' @H/v1/completions"),
                     200);
    size_t tl, bounds[64];
    int nb = 0;
    char *t = answer_text(out, 1, &tl, fin, sizeof fin, bounds, &nb);
    free(out);
    ck_assert_str_eq(fin, "length");
    /* a stop string across two chunks (two tokens) from the middle: the
     * last character of one and the first of the next, so the stream must
     * hold the first back until it knows */
    ck_assert_msg(nb >= 4, "only %d chunks", nb);
    size_t mid = bounds[nb / 2 - 1], a = mid, b = mid;
    do
        a--;
    while (a > 0 && ((unsigned char)t[a] & 0xC0) == 0x80);
    for (b++; b < tl && ((unsigned char)t[b] & 0xC0) == 0x80; b++)
        ;
    const char *first = memmem(t, tl, t + a, b - a);
    size_t want = (size_t)(first - t);
    char body[600];
    snprintf(body, sizeof body, "%s/stop.json", sv.dir);
    for (int stream = 0; stream < 2; stream++) {
        jbuf req = {0};
        jbuf_printf(&req, "{\"prompt\":\"hello\",\"max_tokens\":24,\"temperature\":0,"
                          "\"stream\":%s,\"stop\":[\"zzzz\",", stream ? "true" : "false");
        jbuf_str(&req, t + a, b - a);
        jbuf_puts(&req, "]}");
        FILE *f = fopen(body, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(req.p, 1, req.len, f);
        fclose(f);
        jbuf_free(&req);
        ck_assert_int_eq(test_curl(&sv, &out, "-N --data-binary @'%s' @H/v1/completions", body), 200);
        size_t sl;
        char *st = answer_text(out, stream, &sl, fin, sizeof fin, NULL, NULL);
        ck_assert_msg(sl == want && !memcmp(st, t, want) && !strcmp(fin, "stop"),
                      "stream %d: %zu bytes, finish %s; want %zu bytes before the stop string",
                      stream, sl, fin, want);
        free(st);
        free(out);
    }
    remove(body);
    free(t);
    ck_assert_int_eq(test_server_stop(&sv), 0);
}
END_TEST

/* Bad command lines: status 2 and a message naming the option, before
 * anything is bound or loaded. */
START_TEST(serve_refuses_bad_options)
{
    NEED_CLI();
    const char *bad[][2] = {
        {"--port 70000", "--port '70000'"},
        {"--max-body-mib 0", "--max-body-mib '0'"},
        {"--timeout x", "--timeout 'x'"},
        {"--bogus", "unknown option '--bogus'"},
        {"--port", "--port needs a value"},
        {"-sys hello", "-sys is not used"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        int rc = test_runf(&out, "'%s' serve -m /nonexistent %s 2>&1", cli, bad[i][0]);
        ck_assert_msg(rc == 2 && strstr(out, bad[i][1]), "serve %s: exit %d: %s", bad[i][0], rc,
                      out);
        free(out);
    }
}
END_TEST

/* The model's own template serves chat requests; one that raises for a
 * message fails that request (400, with the template's message), not the
 * server. */
START_TEST(serve_model_template)
{
    NEED_CLI();
    NEED_CURL();
    char *model = test_gguf_with_template(
        test_server_model(), "{% for m in messages %}{% if m.content=='boom' %}{{raise_exception('boom!')}}"
        "{% endif %}<|im_start|>{{m.role}}\n{{m.content}}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n", "raising");
    test_server sv;
    test_server_start(&sv, cli, model, NULL, "-t 2 -c 64");
    char *out = NULL;
    ck_assert_int_eq(test_curl(&sv, &out, CHAT " @H/v1/chat/completions"), 200);
    free(out);
    ck_assert_int_eq(test_curl(&sv, &out, "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"boom\"}]}' "
                                     "@H/v1/chat/completions"), 400);
    ck_assert_msg(strstr(out, "raise_exception: boom!") && strstr(out, "line 1"), "%s", out);
    free(out);
    ck_assert_int_eq(test_curl(&sv, NULL, CHAT " @H/v1/chat/completions"), 200);
    ck_assert_int_eq(test_server_stop(&sv), 0);
    free(model);
}
END_TEST

static Suite *serve_suite(void)
{
    Suite *s = suite_create("serve");
    /* CK_RUN_CASE=serve_errors runs the quick ones (tiny model) alone */
    TCase *tc = tcase_create("serve_errors");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, serve_convindex_finds_longest_prefix);
    tcase_add_test(tc, serve_refuses_bad_options);
    tcase_add_test(tc, serve_stop_strings);
    tcase_add_test(tc, serve_model_template);
    suite_add_tcase(s, tc);
    tc = tcase_create("serve_demo");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, serve_openai_client);
    tcase_add_test(tc, serve_conversations_equal_run);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(serve_suite)
