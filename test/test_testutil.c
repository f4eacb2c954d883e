/* test_testutil.c: the helpers every suite stands on (test_tmp.c,
 * test_util.c): fixtures made once per run, test directories inside the
 * run's directory, the class a one-argument TEST_SKIP takes. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_probe(const char *path, const void *arg, char *why, size_t n_why)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(why, n_why, "cannot write %s", path);
        return -1;
    }
    fputs((const char *)arg, f);
    return fclose(f) == 0 ? 0 : -1;
}

static int must_not_run(const char *path, const void *arg, char *why, size_t n_why)
{
    (void)path;
    (void)arg;
    snprintf(why, n_why, "the fixture was made again instead of reused");
    return -1;
}

/* The first test makes the fixture; the second (its own process: Check
 * forks per test) must find it, or must_not_run fails it.  Under
 * CK_FORK=no both run in one process and the same holds. */
START_TEST(fixture_is_made_once)
{
    const char *p = test_fixture("testutil-probe.txt", write_probe, "made once");
    const char *q = test_fixture("testutil-probe.txt", must_not_run, NULL);
    ck_assert_str_eq(p, q);
    ck_assert_ptr_eq(p, q); /* one path per key */
    ck_assert_ptr_nonnull(strstr(p, test_run_dir()));
}
END_TEST

START_TEST(fixture_is_reused_by_a_later_test)
{
    const char *p = test_fixture("testutil-probe.txt", must_not_run, NULL);
    char *out = NULL;
    ck_assert_int_eq(test_runf(&out, "cat '%s'", p), 0);
    ck_assert_str_eq(out, "made once");
    free(out);
}
END_TEST

START_TEST(tmpdirs_are_fresh_and_inside_the_run)
{
    const char *a = test_tmpdir(), *b = test_tmpdir();
    ck_assert_str_ne(a, b);
    const char *run = test_run_dir();
    ck_assert_int_eq(strncmp(a, run, strlen(run)), 0);
    struct stat st;
    ck_assert_int_eq(stat(a, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    /* children write their temporary files into the run too */
    ck_assert_str_eq(getenv("TMPDIR"), run);
}
END_TEST

START_TEST(old_style_skips_get_a_class)
{
    ck_assert_str_eq(test_skip_class_of("demo model not present (make model)"), "model");
    ck_assert_str_eq(test_skip_class_of("python3 with numpy and gguf not available"), "python");
    ck_assert_str_eq(test_skip_class_of("built without CUDA"), "gpu");
    ck_assert_str_eq(test_skip_class_of("strata-cli not built (STRATA_CLI unset)"), "cli");
    ck_assert_str_eq(test_skip_class_of("tmux not installed"), "tool");
    ck_assert_str_eq(test_skip_class_of("Q2_0 with --kv f16 (set STRATA_SLOW_TESTS=1)"), "slow");
    ck_assert_str_eq(test_skip_class_of("something else"), "other");
}
END_TEST

static Suite *testutil_suite(void)
{
    Suite *s = suite_create("testutil");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, fixture_is_made_once);
    tcase_add_test(tc, fixture_is_reused_by_a_later_test);
    tcase_add_test(tc, tmpdirs_are_fresh_and_inside_the_run);
    tcase_add_test(tc, old_style_skips_get_a_class);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(testutil_suite)
