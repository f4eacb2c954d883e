/* bench_workload.c: `strata-cli bench --workload` — long conversations of
 * concurrent clients served by the scheduler exactly as `strata-cli serve`
 * drives it, and what parking costs inside that.
 *
 * The server's path, minus HTTP: one thread per client submits token ids
 * (sched_submit, greedy, max_tokens), reads the answer in queue mode
 * (sched_next) and waits (sched_wait), on a scheduler made as serve_attach
 * makes it (the engine's slots, its chunk, resident reuse on, the
 * conversation cache).  A client's R rounds are one growing conversation:
 * round r sends everything so far (prompts and answers) plus new random
 * ordinary tokens, so that after R rounds it holds T tokens.  With more
 * clients than slots and a KV pool that holds a few conversations, the
 * scheduler evicts idle conversations (captured into the cache), parks
 * running ones for pages, and restores both when they come back.
 *
 * The copies are timed by park itself (park_set_observer, through
 * sched_params.on_park): the scheduler makes the calls, so there is no call
 * here to put a clock around.  The slot shuttle is not something the
 * scheduler does; between steps (the step hook, on the orchestration
 * thread, where nothing else touches the engine) every conversation that
 * has just become idle in its slot is copied once into a spare sequence
 * (park_shuttle with PARK_SHUTTLE_KEEP, so the slot keeps it), when the
 * pool has the pages, and the copy is dropped again.
 *
 * The workload runs twice on one engine with a fresh scheduler (and cache)
 * each time: the stage copies in parallel, then serial
 * (stagepool_set_serial, what STRATA_STAGE_COPY_PARALLEL=0 sets).  Greedy
 * answers do not depend on either, so the two runs must answer alike; the
 * bench says whether they did.
 *
 * With --conversation-save DIR (and -mib, -days, as the engine takes them)
 * every image the cache commits is also written to disk by the save
 * directory's writer thread, as `serve` does; each run saves into its own
 * subdirectory (DIR/parallel, DIR/serial), which must hold no images yet
 * (images loaded at start would turn the workload's first reads into
 * restores).  The writer's time per 100K tokens saved is a row of the
 * table; the TTFT and wall columns against a run without saving show what
 * the saving costs the decode path. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/bench/bench.h"
#include "cli/options.h"
#include "engine/engine_internal.h"
#include "engine/generate.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "sched/sched_internal.h"
#include "sched/scheduler.h"
#include "text/tokenizer.h"

/* The defaults: the measurement this bench was written for (a layer split
 * in four, 9 clients sharing 4 slots, 110K-token conversations). */
#define WL_CLIENTS 9
#define WL_ROUNDS 3
#define WL_TOKENS 110000
#define WL_GEN 16
#define WL_SLOTS 4
#define WL_CACHE_MIB 393216
#define WL_CACHE_SLOTS 192
#define WL_KV_RESIDENT 524288
#define WL_STAGES 4

typedef struct wl_conf {
    int clients, rounds, tokens, gen, json;
    uint64_t seed;
} wl_conf;

enum { M_FRESH, M_REUSED, M_SHUTTLE, M_RESTORE, N_METRIC };
static const char *metric_name[N_METRIC] = {"capture (fresh)", "capture (K/V reused)",
                                            "slot shuttle", "restore"};
static const char *metric_key[N_METRIC] = {"capture_fresh", "capture_reused", "shuttle",
                                           "restore"};

typedef struct wl_samples {
    double *ms100k;         /* ms per 100K tokens copied, one per copy */
    int n, cap;
    double seconds, bytes;
} wl_samples;

typedef struct wl_summary {
    int n;
    double median, mean, p90, max, gbps;
} wl_summary;

/* One run of the workload (parallel or serial stage copies). */
typedef struct wl_run {
    const char *name;
    int serial;
    const wl_conf *c;
    strata_engine *e;
    strata_sched *s;        /* set before the first submit */
    wl_samples m[N_METRIC];
    int oom;                /* a sample could not be kept */
    /* the shuttle, from the step hook */
    strata_seq *spare;
    uint64_t *idle_seen;    /* per slot: the idle period already shuttled */
    int shuttle_skipped;    /* idle conversations the pool had no pages for */
    int shuttle_rc;
    strata_error shuttle_err;
    /* per request (client-major) */
    sched_result *res;
    int32_t *ans;           /* clients x rounds x gen */
    int *n_ans;
    sched_cache_stats st;   /* after the last request */
    double wall;
    char save_dir[4096];    /* --conversation-save DIR/name, or "" */
} wl_run;

