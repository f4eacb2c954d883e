/* testutil.h: what every suite shares.
 *
 * A suite file defines `static Suite *foo_suite(void)` and registers it with
 * TEST_SUITE(foo_suite); test_main.c runs every registered suite in one
 * Check runner so `make test` ends with Check's summary line. */
#ifndef STRATA_TESTUTIL_H
#define STRATA_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

typedef Suite *(*suite_fn)(void);
void test_register_suite(suite_fn fn);

#define TEST_SUITE(fn)                                                      \
    __attribute__((constructor)) static void register_##fn(void)            \
    {                                                                       \
        test_register_suite(fn);                                            \
    }

/* Report a test as skipped (by name, with the reason) and return from it:
 * Check has no skip state, so the test passes and the skip is listed before
 * the summary. */
void test_note_skip(const char *name, const char *why);
#define TEST_SKIP(why)                                                      \
    do {                                                                    \
        test_note_skip(__func__, (why));                                    \
        return;                                                             \
    } while (0)

/* The demo model's path if present (STRATA_MODEL or ~/.cache/strata/...),
 * else NULL. */
const char *test_demo_model(void);
/* The strata-cli binary (STRATA_CLI, set by make test), or NULL. */
const char *test_cli(void);
/* The repository root (STRATA_ROOT, set by make test; "." otherwise). */
const char *test_root(void);
/* 1 if `python3 -c "import MODS"` works (MODS comma-separated). */
int test_have_python(const char *mods);
/* A fresh temporary directory (removed at exit is not attempted). */
const char *test_tmpdir(void);
/* Run a shell command, capture stdout (malloc'd, NUL-terminated) and return
 * its exit status; *out may be NULL if not wanted. */
int test_run(const char *cmd, char **out);
/* test_run of a printf-formatted command (at most 4 KiB). */
int test_runf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Deterministic random numbers for tests (never zeros). */
uint64_t test_rand_u64(uint64_t *state);
float test_rand_normal(uint64_t *state);
void test_fill_normal(float *x, size_t n, float scale, uint64_t seed);

/* A small random llama (4 layers, dim 128, 4/2 heads, ff 256, Q8_0) written
 * once per process with mkmodel into the temp dir as NAME.gguf: fast enough
 * for tests that run many conversations.  Returns its path. */
const char *test_tiny_llama(const char *name, int n_vocab, uint64_t seed);

/* 1 when STRATA_TEST_SMALL is set (not "0"): the CUDA kernel suites then
 * run a subset of their shapes that still takes every code path (multi-
 * segment clusters, persistent loops, page tails, both cache types), so
 * compute-sanitizer's racecheck, which follows every shared-memory access,
 * finishes within a device call (scripts/gpu-test.sh sets it for racecheck
 * only). */
int test_small(void);

/* 1 if a usable CUDA device exists (and the build has CUDA); else 0 and
 * *why says why. */
int test_have_gpu(const char **why);

#endif
