/* test_tmp.c: where the tests put files, and the models several suites share.
 *
 * One run of strata-tests owns one directory, $TMPDIR/strata-test-run-PID-XXXXXX
 * (test_run_begin).  Its children see TMPDIR pointing into it, so whatever a
 * subprocess makes with mkstemp or Python's tempfile lands there too.  Inside:
 *
 *   fixtures/   models made once per run and reused by every test and suite
 *               that asks for the same generating parameters (Check forks a
 *               process per test, so a cache in memory would be lost)
 *   skips       the skip log the runner prints before its summary
 *   tPID-XXXXXX one per test_tmpdir() call, removed when the test's process
 *               exits: Check ends a passing test with exit(), which runs
 *               the handler; a failing one with _exit(), which does not, so
 *               a failed (or crashed, or timed-out) test's directories stay
 *               until the end of the run
 *
 * test_run_end removes the directory and fails the run if a test left
 * anything besides those, or if anything named strata-test-* / strata-skips-*
 * appeared beside it.  STRATA_KEEP_FAILED=1 keeps the directories of failed
 * tests for a post-mortem: moved to /tmp/strata-kept-* (or
 * $STRATA_KEEP_DIR/strata-kept-*), each named on stderr. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "model/make/mkmodel.h"
#include "model/quant.h"

static char run_dir[700];  /* "" until test_run_begin or first use */
static char base_dir[512]; /* the TMPDIR the run directory lives in */
static int run_owner;      /* 1 in the process that made run_dir */

/* The directories test_tmpdir handed out, with the process that asked. */
#define MAX_TMP 256
static struct {
    char *path;
    pid_t pid;
} tmps[MAX_TMP];
static int n_tmps;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

int test_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int keep_failed(void)
{
    const char *v = getenv("STRATA_KEEP_FAILED");
    return v && *v && strcmp(v, "0") != 0;
}

/* on_exit handler in a test's process: the directories this process made. */
static void drop_tmps(int status, void *arg)
{
    (void)status;
    (void)arg;
    pid_t me = getpid();
    for (int i = 0; i < n_tmps; i++)
        if (tmps[i].path && tmps[i].pid == me)
            test_rm_rf(tmps[i].path);
}

/* A failed test's directory at the end of the run: kept or removed. */
static void keep_or_drop(const char *path, const char *name)
{
    if (keep_failed()) {
        const char *k = getenv("STRATA_KEEP_DIR");
        char dst[1024];
        snprintf(dst, sizeof dst, "%s/strata-kept-%s", k && *k ? k : "/tmp", name);
        /* mv: the keep directory may be on another file system */
        if (test_runf(NULL, "mv '%s' '%s'", path, dst) == 0) {
            fprintf(stderr, "a failed test's files are kept in %s\n", dst);
            return;
        }
    }
    test_rm_rf(path);
}

static const char *base_tmp(void)
{
    const char *t = getenv("STRATA_TEST_BASE");
    if (!t || !*t)
        t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

/* The run directory: made by test_run_begin in the runner; a process that
 * uses the helpers without it (a test linked elsewhere) makes its own. */
static const char *run_path(void)
{
    if (!run_dir[0]) {
        const char *env = getenv("STRATA_TEST_RUN");
        if (env && *env) {
            snprintf(run_dir, sizeof run_dir, "%s", env);
        } else if (test_run_begin() != 0) {
            return NULL;
        }
    }
    return run_dir;
}

int test_run_begin(void)
{
    const char *env = getenv("STRATA_TEST_RUN");
    if (env && *env) { /* a parent runner owns it */
        snprintf(run_dir, sizeof run_dir, "%s", env);
        snprintf(base_dir, sizeof base_dir, "%s", base_tmp());
        return 0;
    }
    snprintf(base_dir, sizeof base_dir, "%s", base_tmp());
    int n = snprintf(run_dir, sizeof run_dir, "%s/strata-test-run-%d-XXXXXX", base_dir,
                     (int)getpid());
    if (n < 0 || (size_t)n >= sizeof run_dir) {
        fprintf(stderr, "strata-tests: TMPDIR too long: %s\n", base_dir);
        run_dir[0] = '\0';
        return -1;
    }
    if (!mkdtemp(run_dir)) {
        fprintf(stderr, "strata-tests: cannot make a directory in %s: %s\n", base_dir,
                strerror(errno));
        run_dir[0] = '\0';
        return -1;
    }
    char fx[800];
    snprintf(fx, sizeof fx, "%s/fixtures", run_dir);
    mkdir(fx, 0700);
    run_owner = 1;
    /* children (the CLI, Python, the test processes) inherit these */
    setenv("STRATA_TEST_BASE", base_dir, 1);
    setenv("STRATA_TEST_RUN", run_dir, 1);
    setenv("TMPDIR", run_dir, 1);
    return 0;
}

const char *test_run_dir(void) { return run_path(); }

/* Names a leftover-check looks for beside the run directory. */
static int ours_by_name(const char *n)
{
    return !strncmp(n, "strata-test-", 12) || !strncmp(n, "strata-skips-", 13);
}

/* A strata-test-run-PID-* directory of another live runner (a parallel
 * `make test`) is not ours to report. */
static int other_live_run(const char *n)
{
    int pid;
    if (sscanf(n, "strata-test-run-%d-", &pid) != 1)
        return 0;
    return pid != (int)getpid() && kill(pid, 0) == 0;
}

int test_snapshot_names(char ***names)
{
    DIR *d = opendir(base_dir[0] ? base_dir : base_tmp());
    int n = 0, cap = 0;
    *names = NULL;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ours_by_name(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, sizeof(char *) * (size_t)cap);
            if (!nn)
                break;
            *names = nn;
        }
        (*names)[n++] = strdup(de->d_name);
    }
    closedir(d);
    return n;
}