static int add_sample(wl_samples *s, double seconds, int tokens, double bytes)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        double *v = realloc(s->ms100k, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        s->ms100k = v;
        s->cap = cap;
    }
    s->ms100k[s->n++] = seconds * 1e3 * 100000.0 / tokens;
    s->seconds += seconds;
    s->bytes += bytes;
    return 0;
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

static wl_summary summarize(double *v, int n)
{
    wl_summary r = {0};
    r.n = n;
    if (!n)
        return r;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    r.mean = sum / n;
    r.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    r.p90 = quantile(v, n, 0.9);
    r.max = v[n - 1];
    return r;
}

/* ---- what the engine reports ----------------------------------------------- */

/* park's own timing of every copy the scheduler had it make (and of the
 * shuttles below); orchestration thread. */
static void wl_on_park(const park_event *ev, void *user)
{
    wl_run *r = user;
    int m = ev->op == PARK_OP_RESTORE ? M_RESTORE
          : ev->op == PARK_OP_SHUTTLE ? M_SHUTTLE
          : ev->kind == PARK_CAPTURE_FRESH ? M_FRESH
          : ev->kind == PARK_CAPTURE_REUSED ? M_REUSED : -1;
    if (m < 0 || ev->tokens <= 0)
        return;
    if (add_sample(&r->m[m], ev->seconds, ev->tokens, (double)ev->bytes))
        r->oom = 1;
}

/* After each step, on the orchestration thread: copy every conversation
 * that has become idle in its slot since the last look into the spare
 * sequence and drop the copy (the slot keeps its own).  Only when every
 * stage has the pages free: the shuttle must not take pages the scheduler
 * counted on. */
static void wl_on_step(const sched_step *st, void *user)
{
    (void)st;
    wl_run *r = user;
    strata_sched *s = r->s;
    if (!s->park || r->shuttle_rc)
        return;
    for (int i = 0; i < s->n_slots; i++) {
        sched_slot *sl = &s->slots[i];
        int n = strata_seq_len(sl->seq);
        if (sl->h || n <= 0 || r->idle_seen[i] == sl->last_used)
            continue;
        r->idle_seen[i] = sl->last_used;
        int pages = (n + KV_PAGE - 1) / KV_PAGE, room = 1;
        for (int k = 0; k < s->e->n_stages; k++)
            room &= s->e->stages[k].kv->n_free >= pages;
        if (!room) {
            r->shuttle_skipped++;
            continue;
        }
        if (!r->spare)
            r->spare = strata_seq_new(s->e, &r->shuttle_err);
        if (!r->spare) {
            r->shuttle_rc = r->shuttle_err.code ? r->shuttle_err.code : STRATA_E_NOMEM;
            return;
        }
        r->shuttle_rc = park_shuttle(s->park, sl->seq, r->spare, PARK_SHUTTLE_KEEP,
                                     &r->shuttle_err);
        strata_seq_reset(r->spare);
        if (r->shuttle_rc)
            return;
    }
}

/* ---- the clients --------------------------------------------------------------- */

typedef struct wl_client {
    wl_run *run;
    int index;
    int rc;
    strata_error err;
} wl_client;

/* Tokens the conversation holds after round r (prompts and answers). */
static int wl_len_after(const wl_conf *c, int r)
{
    return (int)((int64_t)c->tokens * (r + 1) / c->rounds);
}

