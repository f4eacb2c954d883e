/* test_bench_workload.c: `strata-cli bench --workload` end to end (suite
 * `bench_workload`).  A small run on the tiny generated llama (three
 * clients, two slots, a pool and a cache too small for them, so that it
 * evicts, parks, captures and restores), then the table is read back and
 * held against the scheduler's own counters printed beside it: every
 * figure row counts exactly the copies those counters say happened (the
 * rows come from park's per-copy reports, the counters from park_stats:
 * two ways of counting the same copies), every distribution is ordered
 * (median <= p90 <= max, mean within [median/100, max]), the rounds' time
 * to first token counts one per client, and both runs answered alike. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WL_CLIENTS 3
#define WL_ROUNDS 3
#define WL_TOKENS 600

enum { F_FRESH, F_REUSED, F_SHUTTLE, F_RESTORE, N_FIG };
static const char *fig_name[N_FIG] = {"capture (fresh)", "capture (K/V reused)", "slot shuttle",
                                      "restore"};

typedef struct fig {
    int seen, n;
    double median, mean, p90, max, gbps;
} fig;

typedef struct counters {
    int seen, requests;
    double wall;
    unsigned long long captures, fresh, reused, cached, failures, restores, parks, unparks,
        ev_slots, ev_cache, shuttles;
    int skipped;
} counters;

typedef struct table {
    fig f[2][N_FIG];            /* [parallel, serial][figure] */
    int ttft_rows[2];
    counters c[2];
    int same_answers;
} table;

static int mode_of(const char *w)
{
    return !strcmp(w, "parallel") ? 0 : !strcmp(w, "serial") ? 1 : -1;
}

/* Read the text report; fails the test on a line it cannot place. */
static void parse(char *out, table *t)
{
    memset(t, 0, sizeof *t);
    int section = 0, fig_i = -1, ttft_mode = -1;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "strata:", 7))
            continue;   /* progress on stderr, merged in */
        if (!strncmp(line, "ms per 100K tokens copied", 25)) {
            section = 1;
            continue;
        }
        if (!strncmp(line, "time to first token", 19)) {
            section = 2;
            continue;
        }
        if (!strncmp(line, "answers: the same in both runs", 30)) {
            t->same_answers = 1;
            continue;
        }
        char mode[16];
        counters c = {0};
        if (sscanf(line, "%15[a-z]: wall %lf s, %d requests; captures %llu (fresh %llu, K/V "
                         "reused %llu, already cached %llu), capture failures %llu; restores "
                         "%llu; parks %llu (unparks %llu); evictions: %llu from slots, %llu "
                         "from the cache; shuttles %llu (%d skipped",
                   mode, &c.wall, &c.requests, &c.captures, &c.fresh, &c.reused, &c.cached,
                   &c.failures, &c.restores, &c.parks, &c.unparks, &c.ev_slots, &c.ev_cache,
                   &c.shuttles, &c.skipped) == 15) {
            int m = mode_of(mode);
            ck_assert_msg(m >= 0, "counters of an unknown run: %s", line);
            c.seen = 1;
            t->c[m] = c;
            section = 0;
            continue;
        }
        if (section == 1 && strlen(line) > 28) {
            for (int k = 0; k < N_FIG; k++)
                if (!strncmp(line, fig_name[k], strlen(fig_name[k])))
                    fig_i = k;
            fig x = {.seen = 1};
            ck_assert_msg(fig_i >= 0 && sscanf(line + 28, "%15s %d %lf %lf %lf %lf %lf", mode,
                                               &x.n, &x.median, &x.mean, &x.p90, &x.max,
                                               &x.gbps) == 7 && mode_of(mode) >= 0,
                          "not a figure row: '%s'", line);
            t->f[mode_of(mode)][fig_i] = x;
            continue;
        }
        if (section == 2) {
            int round, n;
            double med, p90, max, prompt, resident, restored, read;
            const char *p = line + 28;
            if (sscanf(p, "%15[a-z]", mode) == 1) {
                ttft_mode = mode_of(mode);
                p += strspn(p, " ") + strlen(mode);
            }
            ck_assert_msg(ttft_mode >= 0 &&
                              sscanf(p, "%d %d %lf %lf %lf %lf %lf %lf %lf", &round, &n, &med,
                                     &p90, &max, &prompt, &resident, &restored, &read) == 9,
                          "not a round row: '%s'", line);
            t->ttft_rows[ttft_mode]++;
            ck_assert_msg(round == t->ttft_rows[ttft_mode], "round %d out of order: '%s'", round,
                          line);
            ck_assert_msg(n == WL_CLIENTS, "round %d: %d first tokens, %d clients", round, n,
                          WL_CLIENTS);
            ck_assert_msg(med > 0 && med <= p90 && p90 <= max, "round %d unordered: '%s'", round,
                          line);
            ck_assert_msg(resident + restored + read > prompt - 0.5 &&
                              resident + restored + read < prompt + 0.5,
                          "round %d: kept + restored + read != prompt: '%s'", round, line);
            continue;
        }
    }
}

