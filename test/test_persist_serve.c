/* test_persist_serve.c: a server restart with --conversation-save (suite
 * persist_serve).  Two `strata-cli serve` processes over one directory: the
 * second finds the first's conversation when a client resends its history
 * (cached_tokens covers at least the first turn's prompt), and answers as a
 * server that never saved anything.  The rest of the saving is suite
 * persist (test_persist.c). */
#include "testutil.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serve/json.h"

typedef struct srv {
    pid_t pid;
    int port;
    char out[600], log[600];
} srv;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* `strata-cli serve -m MODEL --port 0 ARGS`, waiting for its URL. */
static void srv_start(srv *sv, const char *cli, const char *model, const char *dir,
                      const char *args)
{
    static int n;
    snprintf(sv->out, sizeof sv->out, "%s/serve-%d.out", dir, n);
    snprintf(sv->log, sizeof sv->log, "%s/serve-%d.log", dir, n++);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec '%s' serve -m '%s' --host 127.0.0.1 --port 0 -t 1 --batch 1 "
             "--temp 0 %s >'%s' 2>'%s'", cli, model, args, sv->out, sv->log);
    sv->pid = fork();
    ck_assert_int_ge(sv->pid, 0);
    if (sv->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const char *key = "listening on http://127.0.0.1:";
    for (int i = 0; i < 3000; i++) {
        char *o = slurp(sv->out);
        const char *p = o ? strstr(o, key) : NULL;
        sv->port = p ? atoi(p + strlen(key)) : 0;
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

/* SIGTERM and wait: the exit status. */
static int srv_stop(srv *sv)
{
    kill(sv->pid, SIGTERM);
    int st = 0;
    waitpid(sv->pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* POST body (a file) to /v1/chat/completions: the answer's text and the
 * cached tokens of its usage. */
static char *ask(const srv *sv, const char *body_file, int *cached, int *prompt)
{
    char *out = NULL;
    int rc = test_runf(&out, "curl -s -m 120 -H 'Content-Type: application/json' -d @'%s' "
                             "http://127.0.0.1:%d/v1/chat/completions", body_file, sv->port);
    ck_assert_msg(rc == 0 && out, "curl failed (%d)", rc);
    json *v = NULL;
    strata_error err = {0};
    ck_assert_msg(json_parse(out, strlen(out), &v, &err) == 0, "%s: %s", err.msg, out);
    const json *ch = json_get(v, "choices"), *u = json_get(v, "usage");
    ck_assert_msg(ch && ch->n == 1 && u, "no choices/usage: %s", out);
    const json *c = json_get(json_get(ch->items[0], "message"), "content");
    ck_assert_ptr_nonnull(c);
    char *text = malloc(c->len + 1);
    memcpy(text, c->str, c->len + 1);
    *cached = (int)json_get(json_get(u, "prompt_tokens_details"), "cached_tokens")->num;
    *prompt = (int)json_get(u, "prompt_tokens")->num;
    json_free(v);
    free(out);
    return text;
}

static void write_body(const char *path, const char *answer)
{
    jbuf b = {0};
    jbuf_puts(&b, "{\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"hi\"}");
    if (answer) {
        jbuf_puts(&b, ",{\"role\":\"assistant\",\"content\":");
        jbuf_cstr(&b, answer);
        jbuf_puts(&b, "},{\"role\":\"user\",\"content\":\"and more\"}");
    }
    jbuf_puts(&b, "]}");
    ck_assert(!b.oom);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(b.p, 1, b.len, f);
    fclose(f);
    jbuf_free(&b);
}

static int count_saved(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l > 4 && !strcmp(de->d_name + l - 4, ".skv");
    }
    if (d)
        closedir(d);
    return n;
}

START_TEST(persist_serve_restart)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    if (system("command -v curl >/dev/null 2>&1"))
        TEST_SKIP("tool", "curl not installed");
    const char *model = test_tiny_llama("serve-llama", 400, 21);
    const char *dir = test_tmpdir();
    char save[600], b1[600], b2[600], args[700];
    snprintf(save, sizeof save, "%s/save", dir);
    snprintf(b1, sizeof b1, "%s/turn1.json", dir);
    snprintf(b2, sizeof b2, "%s/turn2.json", dir);
    snprintf(args, sizeof args, "--conversation-save '%s'", save);
    write_body(b1, NULL);

    srv sv;
    int cached, p1, p2;
    srv_start(&sv, cli, model, dir, args);
    char *a1 = ask(&sv, b1, &cached, &p1);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(srv_stop(&sv), 0);
    ck_assert_int_eq(count_saved(save), 1);

    /* the restarted server: the client resends its history as text */
    write_body(b2, a1);
    srv_start(&sv, cli, model, dir, args);
    char *a2 = ask(&sv, b2, &cached, &p2);
    ck_assert_int_eq(srv_stop(&sv), 0);
    ck_assert_msg(cached >= p1 && cached < p2, "turn 2 of %d tokens: %d cached, want >= %d (turn "
                  "1's prompt)", p2, cached, p1);
    /* a server that never saved anything answers the same */
    int cached0, p0;
    srv_start(&sv, cli, model, dir, "");
    char *want = ask(&sv, b2, &cached0, &p0);
    ck_assert_int_eq(srv_stop(&sv), 0);
    ck_assert_int_eq(cached0, 0);
    ck_assert_int_eq(p0, p2);
    ck_assert_str_eq(a2, want);
    fprintf(stderr, "persist_serve_restart: turn 2 of %d tokens, %d restored after the restart\n",
            p2, cached);
    free(a1);
    free(a2);
    free(want);
}
END_TEST

static Suite *persist_serve_suite(void)
{
    Suite *s = suite_create("persist_serve");
    TCase *tc = tcase_create("persist_serve");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, persist_serve_restart);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(persist_serve_suite)
