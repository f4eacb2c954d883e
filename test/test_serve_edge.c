/* test_serve_edge.c: suite "serve_edge": the edges of `strata-cli serve`,
 * on 127.0.0.1 on a free port, started and stopped by each test
 * (test_server.h).
 *
 *   - each bad input gets its status: 401 (no key, wrong key), 404, 405,
 *     400 (malformed HTTP, malformed JSON, a wrong type, invalid UTF-8, a
 *     prompt over the context), 413 (body over --max-body-mib), 503 over
 *     --max-conns; GET / serves the chat page without a key;
 *   - with one slot and no queue a second request gets 503 + Retry-After;
 *     a client that hangs up mid-answer frees the slot at once (/metrics
 *     counts the disconnect);
 *   - SIGTERM lets the answer in flight finish, then the server exits 0;
 *   - while the model loads, /health and the API say 503.
 * Every wait here is for a condition, with a generous limit, not a fixed
 * span: a loaded box is slow.  The demo model is needed where an answer must
 * take a while; the tiny generated llama serves the rest. */
#include "testutil.h"
#include "test_server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(serve_bad_inputs)
{
    NEED_CLI();
    NEED_CURL();
    test_server sv;
    test_server_start(&sv, cli, test_server_model(), NULL, "-t 2 --api-key sekrit -c 64 --max-body-mib 1 --max-conns 3");
    const char *key = "-H 'Authorization: Bearer sekrit' ";
    char *out = NULL;
    /* the key */
    ck_assert_int_eq(test_curl(&sv, NULL, "@H/v1/models"), 401);
    ck_assert_int_eq(test_curl(&sv, NULL, "-H 'Authorization: Bearer sekriT' @H/v1/models"), 401);
    ck_assert_int_eq(test_curl(&sv, NULL, "%s @H/v1/models", key), 200);
    ck_assert_int_eq(test_curl(&sv, NULL, "@H/health"), 200);
    ck_assert_int_eq(test_curl(&sv, NULL, "%s " CHAT " @H/v1/chat/completions", key), 200);
    /* the chat page needs no key (its requests carry it) */
    ck_assert_int_eq(test_curl(&sv, &out, "@H/"), 200);
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
    ck_assert_int_eq(test_curl(&sv, NULL, "%s @H/v2/nothing", key), 404);
    ck_assert_int_eq(test_curl(&sv, NULL, "%s @H/v1/chat/completions", key), 405);
    /* JSON: malformed, a wrong type, invalid UTF-8, missing field */
    ck_assert_int_eq(test_curl(&sv, &out, "%s -d '{\"messages\":[' @H/v1/chat/completions", key), 400);
    ck_assert_msg(strstr(out, "not valid JSON") && strstr(out, "invalid_request_error"), "%s",
                  out);
    free(out);
    ck_assert_int_eq(test_curl(&sv, &out, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                     "\"max_tokens\":\"4\"}' @H/v1/chat/completions", key), 400);
    ck_assert_msg(strstr(out, "\"param\":\"max_tokens\""), "%s", out);
    free(out);
    ck_assert_int_eq(test_curl(&sv, &out, "%s --data-binary \"$(printf '{\"prompt\":\"a\\377b\"}')\" "
                                     "@H/v1/completions", key), 400);
    ck_assert_msg(strstr(out, "invalid UTF-8"), "%s", out);
    free(out);
    ck_assert_int_eq(test_curl(&sv, &out, "%s -d '{\"max_tokens\":4}' @H/v1/chat/completions", key),
                     400);
    ck_assert_msg(strstr(out, "'messages' is required"), "%s", out);
    free(out);
    /* a prompt over the 64-token context */
    char big[1200] = "-d '{\"prompt\":\"";
    for (int i = 0; i < 100; i++)
        strcat(big, "one two ");
    strcat(big, "\"}'");
    ck_assert_int_eq(test_curl(&sv, &out, "%s %s @H/v1/completions", key, big), 400);
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
    ck_assert_int_eq(test_curl(&sv, &out, "%s @H/metrics", key), 200);
    ck_assert_msg(strstr(out, "status=\"401\"} 2") && strstr(out, "status=\"404\"} 1") &&
                  strstr(out, "status=\"413\"}"), "%s", out);
    free(out);
    ck_assert_int_eq(test_curl(&sv, NULL, "%s " CHAT " @H/v1/chat/completions", key), 200);
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
    for (double t0 = test_now(); st != 503 && test_now() - t0 < 20; usleep(100000)) {
        free(out);
        st = test_curl(&sv, &out, "-i @H/health");
    }
    remove(flag);
    ck_assert_msg(st == 503 && strstr(out, "too many connections") &&
                  strstr(out, "Retry-After: 1"), "%d: %s", st, out);
    free(out);
    out = NULL;
    for (double t0 = test_now(); st != 200 && test_now() - t0 < 10; usleep(100000))
        st = test_curl(&sv, NULL, "@H/health");
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(test_server_stop(&sv), 0);
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
    test_server sv;
    test_server_start(&sv, cli, model, NULL, "-t 2 --batch 1 --max-queue 0 --quiet --drain-seconds 120");
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
    for (double t0 = test_now(); !busy && test_now() - t0 < 20; usleep(50000)) {
        test_curl(&sv, &out, "@H/metrics");
        busy = strstr(out, "strata_requests_in_flight 1") != NULL;
        free(out);
    }
    char *pid_s = test_slurp(pidf, NULL);
    const int long_pid = pid_s ? atoi(pid_s) : 0;
    free(pid_s);
    remove(pidf);
    ck_assert_msg(long_pid > 0, "no pid for the long request");
    if (!busy)
        kill(long_pid, SIGKILL);
    ck_assert_msg(busy, "the long request never ran");
    int st503 = test_curl(&sv, &out, "-i -d '{\"prompt\":\"x\",\"max_tokens\":2}' @H/v1/completions");
    kill(long_pid, SIGTERM); /* the client leaves; its slot frees within a step or two */
    ck_assert_int_eq(st503, 503);
    ck_assert_msg(strstr(out, "Retry-After: 1") && strstr(out, "queue_full"), "%s", out);
    free(out);
    double t_free = 0;
    for (double t0 = test_now(); test_now() - t0 < 10; usleep(50000)) {
        test_curl(&sv, &out, "@H/metrics");
        int done = strstr(out, "strata_requests_in_flight 0") != NULL;
        free(out);
        if (done) {
            t_free = test_now() - t0;
            break;
        }
    }
    ck_assert_msg(t_free > 0, "the slot stayed busy after the client left");
    ck_assert_int_eq(test_curl(&sv, &out, "@H/metrics"), 200);
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
    for (double t0 = test_now(); !running && test_now() - t0 < 20; usleep(20000)) {
        test_curl(&sv, &out, "@H/metrics");
        running = strstr(out, "strata_requests_in_flight 1") != NULL;
        free(out);
        char *got = test_slurp(path, NULL);
        running |= got && strstr(got, "}}") != NULL;
        free(got);
    }
    ck_assert_msg(running, "the answer to drain never started");
    ck_assert_int_eq(test_server_stop(&sv), 0);
    for (double t0 = test_now(); test_now() - t0 < 30; usleep(50000)) {
        out = test_slurp(path, NULL);
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
    for (double t0 = test_now(); !*port && test_now() - t0 < 20; usleep(20000)) {
        char *l = test_slurp(log, NULL);
        const char *p = l ? strstr(l, "http://127.0.0.1:") : NULL;
        if (p)
            *port = atoi(p + strlen("http://127.0.0.1:"));
        free(l);
    }
    ck_assert_msg(*port > 0, "no port announced while loading");
    return pid;
}

static void check_loading(const test_server *sv)
{
    char *out = NULL;
    ck_assert_int_eq(test_curl(sv, &out, "@H/health"), 503);
    ck_assert_str_eq(out, "{\"status\":\"loading\"}");
    free(out);
    ck_assert_int_eq(test_curl(sv, &out, CHAT "@H/v1/chat/completions"), 503);
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
    pid_t pid = spawn_loading(cli, env, test_server_model(), out, log, &port);
    test_server sv = {.pid = pid, .port = port};
    snprintf(sv.dir, sizeof sv.dir, "%s", dir);
    snprintf(sv.out, sizeof sv.out, "%s", out);
    snprintf(sv.log, sizeof sv.log, "%s", log);
    int held = 0, ready = 0;
    for (double t0 = test_now(); !held && !ready && test_now() - t0 < 10; usleep(20000)) {
        held = access(pause, F_OK) == 0;
        char *o = test_slurp(out, NULL);
        ready = o && strstr(o, "listening on") != NULL;
        free(o);
    }
    if (held) {
        check_loading(&sv);
        remove(pause); /* the load goes on */
        int st = 0;
        for (double t0 = test_now(); st != 200 && test_now() - t0 < 20; usleep(20000))
            st = test_curl(&sv, NULL, "@H/health");
        ck_assert_int_eq(st, 200);
        ck_assert_int_eq(test_server_stop(&sv), 0);
        return;
    }
    ck_assert_msg(ready, "serve neither paused nor got ready");
    ck_assert_int_eq(test_server_stop(&sv), 0);
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

static Suite *serve_edge_suite(void)
{
    Suite *s = suite_create("serve_edge");
    /* the case names are suite serve's: CK_RUN_CASE=serve_errors runs the
     * quick ones of both */
    TCase *tc = tcase_create("serve_errors");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, serve_health_while_loading);
    tcase_add_test(tc, serve_bad_inputs);
    suite_add_tcase(s, tc);
    tc = tcase_create("serve_demo");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, serve_queue_disconnect_drain);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(serve_edge_suite)
