/* test_hardening.c: regressions for what a hostile user found (suite
 * "hardening"): data loss, crashes and wrong input that was accepted.
 *
 * - case "write": model files are written through base/safe_write: never
 *   over a FIFO or device, through a symbolic link to a regular file, never
 *   through a planted temporary, with names of up to NAME_MAX bytes;
 * - case "load": the model path may not be a FIFO (open would block), a
 *   model truncated while in use ends with a message, not SIGBUS; absurd
 *   hyper-parameters, a vocabulary that does not match the embedding rows and
 *   layers past block_count are load errors;
 * - case "kv": the KV quantizers give defined blocks for NaN and Inf (run
 *   this suite under UBSan: make BUILD=build/asan CUDA=0 SAN=1 OPT=-O1);
 * - case "sizes": option and engine size products that used to wrap.
 *
 * Every temporary directory a test makes is removed at its end. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/safe_write.h"
#include "model/gguf.h"
#include "model/make/mkmodel.h"
#include "model/model.h"
#include "model/quant.h"
#include "kernels/ops.h"
#include "engine/strata.h"

#define NEED_CLI()                                                            \
    const char *cli = test_cli();                                             \
    if (!cli)                                                                 \
        TEST_SKIP("strata-cli not built (STRATA_CLI unset; run via make test)")

static void rm_rf(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    fclose(f);
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A valid little GGUF file at path (one key, one tensor). */
static int write_small(const char *path, strata_error *err)
{
    gguf_writer *w = gguf_writer_new(0);
    ck_assert_ptr_nonnull(w);
    float t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ne[1] = {8};
    ck_assert_int_eq(gguf_writer_set_str(w, "general.name", "hardening"), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 1, ne, t, sizeof t, NULL), 0);
    int rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return rc;
}

static int is_gguf(const char *path)
{
    size_t n = 0;
    char *b = read_all(path, &n);
    int ok = b && n > 4 && !memcmp(b, "GGUF", 4);
    free(b);
    return ok;
}

/* Entries of dir (to see that no temporary is left). */
static int count_entries(const char *dir)
{
    char *out = NULL;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    test_run(cmd, &out);
    int n = atoi(out);
    free(out);
    return n;
}

/* ---- write ------------------------------------------------------------- */

/* A FIFO as the output: refused, the FIFO stays a FIFO (the old writer
 * renamed a regular file over it: as root, over /dev/null too). */
START_TEST(write_refuses_fifo_and_device)
{
    const char *dir = test_tmpdir();
    char p[1024];
    snprintf(p, sizeof p, "%s/out.fifo", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    strata_error err = {0};
    int rc = write_small(p, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err.msg, p) && strstr(err.msg, "FIFO"), "message: %s", err.msg);
    struct stat st;
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert_msg(S_ISFIFO(st.st_mode), "the FIFO was replaced");
    ck_assert_int_eq(count_entries(dir), 1); /* no temporary left */
    /* a device: refused before anything is created */
    rc = write_small("/dev/null", &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err.msg, "/dev/null") && strstr(err.msg, "character device"),
                  "message: %s", err.msg);
    ck_assert_int_eq(stat("/dev/null", &st), 0);
    ck_assert(S_ISCHR(st.st_mode));
    /* a directory */
    rc = write_small(dir, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "directory"));
    rm_rf(dir);
}
END_TEST

/* A symbolic link to a regular file is written through (the link stays);
 * a link to nothing is refused. */
