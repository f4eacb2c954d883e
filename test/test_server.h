/* test_server.h: what the suites that drive `strata-cli serve` share
 * (test_serve.c, test_serve_edge.c, test_serve_page.c,
 * test_persist_serve.c): a server child on a free port of 127.0.0.1, its
 * stop, and two small helpers for files and time. */
#ifndef STRATA_TEST_SERVER_H
#define STRATA_TEST_SERVER_H

#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>

#include "testutil.h"

/* What a serve test needs before it starts: strata-cli (as `cli`), curl. */
#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("strata-cli not built (STRATA_CLI unset; run via make test)")
#define NEED_CURL()                                                           \
    if (system("command -v curl >/dev/null 2>&1"))                            \
        TEST_SKIP("curl not installed")

/* A chat request body of one short message, for test_curl's arguments. */
#define CHAT "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}' "

typedef struct test_server {
    pid_t pid;
    int port;
    char out[600], log[600]; /* its stdout (where it prints its URL) and stderr */
    char dir[512];           /* a directory of its own (DIR NULL), else "" */
} test_server;

/* Start `CLI serve -m MODEL --host 127.0.0.1 --port 0 ARGS` with its output
 * in DIR/serve-N.out and .log (DIR NULL: a new test_tmpdir(), which the stop
 * removes with the two files), and wait up to 60 s for the URL it prints.
 * The child gets SIGTERM if the test's process ends first (a failed check
 * ends it at once). A server that exits or stays silent fails the test. */
void test_server_start(test_server *sv, const char *cli, const char *model, const char *dir,
                       const char *args);

/* Send sig and wait, up to 150 s (then SIGKILL): the exit status, or
 * -signal when a signal ended it. */
int test_server_stop_sig(test_server *sv, int sig);

/* test_server_stop_sig(sv, SIGTERM): the server finishes what it holds. */
int test_server_stop(test_server *sv);

/* curl ARGS against the server (every argument may name its address as
 * @H): the HTTP status, *body the body (malloc'd; body may be NULL). */
int test_curl(const test_server *sv, char **body, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The small generated llama that serves the error cases (made once). */
const char *test_server_model(void);

/* A file's bytes (at most 1 MiB) with a 0 after them, *len their count (len
 * may be NULL); NULL if it cannot be opened. */
char *test_slurp(const char *path, size_t *len);

/* Seconds on the monotonic clock. */
double test_now(void);

#endif
