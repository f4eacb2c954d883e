/* test_smoke.c: the error record. */
#include "testutil.h"

#include "base/error.h"

START_TEST(error_formats_and_returns_code)
{
    strata_error e;
    int rc = strata_err(&e, STRATA_E_FORMAT, "file %s: field %s = %d", "x.gguf", "version", 7);
    ck_assert_int_eq(rc, STRATA_E_FORMAT);
    ck_assert_int_eq(e.code, STRATA_E_FORMAT);
    ck_assert_str_eq(e.msg, "file x.gguf: field version = 7");
    ck_assert_str_eq(strata_strerror(STRATA_E_FORMAT), "format error");
    ck_assert_int_eq(strata_err(NULL, STRATA_E_IO, "ignored"), STRATA_E_IO);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, error_formats_and_returns_code);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(error_suite)
