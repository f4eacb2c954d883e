/* cmd_serve.c: strata-cli serve — the OpenAI-compatible HTTP server
 * (serve/server.h, doc/server.md).
 *
 * The socket is bound before the model loads, so /health says 503 while
 * it does; the URL is printed once the model is ready.  SIGINT and
 * SIGTERM are taken by sigwait on the main thread (blocked everywhere
 * else, the threads inherit the mask): the server stops taking requests,
 * lets the answers in flight finish for at most --drain-seconds, cancels
 * the rest, and the program exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/frontend.h"
#include "cli/options.h"
#include "cli/signals.h"
#include "serve/server.h"

#define SERVE_SLOTS 4      /* batch slots unless --batch says otherwise */
#define SERVE_CACHE_MIB 256 /* conversation cache, as in chat */
#define SERVE_USES                                                                \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_VERBOSE | CLI_USE_SLOTS |     \
     CLI_USE_GROUPS | CLI_USE_SAMPLING | CLI_USE_PREDICT | CLI_USE_CHAT | CLI_USE_CACHE | \
     CLI_USE_SAVE)

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli serve [-m MODEL] [--host ADDR] [--port N] [--api-key KEY]\n"
               "                        [--max-queue N] [--max-body-mib N] [options]\n\n"
               "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST\n"
               "/v1/completions, GET /v1/models, GET /health, GET /metrics (doc/server.md).\n\n"
               "server:\n"
               "  --host ADDR             address to listen on (default 127.0.0.1: this machine\n"
               "                          only; 0.0.0.0 opens it to the network)\n"
               "  --port N                TCP port (default 8080; 0: any free one, printed)\n"
               "  --api-key KEY           require \"Authorization: Bearer KEY\" (also read from\n"
               "                          STRATA_API_KEY); default: no key\n"
               "  --max-queue N           requests waiting beyond the slots (default 64);\n"
               "                          more get 503 with Retry-After\n"
               "  --max-body-mib N        largest request body (default 16); more: 413\n"
               "  --max-conns N           open connections (default 256)\n"
               "  --timeout S             seconds a request may take to arrive, a kept-alive\n"
               "                          connection may idle, a write may wait (default 30)\n"
               "  --drain-seconds S       on SIGINT/SIGTERM, how long answers in flight may\n"
               "                          still run (default 10)\n"
               "  --model-id NAME         the model's name in /v1/models (default: the file's)\n"
               "  --quiet                 no log line per request\n\n"
               "Slots default to %d (--batch), the conversation cache to %d MiB\n"
               "(--conversation-cache-mib); sampling options set what requests leave out.\n\n",
            SERVE_SLOTS, SERVE_CACHE_MIB);
    cli_opts_help(f, SERVE_USES);
}