START_TEST(write_through_symlink)
{
    const char *dir = test_tmpdir();
    char target[1024], link[1024], dangling[1024];
    snprintf(target, sizeof target, "%s/real.gguf", dir);
    snprintf(link, sizeof link, "%s/link.gguf", dir);
    snprintf(dangling, sizeof dangling, "%s/dangling.gguf", dir);
    write_text(target, "old");
    ck_assert_int_eq(chmod(target, 0640), 0);
    ck_assert_int_eq(symlink("real.gguf", link), 0);
    strata_error err = {0};
    ck_assert_msg(write_small(link, &err) == 0, "%s", err.msg);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert_msg(S_ISLNK(st.st_mode), "the link was replaced by a file");
    ck_assert(is_gguf(target));
    ck_assert_int_eq(stat(target, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0640); /* the replaced file's permissions */
    ck_assert_int_eq(symlink("missing/x.gguf", dangling), 0);
    ck_assert_int_ne(write_small(dangling, &err), 0);
    ck_assert_msg(strstr(err.msg, dangling) && strstr(err.msg, "symbolic link"), "%s", err.msg);
    ck_assert_int_eq(lstat(dangling, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(count_entries(dir), 3);
    rm_rf(dir);
}
END_TEST

/* The old fixed temporary OUT.tmp was opened without O_EXCL: a link
 * planted under that name (or a second writer) was written through.  The
 * temporary is now unique, so the planted victim stays as it was. */
START_TEST(write_ignores_planted_temporary)
{
    const char *dir = test_tmpdir();
    char out[1024], tmp[1100], victim[1024];
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    write_text(victim, "precious");
    ck_assert_int_eq(symlink(victim, tmp), 0);
    strata_error err = {0};
    ck_assert_msg(write_small(out, &err) == 0, "%s", err.msg);
    ck_assert(is_gguf(out));
    char *v = read_all(victim, NULL);
    ck_assert_str_eq(v, "precious");
    free(v);
    /* two writers to one destination: each has its own temporary, the
     * last rename wins and the file is whole */
    safe_write a, b;
    ck_assert_int_eq(safe_write_open(&a, out, &err), 0);
    ck_assert_int_eq(safe_write_open(&b, out, &err), 0);
    ck_assert_str_ne(a.tmp, b.tmp);
    fputs("first writer", a.f);
    fputs("second writer", b.f);
    ck_assert_int_eq(safe_write_commit(&a, 1, 0, &err), 0);
    ck_assert_int_eq(safe_write_commit(&b, 1, 0, &err), 0);
    v = read_all(out, NULL);
    ck_assert_str_eq(v, "second writer");
    free(v);
    /* an aborted write leaves the destination as it was */
    ck_assert_int_eq(safe_write_open(&a, out, &err), 0);
    fputs("half", a.f);
    ck_assert_int_ne(safe_write_commit(&a, 0, EIO, &err), 0);
    ck_assert_msg(strstr(err.msg, out) && !strstr(err.msg, ".strata-"), "%s", err.msg);
    v = read_all(out, NULL);
    ck_assert_str_eq(v, "second writer");
    free(v);
    ck_assert_int_eq(count_entries(dir), 3); /* out, out.tmp, victim */
    rm_rf(dir);
}
END_TEST

/* A destination name of NAME_MAX (255) bytes: OUT.tmp would exceed it. */
START_TEST(write_long_name)
{
    const char *dir = test_tmpdir();
    for (int len = 252; len <= 255; len++) {
        char name[256], p[1400];
        memset(name, 'n', (size_t)len);
        name[len] = '\0';
        snprintf(p, sizeof p, "%s/%s", dir, name);
        strata_error err = {0};
        ck_assert_msg(write_small(p, &err) == 0, "name of %d bytes: %s", len, err.msg);
        ck_assert(is_gguf(p));
    }
    ck_assert_int_eq(count_entries(dir), 4);
    rm_rf(dir);
}
END_TEST

/* The CLI writers go through the same path: mkmodel -o FIFO fails with a
 * message naming it and leaves the FIFO. */
START_TEST(cli_mkmodel_refuses_fifo)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char p[1024];
    snprintf(p, sizeof p, "%s/m.fifo", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    char *out = NULL;
    int rc = test_runf(&out, "'%s' mkmodel --arch llama --layers 1 --dim 64 --heads 2 --ff 64 "
                             "--type q8_0 -o '%s' 2>&1", cli, p);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(out, p) && strstr(out, "FIFO"), "output: %s", out);
    free(out);
    struct stat st;
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
    rm_rf(dir);
}
END_TEST

static Suite *hardening_suite(void)
{
    Suite *s = suite_create("hardening");
    TCase *w = tcase_create("write");
    tcase_add_test(w, write_refuses_fifo_and_device);
    tcase_add_test(w, write_through_symlink);
    tcase_add_test(w, write_ignores_planted_temporary);
    tcase_add_test(w, write_long_name);
    tcase_add_test(w, cli_mkmodel_refuses_fifo);
    tcase_set_timeout(w, 60);
    suite_add_tcase(s, w);
    return s;
}
TEST_SUITE(hardening_suite)
