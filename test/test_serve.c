/* test_serve.c: suite "serve": `strata-cli serve` end to end, on
 * 127.0.0.1 on a free port, started and stopped by each test.
 *
 *   - the official `openai` Python client: models, chat whole and streamed
 *     (the same greedy text; include_usage), completions, a 400;
 *   - 16 clients hold 2-turn greedy conversations at once (resending the
 *     history as text): every answer equals the one the same conversation
 *     gets alone, every first answer equals `strata-cli run --chat`'s, four
 *     whole conversations equal `strata-cli chat`'s, and every follow-up
 *     reports its whole previous turn as cached tokens;
 *   - each bad input gets its status: 401 (no key, wrong key), 404, 405,
 *     400 (malformed HTTP, malformed JSON, a wrong type, invalid UTF-8, a
 *     prompt over the context), 413 (body over --max-body-mib), 503 over
 *     --max-conns;
 *   - with one slot and no queue a second request gets 503 + Retry-After;
 *     a client that hangs up mid-answer frees the slot at once (the next
 *     request is answered; /metrics counts the disconnect);
 *   - SIGTERM lets the answer in flight finish, then the server exits 0;
 *   - while the model loads, /health and the API say 503;
 *   - GET / serves the chat page, without a key;
 *   - an answer ends before its first stop string, whole and streamed.
 * The demo model is needed where answers are compared or must be slow;
 * the tiny generated llama serves the error cases. */
#include "testutil.h"
#include "test_jinja.h"

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

#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("strata-cli not built (STRATA_CLI unset; run via make test)")
#define NEED_CURL()                                                           \
    if (system("command -v curl >/dev/null 2>&1"))                            \
        TEST_SKIP("curl not installed")

typedef struct server {
    pid_t pid;
    int port;
    char dir[512], out[512], log[512];
} server;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(1 << 20);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* Start `strata-cli serve -m MODEL --port 0 ARGS` and wait for its URL. */
static void server_start(server *sv, const char *cli, const char *model, const char *args)
{
    static int n;
    const char *dir = test_tmpdir();
    snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    snprintf(sv->out, sizeof sv->out, "%s/serve-%d-%d.out", dir, (int)getpid(), n);
    snprintf(sv->log, sizeof sv->log, "%s/serve-%d-%d.log", dir, (int)getpid(), n++);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec '%s' serve -m '%s' --host 127.0.0.1 --port 0 -t 2 %s >'%s' 2>'%s'", cli, model,
             args, sv->out, sv->log);
    sv->pid = fork();
    ck_assert_int_ge(sv->pid, 0);
    if (sv->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    sv->port = 0;
    for (double t0 = now_s(); now_s() - t0 < 60;) {
        char *o = slurp(sv->out);
        const char *p = o ? strstr(o, "listening on http://127.0.0.1:") : NULL;
        if (p)
            sv->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        free(o);
        if (sv->port)
            return;
        int st;
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            char *l = slurp(sv->log);
            ck_abort_msg("serve exited before listening: %s", l ? l : "");
        }
        usleep(20000);
    }
    kill(sv->pid, SIGKILL);
    ck_abort_msg("serve printed no URL within 60 s");
}

/* SIGTERM; returns the exit status (-1 if it had to be killed). */
static int server_stop(server *sv)
{
    kill(sv->pid, SIGTERM);
    int st = 0;
    for (double t0 = now_s(); now_s() - t0 < 150; usleep(20000))
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            remove(sv->out);
            remove(sv->log);
            rmdir(sv->dir);
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    return -1;
}

/* curl ARGS against the server; returns the HTTP status, *body the body
 * (malloc'd, may be NULL). */
