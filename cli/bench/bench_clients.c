/* bench_clients.c: `strata-cli bench --clients C` — an in-process
 * multi-client driver for the scheduler (sched/scheduler.h).
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
 * With --conversation-cache-mib M, each client's R rounds are one growing
 * conversation instead: round r sends round r-1's prompt, its answer and P
 * new tokens, as a chat client does.  The two modes are then both "slots",
 * once with the cache off (every follow-up re-reads its history) and once
 * on (a follow-up restores the previous round's image and reads only the
 * new tokens), and the table adds the time to first token of the
 * follow-up rounds (r >= 1): restored vs re-read.
 *
 *   strata-cli bench --clients C --rounds R --prompt-tokens P --gen-tokens G
 *                    [--batch N] [--json] [engine options: -m -c -t --backend ...] */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "engine/generate.h"
#include "sched/scheduler.h"
#include "kernels/ops.h"
#include "text/tokenizer.h"
#include "cli/options.h"

typedef struct bc_conf {
    int clients, rounds, prompt_tokens, gen_tokens, json;
    int grow;               /* rounds are one growing conversation */
    const char *answers;    /* --answers FILE: write every answer's ids there */
} bc_conf;

typedef struct bc_client {
    strata_sched *s;
    const bc_conf *c;
    int index;
    int n_vocab;
    const tokenizer *tok;
    sched_result *res;      /* rounds results */
    int32_t *ids;           /* rounds x gen_tokens: the answers */
    int rc;
    strata_error err;
} bc_client;

