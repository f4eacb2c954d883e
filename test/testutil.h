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

#include "engine/strata.h"

typedef Suite *(*suite_fn)(void);
void test_register_suite(suite_fn fn);

#define TEST_SUITE(fn)                                                      \
    __attribute__((constructor)) static void register_##fn(void)            \
    {                                                                       \
        test_register_suite(fn);                                            \
    }

/* Report a test as skipped (by name, with its reason class and the reason)
 * and return from it: Check has no skip state, so the test passes and the
 * skip is listed before the summary.  The class says what was missing:
 *
 *   python  a Python module an oracle needs      model  the demo model
 *   gpu     a CUDA device or a CUDA build        cli    the strata-cli binary
 *   tool    a program on PATH (tmux, objdump)    cpu    an instruction set
 *   slow    a long case behind STRATA_SLOW_TESTS
 *
 * STRATA_REQUIRE=python,model,... (a comma list of classes) turns a skip of
 * a listed class into a failure, so a CI run that installed a dependency
 * notices when a test stops finding it. */
void test_note_skip(const char *name, const char *cls, const char *why);
#define TEST_SKIP2(cls, why)                                                \
    do {                                                                    \
        test_note_skip(__func__, (cls), (why));                             \
        return;                                                             \
    } while (0)
/* TEST_SKIP(why) without a class, as tests written before the classes
 * have it: the class is taken from the reason's words
 * (test_skip_class_of); write the class. */
#define TEST_SKIP1(why) TEST_SKIP2(test_skip_class_of(why), (why))
#define TEST_SKIP_PICK(a, b, name, ...) name
#define TEST_SKIP(...) TEST_SKIP_PICK(__VA_ARGS__, TEST_SKIP2, TEST_SKIP1, _)(__VA_ARGS__)
const char *test_skip_class_of(const char *why);
/* 1 if the class is listed in STRATA_REQUIRE. */
int test_required(const char *cls);
/* 0 if every class in STRATA_REQUIRE is known; else -1 and a message. */
int test_check_require(void);

/* The demo model's path if present (STRATA_MODEL or ~/.cache/strata/...),
 * else NULL. */
const char *test_demo_model(void);
/* The demo model's tokenizer, or NULL without the model (tokenizer_free it). */
struct tokenizer;
struct tokenizer *test_demo_tokenizer(void);
/* The strata-cli binary (STRATA_CLI, set by make test), or NULL. */
const char *test_cli(void);
/* The repository root (STRATA_ROOT, set by make test; "." otherwise). */
const char *test_root(void);
/* 1 if `python3 -c "import MODS"` works (MODS comma-separated). */
int test_have_python(const char *mods);
/* A fresh directory inside the run's directory (test_tmp.c), removed when
 * the test passes, or at the end of the run when it failed (or kept then:
 * STRATA_KEEP_FAILED).  Failing to make one fails the test. */
const char *test_tmpdir(void);
/* rm -rf of one path (0, or -1 with errno). */
int test_rm_rf(const char *path);
/* Run a shell command, capture stdout (malloc'd, NUL-terminated) and return
 * its exit status; *out may be NULL if not wanted. */
int test_run(const char *cmd, char **out);
/* test_run of a printf-formatted command (at most 4 KiB). */
int test_runf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Deterministic random numbers for tests (never zeros). */
uint64_t test_rand_u64(uint64_t *state);
float test_rand_normal(uint64_t *state);
void test_fill_normal(float *x, size_t n, float scale, uint64_t seed);

/* ---- models several tests share (test_tmp.c) ------------------------------
 * Made once per run of strata-tests into the run's fixtures/ directory, keyed
 * by what generates them, and reused by every test (each runs in its own
 * process) and suite that asks again.  A failure to make one fails the test. */

/* make writes the file at path; on failure returns nonzero and says why. */
typedef int (*test_make_fn)(const char *path, const void *arg, char *why, size_t n_why);
const char *test_fixture(const char *key, test_make_fn make, const void *arg);
/* A fixture made by a shell command: cmd_fmt has one %s, the output path;
 * the file is keyed by a hash of the command ("name.ext": name-HASH.ext). */
const char *test_fixture_cmd(const char *stem, const char *cmd_fmt);
/* `strata-cli mkmodel ARGS -o PATH` as a fixture (needs test_cli()). */
const char *test_mkmodel(const char *args);

/* A small random llama (4 layers, dim 128, 4/2 heads, ff 256, Q8_0): fast
 * enough for tests that run many conversations.  The name is for the
 * reader; the model is keyed by n_vocab and seed. */
const char *test_tiny_llama(const char *name, int n_vocab, uint64_t seed);

/* ---- the runner's side (test_main.c) -------------------------------------- */
/* Make the run's directory under $TMPDIR and point TMPDIR into it. */
int test_run_begin(void);
const char *test_run_dir(void);
/* The names strata-test-* / strata-skips-* beside the run directory. */
int test_snapshot_names(char ***names);
/* Remove the dirs test_tmpdir made in this process. */
void test_tmp_cleanup(void);
/* Remove the run directory; the count of things left behind (each named
 * on stderr): in it besides fixtures/skips, or new beside it. */
int test_run_end(char **before, int n_before);

/* ---- engines ---------------------------------------------------------------
 * strata_params_default() for a model on a backend, with quiet set: a test
 * then sets what it varies (slots, split, context, chunk, KV type). */
strata_params test_params(const char *model, int backend);
/* strata_open that must succeed: a failure fails the test with the engine's
 * message, the model, backend, split and slots. */
strata_engine *test_open(const strata_params *p);

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
