/* test_main.c: one Check runner over every registered suite. */
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

int main(int argc, char **argv)
{
    /* Model-level tests take longer than Check's 4 s default. */
    setenv("CK_DEFAULT_TIMEOUT", "900", 0);
    char skiplog[] = "/tmp/strata-skips-XXXXXX";
    int fd = mkstemp(skiplog);
    if (fd >= 0)
        setenv("STRATA_SKIP_LOG", skiplog, 1);

    /* Check's own CK_RUN_SUITE / CK_RUN_CASE variables select suites. */
    (void)argc;
    (void)argv;
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

    FILE *f = fopen(skiplog, "r");
    if (f) {
        char line[1024];
        int n = 0;
        while (fgets(line, sizeof line, f)) {
            if (n++ == 0)
                printf("Skipped:\n");
            printf("  %s", line);
        }
        fclose(f);
        remove(skiplog);
    }
    int failed = srunner_ntests_failed(sr);
    /* The last line is Check's own summary. */
    srunner_print(sr, CK_MINIMAL);
    srunner_free(sr);
    return failed ? 1 : 0;
}