START_TEST(table_counts_what_happened)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_tiny_llama("bench-workload-llama", 400, 13);
    char *out = NULL;
    /* conversations of 3 pages, a pool of 4 pages for two slots, a cache
     * of a few conversations: evictions, parks, restores all happen */
    int rc = test_runf(&out, "'%s' bench --workload -m '%s' --backend cpu -t 1 --clients %d "
                             "--rounds %d --tokens %d --gen-tokens 6 --batch 2 --kv-resident "
                             "1024 --conversation-cache-mib 1 --conversation-cache-slots 4 "
                             "2>&1", cli, model, WL_CLIENTS, WL_ROUNDS, WL_TOKENS);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    char *copy = strdup(out);
    table t;
    parse(copy, &t);
    free(copy);
    ck_assert_msg(t.same_answers, "the runs answered differently:\n%s", out);
    for (int m = 0; m < 2; m++) {
        const counters *c = &t.c[m];
        ck_assert_msg(c->seen && c->requests == WL_CLIENTS * WL_ROUNDS,
                      "run %d's counters missing:\n%s", m, out);
        ck_assert_msg(t.ttft_rows[m] == WL_ROUNDS, "run %d: %d round rows:\n%s", m,
                      t.ttft_rows[m], out);
        ck_assert_msg(c->captures == c->fresh + c->reused + c->cached,
                      "captures %llu != fresh + reused + cached:\n%s", c->captures, out);
        unsigned long long want[N_FIG] = {c->fresh, c->reused, c->shuttles, c->restores};
        for (int k = 0; k < N_FIG; k++) {
            const fig *f = &t.f[m][k];
            ck_assert_msg(f->seen, "run %d: no row for %s:\n%s", m, fig_name[k], out);
            ck_assert_msg((unsigned long long)f->n == want[k], "run %d %s: n = %d, the "
                          "counters say %llu:\n%s", m, fig_name[k], f->n, want[k], out);
            if (f->n)
                ck_assert_msg(f->median > 0 && f->median <= f->p90 && f->p90 <= f->max &&
                                  f->mean <= f->max && f->mean >= f->median / 100 &&
                                  f->gbps > 0,
                              "run %d %s: unordered figures:\n%s", m, fig_name[k], out);
        }
        /* the workload was sized to make every path happen */
        ck_assert_msg(c->fresh > 0 && c->reused > 0 && c->restores > 0 && c->parks > 0 &&
                          c->ev_slots > 0 && c->ev_cache > 0 && c->shuttles > 0,
                      "run %d did not evict, park, capture and restore:\n%s", m, out);
        ck_assert_msg(c->parks == c->unparks, "run %d: %llu parks, %llu unparks", m, c->parks,
                      c->unparks);
    }
    free(out);
    /* the same in JSON: one object that says the answers agreed */
    rc = test_runf(&out, "'%s' bench --workload -m '%s' --backend cpu -t 1 --clients 2 "
                         "--rounds 2 --tokens 120 --gen-tokens 4 --batch 2 "
                         "--conversation-cache-mib 1 --json 2>/dev/null", cli, model);
    ck_assert_msg(rc == 0 && out[0] == '{' && strstr(out, "\"same_answers\": true") &&
                      strstr(out, "\"capture_fresh\": {\"n\": "),
                  "--json: exit %d:\n%s", rc, out);
    free(out);
}
END_TEST