static int curl(const server *sv, char **body, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int curl(const server *sv, char **body, const char *fmt, ...)
{
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out = NULL;
    char host[64];
    snprintf(host, sizeof host, "http://127.0.0.1:%d", sv->port);
    /* every argument may name the host as @H */
    char cmd[4096], *d = cmd;
    d += snprintf(d, sizeof cmd, "curl -s -m 120 -w '\\n%%{http_code}' ");
    for (const char *s = args; *s && d < cmd + sizeof cmd - 80; s++) {
        if (s[0] == '@' && s[1] == 'H') {
            d += sprintf(d, "%s", host);
            s++;
        } else {
            *d++ = *s;
        }
    }
    *d = 0;
    test_run(cmd, &out);
    char *nl = out ? strrchr(out, '\n') : NULL;
    int code = nl ? atoi(nl + 1) : -1;
    if (nl)
        *nl = 0;
    if (body)
        *body = out;
    else
        free(out);
    return code;
}

static const char *tiny_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("serve-llama", 400, 21);
    return path;
}

#define CHAT "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}' "

START_TEST(serve_openai_client)
{
    NEED_CLI();
    NEED_CURL();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not present (make model)");
    if (!test_have_python("openai"))
        TEST_SKIP("python openai package missing (pip install openai)");
    server sv;
    server_start(&sv, cli, model, "--quiet");
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
    ck_assert_int_eq(curl(&sv, &out, "@H/health"), 200);
    ck_assert_str_eq(out, "{\"status\":\"ok\"}");
    free(out);
    ck_assert_int_eq(curl(&sv, &out, "@H/metrics"), 200);
    ck_assert_msg(strstr(out, "strata_requests_total{endpoint=\"/v1/chat/completions\","
                              "status=\"200\"} 2") &&
                  strstr(out, "strata_requests_total{endpoint=\"/v1/chat/completions\","
                              "status=\"400\"} 1") &&
                  strstr(out, "strata_generated_tokens_total 22") &&
                  strstr(out, "strata_time_to_first_token_seconds_count 3"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(server_stop(&sv), 0);
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
    server sv;
    server_start(&sv, cli, model, "--quiet --batch 8");
    char *out = NULL;
    double t0 = now_s();
    int rc = test_runf(&out, "python3 '%s/test/scripts/serve_client.py' conversations "
                             "http://127.0.0.1:%d/v1 %d 2 8", test_root(), sv.port, N_CLIENTS);
    double dt = now_s() - t0;
    ck_assert_msg(rc == 0, "serve_client.py conversations failed (%d): %s", rc, out);
    ck_assert_int_eq(server_stop(&sv), 0);
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

START_TEST(serve_bad_inputs)
{
    NEED_CLI();
    NEED_CURL();
    server sv;
    server_start(&sv, cli, tiny_model(), "--api-key sekrit -c 64 --max-body-mib 1 --max-conns 3");
    const char *key = "-H 'Authorization: Bearer sekrit' ";
    char *out = NULL;
    /* the key */
    ck_assert_int_eq(curl(&sv, NULL, "@H/v1/models"), 401);
    ck_assert_int_eq(curl(&sv, NULL, "-H 'Authorization: Bearer sekriT' @H/v1/models"), 401);
    ck_assert_int_eq(curl(&sv, NULL, "%s @H/v1/models", key), 200);
    ck_assert_int_eq(curl(&sv, NULL, "@H/health"), 200);
    ck_assert_int_eq(curl(&sv, NULL, "%s " CHAT " @H/v1/chat/completions", key), 200);
    /* the chat page needs no key (its requests carry it) */
    ck_assert_int_eq(curl(&sv, &out, "@H/"), 200);
    ck_assert_msg(strstr(out, "<title>strata chat</title>") && strstr(out, "/v1/chat/completions"),
                  "%s", out);
    free(out);
    if (system("command -v node >/dev/null 2>&1") == 0) {
        /* its script parses (node --check on what lies between the tags) */
        char *r = NULL;
        int rc = test_runf(&r, "curl -s http://127.0.0.1:%d/ | sed -n '/<script>/,/<\\/script>/p' "
                               "| sed '1d;$d' > '%s/page.js' && node --check '%s/page.js' 2>&1; "
                               "st=$?; rm -f '%s/page.js'; exit $st",
                           sv.port, sv.dir, sv.dir, sv.dir);
        ck_assert_msg(rc == 0, "the page's script does not parse: %s", r);
        free(r);
    }
    /* HTTP/1.0 asking for keep-alive gets a close-delimited stream that
     * does end (timeout 10 s would say it did not) */
    char *r10 = NULL;
    int rc10 = test_runf(&r10, "curl -s -m 10 -0 -N -H 'Connection: keep-alive' %s -d '{\"prompt\":"
                               "\"x\",\"max_tokens\":3,\"stream\":true}' "
                               "http://127.0.0.1:%d/v1/completions", key, sv.port);
    ck_assert_msg(rc10 == 0 && strstr(r10, "data: [DONE]"), "HTTP/1.0 stream: %d %s", rc10, r10);
    free(r10);
    /* paths and methods */
    ck_assert_int_eq(curl(&sv, NULL, "%s @H/v2/nothing", key), 404);
    ck_assert_int_eq(curl(&sv, NULL, "%s @H/v1/chat/completions", key), 405);
    /* JSON: malformed, a wrong type, invalid UTF-8, missing field */
    ck_assert_int_eq(curl(&sv, &out, "%s -d '{\"messages\":[' @H/v1/chat/completions", key), 400);
    ck_assert_msg(strstr(out, "not valid JSON") && strstr(out, "invalid_request_error"), "%s",
                  out);
    free(out);
    ck_assert_int_eq(curl(&sv, &out, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                     "\"max_tokens\":\"4\"}' @H/v1/chat/completions", key), 400);
    ck_assert_msg(strstr(out, "\"param\":\"max_tokens\""), "%s", out);
    free(out);
    ck_assert_int_eq(curl(&sv, &out, "%s --data-binary \"$(printf '{\"prompt\":\"a\\377b\"}')\" "
                                     "@H/v1/completions", key), 400);
    ck_assert_msg(strstr(out, "invalid UTF-8"), "%s", out);
    free(out);
    ck_assert_int_eq(curl(&sv, &out, "%s -d '{\"max_tokens\":4}' @H/v1/chat/completions", key),
                     400);
    ck_assert_msg(strstr(out, "'messages' is required"), "%s", out);
    free(out);
    /* a prompt over the 64-token context */
    char big[1200] = "-d '{\"prompt\":\"";
    for (int i = 0; i < 100; i++)
        strcat(big, "one two ");
    strcat(big, "\"}'");
    ck_assert_int_eq(curl(&sv, &out, "%s %s @H/v1/completions", key, big), 400);
    ck_assert_msg(strstr(out, "context_length_exceeded"), "%s", out);
    free(out);
    /* a body over --max-body-mib 1 */
    char *raw = NULL;
    /* with Expect: 100-continue (curl's default for big bodies) and without:
     * the 413 must reach a client that is still sending */
    const char *expect[] = {"", "-H 'Expect:'"};
    for (int i = 0; i < 2; i++) {
        test_runf(&raw, "head -c 3000000 /dev/zero | curl -s -o /dev/null -w '%%{http_code}' %s "
                        "%s --data-binary @- http://127.0.0.1:%d/v1/completions", key, expect[i],
                  sv.port);
        ck_assert_msg(!strcmp(raw, "413"), "body over the limit (%s): %s", expect[i], raw);
        free(raw);
    }
    /* malformed HTTP, by hand */
    test_runf(&raw, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; printf \"GET /health HTTP/1.1\\r\\n"
                    "Host: x\\r\\nBad Field: y\\r\\n\\r\\n\" >&3; head -c 12 <&3'", sv.port);
    ck_assert_msg(!strcmp(raw, "HTTP/1.1 400"), "malformed header: '%s'", raw);
    free(raw);
    /* the metrics saw all of it, and the server still answers */
    ck_assert_int_eq(curl(&sv, &out, "%s @H/metrics", key), 200);
    ck_assert_msg(strstr(out, "status=\"401\"} 2") && strstr(out, "status=\"404\"} 1") &&
                  strstr(out, "status=\"413\"}"), "%s", out);
    free(out);
    ck_assert_int_eq(curl(&sv, NULL, "%s " CHAT " @H/v1/chat/completions", key), 200);
    /* --max-conns 3: three idle connections held open (while the file
     * `flag` exists, at most 30 s: no fixed span for a loaded box to
     * outrun), the fourth gets 503; once they close, 200 again */
    char flag[600], hold[1600];
    snprintf(flag, sizeof flag, "%s/hold-conns", sv.dir);
    FILE *ff = fopen(flag, "w");
    ck_assert_ptr_nonnull(ff);
    fclose(ff);
    snprintf(hold, sizeof hold, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d 4<>/dev/tcp/127.0.0.1/%d "
             "5<>/dev/tcp/127.0.0.1/%d; i=0; while [ -e \"%s\" ] && [ $i -lt 300 ]; do "
             "sleep 0.1; i=$((i+1)); done' &", sv.port, sv.port, sv.port, flag);
    ck_assert_int_eq(system(hold), 0);
    int st = 0;
    out = NULL;
    for (double t0 = now_s(); st != 503 && now_s() - t0 < 20; usleep(100000)) {
        free(out);
        st = curl(&sv, &out, "-i @H/health");
    }
    remove(flag);
    ck_assert_msg(st == 503 && strstr(out, "too many connections") &&
                  strstr(out, "Retry-After: 1"), "%d: %s", st, out);
    free(out);
    out = NULL;
    for (double t0 = now_s(); st != 200 && now_s() - t0 < 10; usleep(100000))
        st = curl(&sv, NULL, "@H/health");
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(server_stop(&sv), 0);
}
END_TEST

/* With one slot and no queue: busy -> 503; a client that leaves frees the
 * slot; SIGTERM drains. */
START_TEST(serve_queue_disconnect_drain)
{
    NEED_CLI();
    NEED_CURL();
    const char *model = test_demo_model();
    if (!model)
        TEST_SKIP("demo model not present (make model): the answers must take a while");
    server sv;
    server_start(&sv, cli, model, "--batch 1 --max-queue 0 --quiet --drain-seconds 120");
    char cmd[1024];
    const char *dir = test_tmpdir();
    /* a long streamed answer, whose client leaves when the test kills it
     * (its pid in long.pid; -m 120 only bounds a test that died) */
    char pidf[600];
    snprintf(pidf, sizeof pidf, "%s/long.pid", dir);
    snprintf(cmd, sizeof cmd, "curl -sN -m 120 -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":"
             "3000,\"stream\":true}' http://127.0.0.1:%d/v1/completions >'%s/long.out' 2>&1 & "
             "echo $! >'%s'", sv.port, dir, pidf);
    ck_assert_int_eq(system(cmd), 0);
    char *out = NULL;
    int busy = 0;
    for (double t0 = now_s(); !busy && now_s() - t0 < 20; usleep(50000)) {
        curl(&sv, &out, "@H/metrics");
        busy = strstr(out, "strata_requests_in_flight 1") != NULL;
        free(out);
    }
    char *pid_s = slurp(pidf);
    const int long_pid = pid_s ? atoi(pid_s) : 0;
    free(pid_s);
    remove(pidf);
    ck_assert_msg(long_pid > 0, "no pid for the long request");
    if (!busy)
        kill(long_pid, SIGKILL);
    ck_assert_msg(busy, "the long request never ran");
    int st503 = curl(&sv, &out, "-i -d '{\"prompt\":\"x\",\"max_tokens\":2}' @H/v1/completions");
    kill(long_pid, SIGTERM); /* the client leaves; its slot frees within a step or two */
    ck_assert_int_eq(st503, 503);
    ck_assert_msg(strstr(out, "Retry-After: 1") && strstr(out, "queue_full"), "%s", out);
    free(out);
    double t_free = 0;
    for (double t0 = now_s(); now_s() - t0 < 10; usleep(50000)) {
        curl(&sv, &out, "@H/metrics");
        int done = strstr(out, "strata_requests_in_flight 0") != NULL;
        free(out);
        if (done) {
            t_free = now_s() - t0;
            break;
        }
    }
    ck_assert_msg(t_free > 0, "the slot stayed busy after the client left");
    ck_assert_int_eq(curl(&sv, &out, "@H/metrics"), 200);
    ck_assert_msg(strstr(out, "strata_client_disconnects_total 1"), "%s", out);
    free(out);
    /* SIGTERM while an answer runs: it is finished, then exit 0 */
    snprintf(cmd, sizeof cmd, "curl -s -m 60 -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":"
             "24}' http://127.0.0.1:%d/v1/completions >'%s/drain.out' 2>&1 &", sv.port, dir);
    ck_assert_int_eq(system(cmd), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/drain.out", dir);
    /* SIGTERM once the server holds the answer (a fixed pause raced the
     * background curl on a loaded box); an answer that already ended is
     * fine too: the check below reads it either way */
    int running = 0;
    for (double t0 = now_s(); !running && now_s() - t0 < 20; usleep(20000)) {
        curl(&sv, &out, "@H/metrics");
        running = strstr(out, "strata_requests_in_flight 1") != NULL;
        free(out);
        char *got = slurp(path);
        running |= got && strstr(got, "}}") != NULL;
        free(got);
    }
    ck_assert_msg(running, "the answer to drain never started");
    ck_assert_int_eq(server_stop(&sv), 0);
    for (double t0 = now_s(); now_s() - t0 < 30; usleep(50000)) {
        out = slurp(path);
        if (out && strstr(out, "}}"))
            break;
        free(out);
        out = NULL;
    }
    ck_assert_msg(out && strstr(out, "\"completion_tokens\":24"), "drained answer: %s",
                  out ? out : "(none)");
    free(out);
    remove(path);
    snprintf(path, sizeof path, "%s/long.out", dir);
    remove(path);
    rmdir(dir);
}
END_TEST

/* Start serve without waiting for it to be ready (env: assignments for
 * the shell, or ""); returns its pid, fills the announced port. */
static pid_t spawn_loading(const char *cli, const char *env, const char *model, const char *out,
                           const char *log, int *port)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s exec '%s' serve -m '%s' --port 0 -t 1 >'%s' 2>'%s'", env, cli,
             model, out, log);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    *port = 0;
    for (double t0 = now_s(); !*port && now_s() - t0 < 20; usleep(20000)) {
        char *l = slurp(log);
        const char *p = l ? strstr(l, "http://127.0.0.1:") : NULL;
        if (p)
            *port = atoi(p + strlen("http://127.0.0.1:"));
        free(l);
    }
    ck_assert_msg(*port > 0, "no port announced while loading");
    return pid;
}

static void check_loading(const server *sv)
{
    char *out = NULL;
    ck_assert_int_eq(curl(sv, &out, "@H/health"), 503);
    ck_assert_str_eq(out, "{\"status\":\"loading\"}");
    free(out);
    ck_assert_int_eq(curl(sv, &out, CHAT "@H/v1/chat/completions"), 503);
    ck_assert_msg(strstr(out, "still loading"), "%s", out);
    free(out);
}

/* The socket is open while the model loads: /health and the API say 503,
 * and /health says 200 once it is ready.  The load is held by strata-cli's
 * test hook (STRATA_TEST_PAUSE_IN_LOAD: a file it creates and waits on
 * until it is removed) where the binary has it; without the hook, by a
 * FIFO given as the model (the open waits for a writer; then a few bytes
 * that are no GGUF end it with exit 1). */
START_TEST(serve_health_while_loading)
{
    NEED_CLI();
    NEED_CURL();
    char pause[400], fifo[400], out[400], log[400], env[500];
    const char *dir = test_tmpdir();
    snprintf(pause, sizeof pause, "%s/pause", dir);
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    snprintf(out, sizeof out, "%s/loading.out", dir);
    snprintf(log, sizeof log, "%s/loading.log", dir);
    snprintf(env, sizeof env, "STRATA_TEST_PAUSE_IN_LOAD='%s'", pause);
    int port;
    pid_t pid = spawn_loading(cli, env, tiny_model(), out, log, &port);
    server sv = {.pid = pid, .port = port};
    snprintf(sv.dir, sizeof sv.dir, "%s", dir);
    snprintf(sv.out, sizeof sv.out, "%s", out);
    snprintf(sv.log, sizeof sv.log, "%s", log);
    int held = 0, ready = 0;
    for (double t0 = now_s(); !held && !ready && now_s() - t0 < 10; usleep(20000)) {
        held = access(pause, F_OK) == 0;
        char *o = slurp(out);
        ready = o && strstr(o, "listening on") != NULL;
        free(o);
    }
    if (held) {
        check_loading(&sv);
        remove(pause); /* the load goes on */
        int st = 0;
        for (double t0 = now_s(); st != 200 && now_s() - t0 < 20; usleep(20000))
            st = curl(&sv, NULL, "@H/health");
        ck_assert_int_eq(st, 200);
        ck_assert_int_eq(server_stop(&sv), 0);
        return;
    }
    ck_assert_msg(ready, "serve neither paused nor got ready");
    ck_assert_int_eq(server_stop(&sv), 0);
    /* no hook in this binary: the FIFO */
    dir = test_tmpdir();
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    snprintf(out, sizeof out, "%s/loading.out", dir);
    snprintf(log, sizeof log, "%s/loading.log", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    pid = spawn_loading(cli, "", fifo, out, log, &port);
    sv.pid = pid;
    sv.port = port;
    check_loading(&sv);
    /* the loader may give up and close its end before this write: no
     * SIGPIPE for that (the test runs in its own process) */
    signal(SIGPIPE, SIG_IGN);
    FILE *f = fopen(fifo, "w"); /* the loader's open returns; EOF follows */
    ck_assert_ptr_nonnull(f);
    fputs("not a gguf", f);
    fclose(f);
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    remove(fifo);
    remove(out);
    remove(log);
    rmdir(dir);
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
    server sv;
    server_start(&sv, cli, tiny_model(), "--quiet");
    char *out = NULL, fin[32];
    ck_assert_int_eq(curl(&sv, &out, "-N -d '{\"prompt\":\"hello\",\"max_tokens\":24,"
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
        ck_assert_int_eq(curl(&sv, &out, "-N --data-binary @'%s' @H/v1/completions", body), 200);
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
    ck_assert_int_eq(server_stop(&sv), 0);
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
        tiny_model(), "{% for m in messages %}{% if m.content=='boom' %}{{raise_exception('boom!')}}"
        "{% endif %}<|im_start|>{{m.role}}\n{{m.content}}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n", "raising");
    server sv;
    server_start(&sv, cli, model, "-c 64");
    char *out = NULL;
    ck_assert_int_eq(curl(&sv, &out, CHAT " @H/v1/chat/completions"), 200);
    free(out);
    ck_assert_int_eq(curl(&sv, &out, "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"boom\"}]}' "
                                     "@H/v1/chat/completions"), 400);
    ck_assert_msg(strstr(out, "raise_exception: boom!") && strstr(out, "line 1"), "%s", out);
    free(out);
    ck_assert_int_eq(curl(&sv, NULL, CHAT " @H/v1/chat/completions"), 200);
    ck_assert_int_eq(server_stop(&sv), 0);
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
    tcase_add_test(tc, serve_health_while_loading);
    tcase_add_test(tc, serve_bad_inputs);
    tcase_add_test(tc, serve_model_template);
    suite_add_tcase(s, tc);
    tc = tcase_create("serve_demo");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, serve_queue_disconnect_drain);
    tcase_add_test(tc, serve_openai_client);
    tcase_add_test(tc, serve_conversations_equal_run);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(serve_suite)
