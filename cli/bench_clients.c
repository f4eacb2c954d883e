/* bench_clients.c: `strata-cli bench --clients C` — an in-process
 * multi-client driver for the scheduler (engine/scheduler.h).
 *
 * C client threads each run R rounds of: submit a prompt of P random
 * ordinary tokens, generate exactly G tokens (stop tokens ignored, so every
 * request does the same work), wait.  Twice, on one loaded engine:
 *   one at a time   the scheduler limited to 1 slot: requests serialize;
 *   slots           all N slots of the engine (--batch N, default C).
 * Reported per mode: wall time, total decode tok/s (all generated tokens
 * over the wall time), per-request decode tok/s (median and p10: the slow
 * tail) and time to first token from submission (median and p90: queueing
 * included, as a client sees it).
 *
 *   strata-cli bench --clients C --rounds R --prompt-tokens P --gen-tokens G
 *                    [--batch N] [--json] [engine options: -m -c -t --backend ...] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/generate.h"
#include "engine/scheduler.h"
#include "model/tokenizer.h"
#include "options.h"

typedef struct bc_conf {
    int clients, rounds, prompt_tokens, gen_tokens, json;
} bc_conf;

typedef struct bc_client {
    strata_sched *s;
    const bc_conf *c;
    int index;
    int n_vocab;
    const tokenizer *tok;
    sched_result *res;      /* rounds results */
    int rc;
    strata_error err;
} bc_client;

typedef struct bc_mode {
    const char *name;
    int slots;
    int n_req, n_gen;
    double wall;
    double ttft_med, ttft_p90, tps_med, tps_p10, total_tps;
} bc_mode;

/* P ordinary tokens (no control or byte tokens), different for every
 * client and round so no two requests share a prefix. */
static void bc_prompt(const bc_client *cl, int round, int32_t *out, int n)
{
    uint64_t st = 0x9e3779b97f4a7c15ull * (uint64_t)(cl->index * 1000 + round + 1);
    for (int i = 0; i < n;) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        int32_t t = (int32_t)(st % (uint64_t)cl->n_vocab);
        if (tokenizer_token_type(cl->tok, t) == TOKEN_TYPE_NORMAL && !tokenizer_is_stop(cl->tok, t))
            out[i++] = t;
    }
}