static int in_list(char **v, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (v[i] && !strcmp(v[i], s))
            return 1;
    return 0;
}

void test_tmp_cleanup(void)
{
    pid_t me = getpid();
    for (int i = 0; i < n_tmps; i++) {
        if (tmps[i].path && tmps[i].pid == me)
            test_rm_rf(tmps[i].path);
        free(tmps[i].path);
        tmps[i].path = NULL;
    }
    n_tmps = 0;
}

int test_run_end(char **before, int n_before)
{
    int bad = 0;
    test_tmp_cleanup();
    if (run_owner && run_dir[0]) {
        /* what a test left in the run directory outside test_tmpdir */
        DIR *d = opendir(run_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            const char *n = de->d_name;
            if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "fixtures") || !strcmp(n, "skips"))
                continue;
            int pid;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", run_dir, n);
            if (sscanf(n, "t%d-", &pid) == 1) {
                /* a test_tmpdir of a test that did not pass (see above):
                 * that test already counts as failed */
                keep_or_drop(path, n);
                continue;
            }
            fprintf(stderr, "left behind by a test: %s\n", path);
            bad++;
        }
        if (d)
            closedir(d);
        if (test_rm_rf(run_dir) != 0) {
            fprintf(stderr, "cannot remove %s: %s\n", run_dir, strerror(errno));
            bad++;
        }
        char **after = NULL;
        int n_after = test_snapshot_names(&after);
        for (int i = 0; i < n_after; i++) {
            if (!in_list(before, n_before, after[i]) && !other_live_run(after[i])) {
                fprintf(stderr, "left behind in %s: %s\n", base_dir, after[i]);
                bad++;
            }
            free(after[i]);
        }
        free(after);
        run_dir[0] = '\0';
    }
    return bad;
}

const char *test_tmpdir(void)
{
    const char *run = run_path();
    ck_assert_msg(run != NULL, "no test run directory");
    ck_assert_msg(n_tmps < MAX_TMP, "more than %d test_tmpdir() calls in one process", MAX_TMP);
    char *p = malloc(strlen(run) + 32);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s/t%d-XXXXXX", run, (int)getpid());
    ck_assert_msg(mkdtemp(p) != NULL, "mkdtemp %s: %s", p, strerror(errno));
    pid_t me = getpid();
    int first = 1;
    for (int i = 0; i < n_tmps; i++)
        if (tmps[i].pid == me)
            first = 0;
    if (first)
        on_exit(drop_tmps, NULL);
    tmps[n_tmps].path = p;
    tmps[n_tmps].pid = me;
    n_tmps++;
    return p;
}

/* ---- fixtures: made once per run, keyed by what generates them --------- */

/* FNV-1a: a stable file name for a generating command line. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The paths handed out, one per key: callers keep them for the process's
 * life, and a list that holds them keeps LeakSanitizer quiet too. */
#define MAX_FIXTURES 128
static char *fixture_paths[MAX_FIXTURES];
static int n_fixtures;

