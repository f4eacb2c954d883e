/* bench_conversations.c: `strata-cli bench --conversations` — long
 * conversations leaving and coming back: capture into the conversation
 * cache, restore from it, the slot shuttle, and the first token of a
 * follow-up turn restored vs re-read.
 *
 * Workload: C clients x R rounds.  Each client's conversation grows by
 * T / R random tokens a round (prefilled: random ids build a long K/V as
 * fast as the engine reads), so after R rounds it holds T tokens.  A round
 * of one client:
 *   - restore its image from the cache (rounds after the first) and read
 *     the new turn;
 *   - shuttle session -> slot -> session, once with the stage copies in
 *     parallel and once serial (STRATA_STAGE_COPY_PARALLEL=1 / =0, switched
 *     with stagepool_set_serial in this one process);
 *   - capture: the other mode first as a dry run (copied, sealed, then
 *     discarded), then the kept capture: fresh in round 1, "K/V reused"
 *     (only the new turn copied) after.
 * The mode that goes first alternates, so neither profits from warm caches.
 * Every time is also given per 100K tokens copied, next to the limit: the
 * bytes of the slowest stage over the pinned D2H bandwidth this run
 * measures (CUDA: >= 1 GiB cudaMemcpyAsync per stage's card; CPU: memcpy).
 *
 * Options (besides the engine's: -m --batch --kv --kv-resident
 * --layer-split --devices -c -t):
 *   --clients C (9)  --rounds R (3)  --tokens T (110000)  --followup F (128)
 *   --conversation-cache-mib M (default: room for every conversation)
 *   --conversation-cache-slots K (192)  --seed S  --json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench/bench.h"
#include "cli/options.h"
#include "engine/cuda/backend_cuda.h"
#include "engine/engine_internal.h"
#include "park/park.h"
#include "kernels/ops.h"

static double bc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- samples ------------------------------------------------------------------- */

enum { M_CAPTURE_FRESH, M_CAPTURE_REUSED, M_SHUTTLE, M_RESTORE, N_METRIC };
static const char *metric_name[N_METRIC] = {"capture (fresh)", "capture (K/V reused)",
                                            "slot shuttle", "restore"};
static const char *metric_key[N_METRIC] = {"capture_fresh", "capture_reused", "shuttle",
                                           "restore"};

typedef struct samples {
    double *ms100k;      /* ms per 100K tokens copied */
    double tokens, seconds, bytes;
    int n, cap;
} samples;

static int add_sample(samples *s, double seconds, int tokens, double bytes)
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
    s->tokens += tokens;
    s->seconds += seconds;
    s->bytes += bytes;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct summary {
    int n;
    double median, mean, p90, max, gbps;
} summary;

static summary summarize(samples *s)
{
    summary r = {0};
    r.n = s->n;
    if (!s->n)
        return r;
    qsort(s->ms100k, (size_t)s->n, sizeof *s->ms100k, cmp_double);
    double sum = 0;
    for (int i = 0; i < s->n; i++)
        sum += s->ms100k[i];
    r.mean = sum / s->n;
    r.median = s->n % 2 ? s->ms100k[s->n / 2]
                        : (s->ms100k[s->n / 2 - 1] + s->ms100k[s->n / 2]) / 2;
    int k = (int)(0.9 * s->n + 0.999999) - 1;   /* nearest rank */
    r.p90 = s->ms100k[k < 0 ? 0 : k];
    r.max = s->ms100k[s->n - 1];
    r.gbps = s->seconds > 0 ? s->bytes / s->seconds / 1e9 : 0;
    return r;
}

/* ---- the limit --------------------------------------------------------------------- */

/* The slowest card's pinned bandwidth (GB/s), device to host when to_host,
 * else host to device; CPU: one thread's memcpy (either way). */
static int measure_link(strata_engine *e, int to_host, double *gbps, strata_error *err)
{
#ifdef STRATA_CUDA
    if (e->backend == STRATA_BACKEND_CUDA) {
        double worst = 0;
        for (int i = 0; i < e->n_stages; i++) {
            int seen = 0;   /* stages sharing a card share its link: once per card */
            for (int k = 0; k < i; k++)
                seen |= e->stages[k].device == e->stages[i].device;
            if (seen)
                continue;
            double g;
            int rc = cuda_link_bandwidth(e->stages[i].device, (size_t)1 << 30, to_host, 5, &g,
                                         err);
            if (rc)
                return rc;
            if (!worst || g < worst)
                worst = g;
        }
        *gbps = worst;
        return 0;
    }
#endif
    (void)to_host;
    (void)e;
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return strata_err(err, STRATA_E_NOMEM, "out of memory for the memcpy measurement");
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int i = 0; i < 4; i++) {
        double t0 = bc_now();
        memcpy(b, a, n);
        double t = bc_now() - t0;
        if (i && (!best || t < best))
            best = t;
        a[i] = b[n - 1 - i];   /* keep the copies observable */
    }
    *gbps = (double)n / best / 1e9;
    free(a);
    free(b);
    return 0;
}