static void *wl_client_main(void *arg)
{
    wl_client *cl = arg;
    wl_run *run = cl->run;
    const wl_conf *c = run->c;
    const tokenizer *tok = strata_tokenizer(run->e);
    int V = strata_n_vocab(run->e);
    int32_t *conv = malloc((size_t)(c->tokens + 1) * sizeof *conv);
    if (!conv) {
        cl->rc = strata_err(&cl->err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    /* the same tokens in both runs: a stream per client */
    uint64_t x = c->seed * 0x9e3779b97f4a7c15ull + (uint64_t)cl->index + 1;
    int n = 0;
    for (int r = 0; r < c->rounds && !cl->rc; r++) {
        int k = cl->index * c->rounds + r;
        int prompt = wl_len_after(c, r) - c->gen;
        while (n < prompt) {   /* new ordinary tokens, no control or stop ids */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int32_t t = (int32_t)(x % (uint64_t)V);
            if (tokenizer_token_type(tok, t) == TOKEN_TYPE_NORMAL && !tokenizer_is_stop(tok, t))
                conv[n++] = t;
        }
        /* what serve/openai.c submits: ids, sampling, max_tokens */
        sched_request req = sched_request_default();
        req.tokens = conv;
        req.n_tokens = n;
        req.sampling.temp = 0;
        req.max_tokens = c->gen;
        sched_handle *h = NULL;
        cl->rc = sched_submit(run->s, &req, &h, &cl->err);
        if (cl->rc)
            break;
        int32_t *ans = run->ans + (size_t)k * c->gen, t;
        int got = 0;
        while (sched_next(h, &t, -1) == 1)
            if (got < c->gen)
                ans[got++] = t;
        cl->rc = sched_wait(h, &run->res[k]);
        if (cl->rc)
            cl->err = run->res[k].err;
        sched_handle_free(h);
        run->n_ans[k] = got;
        memcpy(conv + n, ans, (size_t)got * sizeof *ans);
        n += got;
    }
    free(conv);
    return NULL;
}

/* DIR/name for a run's saves: DIR made if missing, the subdirectory left to
 * the save directory (persist_new makes it), and refused when it already
 * holds images. */
static int wl_save_dir(const char *dir, wl_run *run, strata_error *err)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return strata_err(err, STRATA_E_IO, "--conversation-save %s: %s", dir, strerror(errno));
    int n = snprintf(run->save_dir, sizeof run->save_dir, "%s/%s", dir, run->name);
    if (n < 0 || (size_t)n >= sizeof run->save_dir)
        return strata_err(err, STRATA_E_ARG, "--conversation-save %s: path too long", dir);
    DIR *d = opendir(run->save_dir);
    int images = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        images += l > 4 && !strcmp(de->d_name + l - 4, ".skv");
    }
    if (d)
        closedir(d);
    if (images)
        return strata_err(err, STRATA_E_ARG, "--conversation-save: %s holds %d saved images "
                          "from an earlier run; the workload starts with none (give an empty "
                          "directory)", run->save_dir, images);
    return 0;
}