typedef struct bc_mode {
    const char *name;
    int slots;
    size_t cache_mib;       /* 0: no conversation cache */
    int cache_slots;
    int no_reuse;           /* the scheduler's resident reuse off: a follow-up
                             * is re-read or restored, never found in its slot */
    int n_req, n_gen;
    int32_t *ids;           /* clients x rounds x gen_tokens: every answer, greedy */
    double wall;
    double ttft_med, ttft_p90, tps_med, tps_p10, total_tps;
    /* follow-up rounds (r >= 1) of growing conversations */
    int n_follow;
    double f_ttft_med, f_ttft_p90, f_restored, f_restore_s, f_prompt;
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

/* The answer's tokens, appended to the conversation (they wait in the
 * handle's queue: nobody read them while it ran). */
static int bc_take_answer(sched_handle *h, int32_t *conv, int n, int cap)
{
    int32_t t;
    while (sched_next(h, &t, 0) == 1)
        if (n < cap)
            conv[n++] = t;
    return n;
}

static void *bc_client_main(void *arg)
{
    bc_client *cl = arg;
    const bc_conf *c = cl->c;
    /* Growing: the whole conversation; otherwise one round's prompt. */
    /* bounded by bc_check_sizes: at most STRATA_MAX_CTX tokens */
    size_t cap = c->grow ? (size_t)c->rounds * (size_t)(c->prompt_tokens + c->gen_tokens)
                         : (size_t)c->prompt_tokens;
    int32_t *conv = malloc(sizeof *conv * cap);
    int n = 0;
    if (!conv) {
        cl->rc = strata_err(&cl->err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    for (int r = 0; r < c->rounds && !cl->rc; r++) {
        if (!c->grow)
            n = 0;
        bc_prompt(cl, r, conv + n, c->prompt_tokens);
        n += c->prompt_tokens;
        sched_request req = sched_request_default();
        req.sampling.temp = 0;
        req.tokens = conv;
        req.n_tokens = n;
        req.max_tokens = c->gen_tokens;
        req.ignore_stop = 1;
        sched_handle *h;
        cl->rc = sched_submit(cl->s, &req, &h, &cl->err);
        if (cl->rc)
            break;
        cl->rc = sched_wait(h, &cl->res[r]);
        int32_t *ans = cl->ids + (size_t)r * c->gen_tokens;
        if (cl->rc) {
            cl->err = cl->res[r].err;
        } else if (bc_take_answer(h, ans, 0, c->gen_tokens) != c->gen_tokens) {
            cl->rc = strata_err(&cl->err, STRATA_E_LIMIT, "client %d round %d: %d tokens "
                                "generated, %d asked", cl->index, r, cl->res[r].n_gen,
                                c->gen_tokens);
        } else if (c->grow) {
            memcpy(conv + n, ans, (size_t)c->gen_tokens * sizeof *ans);
            n += c->gen_tokens;
        }
        sched_handle_free(h);
    }
    free(conv);
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

/* Time to first token of the follow-up rounds (r >= 1), and how much of
 * their prompts the cache restored. */
static void bc_follow_ups(const bc_conf *c, const sched_result *res, bc_mode *m, double *tmp)
{
    int k = 0;
    double restored = 0, restore_s = 0, prompt = 0;
    for (int i = 0; i < c->clients; i++)
        for (int r = 1; r < c->rounds; r++) {
            const sched_result *x = &res[i * c->rounds + r];
            tmp[k++] = x->t_first;
            restored += x->n_restored;
            restore_s += x->t_restore;
            prompt += x->n_prompt;
        }
    m->n_follow = k;
    if (!k)
        return;
    qsort(tmp, (size_t)k, sizeof *tmp, cmp_double);
    m->f_ttft_med = quantile(tmp, k, 0.5);
    m->f_ttft_p90 = quantile(tmp, k, 0.9);
    m->f_restored = restored / k;
    m->f_restore_s = restore_s / k;
    m->f_prompt = prompt / k;
}

static int bc_run_mode(strata_engine *e, const bc_conf *c, bc_mode *m, strata_error *err)
{
    sched_params sp = sched_params_default();
    sp.n_slots = m->slots;
    sp.cache_mib = m->cache_mib;
    sp.cache_slots = m->cache_slots;
    sp.no_resident_reuse = m->no_reuse;
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
                            m->ids + (size_t)i * c->rounds * c->gen_tokens, 0, {0}};
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
    if (c->grow)
        bc_follow_ups(c, res, m, ttft);
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

static void bc_print_follow_ups(const bc_mode *modes)
{
    printf("\nfollow-up rounds (r >= 1): time to first token, restored vs re-read\n");
    printf("%-14s %8s %12s %12s %12s %10s %10s\n", "mode", "requests", "prompt tok", "restored",
           "restore s", "ttft s", "ttft s");
    printf("%-14s %8s %12s %12s %12s %10s %10s\n", "", "", "mean", "mean", "mean", "median", "p90");
    for (int k = 0; k < 2; k++)
        printf("%-14s %8d %12.1f %12.1f %12.6f %10.3f %10.3f\n", modes[k].name, modes[k].n_follow,
               modes[k].f_prompt, modes[k].f_restored, modes[k].f_restore_s, modes[k].f_ttft_med,
               modes[k].f_ttft_p90);
    if (modes[1].f_ttft_med > 0)
        printf("re-read / restored: %.2fx follow-up time to first token (median)\n",
               modes[0].f_ttft_med / modes[1].f_ttft_med);
}

/* Greedy answers do not depend on how requests share the slots, nor on
 * whether a history was restored or re-read (the invariance rule): the
 * two modes must agree token for token.  0, or -1 with the first
 * difference printed. */
static int bc_same_answers(const bc_conf *c, const bc_mode *modes)
{
    size_t per = (size_t)c->rounds * c->gen_tokens;
    for (int i = 0; i < c->clients; i++)
        for (size_t j = 0; j < per; j++)
            if (modes[0].ids[i * per + j] != modes[1].ids[i * per + j]) {
                fprintf(stderr, "strata-cli bench: the answers differ between '%s' and '%s': "
                                "client %d, round %zu, token %zu (%d vs %d)\n", modes[0].name,
                        modes[1].name, i, j / c->gen_tokens, j % c->gen_tokens,
                        modes[0].ids[i * per + j], modes[1].ids[i * per + j]);
                return -1;
            }
    return 0;
}

/* --answers FILE: one line per request, "client round: id id ...", so two
 * runs (one card against several, serial against parallel copies) can be
 * compared by checksum. */
static int bc_write_answers(const bc_conf *c, const int32_t *ids)
{
    FILE *f = fopen(c->answers, "w");
    if (!f) {
        fprintf(stderr, "strata-cli bench: --answers %s: cannot write it\n", c->answers);
        return -1;
    }
    for (int i = 0; i < c->clients; i++)
        for (int r = 0; r < c->rounds; r++) {
            fprintf(f, "%d %d:", i, r);
            const int32_t *a = ids + ((size_t)i * c->rounds + r) * c->gen_tokens;
            for (int j = 0; j < c->gen_tokens; j++)
                fprintf(f, " %d", a[j]);
            fputc('\n', f);
        }
    if (fclose(f)) {
        fprintf(stderr, "strata-cli bench: --answers %s: write failed\n", c->answers);
        return -1;
    }
    return 0;
}

void bench_clients_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --clients C [--rounds R] [--prompt-tokens P]\n"
               "                        [--gen-tokens G] [--batch N] [--json] [options]\n\n"
               "C client threads each submit R requests (P random prompt tokens, exactly G\n"
               "generated, greedy) to the in-process scheduler, once with one slot (one at a\n"
               "time) and once with N slots (default N = C).  Prints total and per-request\n"
               "decode tok/s and time to first token (median, p90).\n\n"
               "With --conversation-cache-mib M (and -slots K) each client's rounds are one\n"
               "growing conversation (round r = round r-1's prompt + answer + P new tokens),\n"
               "run with the cache off and on; the time to first token of the follow-up\n"
               "rounds compares restoring the history with re-reading it.\n\n"
               "The answers are greedy, so both runs must give the same tokens: the bench\n"
               "fails if they differ.  --answers FILE writes them (one line per request:\n"
               "\"client round: ids\") to compare runs, e.g. one card against several.\n\n"
               "  --clients C             client threads (default 4)\n"
               "  --rounds R              requests per client (default 1)\n"
               "  --prompt-tokens P       random prompt tokens per request (default 16)\n"
               "  --gen-tokens G          tokens generated per request (default 8)\n"
               "  --answers FILE          write every request's generated ids there\n"
               "  --json                  print one JSON object instead of the table\n"
               "  -c, --ctx-size N        context per slot (default: what the rounds need)\n");
    cli_opts_help(f, BENCH_CLIENTS_USES & ~CLI_USE_CTX);
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

/* The sizes the options imply, in 64 bits, before anything is allocated:
 * --clients 4096 --rounds 1048576 used to wrap clients x rounds in an int
 * and crash.  Returns 0, or 2 with a message. */
#define BC_MAX_REQUESTS (1 << 20)
static int bc_check_sizes(const bc_conf *c, int grow)
{
    int64_t n_req = (int64_t)c->clients * c->rounds;
    int64_t conv = (int64_t)(grow ? c->rounds : 1) * (c->prompt_tokens + c->gen_tokens) + 1;
    if (c->clients > STRATA_MAX_SLOTS) {
        fprintf(stderr, "strata-cli bench: --clients %d: at most %d\n", c->clients,
                STRATA_MAX_SLOTS);
        return 2;
    }
    if (n_req > BC_MAX_REQUESTS) {
        fprintf(stderr, "strata-cli bench: --clients %d x --rounds %d = %lld requests: at most "
                        "%d\n", c->clients, c->rounds, (long long)n_req, BC_MAX_REQUESTS);
        return 2;
    }
    if (conv > STRATA_MAX_CTX) {
        fprintf(stderr, "strata-cli bench: %s(--prompt-tokens %d + --gen-tokens %d) = %lld "
                        "tokens per conversation: at most %d\n", grow ? "--rounds x " : "",
                c->prompt_tokens, c->gen_tokens, (long long)conv - 1, STRATA_MAX_CTX);
        return 2;
    }
    return 0;
}

int bench_clients(int argc, char **argv)
{
    bc_conf c = {.clients = 4, .rounds = 1, .prompt_tokens = 16, .gen_tokens = 8};
    cli_opts o;
    cli_opts_init(&o);
    o.uses = BENCH_CLIENTS_USES;
    o.cmd = "bench";
    o.ep.n_slots = 0; /* 0 after parsing: --batch not given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_clients_usage(stdout);
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
        else if (!strcmp(a, "--answers")) {
            if (!v) {
                fprintf(stderr, "strata-cli bench: --answers needs a file name\n");
                return 2;
            }
            c.answers = v;
            i++;
        }
        else {
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
    if (cli_opts_check(&o, "bench"))
        return 2;
    c.grow = o.conv_cache_mib > 0;
    if (bc_check_sizes(&c, c.grow))
        return 2;
    if (!o.ep.n_ctx)
        o.ep.n_ctx = (c.grow ? c.rounds : 1) * (c.prompt_tokens + c.gen_tokens) + 1;
    /* Every slot may hold a whole context at once, and a sequence takes
     * whole KV pages: the engine's default pool (n_ctx x slots tokens,
     * rounded up once) is short when n_ctx is not a multiple of KV_PAGE. */
    if (!o.ep.kv_resident) {
        int64_t r = (int64_t)o.ep.n_slots * (((int64_t)o.ep.n_ctx + KV_PAGE - 1) / KV_PAGE) *
                    KV_PAGE;
        if (r > INT_MAX) {
            fprintf(stderr, "strata-cli bench: --batch %d x %d tokens = %lld KV tokens per stage: "
                            "more than %d (lower --batch or the conversation, or set "
                            "--kv-resident)\n", o.ep.n_slots, o.ep.n_ctx, (long long)r, INT_MAX);
            return 2;
        }
        o.ep.kv_resident = (int)r;
    }
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
    if (c.grow) {
        /* resident reuse off in both: with it, a follow-up would find its
         * conversation still in its slot, and neither the copy nor the
         * re-read would be measured */
        modes[0] = (bc_mode){.name = "re-read", .slots = o.ep.n_slots, .no_reuse = 1};
        modes[1] = (bc_mode){.name = "restored", .slots = o.ep.n_slots,
                             .cache_mib = o.conv_cache_mib, .cache_slots = o.conv_cache_slots,
                             .no_reuse = 1};
    }
    int rc = 0;
    size_t n_ids = (size_t)c.clients * c.rounds * c.gen_tokens;
    for (int k = 0; k < 2 && !rc; k++) {
        modes[k].ids = calloc(n_ids, sizeof *modes[k].ids);
        if (!modes[k].ids) {
            rc = strata_err(&err, STRATA_E_NOMEM, "out of memory for %zu answer tokens", n_ids);
            break;
        }
        fprintf(stderr, "strata: bench %s: %d clients x %d rounds, %d prompt + %d generated tokens\n",
                modes[k].name, c.clients, c.rounds, c.prompt_tokens, c.gen_tokens);
        rc = bc_run_mode(e, &c, &modes[k], &err);
    }
    strata_close(e);
    int bad = rc || bc_same_answers(&c, modes) || (c.answers && bc_write_answers(&c, modes[1].ids));
    free(modes[0].ids);
    free(modes[1].ids);
    if (rc)
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
    if (bad)
        return 1;
    if (c.json) {
        printf("{\"clients\": %d, \"rounds\": %d, \"prompt_tokens\": %d, \"gen_tokens\": %d, "
               "\"growing\": %d, \"modes\": [", c.clients, c.rounds, c.prompt_tokens,
               c.gen_tokens, c.grow);
        for (int k = 0; k < 2; k++)
            printf("%s{\"mode\": \"%s\", \"slots\": %d, \"requests\": %d, \"generated\": %d, "
                   "\"wall_s\": %.4f, \"total_decode_tps\": %.3f, \"request_decode_tps_median\": "
                   "%.3f, \"request_decode_tps_p10\": %.3f, \"ttft_median_s\": %.4f, "
                   "\"ttft_p90_s\": %.4f}", k ? ", " : "", modes[k].name, modes[k].slots,
                   modes[k].n_req, modes[k].n_gen, modes[k].wall, modes[k].total_tps,
                   modes[k].tps_med, modes[k].tps_p10, modes[k].ttft_med, modes[k].ttft_p90);
        if (c.grow)
            for (int k = 0; k < 2; k++)
                printf(", {\"mode\": \"%s follow-ups\", \"requests\": %d, \"prompt_tokens_mean\": "
                       "%.1f, \"restored_tokens_mean\": %.1f, \"restore_s_mean\": %.6f, "
                       "\"ttft_median_s\": %.4f, \"ttft_p90_s\": %.4f}", modes[k].name,
                       modes[k].n_follow, modes[k].f_prompt, modes[k].f_restored,
                       modes[k].f_restore_s, modes[k].f_ttft_med, modes[k].f_ttft_p90);
        printf("], \"speedup\": %.3f}\n",
               modes[0].total_tps > 0 ? modes[1].total_tps / modes[0].total_tps : 0);
        return 0;
    }
    printf("%d clients x %d rounds, %d %sprompt + %d generated tokens per request\n", c.clients,
           c.rounds, c.prompt_tokens, c.grow ? "new " : "", c.gen_tokens);
    printf("%-14s %5s %8s %8s %12s %12s %12s %10s %10s\n", "mode", "slots", "requests", "wall s",
           "total tok/s", "req tok/s", "req tok/s", "ttft s", "ttft s");
    printf("%-14s %5s %8s %8s %12s %12s %12s %10s %10s\n", "", "", "", "", "", "median", "p10",
           "median", "p90");
    for (int k = 0; k < 2; k++)
        printf("%-14s %5d %8d %8.2f %12.2f %12.2f %12.2f %10.3f %10.3f\n", modes[k].name,
               modes[k].slots, modes[k].n_req, modes[k].wall, modes[k].total_tps, modes[k].tps_med,
               modes[k].tps_p10, modes[k].ttft_med, modes[k].ttft_p90);
    if (c.grow) {
        bc_print_follow_ups(modes);
        return 0;
    }
    if (modes[0].total_tps > 0)
        printf("slots / one at a time: %.2fx total decode tok/s\n",
               modes[1].total_tps / modes[0].total_tps);
    return 0;
}
