/* test_server.c: the serve suites' server child (test_server.h). */
#include "test_server.h"

#include "testutil.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(1 << 20);
    size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (b)
        b[n] = 0;
    if (len)
        *len = n;
    return b;
}

void test_server_start(test_server *sv, const char *cli, const char *model, const char *dir,
                       const char *args)
{
    static int n;
    sv->dir[0] = 0;
    if (!dir) {
        dir = test_tmpdir();
        snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    }
    snprintf(sv->out, sizeof sv->out, "%s/serve-%d-%d.out", dir, (int)getpid(), n);
    snprintf(sv->log, sizeof sv->log, "%s/serve-%d-%d.log", dir, (int)getpid(), n++);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec '%s' serve -m '%s' --host 127.0.0.1 --port 0 %s >'%s' 2>'%s'",
             cli, model, args, sv->out, sv->log);
    pid_t parent = getpid();
    sv->pid = fork();
    ck_assert_int_ge(sv->pid, 0);
    if (sv->pid == 0) {
        /* the signal survives the exec: no server outlives its test */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const char *tag = "listening on http://127.0.0.1:";
    sv->port = 0;
    for (double t0 = test_now(); test_now() - t0 < 60; usleep(20000)) {
        char *o = test_slurp(sv->out, NULL);
        const char *p = o ? strstr(o, tag) : NULL;
        sv->port = p ? atoi(p + strlen(tag)) : 0;
        free(o);
        if (sv->port)
            return;
        int st;
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            char *l = test_slurp(sv->log, NULL);
            ck_abort_msg("serve exited before listening: %s", l ? l : "");
        }
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, NULL, 0);
    ck_abort_msg("serve printed no URL within 60 s");
}

int test_server_stop_sig(test_server *sv, int sig)
{
    kill(sv->pid, sig);
    int st = 0;
    for (double t0 = test_now(); test_now() - t0 < 150; usleep(20000))
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            if (sv->dir[0]) {
                remove(sv->out);
                remove(sv->log);
                rmdir(sv->dir);
            }
            return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
        }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    return -1000;
}

int test_server_stop(test_server *sv) { return test_server_stop_sig(sv, SIGTERM); }

int test_curl(const test_server *sv, char **body, const char *fmt, ...)
{
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char host[64];
    snprintf(host, sizeof host, "http://127.0.0.1:%d", sv->port);
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
    char *out = NULL;
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

const char *test_server_model(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("serve-llama", 400, 21);
    return path;
}