static int wl_run_once(strata_engine *e, const cli_opts *o, wl_run *run, strata_error *err)
{
    const wl_conf *c = run->c;
    int n_req = c->clients * c->rounds, rc = 0;
    run->e = e;
    run->res = calloc((size_t)n_req, sizeof *run->res);
    run->ans = calloc((size_t)n_req * c->gen, sizeof *run->ans);
    run->n_ans = calloc((size_t)n_req, sizeof *run->n_ans);
    run->idle_seen = calloc((size_t)strata_n_slots(e), sizeof *run->idle_seen);
    wl_client *cl = calloc((size_t)c->clients, sizeof *cl);
    pthread_t *th = calloc((size_t)c->clients, sizeof *th);
    if (!run->res || !run->ans || !run->n_ans || !run->idle_seen || !cl || !th) {
        free(cl);
        free(th);
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    }
    if (e->pool)
        stagepool_set_serial(e->pool, run->serial);
    /* as serve_attach does it (cli/cmd_serve.c), plus the two hooks */
    sched_params sp = sched_params_default();
    cli_opts_sched_cache(o, &sp);   /* the cache, and the save directory's options */
    sp.save_dir = run->save_dir[0] ? run->save_dir : NULL;
    sp.on_park = wl_on_park;
    sp.park_user = run;
    sp.on_step = wl_on_step;
    sp.step_user = run;
    run->s = sched_new(e, &sp, err);
    if (!run->s) {
        free(cl);
        free(th);
        return err->code ? err->code : STRATA_E_NOMEM;
    }
    double t0 = strata_now();
    int started = 0;
    for (int i = 0; i < c->clients; i++) {
        cl[i] = (wl_client){run, i, 0, {0}};
        if (pthread_create(&th[i], NULL, wl_client_main, &cl[i])) {
            rc = strata_err(err, STRATA_E_NOMEM, "cannot start client thread %d", i);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    run->wall = strata_now() - t0;
    sched_get_cache_stats(run->s, &run->st);
    sched_free(run->s);     /* joins the orchestration thread: the hooks are done */
    run->s = NULL;
    strata_seq_free(run->spare);
    run->spare = NULL;
    for (int i = 0; i < started && !rc; i++)
        if (cl[i].rc) {
            rc = cl[i].rc;
            strata_err(err, rc, "client %d: %s", i, cl[i].err.msg);
        }
    if (!rc && run->shuttle_rc)
        rc = strata_err(err, run->shuttle_rc, "slot shuttle: %s", run->shuttle_err.msg);
    if (!rc && run->oom)
        rc = strata_err(err, STRATA_E_NOMEM, "out of memory for the samples");
    if (e->pool)
        stagepool_set_serial(e->pool, 0);
    free(cl);
    free(th);
    return rc;
}

static void wl_run_free(wl_run *r)
{
    for (int k = 0; k < N_METRIC; k++)
        free(r->m[k].ms100k);
    free(r->res);
    free(r->ans);
    free(r->n_ans);
    free(r->idle_seen);
}

/* The first request whose answers differ between the runs, or -1. */
static int wl_first_difference(const wl_conf *c, const wl_run *a, const wl_run *b)
{
    for (int k = 0; k < c->clients * c->rounds; k++) {
        if (a->n_ans[k] != b->n_ans[k] ||
            memcmp(a->ans + (size_t)k * c->gen, b->ans + (size_t)k * c->gen,
                   (size_t)a->n_ans[k] * sizeof *a->ans))
            return k;
    }
    return -1;
}

/* ---- the report --------------------------------------------------------------- */

typedef struct wl_round {
    wl_summary ttft;        /* seconds */
    double resident, restored, read, prompt; /* means, tokens */
} wl_round;

static wl_round wl_round_of(const wl_conf *c, const wl_run *run, int r, double *tmp)
{
    wl_round o = {0};
    int n = 0;
    for (int i = 0; i < c->clients; i++) {
        const sched_result *x = &run->res[i * c->rounds + r];
        if (x->n_gen > 0)
            tmp[n++] = x->t_first;
        o.resident += x->n_resident;
        o.restored += x->n_restored;
        o.read += x->n_prompt - x->n_resident - x->n_restored;
        o.prompt += x->n_prompt;
    }
    o.ttft = summarize(tmp, n);
    o.resident /= c->clients;
    o.restored /= c->clients;
    o.read /= c->clients;
    o.prompt /= c->clients;
    return o;
}

static void wl_print_text(const wl_conf *c, wl_run *runs, int n_runs, double *tmp)
{
    printf("ms per 100K tokens copied   copies        n     median       mean        p90"
           "        max     GB/s\n");
    for (int k = 0; k < N_METRIC; k++)
        for (int m = 0; m < n_runs; m++) {
            wl_samples *s = &runs[m].m[k];
            wl_summary x = summarize(s->ms100k, s->n);
            printf("%-27s %-8s %6d %10.2f %10.2f %10.2f %10.2f %8.2f\n", m ? "" : metric_name[k],
                   runs[m].name, x.n, x.median, x.mean, x.p90, x.max,
                   s->seconds > 0 ? s->bytes / s->seconds / 1e9 : 0);
        }
    /* the save directory's writer: totals, so the mean and the slowest */
    for (int m = 0; m < n_runs; m++) {
        const persist_stats *ps = &runs[m].st.park.persist;
        if (!runs[m].save_dir[0])
            continue;
        printf("%-27s %-8s %6llu %10s %10.2f %10s %10.2f %8.2f\n", m ? "" : "save (writer)",
               runs[m].name, (unsigned long long)ps->saved, "-",
               ps->tokens_saved ? ps->save_seconds * 1e8 / (double)ps->tokens_saved : 0, "-",
               ps->save_ms100k_max,
               ps->save_seconds > 0 ? (double)ps->bytes_written / ps->save_seconds / 1e9 : 0);
    }
    printf("time to first token, s     copies   round      n     median        p90        max"
           "   prompt resident restored     read\n");
    for (int m = 0; m < n_runs; m++)
        for (int r = 0; r < c->rounds; r++) {
            wl_round o = wl_round_of(c, &runs[m], r, tmp);
            printf("%-27s %-8s %5d %6d %10.3f %10.3f %10.3f %8.0f %8.0f %8.0f %8.0f\n", "",
                   r ? "" : runs[m].name, r + 1, o.ttft.n, o.ttft.median, o.ttft.p90, o.ttft.max,
                   o.prompt, o.resident, o.restored, o.read);
        }
    for (int m = 0; m < n_runs; m++) {
        const sched_cache_stats *st = &runs[m].st;
        printf("%s: wall %.2f s, %d requests; captures %llu (fresh %llu, K/V reused %llu, "
               "already cached %llu), capture failures %llu; restores %llu; parks %llu "
               "(unparks %llu); evictions: %llu from slots, %llu from the cache; shuttles %llu "
               "(%d skipped: no free pages); KV failures %llu; cache %d of %d images, %.1f of "
               "%.1f MiB\n",
               runs[m].name, runs[m].wall, c->clients * c->rounds,
               (unsigned long long)st->captures,
               (unsigned long long)st->park.captures[PARK_CAPTURE_FRESH],
               (unsigned long long)st->park.captures[PARK_CAPTURE_REUSED],
               (unsigned long long)st->park.captures[PARK_CAPTURE_CACHED],
               (unsigned long long)st->capture_failures, (unsigned long long)st->park.restores,
               (unsigned long long)st->parks, (unsigned long long)st->unparks,
               (unsigned long long)st->resident_evictions,
               (unsigned long long)st->cache.evictions,
               (unsigned long long)(st->park.shuttles_d2d + st->park.shuttles_host),
               runs[m].shuttle_skipped, (unsigned long long)st->kv_failures, st->cache.images,
               st->cache.images_max, st->cache.bytes_used / 1048576.0,
               st->cache.bytes_max / 1048576.0);
        const persist_stats *ps = &st->park.persist;
        if (runs[m].save_dir[0])
            printf("%s: saved to %s: %llu images, %llu tokens, %.1f MiB in %.2f s of the "
                   "writer; %llu failed, %llu not queued (the writer behind), %llu files "
                   "removed\n", runs[m].name, runs[m].save_dir,
                   (unsigned long long)ps->saved, (unsigned long long)ps->tokens_saved,
                   ps->bytes_written / 1048576.0, ps->save_seconds,
                   (unsigned long long)ps->save_failures, (unsigned long long)ps->save_dropped,
                   (unsigned long long)ps->removed);
    }
}

static void wl_print_json(const wl_conf *c, const cli_opts *o, const strata_engine *e,
                          wl_run *runs, int n_runs, int same, double *tmp)
{
    printf("{\"model\": \"%s\", \"backend\": \"%s\", \"stages\": %d, \"slots\": %d, "
           "\"clients\": %d, \"rounds\": %d, \"tokens\": %d, \"gen_tokens\": %d, "
           "\"cache_mib\": %zu, \"cache_slots\": %d, \"kv_resident\": %d, "
           "\"same_answers\": %s, \"runs\": [",
           o->ep.model_path, strata_backend(e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu",
           e->n_stages, strata_n_slots(e), c->clients, c->rounds, c->tokens, c->gen,
           o->conv_cache_mib, o->conv_cache_slots, o->ep.kv_resident, same ? "true" : "false");
    for (int m = 0; m < n_runs; m++) {
        wl_run *run = &runs[m];
        const sched_cache_stats *st = &run->st;
        printf("%s{\"copies\": \"%s\", \"wall_s\": %.4f, \"metrics_ms_per_100k\": {", m ? ", " : "",
               run->name, run->wall);
        for (int k = 0; k < N_METRIC; k++) {
            wl_samples *s = &run->m[k];
            wl_summary x = summarize(s->ms100k, s->n);
            printf("%s\"%s\": {\"n\": %d, \"median\": %.4f, \"mean\": %.4f, \"p90\": %.4f, "
                   "\"max\": %.4f, \"gbps\": %.4f}", k ? ", " : "", metric_key[k], x.n, x.median,
                   x.mean, x.p90, x.max, s->seconds > 0 ? s->bytes / s->seconds / 1e9 : 0);
        }
        printf("}, \"rounds\": [");
        for (int r = 0; r < c->rounds; r++) {
            wl_round w = wl_round_of(c, run, r, tmp);
            printf("%s{\"n\": %d, \"ttft_median_s\": %.5f, \"ttft_p90_s\": %.5f, "
                   "\"ttft_max_s\": %.5f, \"prompt\": %.1f, \"resident\": %.1f, "
                   "\"restored\": %.1f, \"read\": %.1f}", r ? ", " : "", w.ttft.n, w.ttft.median,
                   w.ttft.p90, w.ttft.max, w.prompt, w.resident, w.restored, w.read);
        }
        printf("], \"captures\": %llu, \"captures_fresh\": %llu, \"captures_reused\": %llu, "
               "\"captures_cached\": %llu, \"capture_failures\": %llu, \"restores\": %llu, "
               "\"parks\": %llu, \"unparks\": %llu, \"resident_evictions\": %llu, "
               "\"cache_evictions\": %llu, \"shuttles\": %llu, \"shuttles_skipped\": %d, "
               "\"kv_failures\": %llu",
               (unsigned long long)st->captures,
               (unsigned long long)st->park.captures[PARK_CAPTURE_FRESH],
               (unsigned long long)st->park.captures[PARK_CAPTURE_REUSED],
               (unsigned long long)st->park.captures[PARK_CAPTURE_CACHED],
               (unsigned long long)st->capture_failures, (unsigned long long)st->park.restores,
               (unsigned long long)st->parks, (unsigned long long)st->unparks,
               (unsigned long long)st->resident_evictions,
               (unsigned long long)st->cache.evictions,
               (unsigned long long)(st->park.shuttles_d2d + st->park.shuttles_host),
               run->shuttle_skipped, (unsigned long long)st->kv_failures);
        const persist_stats *ps = &st->park.persist;
        if (run->save_dir[0])
            printf(", \"save\": {\"images\": %llu, \"tokens\": %llu, \"bytes\": %llu, "
                   "\"seconds\": %.4f, \"ms_per_100k_mean\": %.4f, \"ms_per_100k_max\": %.4f, "
                   "\"failures\": %llu, \"dropped\": %llu, \"removed\": %llu}",
                   (unsigned long long)ps->saved, (unsigned long long)ps->tokens_saved,
                   (unsigned long long)ps->bytes_written, ps->save_seconds,
                   ps->tokens_saved ? ps->save_seconds * 1e8 / (double)ps->tokens_saved : 0,
                   ps->save_ms100k_max, (unsigned long long)ps->save_failures,
                   (unsigned long long)ps->save_dropped, (unsigned long long)ps->removed);
        printf("}");
    }
    printf("]}\n");
}

/* ---- options ------------------------------------------------------------------ */

void bench_workload_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --workload [--clients C] [--rounds R] [--tokens T]\n"
               "                        [--gen-tokens G] [--seed S] [--json] [options]\n\n"
               "C clients x R rounds of growing conversations served by the scheduler as\n"
               "`strata-cli serve` drives it (in-process, no HTTP), twice: the stage copies in\n"
               "parallel, then serial (STRATA_STAGE_COPY_PARALLEL=0).  Prints, per 100K tokens\n"
               "copied, n / median / mean / p90 / max of what parking cost inside each run, as\n"
               "park itself timed it: capture (fresh), capture (K/V reused), slot shuttle\n"
               "(each conversation that went idle, copied between steps into a spare\n"
               "sequence), restore; then the time to first token of each round and the\n"
               "scheduler's counters (captures, restores, parks, evictions).  The runs'\n"
               "greedy answers must agree; the last line says whether they did.  With\n"
               "--conversation-save DIR every committed image is also saved, as serve does,\n"
               "into DIR/parallel and DIR/serial (each must hold no images yet), and the\n"
               "writer's time per 100K tokens saved is the row \"save (writer)\".\n\n"
               "  --clients C             client threads, one conversation each (default %d)\n"
               "  --rounds R              requests per client (default %d)\n"
               "  --tokens T              tokens a conversation holds after R rounds, prompts\n"
               "                          and answers (default %d)\n"
               "  --gen-tokens G          tokens generated per request, greedy (default %d)\n"
               "  --seed S                random tokens' seed (default 1)\n"
               "  --json                  print one JSON object instead of the tables\n"
               "  -c, --ctx-size N        context per slot (default T + 1)\n\n"
               "Defaults besides: --batch %d, --kv-resident %d (at least one conversation),\n"
               "--conversation-cache-mib %d --conversation-cache-slots %d, and without\n"
               "--layer-split the layers cut into %d equal stages.\n\n",
            WL_CLIENTS, WL_ROUNDS, WL_TOKENS, WL_GEN, WL_SLOTS, WL_KV_RESIDENT, WL_CACHE_MIB,
            WL_CACHE_SLOTS, WL_STAGES);
    cli_opts_help(f, BENCH_WORKLOAD_USES & ~CLI_USE_CTX);
}

/* Without --layer-split: WL_STAGES equal stages (fewer for a model of fewer
 * layers), so there are stage copies to run in parallel. */
static int wl_default_split(cli_opts *o, char *buf, size_t n)
{
    model *m = NULL;
    strata_error err = {0};
    if (model_load(o->ep.model_path, &m, &err)) {
        fprintf(stderr, "strata-cli bench --workload: %s\n", err.msg);
        return -1;
    }
    int L = m->hp.n_layer, k = L < WL_STAGES ? L : WL_STAGES;
    model_free(m);
    buf[0] = '\0';
    for (int i = 1; i < k; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%d", i > 1 ? "," : "", L * i / k);
    }
    o->ep.layer_split = buf[0] ? buf : NULL;
    return 0;
}

int bench_workload(int argc, char **argv)
{
    wl_conf c = {.clients = WL_CLIENTS, .rounds = WL_ROUNDS, .tokens = WL_TOKENS,
                 .gen = WL_GEN, .seed = 1};
    cli_opts o;
    cli_opts_init(&o);
    o.uses = BENCH_WORKLOAD_USES;
    o.cmd = "bench";
    o.ep.n_slots = WL_SLOTS;               /* before parsing: the user's value wins */
    o.conv_cache_mib = WL_CACHE_MIB;
    o.conv_cache_slots = WL_CACHE_SLOTS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *iv = !strcmp(a, "--clients") ? &c.clients : !strcmp(a, "--rounds") ? &c.rounds
                : !strcmp(a, "--tokens") ? &c.tokens : !strcmp(a, "--gen-tokens") ? &c.gen
                : NULL;
        if (!strcmp(a, "--workload"))
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_workload_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            c.json = 1;
        } else if (iv || !strcmp(a, "--seed")) {
            long hi = !strcmp(a, "--tokens") ? STRATA_MAX_CTX - 1
                    : !strcmp(a, "--gen-tokens") ? STRATA_MAX_CTX - 1
                    : !strcmp(a, "--clients") ? 4096 : !strcmp(a, "--rounds") ? 65536 : 1L << 30;
            long x;
            if (bench_int("--workload", a, v, iv ? 1 : 0, hi, &x))
                return 2;
            i++;
            if (iv)
                *iv = (int)x;
            else
                c.seed = (uint64_t)x;
        } else {
            int r = cli_opts_parse(&o, "bench", argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                fprintf(stderr, "strata-cli bench --workload: unknown option '%s' (see "
                                "--help)\n", a);
                return 2;
            }
        }
    }
    if (cli_opts_check(&o, "bench"))
        return 2;
    /* every round adds at least one new token besides the answer */
    if (c.tokens / c.rounds < c.gen + 2) {
        fprintf(stderr, "strata-cli bench --workload: --tokens %d over --rounds %d is %d tokens "
                        "a round; each needs --gen-tokens %d + 2 at least\n", c.tokens, c.rounds,
                c.tokens / c.rounds, c.gen);
        return 2;
    }
    if ((int64_t)c.clients * c.rounds > 1 << 20) {
        fprintf(stderr, "strata-cli bench --workload: --clients x --rounds: at most %d "
                        "requests\n", 1 << 20);
        return 2;
    }
    if (!o.conv_cache_mib) {
        fprintf(stderr, "strata-cli bench --workload: the workload measures the conversation "
                        "cache: --conversation-cache-mib must be > 0\n");
        return 2;
    }
    if (!o.ep.n_ctx)
        o.ep.n_ctx = c.tokens + 1;
    int64_t one = ((int64_t)o.ep.n_ctx + KV_PAGE - 1) / KV_PAGE * KV_PAGE;
    if (!o.ep.kv_resident) {
        o.ep.kv_resident = one > WL_KV_RESIDENT ? (int)one : WL_KV_RESIDENT;
    } else if (o.ep.kv_resident < one) {
        fprintf(stderr, "strata-cli bench --workload: --kv-resident %d does not hold one "
                        "conversation of -c %d tokens (%lld in whole pages)\n",
                o.ep.kv_resident, o.ep.n_ctx, (long long)one);
        return 2;
    }
    if (cli_opts_default_model(&o, "bench"))
        return 2;
    wl_run runs[2] = {{.name = "parallel", .serial = 0, .c = &c},
                      {.name = "serial", .serial = 1, .c = &c}};
    for (int m = 0; m < 2 && o.conv_save_dir; m++) {
        strata_error serr = {0};
        if (wl_save_dir(o.conv_save_dir, &runs[m], &serr)) {
            fprintf(stderr, "strata-cli bench --workload: %s\n", serr.msg);
            return 2;
        }
    }
    char split[256];
    if (!o.ep.layer_split && wl_default_split(&o, split, sizeof split))
        return 1;
    o.ep.quiet = 1;

    strata_engine *e = NULL;
    strata_error err = {0};
    if (strata_open(&o.ep, &e, &err)) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
        return 1;
    }
    size_t token_bytes = 0;
    for (int i = 0; i < e->n_stages; i++)
        token_bytes += kv_page_bytes(e->stages[i].kv) / KV_PAGE;
    if (!c.json) {
        char desc[1024];
        strata_describe(e, desc, sizeof desc);
        printf("%s\n", desc);
        printf("workload: %d clients x %d rounds, conversations of %d tokens (%d generated a "
               "round), %d slots, %d stage(s) (split %s), K/V %.1f KiB/token; cache %zu MiB, "
               "%d images; kv-resident %d tokens a stage; stage copies %s\n",
               c.clients, c.rounds, c.tokens, c.gen, strata_n_slots(e), e->n_stages,
               o.ep.layer_split ? o.ep.layer_split : "none", token_bytes / 1024.0,
               o.conv_cache_mib, o.conv_cache_slots, o.ep.kv_resident,
               e->pool ? "parallel, then serial" : "one stage: both runs the same loop");
        fflush(stdout);
    }
    int rc = 0;
    for (int m = 0; m < 2 && !rc; m++) {
        if (!c.json)
            fprintf(stderr, "strata: bench --workload: %s stage copies ...\n", runs[m].name);
        rc = wl_run_once(e, &o, &runs[m], &err);
    }
    int diff = rc ? -1 : wl_first_difference(&c, &runs[0], &runs[1]);
    double *tmp = malloc((size_t)(c.clients > 1 ? c.clients : 1) * sizeof *tmp);
    if (!rc && !tmp)
        rc = strata_err(&err, STRATA_E_NOMEM, "out of memory");
    if (rc) {
        fprintf(stderr, "strata-cli bench --workload: %s\n", err.msg);
    } else if (c.json) {
        wl_print_json(&c, &o, e, runs, 2, diff < 0, tmp);
    } else {
        wl_print_text(&c, runs, 2, tmp);
        if (diff < 0)
            printf("answers: the same in both runs (%d requests, greedy)\n",
                   c.clients * c.rounds);
        else
            printf("answers: DIFFER between the runs, first at client %d round %d (greedy "
                   "answers should not depend on the copies)\n", diff / c.rounds,
                   diff % c.rounds + 1);
    }
    free(tmp);
    wl_run_free(&runs[0]);
    wl_run_free(&runs[1]);
    strata_close(e);
    return rc ? 1 : 0;
}