/* ---- the workload -------------------------------------------------------------------- */

typedef struct bench {
    strata_engine *e;
    strata_park *pk;
    samples s[2][N_METRIC];     /* [serial][metric] */
    size_t token_bytes;
    /* K/V bytes per token that cross the busiest card's host link: stages
     * on one card share it, stages on different cards copy side by side */
    size_t card_token_bytes;
    int op;                     /* alternates which mode goes first */
} bench;

static void set_serial(bench *b, int serial)
{
    if (b->e->pool)
        stagepool_set_serial(b->e->pool, serial);
}

static int timed_capture(bench *b, strata_seq *s, int serial, int flags, int *kind,
                         strata_error *err)
{
    park_stats before, after;
    park_get_stats(b->pk, &before);
    set_serial(b, serial);
    double t0 = bc_now();
    int rc = park_capture(b->pk, s, -1, flags, kind, err);
    double t = bc_now() - t0;
    if (rc)
        return rc;
    park_get_stats(b->pk, &after);
    double bytes = (double)(after.bytes_d2h - before.bytes_d2h);
    int tokens = (int)(bytes / (double)b->token_bytes + 0.5);
    if (*kind == PARK_CAPTURE_CACHED || tokens <= 0)
        return 0;
    int m = *kind == PARK_CAPTURE_FRESH ? M_CAPTURE_FRESH : M_CAPTURE_REUSED;
    return add_sample(&b->s[serial][m], t, tokens, bytes) ? STRATA_E_NOMEM : 0;
}

static int timed_shuttle(bench *b, strata_seq *from, strata_seq *to, int serial,
                         strata_error *err)
{
    set_serial(b, serial);
    int n = strata_seq_len(from);
    double t0 = bc_now();
    int rc = park_shuttle(b->pk, from, to, 0, err);
    double t = bc_now() - t0;
    if (rc)
        return rc;
    return add_sample(&b->s[serial][M_SHUTTLE], t, n, (double)n * b->token_bytes)
               ? STRATA_E_NOMEM : 0;
}

static int timed_restore(bench *b, strata_seq *s, const int32_t *tok, int n, int serial,
                         int *got, strata_error *err)
{
    set_serial(b, serial);
    strata_seq_reset(s);
    double t0 = bc_now();
    int rc = park_restore(b->pk, s, tok, n, got, err);
    double t = bc_now() - t0;
    if (rc || *got <= 0)
        return rc;
    return add_sample(&b->s[serial][M_RESTORE], t, *got, (double)*got * b->token_bytes)
               ? STRATA_E_NOMEM : 0;
}

/* One client's round: restore (after round 0), read the turn, shuttle,
 * capture.  hist holds the client's whole conversation. */
static int client_round(bench *b, strata_seq *session, strata_seq *slot, const int32_t *hist,
                        int n0, int n1, strata_error *err)
{
    int rc = 0, got = 0, first = b->op++ % 2;
    if (n0 > 0) {
        /* restore in both modes; the second restore is the one kept */
        for (int k = 0; k < 2 && !rc; k++)
            rc = timed_restore(b, session, hist, n0 + 1, k ? !first : first, &got, err);
        if (!rc && got != n0)
            rc = strata_err(err, STRATA_E_NOTFOUND, "round restore found %d of %d tokens", got,
                            n0);
    }
    if (!rc)
        rc = strata_seq_feed(session, hist + n0, n1 - n0, NULL, NULL, err);
    /* session -> slot -> session, in each mode */
    for (int k = 0; k < 2 && !rc; k++) {
        int serial = k ? !first : first;
        rc = timed_shuttle(b, session, slot, serial, err);
        if (!rc)
            rc = timed_shuttle(b, slot, session, serial, err);
    }
    int kind;
    if (!rc)
        rc = timed_capture(b, session, !first, PARK_CAPTURE_DRY, &kind, err);
    if (!rc)
        rc = timed_capture(b, session, first, 0, &kind, err);
    if (!rc && kind != (n0 ? PARK_CAPTURE_REUSED : PARK_CAPTURE_FRESH))
        rc = strata_err(err, STRATA_E_LIMIT, "capture of tokens [%d, %d) was kind %d (the "
                        "cache is too small for the workload?)", n0, n1, kind);
    strata_seq_reset(session);
    return rc;
}