START_TEST(bad_sizes_refused)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_tiny_llama("bench-workload-llama", 400, 13);
    char *out = NULL;
    /* 10 tokens over 3 rounds leaves no room for 8 answer tokens a round */
    int rc = test_runf(&out, "'%s' bench --workload -m '%s' --tokens 10 --rounds 3 "
                             "--gen-tokens 8 2>&1", cli, model);
    ck_assert_msg(rc == 2 && strstr(out, "--gen-tokens 8"), "exit %d:\n%s", rc, out);
    free(out);
    rc = test_runf(&out, "'%s' bench --workload -m '%s' --tokens 1000 --kv-resident 256 2>&1",
                   cli, model);
    ck_assert_msg(rc == 2 && strstr(out, "--kv-resident 256"), "exit %d:\n%s", rc, out);
    free(out);
    rc = test_runf(&out, "'%s' bench --workload -m '%s' --conversation-cache-mib 0 2>&1", cli,
                   model);
    ck_assert_msg(rc == 2 && strstr(out, "--conversation-cache-mib"), "exit %d:\n%s", rc, out);
    free(out);
}
END_TEST

/* --conversation-save: each run saves into its own subdirectory, the
 * writer's time is a row of the table whose count is the images the
 * summary says were saved, and a directory that already holds images is
 * refused (they would be loaded, turning first reads into restores). */
START_TEST(saves_are_timed)
{
    const char *cli = test_cli();
    if (!cli)
        TEST_SKIP("cli", "strata-cli not built (STRATA_CLI unset; run via make test)");
    const char *model = test_tiny_llama("bench-workload-llama", 400, 13);
    const char *dir = test_tmpdir();
    char *out = NULL;
    const char *fmt = "'%s' bench --workload -m '%s' --backend cpu -t 1 --clients %d --rounds %d "
                      "--tokens %d --gen-tokens 6 --batch 2 --kv-resident 1024 "
                      "--conversation-cache-mib 1 --conversation-cache-slots 4 "
                      "--conversation-save '%s/save' 2>&1";
    int rc = test_runf(&out, fmt, cli, model, WL_CLIENTS, WL_ROUNDS, WL_TOKENS, dir);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "answers: the same in both runs"), "%s", out);
    const char *name[2] = {"parallel", "serial"};
    for (int m = 0; m < 2; m++) {
        char key[700];
        snprintf(key, sizeof key, "%s: saved to %s/save/%s: ", name[m], dir, name[m]);
        const char *p = strstr(out, key);
        unsigned long long saved = 0, tokens = 0, failed = 9, dropped = 9;
        double mib = 0, secs = 0;
        ck_assert_msg(p && sscanf(p + strlen(key), "%llu images, %llu tokens, %lf MiB in %lf s "
                                  "of the writer; %llu failed, %llu not queued", &saved,
                                  &tokens, &mib, &secs, &failed, &dropped) == 6,
                      "no save line for %s:\n%s", name[m], out);
        ck_assert_msg(saved > 0 && tokens > saved && mib > 0 && secs > 0 && failed == 0,
                      "%s saved nothing:\n%s", name[m], out);
        /* the row: "save (writer)" on the first run's line, blank on the second's */
        const char *row = strstr(out, "save (writer)");
        ck_assert_ptr_nonnull(row);
        if (m)
            row = strchr(row, '\n') + 1;
        char mode[16], dash1[4], dash2[4];
        int n = 0;
        double mean = 0, max = 0, gbps = 0;
        ck_assert_msg(sscanf(row + 28, "%15s %d %3s %lf %3s %lf %lf", mode, &n, dash1, &mean,
                             dash2, &max, &gbps) == 7 && !strcmp(mode, name[m]),
                      "no save row for %s:\n%s", name[m], out);
        ck_assert_msg((unsigned long long)n == saved && mean > 0 && max >= mean && gbps > 0,
                      "%s: save row n %d mean %.2f max %.2f, %llu saved:\n%s", name[m], n,
                      mean, max, saved, out);
        char sub[700];
        snprintf(sub, sizeof sub, "ls '%s/save/%s' | grep -c 'skv$'", dir, name[m]);
        char *ls = NULL;
        ck_assert_int_eq(test_runf(&ls, "%s", sub), 0);
        ck_assert_msg(atoi(ls) > 0, "no images in %s/save/%s", dir, name[m]);
        free(ls);
    }
    free(out);
    rc = test_runf(&out, fmt, cli, model, WL_CLIENTS, WL_ROUNDS, WL_TOKENS, dir);
    ck_assert_msg(rc == 2 && strstr(out, "saved images from an earlier run"), "exit %d:\n%s",
                  rc, out);
    free(out);
}
END_TEST

static Suite *bench_workload_suite(void)
{
    Suite *s = suite_create("bench_workload");
    TCase *tc = tcase_create("bench_workload");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, table_counts_what_happened);
    tcase_add_test(tc, bad_sizes_refused);
    tcase_add_test(tc, saves_are_timed);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(bench_workload_suite)