static void *bc_client_main(void *arg)
{
    bc_client *cl = arg;
    int32_t *prompt = malloc(sizeof *prompt * (size_t)cl->c->prompt_tokens);
    if (!prompt) {
        cl->rc = strata_err(&cl->err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    for (int r = 0; r < cl->c->rounds && !cl->rc; r++) {
        bc_prompt(cl, r, prompt, cl->c->prompt_tokens);
        sched_request req = sched_request_default();
        req.sampling.temp = 0;
        req.tokens = prompt;
        req.n_tokens = cl->c->prompt_tokens;
        req.max_tokens = cl->c->gen_tokens;
        req.ignore_stop = 1;
        sched_handle *h;
        cl->rc = sched_submit(cl->s, &req, &h, &cl->err);
        if (cl->rc)
            break;
        cl->rc = sched_wait(h, &cl->res[r]);
        if (cl->rc)
            cl->err = cl->res[r].err;
        sched_handle_free(h);
    }
    free(prompt);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of n sorted values, nearest rank. */
static double quantile(const double *v, int n, double q)
{
    if (n <= 0)
        return 0;
    int k = (int)(q * n + 0.999999) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static int bc_run_mode(strata_engine *e, const bc_conf *c, bc_mode *m, strata_error *err)
{
    sched_params sp = sched_params_default();
    sp.n_slots = m->slots;
    strata_sched *s = sched_new(e, &sp, err);
    if (!s)
        return err->code;
    m->slots = sched_n_slots(s);
    int n_req = c->clients * c->rounds, rc = 0;
    bc_client *cl = calloc((size_t)c->clients, sizeof *cl);
    sched_result *res = calloc((size_t)n_req, sizeof *res);
    pthread_t *th = calloc((size_t)c->clients, sizeof *th);
    double *ttft = calloc((size_t)n_req, sizeof *ttft), *tps = calloc((size_t)n_req, sizeof *tps);
    if (!cl || !res || !th || !ttft || !tps) {
        rc = strata_err(err, STRATA_E_NOMEM, "out of memory");
        goto done;
    }
    double t0 = strata_now();
    int started = 0;
    for (int i = 0; i < c->clients; i++) {
        cl[i] = (bc_client){s, c, i, strata_n_vocab(e), strata_tokenizer(e), res + i * c->rounds,
                            0, {0}};
        if (pthread_create(&th[i], NULL, bc_client_main, &cl[i])) {
            rc = strata_err(err, STRATA_E_NOMEM, "cannot start client thread %d", i);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    m->wall = strata_now() - t0;
    for (int i = 0; i < started && !rc; i++)
        if (cl[i].rc) {
            rc = cl[i].rc;
            *err = cl[i].err;
        }
    if (rc)
        goto done;
    m->n_req = n_req;
    m->n_gen = 0;
    for (int r = 0; r < n_req; r++) {
        m->n_gen += res[r].n_gen;
        ttft[r] = res[r].t_first;
        tps[r] = res[r].decode_tps;
    }
    qsort(ttft, (size_t)n_req, sizeof *ttft, cmp_double);
    qsort(tps, (size_t)n_req, sizeof *tps, cmp_double);
    m->ttft_med = quantile(ttft, n_req, 0.5);
    m->ttft_p90 = quantile(ttft, n_req, 0.9);
    m->tps_med = quantile(tps, n_req, 0.5);
    m->tps_p10 = quantile(tps, n_req, 0.1);
    m->total_tps = m->wall > 0 ? m->n_gen / m->wall : 0;
done:
    sched_free(s);
    free(cl);
    free(res);
    free(th);
    free(ttft);
    free(tps);
    return rc;
}

static void bc_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --clients C [--rounds R] [--prompt-tokens P]\n"
               "                        [--gen-tokens G] [--batch N] [--json] [options]\n\n"
               "C client threads each submit R requests (P random prompt tokens, exactly G\n"
               "generated, greedy) to the in-process scheduler, once with one slot (one at a\n"
               "time) and once with N slots (default N = C).  Prints total and per-request\n"
               "decode tok/s and time to first token (median, p90).\n\n");
    cli_opts_help(f);
}

static int bc_int(const char *opt, const char *v, int lo, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > 1 << 20) {
        fprintf(stderr, "strata-cli bench: %s needs an integer >= %d\n", opt, lo);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int bench_clients(int argc, char **argv)
{
    bc_conf c = {.clients = 4, .rounds = 1, .prompt_tokens = 16, .gen_tokens = 8};
    cli_opts o;
    cli_opts_init(&o);
    o.ep.n_slots = 0; /* 0 after parsing: --batch not given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bc_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json"))
            c.json = 1;
        else if (!strcmp(a, "--clients"))
            bad = bc_int(a, v, 1, &c.clients), i++;
        else if (!strcmp(a, "--rounds"))
            bad = bc_int(a, v, 1, &c.rounds), i++;
        else if (!strcmp(a, "--prompt-tokens"))
            bad = bc_int(a, v, 1, &c.prompt_tokens), i++;
        else if (!strcmp(a, "--gen-tokens"))
            bad = bc_int(a, v, 1, &c.gen_tokens), i++;
        else if (!strcmp(a, "--batch-groups")) {
            fprintf(stderr, "strata-cli bench: --batch-groups is not implemented yet "
                            "(pipelined groups need GPU stages; see doc/scheduler.md)\n");
            return 2;
        } else {
            int r = cli_opts_parse(&o, "bench", argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                fprintf(stderr, "strata-cli bench: unknown option '%s' (see --help)\n", a);
                return 2;
            }
        }
        if (bad)
            return 2;
    }
    if (!o.ep.n_slots)
        o.ep.n_slots = c.clients;
    if (!o.ep.n_ctx)
        o.ep.n_ctx = c.prompt_tokens + c.gen_tokens + 1;
    if (cli_opts_default_model(&o, "bench"))
        return 1;
    o.ep.quiet = !o.verbose;
    strata_engine *e = NULL;
    strata_error err = {0};
    if (strata_open(&o.ep, &e, &err)) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
        return 1;
    }
    char desc[1024];
    strata_describe(e, desc, sizeof desc);
    fprintf(stderr, "strata: %s\n", desc);
    bc_mode modes[2] = {{.name = "one at a time", .slots = 1},
                        {.name = "slots", .slots = o.ep.n_slots}};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        fprintf(stderr, "strata: bench %s: %d clients x %d rounds, %d prompt + %d generated tokens\n",
                modes[k].name, c.clients, c.rounds, c.prompt_tokens, c.gen_tokens);
        rc = bc_run_mode(e, &c, &modes[k], &err);
    }
    strata_close(e);
    if (rc) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
        return 1;
    }
    if (c.json) {
        printf("{\"clients\": %d, \"rounds\": %d, \"prompt_tokens\": %d, \"gen_tokens\": %d, "
               "\"modes\": [", c.clients, c.rounds, c.prompt_tokens, c.gen_tokens);
        for (int k = 0; k < 2; k++)
            printf("%s{\"mode\": \"%s\", \"slots\": %d, \"requests\": %d, \"generated\": %d, "
                   "\"wall_s\": %.4f, \"total_decode_tps\": %.3f, \"request_decode_tps_median\": "
                   "%.3f, \"request_decode_tps_p10\": %.3f, \"ttft_median_s\": %.4f, "
                   "\"ttft_p90_s\": %.4f}", k ? ", " : "", modes[k].name, modes[k].slots,
                   modes[k].n_req, modes[k].n_gen, modes[k].wall, modes[k].total_tps,
                   modes[k].tps_med, modes[k].tps_p10, modes[k].ttft_med, modes[k].ttft_p90);
        printf("], \"speedup\": %.3f}\n",
               modes[0].total_tps > 0 ? modes[1].total_tps / modes[0].total_tps : 0);
        return 0;
    }
    printf("%d clients x %d rounds, %d prompt + %d generated tokens per request\n", c.clients,
           c.rounds, c.prompt_tokens, c.gen_tokens);
    printf("%-14s %5s %8s %8s %12s %12s %12s %10s %10s\n", "mode", "slots", "requests", "wall s",
           "total tok/s", "req tok/s", "req tok/s", "ttft s", "ttft s");
    printf("%-14s %5s %8s %8s %12s %12s %12s %10s %10s\n", "", "", "", "", "", "median", "p10",
           "median", "p90");
    for (int k = 0; k < 2; k++)
        printf("%-14s %5d %8d %8.2f %12.2f %12.2f %12.2f %10.3f %10.3f\n", modes[k].name,
               modes[k].slots, modes[k].n_req, modes[k].wall, modes[k].total_tps, modes[k].tps_med,
               modes[k].tps_p10, modes[k].ttft_med, modes[k].ttft_p90);
    if (modes[0].total_tps > 0)
        printf("slots / one at a time: %.2fx total decode tok/s\n",
               modes[1].total_tps / modes[0].total_tps);
    return 0;
}