/* Time to the first token of a follow-up turn: restored vs re-read. */
static int time_followup(bench *b, strata_seq *s, const int32_t *hist, int n, int f,
                         double *restored_s, double *reread_s, strata_error *err)
{
    int V = strata_n_vocab(b->e), got = 0;
    float *lg = malloc((size_t)V * sizeof *lg), *lg_a = malloc((size_t)V * sizeof *lg_a);
    if (!lg || !lg_a) {
        free(lg);
        free(lg_a);
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    }
    set_serial(b, 0);
    strata_seq_reset(s);
    double t0 = bc_now();
    int rc = park_restore(b->pk, s, hist, n + f, &got, err);
    if (!rc)
        rc = strata_seq_feed(s, hist + got, n + f - got, lg, NULL, err);
    int32_t first_a = rc ? -1 : cpu_argmax(lg, V);
    *restored_s = bc_now() - t0;
    memcpy(lg_a, lg, (size_t)V * sizeof *lg);
    strata_seq_reset(s);
    t0 = bc_now();
    if (!rc)
        rc = strata_seq_feed(s, hist, n + f, lg, NULL, err);
    int32_t first_b = rc ? -1 : cpu_argmax(lg, V);
    *reread_s = bc_now() - t0;
    strata_seq_reset(s);
    /* The invariance rule promises the same bits, not only the same argmax
     * (a random model's argmax hides most differences). */
    int differ = 0;
    for (int i = 0; !rc && i < V; i++)
        differ += memcmp(lg + i, lg_a + i, sizeof *lg) != 0;
    free(lg);
    free(lg_a);
    if (!rc && differ)
        rc = strata_err(err, STRATA_E_FORMAT, "the restored follow-up's logits differ from the "
                        "re-read one's in %d of %d (first token %d vs %d; restored %d of %d "
                        "tokens)", differ, V, first_a, first_b, got, n + f);
    return rc;
}

void bench_conversations_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --conversations [--clients C] [--rounds R] [--tokens T]\n"
               "                        [--followup F] [--conversation-cache-mib M] [--json]\n"
               "                        [options]\n\n"
               "C clients x R rounds of long conversations leaving and coming back: capture\n"
               "into the conversation cache, restore from it, the slot shuttle (stage copies in\n"
               "parallel and serial), and a follow-up's first token restored vs re-read.\n\n"
               "  --clients C             conversations (default 9)\n"
               "  --rounds R              rounds each (default 3)\n"
               "  --tokens T              tokens a conversation holds after R rounds\n"
               "                          (default 110000)\n"
               "  --followup F            tokens of a follow-up turn (default 128)\n"
               "  --conversation-cache-mib M  the cache (default: room for every conversation)\n"
               "  --conversation-cache-slots K  most conversations kept (default 192)\n"
               "  --seed S                random tokens' seed (default 1)\n"
               "  --json                  print one JSON object instead of the table\n"
               "  -c, --ctx-size N        context per slot (default T + F + 1)\n");
    cli_opts_help(f, BENCH_CONVERSATIONS_USES & ~CLI_USE_CTX);
}

