/* test_main.c: one Check runner over every registered suite.
 *
 * It owns the run's temporary directory (test_tmp.c): made before the first
 * suite, removed after the last, and the run fails if a test left anything
 * behind in it or beside it.  Check's own CK_RUN_SUITE / CK_RUN_CASE
 * variables select suites and cases. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SUITES 64
static suite_fn suites[MAX_SUITES];
static int n_suites;

void test_register_suite(suite_fn fn)
{
    if (n_suites < MAX_SUITES)
        suites[n_suites++] = fn;
}

/* Print the skip log (one line per skipped test, with its class). */
static void print_skips(const char *skiplog)
{
    FILE *f = fopen(skiplog, "r");
    if (!f)
        return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (n++ == 0)
            printf("Skipped:\n");
        printf("  %s", line);
    }
    fclose(f);
}

/* Repeat the failures after the long skip list, so that a log's tail (all a
 * CI summary may keep) names the failing tests, not only their count. */
static void print_failures(SRunner *sr)
{
    TestResult **tr = srunner_failures(sr);
    int n = srunner_ntests_failed(sr);
    if (n > 0)
        printf("Failed:\n");
    for (int i = 0; i < n; i++)
        printf("  %s:%d: %s:%s: %s\n", tr_lfile(tr[i]), tr_lno(tr[i]), tr_tcname(tr[i]),
               tr_rtype(tr[i]) == CK_ERROR ? "error" : "failure", tr_msg(tr[i]));
    free(tr);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* Model-level tests take longer than Check's 4 s default. */
    setenv("CK_DEFAULT_TIMEOUT", "900", 0);
    if (test_check_require() != 0)
        return 2;
    char **before = NULL;
    int n_before = test_snapshot_names(&before);
    if (test_run_begin() != 0)
        return 2;
    char skiplog[1024];
    snprintf(skiplog, sizeof skiplog, "%s/skips", test_run_dir());
    setenv("STRATA_SKIP_LOG", skiplog, 1);

    SRunner *sr = NULL;
    for (int i = 0; i < n_suites; i++) {
        Suite *s = suites[i]();
        if (!sr)
            sr = srunner_create(s);
        else
            srunner_add_suite(sr, s);
    }
    if (!sr) {
        fprintf(stderr, "no suites registered\n");
        return 1;
    }
    srunner_run_all(sr, CK_NORMAL);
    print_skips(skiplog);
    print_failures(sr);

    int failed = srunner_ntests_failed(sr);
    int left = test_run_end(before, n_before);
    for (int i = 0; i < n_before; i++)
        free(before[i]);
    free(before);
    if (left)
        printf("%d temporary file(s) or directory(ies) left behind (named above): failing the run\n",
               left);
    /* The last line is Check's own summary. */
    srunner_print(sr, CK_MINIMAL);
    srunner_free(sr);
    return failed || left ? 1 : 0;
}