static int num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end || !(d >= lo && d <= hi)) {
        fprintf(stderr, "strata-cli serve: %s '%s': expected a number in [%g, %g]\n", opt, v, lo,
                hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* The file name without folders and ".gguf". */
static void model_id_of(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, n, "%s", b);
    size_t l = strlen(out);
    if (l > 5 && !strcmp(out + l - 5, ".gguf"))
        out[l - 5] = '\0';
}

int cmd_serve(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = SERVE_USES;
    o.cmd = "serve";
    o.ep.n_slots = SERVE_SLOTS;
    o.conv_cache_mib = SERVE_CACHE_MIB;
    serve_params sp = serve_params_default();
    sp.api_key = getenv("STRATA_API_KEY");
    double drain = 10, d;
    char idbuf[256] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int takes = !strcmp(a, "--host") || !strcmp(a, "--port") || !strcmp(a, "--api-key") ||
                    !strcmp(a, "--max-queue") || !strcmp(a, "--max-body-mib") ||
                    !strcmp(a, "--max-conns") || !strcmp(a, "--timeout") ||
                    !strcmp(a, "--drain-seconds") || !strcmp(a, "--model-id");
        if (takes && !v) {
            fprintf(stderr, "strata-cli serve: option %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--quiet")) {
            sp.quiet = 1;
            continue;
        }
        if (!takes) {
            int r = cli_opts_parse(&o, "serve", argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                fprintf(stderr, "strata-cli serve: unknown option '%s' (see --help)\n", a);
                return 2;
            }
            continue;
        }
        i++;
        if (!strcmp(a, "--host"))
            sp.host = v;
        else if (!strcmp(a, "--api-key"))
            sp.api_key = v;
        else if (!strcmp(a, "--model-id"))
            snprintf(idbuf, sizeof idbuf, "%s", v);
        else {
            double lo = 0, hi = 1e9;
            if (!strcmp(a, "--port"))
                hi = 65535;
            if (!strcmp(a, "--max-body-mib") || !strcmp(a, "--max-conns"))
                lo = 1;
            if (!strcmp(a, "--max-body-mib"))
                hi = 4096;
            if (!strcmp(a, "--timeout"))
                lo = 0.1;
            if (num(a, v, lo, hi, &d))
                return 2;
            if (!strcmp(a, "--port"))
                sp.port = (int)d;
            else if (!strcmp(a, "--max-queue"))
                sp.max_queue = (int)d;
            else if (!strcmp(a, "--max-body-mib"))
                sp.max_body = (size_t)(d * 1048576.0);
            else if (!strcmp(a, "--max-conns"))
                sp.max_conns = (int)d;
            else if (!strcmp(a, "--timeout"))
                sp.idle_timeout = sp.request_timeout = sp.write_timeout = d;
            else
                drain = d;
        }
    }
    if (cli_opts_check(&o, "serve") || cli_opts_default_model(&o, "serve"))
        return 2;
    if (o.system) {
        /* an option taken and ignored would mislead */
        fprintf(stderr, "strata-cli serve: -sys is not used by the server: clients send their "
                        "system message\n");
        return 2;
    }
    cli_opts_demo_defaults(&o);
    if (!idbuf[0])
        model_id_of(o.ep.model_path, idbuf, sizeof idbuf);
    sp.model_id = idbuf;
    sp.sampling = o.sp;
    sp.max_tokens = o.n_predict;

    /* Every thread started from here on inherits the mask: the signals
     * come to sigwait below, and only there. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    strata_error err = {0};
    serve *srv = NULL;
    if (serve_start(&sp, &srv, &err)) {
        fprintf(stderr, "strata-cli serve: %s\n", err.msg);
        return 1;
    }
    const char *h = sp.host;
    int v6 = strchr(h, ':') != NULL;
    fprintf(stderr, "strata serve: loading %s; http://%s%s%s:%d/health says 503 until it is "
                    "ready\n", o.ep.model_path, v6 ? "[" : "", h, v6 ? "]" : "", serve_port(srv));
    frontend fe;
    if (frontend_open_flags(&fe, &o, FRONTEND_NO_SEQ, &err)) {
        fprintf(stderr, "strata-cli serve: %s\n", err.msg);
        serve_free(srv);
        return err.code == STRATA_E_CANCELLED ? CLI_EXIT_INTERRUPTED : 1;
    }
    sched_params schp = sched_params_default();
    schp.chat_template = o.chat_template;
    cli_opts_sched_cache(&o, &schp);
    if (serve_attach(srv, fe.e, &schp, &err)) {
        fprintf(stderr, "strata-cli serve: %s\n", err.msg);
        serve_free(srv);
        frontend_close(&fe);
        return 1;
    }
    printf("strata serve: listening on http://%s%s%s:%d/v1 (model %s, %s, %d slots, context %d, "
           "conversation cache %zu MiB%s)\n",
           v6 ? "[" : "", h, v6 ? "]" : "", serve_port(srv), idbuf,
           strata_backend(fe.e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu", strata_n_slots(fe.e),
           strata_n_ctx(fe.e), o.conv_cache_mib,
           sp.api_key && *sp.api_key ? ", API key required" : "");
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "strata serve: %s: finishing answers in flight (at most %.0f s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", drain);
    serve_shutdown(srv, drain);
    serve_free(srv);
    frontend_close(&fe);
    fprintf(stderr, "strata serve: stopped\n");
    return 0;
}