int bench_conversations(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = BENCH_CONVERSATIONS_USES;
    o.cmd = "bench";
    int clients = 9, rounds = 3, tokens = 110000, followup = 128, json = 0, slots = 192;
    long mib = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *iv = !strcmp(a, "--clients") ? &clients : !strcmp(a, "--rounds") ? &rounds
                : !strcmp(a, "--tokens") ? &tokens : !strcmp(a, "--followup") ? &followup
                : !strcmp(a, "--conversation-cache-slots") ? &slots : NULL;
        long x = 0;
        if (!strcmp(a, "--conversations"))
            continue;
        else if (iv || !strcmp(a, "--conversation-cache-mib") || !strcmp(a, "--seed")) {
            /* strict and bounded: every product below is then formed in
             * 64 bits from values that cannot wrap it (--tokens 2147483647
             * used to overflow tokens + followup + 1) */
            int is_tok = !strcmp(a, "--tokens") || !strcmp(a, "--followup");
            long hi = is_tok ? STRATA_MAX_CTX : !strcmp(a, "--clients") ? 4096
                    : !strcmp(a, "--rounds") ? 65536 : 1 << 30;
            if (bench_int("--conversations", a, v, iv ? 1 : 0, hi, &x))
                return 2;
            i++;
            if (iv)
                *iv = (int)x;
            else if (!strcmp(a, "--seed"))
                seed = (uint64_t)x;
            else
                mib = x;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else {
            int r = cli_opts_parse(&o, "bench", argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                fprintf(stderr, "strata-cli bench --conversations: unknown option '%s'\n", a);
                return 2;
            }
        }
    }
    if (clients < 1 || rounds < 1 || tokens < rounds || followup < 1 || slots < 1) {
        fprintf(stderr, "strata-cli bench --conversations: --clients, --rounds, --followup, "
                        "--conversation-cache-slots must be >= 1 and --tokens >= --rounds\n");
        return 2;
    }
    if (cli_opts_default_model(&o, "bench"))
        return 2;
    if ((int64_t)tokens + followup + 1 > STRATA_MAX_CTX) {
        fprintf(stderr, "strata-cli bench --conversations: --tokens %d + --followup %d: a "
                        "conversation of more than %d tokens\n", tokens, followup, STRATA_MAX_CTX);
        return 2;
    }
    if (!o.ep.n_ctx)
        o.ep.n_ctx = tokens + followup + 1;
    if (!o.ep.kv_resident)
        o.ep.kv_resident = 524288 > 2 * o.ep.n_ctx ? 524288 : 2 * o.ep.n_ctx;
    if (o.ep.n_slots < 4 && !getenv("STRATA_BENCH_KEEP_SLOTS"))
        o.ep.n_slots = 4;
    o.ep.quiet = 1;

    strata_error err = {0};
    bench b;
    memset(&b, 0, sizeof b);
    int rc = strata_open(&o.ep, &b.e, &err);
    if (rc) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
        return 1;
    }
    strata_engine *e = b.e;
    for (int i = 0; i < e->n_stages; i++) {
        b.token_bytes += kv_page_bytes(e->stages[i].kv) / KV_PAGE;
        size_t card = 0;
        for (int k = 0; k < e->n_stages; k++)
            if (e->stages[k].device == e->stages[i].device)
                card += kv_page_bytes(e->stages[k].kv) / KV_PAGE;
        if (card > b.card_token_bytes)
            b.card_token_bytes = card;
    }
    if (!mib) /* every conversation, plus room for a dry capture, plus 10 % */
        mib = (long)((double)b.token_bytes * ((double)clients * tokens * 1.1 + tokens) /
                     1048576.0) + 16;
    b.pk = park_new(e, (size_t)mib, slots, &err);
    double d2h = 0, h2d = 0;
    if (!b.pk || measure_link(e, 1, &d2h, &err) || measure_link(e, 0, &h2d, &err)) {
        fprintf(stderr, "strata-cli bench: %s\n", err.msg);
        park_free(b.pk);
        strata_close(e);
        return 1;
    }
    char desc[1024];
    strata_describe(e, desc, sizeof desc);
    if (!json) {
        printf("%s\n", desc);
        printf("conversations: %d clients x %d rounds, %d tokens each (+%d follow-up); K/V %.1f "
               "KiB/token over %d stage(s); cache %ld MiB, %d slots; pool %s\n",
               clients, rounds, tokens, followup, b.token_bytes / 1024.0, e->n_stages, mib,
               slots, e->pool ? "parallel and serial" : "none (one stage: both modes are the "
                                                          "same loop)");
        fflush(stdout);
    }

    int32_t *hist = malloc((size_t)(tokens + followup) * sizeof *hist);
    strata_seq *session = strata_seq_new(e, &err), *slot = strata_seq_new(e, &err);
    if (!hist || !session || !slot)
        rc = strata_err(&err, STRATA_E_NOMEM, "out of memory");
    int V = strata_n_vocab(e);
    double wall0 = bc_now();
    for (int r = 0; r < rounds && !rc; r++)
        for (int c = 0; c < clients && !rc; c++) {
            uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)c + 1;
            for (int i = 0; i < tokens + followup; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                hist[i] = (int32_t)(x % (uint64_t)V);
            }
            int n0 = (int)((long)tokens * r / rounds), n1 = (int)((long)tokens * (r + 1) / rounds);
            rc = client_round(&b, session, slot, hist, n0, n1, &err);
            if (!json && !rc) {
                fprintf(stderr, "\rround %d/%d client %d/%d (%.0f s)   ", r + 1, rounds, c + 1,
                        clients, bc_now() - wall0);
            }
        }
    if (!json)
        fprintf(stderr, "\n");
    /* the follow-up of the last client's conversation (its hist is current) */
    double ttft_restored = 0, ttft_reread = 0;
    if (!rc)
        rc = time_followup(&b, session, hist, tokens, followup, &ttft_restored, &ttft_reread,
                           &err);
    if (rc) {
        fprintf(stderr, "strata-cli bench --conversations: %s\n", err.msg);
    } else {
        /* the copy's floor per 100K tokens: the busiest card's bytes over
         * its measured bandwidth (cards copy at the same time); D2H for
         * captures and the shuttle, H2D for restores */
        double floor_ms = (double)b.card_token_bytes * 100000.0 / (d2h * 1e9) * 1e3;
        double floor_h2d_ms = (double)b.card_token_bytes * 100000.0 / (h2d * 1e9) * 1e3;
        summary sm[2][N_METRIC];
        for (int m = 0; m < 2; m++)
            for (int k = 0; k < N_METRIC; k++)
                sm[m][k] = summarize(&b.s[m][k]);
        convcache_stats cs;
        convcache_get_stats(park_cache(b.pk), &cs);
        if (json) {
            printf("{\"model\": \"%s\", \"backend\": \"%s\", \"stages\": %d, \"clients\": %d, "
                   "\"rounds\": %d, \"tokens\": %d, \"kv_bytes_per_token\": %zu, "
                   "\"d2h_gbps\": %.3f, \"h2d_gbps\": %.3f, \"floor_ms_per_100k\": %.3f, "
                   "\"floor_h2d_ms_per_100k\": %.3f, \"metrics\": {",
                   o.ep.model_path, strata_backend(e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu",
                   e->n_stages, clients, rounds, tokens, b.token_bytes, d2h, h2d, floor_ms,
                   floor_h2d_ms);
            for (int k = 0; k < N_METRIC; k++)
                for (int m = 0; m < 2; m++) {
                    summary *s = &sm[m][k];
                    printf("%s\"%s_parallel%d\": {\"n\": %d, \"median_ms\": %.3f, "
                           "\"mean_ms\": %.3f, \"p90_ms\": %.3f, \"max_ms\": %.3f, "
                           "\"gbps\": %.3f}", k || m ? ", " : "", metric_key[k], !m, s->n,
                           s->median, s->mean, s->p90, s->max, s->gbps);
                }
            printf("}, \"ttft_restored_ms\": %.3f, \"ttft_reread_ms\": %.3f, "
                   "\"cache\": {\"images\": %d, \"bytes_used\": %zu, \"hits\": %llu, "
                   "\"evictions\": %llu, \"bytes_reused\": %llu}}\n",
                   ttft_restored * 1e3, ttft_reread * 1e3, cs.images, cs.bytes_used,
                   (unsigned long long)cs.hits, (unsigned long long)cs.evictions,
                   (unsigned long long)cs.bytes_reused);
        } else {
            const char *how = strata_backend(e) == STRATA_BACKEND_CUDA
                                  ? "cudaMemcpyAsync 1 GiB, slowest card"
                                  : "host memcpy, one thread";
            printf("pinned D2H limit: %.2f GB/s, H2D %.2f GB/s (%s) -> floor %.2f / %.2f ms per "
                   "100K tokens (busiest card: %.1f KiB/token)\n", d2h, h2d, how, floor_ms,
                   floor_h2d_ms, b.card_token_bytes / 1024.0);
            printf("ms per 100K tokens copied        parallel  n   median     mean      p90"
                   "      max    GB/s  x floor\n");
            for (int k = 0; k < N_METRIC; k++)
                for (int m = 0; m < 2; m++) {
                    summary *s = &sm[m][k];
                    printf("%-32s %8d %3d %8.2f %8.2f %8.2f %8.2f %7.2f %7.2f\n",
                           m ? "" : metric_name[k], !m, s->n, s->median, s->mean, s->p90,
                           s->max, s->gbps,
                           s->n ? s->median / (k == M_RESTORE ? floor_h2d_ms : floor_ms) : 0);
                }
            printf("follow-up of %d tokens after %d: first token restored %.1f ms, re-read %.1f "
                   "ms (%.1fx sooner)\n", followup, tokens, ttft_restored * 1e3,
                   ttft_reread * 1e3, ttft_restored > 0 ? ttft_reread / ttft_restored : 0);
            printf("cache: %d images, %.1f of %ld MiB, %llu hits, %llu evictions, %.1f MiB "
                   "reused by reference\n", cs.images, cs.bytes_used / 1048576.0, mib,
                   (unsigned long long)cs.hits, (unsigned long long)cs.evictions,
                   cs.bytes_reused / 1048576.0);
        }
    }
    strata_seq_free(session);
    strata_seq_free(slot);
    free(hist);
    park_free(b.pk);
    strata_close(e);
    return rc ? 1 : 0;
}