const char *test_fixture(const char *key, test_make_fn make, const void *arg)
{
    const char *run = run_path();
    ck_assert_msg(run != NULL, "no test run directory");
    char want[1024];
    snprintf(want, sizeof want, "%s/fixtures/%s", run, key);
    char *path = NULL;
    for (int i = 0; i < n_fixtures && !path; i++)
        if (!strcmp(fixture_paths[i], want))
            path = fixture_paths[i];
    if (!path) {
        ck_assert_msg(n_fixtures < MAX_FIXTURES, "more than %d fixtures", MAX_FIXTURES);
        path = strdup(want);
        ck_assert_ptr_nonnull(path);
        fixture_paths[n_fixtures++] = path;
    }
    if (exists(path))
        return path;
    char fx[600];
    snprintf(fx, sizeof fx, "%s/fixtures", run);
    mkdir(fx, 0700);
    /* a test that times out while writing leaves only the part file; the
     * next one starts over instead of reading half a model */
    char part[1100];
    snprintf(part, sizeof part, "%s.part%d", path, (int)getpid());
    char why[512] = "";
    int rc = make(part, arg, why, sizeof why);
    if (rc != 0) {
        unlink(part);
        ck_abort_msg("fixture %s: %s", key, why[0] ? why : "generator failed");
    }
    ck_assert_msg(rename(part, path) == 0, "fixture %s: rename: %s", key, strerror(errno));
    return path;
}

typedef struct tiny_args {
    int n_vocab;
    uint64_t seed;
} tiny_args;

static int make_tiny(const char *path, const void *arg, char *why, size_t n_why)
{
    const tiny_args *a = arg;
    mkmodel_params mp;
    memset(&mp, 0, sizeof mp);
    mp.arch = "llama";
    mp.n_layer = 4;
    mp.n_embd = 128;
    mp.n_head = 4;
    mp.n_head_kv = 2;
    mp.n_ff = 256;
    mp.n_vocab = a->n_vocab;
    mp.type = GGML_TYPE_Q8_0;
    mp.seed = a->seed;
    mp.n_threads = 1;
    strata_error err = {0};
    int rc = mkmodel_write(&mp, path, &err);
    if (rc != 0)
        snprintf(why, n_why, "mkmodel: %s", err.msg);
    return rc;
}

const char *test_tiny_llama(const char *name, int n_vocab, uint64_t seed)
{
    (void)name; /* the same shape, vocabulary and seed is the same model */
    char key[128];
    snprintf(key, sizeof key, "tiny-llama-v%d-s%llu.gguf", n_vocab, (unsigned long long)seed);
    tiny_args a = {n_vocab, seed};
    return test_fixture(key, make_tiny, &a);
}

static int make_by_command(const char *path, const void *arg, char *why, size_t n_why)
{
    const char *fmt = arg; /* a command with one %s for the output path */
    char *out = NULL;
    int rc = test_runf(&out, fmt, path);
    if (rc != 0) {
        /* what it printed, or the end of the file if it wrote its output there */
        char tail[301] = "";
        FILE *f = fopen(path, "rb");
        if (f) {
            if (fseek(f, -300, SEEK_END) != 0)
                rewind(f);
            tail[fread(tail, 1, 300, f)] = '\0';
            fclose(f);
        }
        snprintf(why, n_why, "exit %d: %.*s\n%.300s%s", rc, (int)(n_why / 2), fmt,
                 out ? out : "", tail);
    }
    free(out);
    return rc;
}

const char *test_fixture_cmd(const char *stem, const char *cmd_fmt)
{
    /* stem "name.ext": the file is name-HASH.ext */
    char key[160], name[96];
    const char *dot = strrchr(stem, '.');
    int n = dot ? (int)(dot - stem) : (int)strlen(stem);
    snprintf(name, sizeof name, "%.*s", n, stem);
    snprintf(key, sizeof key, "%s-%016llx%s", name, (unsigned long long)fnv1a(cmd_fmt),
             dot ? dot : "");
    return test_fixture(key, make_by_command, cmd_fmt);
}

const char *test_mkmodel(const char *args)
{
    const char *cli = test_cli();
    ck_assert_msg(cli != NULL, "test_mkmodel needs strata-cli (STRATA_CLI)");
    char fmt[2048];
    /* %% survives into the format test_fixture_cmd fills with the path */
    int n = snprintf(fmt, sizeof fmt, "'%s' mkmodel %s -o '%%s' 2>&1", cli, args);
    ck_assert_msg(n > 0 && (size_t)n < sizeof fmt, "mkmodel arguments too long: %s", args);
    return test_fixture_cmd("mk.gguf", fmt);
}
