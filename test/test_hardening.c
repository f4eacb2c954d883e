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

/* ---- load ---------------------------------------------------------------- */

/* A small random llama (2 layers, dim 64, vocab 300) in dir as NAME. */
static void small_model(const char *dir, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    mkmodel_params mp;
    memset(&mp, 0, sizeof mp);
    mp.arch = "llama";
    mp.n_layer = 2;
    mp.n_embd = 64;
    mp.n_head = 2;
    mp.n_ff = 64;
    mp.n_vocab = 300;
    mp.type = GGML_TYPE_Q8_0;
    mp.seed = 7;
    mp.n_threads = 1;
    strata_error err = {0};
    ck_assert_msg(mkmodel_write(&mp, path, &err) == 0, "mkmodel: %s", err.msg);
}

/* What to change when copying a model file. */
typedef struct edit {
    const char *f32_key; /* set this f32 key ... */
    float f32;           /* ... to this */
    const char *u32_key;
    uint32_t u32;
    int drop_tokens;     /* shorten tokenizer.ggml.tokens by this many */
} edit;

/* Copy src to dst record by record with the GGUF writer, applying e. */
static void rewrite(const char *src, const char *dst, const edit *e)
{
    gguf *g = NULL;
    strata_error err = {0};
    ck_assert_msg(gguf_open(src, &g, &err) == 0, "%s", err.msg);
    gguf_writer *w = gguf_writer_new(gguf_alignment(g));
    ck_assert_ptr_nonnull(w);
    const char **toks = NULL;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (e->drop_tokens && !strcmp(kv->key, "tokenizer.ggml.tokens")) {
            uint64_t n = kv->n - (uint64_t)e->drop_tokens;
            toks = calloc(n, sizeof *toks);
            for (uint64_t k = 0; k < n; k++)
                toks[k] = strndup(kv->strs[k].p, kv->strs[k].len);
            ck_assert_int_eq(gguf_writer_set_str_array(w, kv->key, toks, n), 0);
            for (uint64_t k = 0; k < n; k++)
                free((void *)toks[k]);
            free(toks);
            continue;
        }
        ck_assert_int_eq(gguf_writer_copy_kv(w, kv), 0);
    }
    if (e->f32_key)
        ck_assert_int_eq(gguf_writer_set_f32(w, e->f32_key, e->f32), 0);
    if (e->u32_key)
        ck_assert_int_eq(gguf_writer_set_u32(w, e->u32_key, e->u32), 0);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                t->nbytes, &err), 0);
    }
    ck_assert_msg(gguf_writer_write(w, dst, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    gguf_close(g);
}

/* model_load of path must fail with a message containing want. */
static void expect_load_error(const char *path, const char *want, const char *what)
{
    model *m = NULL;
    strata_error err = {0};
    int rc = model_load(path, &m, &err);
    ck_assert_msg(rc != 0, "%s: loaded", what);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, err.msg,
                  want);
}

/* A FIFO as the model used to block open() until a writer came. */
START_TEST(load_refuses_fifo)
{
    const char *dir = test_tmpdir();
    char p[1024];
    snprintf(p, sizeof p, "%s/model.fifo", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    expect_load_error(p, "FIFO", "fifo");
    expect_load_error(dir, "directory", "directory");
    expect_load_error("/dev/zero", "character device", "device");
    rm_rf(dir);
}
END_TEST

/* NaN, zero or negative rms epsilon and RoPE base, named at load (they used
 * to run and answer nothing, exit 0). */
START_TEST(load_rejects_absurd_hparams)
{
    const char *dir = test_tmpdir();
    char src[1024], dst[1100];
    small_model(dir, "m.gguf", src, sizeof src);
    snprintf(dst, sizeof dst, "%s/bad.gguf", dir);
    model *m = NULL;
    strata_error err = {0};
    ck_assert_msg(model_load(src, &m, &err) == 0, "%s", err.msg); /* the good one loads */
    model_free(m);
    static const struct { const char *key; float v; } bad[] = {
        {"llama.attention.layer_norm_rms_epsilon", NAN},
        {"llama.attention.layer_norm_rms_epsilon", -1e-5f},
        {"llama.attention.layer_norm_rms_epsilon", 0.0f},
        {"llama.attention.layer_norm_rms_epsilon", INFINITY},
        {"llama.rope.freq_base", 0.0f},
        {"llama.rope.freq_base", -10000.0f},
        {"llama.rope.freq_base", NAN},
        {"llama.rope.freq_base", INFINITY},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        edit e = {.f32_key = bad[i].key, .f32 = bad[i].v};
        rewrite(src, dst, &e);
        char what[128];
        snprintf(what, sizeof what, "%s = %g", bad[i].key, bad[i].v);
        expect_load_error(dst, bad[i].key, what);
    }
    rm_rf(dir);
}
END_TEST

/* The vocabulary must match token_embd's rows; layers past block_count are
 * an error naming the first extra tensor. */
START_TEST(load_rejects_vocab_and_layer_mismatch)
{
    const char *dir = test_tmpdir();
    char src[1024], dst[1100];
    small_model(dir, "m.gguf", src, sizeof src);
    snprintf(dst, sizeof dst, "%s/bad.gguf", dir);
    edit e = {.drop_tokens = 1};
    rewrite(src, dst, &e);
    expect_load_error(dst, "tokenizer.ggml.tokens has 299 tokens but token_embd.weight has 300",
                      "short vocabulary");
    edit e2 = {.u32_key = "llama.block_count", .u32 = 1};
    rewrite(src, dst, &e2);
    expect_load_error(dst, "tensor 'blk.1.", "block_count 1 of 2 layers");
    rm_rf(dir);
}
END_TEST

/* strata_params.load_cancel stops strata_open with STRATA_E_CANCELLED. */
static int cancel_now(void *user)
{
    ++*(int *)user;
    return 1;
}

START_TEST(load_cancel_stops_open)
{
    const char *dir = test_tmpdir();
    char src[1024];
    small_model(dir, "m.gguf", src, sizeof src);
    strata_params p = strata_params_default();
    p.model_path = src;
    p.backend = STRATA_BACKEND_CPU;
    p.quiet = 1;
    int calls = 0;
    p.load_cancel = cancel_now;
    p.load_cancel_user = &calls;
    strata_engine *e = NULL;
    strata_error err = {0};
    ck_assert_int_eq(strata_open(&p, &e, &err), STRATA_E_CANCELLED);
    ck_assert_ptr_null(e);
    ck_assert_int_eq(calls, 1);
    ck_assert_ptr_nonnull(strstr(err.msg, "loading stopped"));
    rm_rf(dir);
}
END_TEST

/* Run a command in the background with STRATA_TEST_PAUSE_IN_LOAD, wait for
 * it to reach the pause, do `action` (a shell snippet; $pid is the command),
 * release it and print "status=N" and its stderr. */
static int run_paused(char **out, const char *dir, const char *cmd, const char *action)
{
    return test_runf(out,
                     "cd '%s' && { STRATA_TEST_PAUSE_IN_LOAD='%s/ready' %s </dev/null >/dev/null "
                     "2>'%s/err' & pid=$!; i=0; while [ ! -e '%s/ready' ] && [ $i -lt 1200 ]; do "
                     "sleep 0.05; i=$((i+1)); done; %s; rm -f '%s/ready'; wait $pid; "
                     "echo \"status=$?\"; cat '%s/err'; }",
                     dir, dir, cmd, dir, dir, action, dir, dir);
}

/* A model truncated under its mapping: a message and exit 74, not SIGBUS
 * (status 135).  The pause holds the load after the mapping is made. */
START_TEST(cli_truncated_model_reports)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char src[1024], cmd[2200];
    small_model(dir, "m.gguf", src, sizeof src);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p hello -n 4 --temp 0 --backend cpu", cli, src);
    char *out = NULL;
    run_paused(&out, dir, cmd, "truncate -s 4096 m.gguf");
    ck_assert_msg(strstr(out, "status=74") != NULL, "output: %s", out);
    ck_assert_msg(strstr(out, "model file") && strstr(out, "m.gguf") &&
                  strstr(out, "changed on disk while in use"), "output: %s", out);
    free(out);
    rm_rf(dir);
}
END_TEST

/* Ctrl-C while loading: run and chat stop at the next tensor, exit 130
 * (chat used to ignore it until the load ended). */
START_TEST(cli_ctrl_c_stops_load)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char src[1024], cmd[2200];
    small_model(dir, "m.gguf", src, sizeof src);
    static const char *what[] = {"run -p hello -n 4", "chat -n 4"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "'%s' %s -m '%s' --temp 0 --backend cpu", cli, what[k], src);
        char *out = NULL;
        run_paused(&out, dir, cmd, "kill -INT $pid");
        ck_assert_msg(strstr(out, "status=130") != NULL, "%s: output: %s", what[k], out);
        ck_assert_msg(strstr(out, "loading stopped") != NULL, "%s: output: %s", what[k], out);
        free(out);
    }
    rm_rf(dir);
}
END_TEST

/* Absurd hyper-parameters through the CLI: exit 1 with the key named
 * (it used to print an empty answer and exit 0). */
START_TEST(cli_absurd_hparams_exit_1)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char src[1024], dst[1100];
    small_model(dir, "m.gguf", src, sizeof src);
    snprintf(dst, sizeof dst, "%s/bad.gguf", dir);
    edit e = {.f32_key = "llama.attention.layer_norm_rms_epsilon", .f32 = NAN};
    rewrite(src, dst, &e);
    char *out = NULL;
    int rc = test_runf(&out, "'%s' run -m '%s' -p hello -n 4 --temp 0 --backend cpu 2>&1", cli,
                       dst);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "layer_norm_rms_epsilon = nan") != NULL, "output: %s", out);
    free(out);
    rm_rf(dir);
}
END_TEST

/* ---- kv ------------------------------------------------------------------- */

/* NaN and Inf in a K or V block give a defined block: finite elements keep
 * the codes they would have with the NaN as 0, a NaN gets zero's code, an
 * Inf makes every code zero's.  Under UBSan the old code reported a left
 * shift of a negative value (and, at -O2, wrote garbage nibbles). */
START_TEST(kv_quant_defined_for_nan_inf)
{
    float x[64], ref[64];
    test_fill_normal(x, 64, 1.0f, 11);
    int8_t qk[64], qk_ref[64];
    uint8_t qv[32], qv_ref[32];
    uint16_t dk[2], dv[2], dk_ref[2], dv_ref[2];
    /* block 0: one NaN among finite values */
    memcpy(ref, x, sizeof x);
    ref[5] = 0.0f;
    x[5] = NAN;
    /* block 1: an Inf */
    x[32 + 20] = -INFINITY;
    ref[32 + 20] = 0.0f;
    cpu_quant_k8(x, 64, qk, dk);
    cpu_quant_v4(x, 64, qv, dv);
    cpu_quant_k8(ref, 64, qk_ref, dk_ref);
    cpu_quant_v4(ref, 64, qv_ref, dv_ref);
    ck_assert_int_eq(dk[0], dk_ref[0]);
    ck_assert_int_eq(dv[0], dv_ref[0]);
    for (int j = 0; j < 32; j++)
        ck_assert_msg(qk[j] == qk_ref[j], "k8 code %d: %d vs %d", j, qk[j], qk_ref[j]);
    for (int j = 0; j < 16; j++)
        ck_assert_msg(qv[j] == qv_ref[j], "v4 byte %d: %02x vs %02x", j, qv[j], qv_ref[j]);
    /* the Inf block: scale Inf (k: +Inf; v: the sign flips, d = v / -8),
     * every code that of zero */
    ck_assert(isinf(fp16_to_f32(dk[1])));
    ck_assert(isinf(fp16_to_f32(dv[1])));
    for (int j = 32; j < 64; j++)
        ck_assert_int_eq(qk[j], 0);
    for (int j = 16; j < 32; j++)
        ck_assert_int_eq(qv[j], 0x88);
    /* a block of NaN only: zero scales, zero codes, zeros back */
    for (int j = 0; j < 32; j++)
        x[j] = NAN;
    cpu_quant_k8(x, 32, qk, dk);
    cpu_quant_v4(x, 32, qv, dv);
    float back[32];
    cpu_dequant_k8(qk, dk, 32, back);
    for (int j = 0; j < 32; j++)
        ck_assert(back[j] == 0.0f);
    cpu_dequant_v4(qv, dv, 32, back);
    for (int j = 0; j < 32; j++)
        ck_assert(back[j] == 0.0f);
    /* huge finite values stay in range */
    for (int j = 0; j < 32; j++)
        x[j] = (j & 1 ? -3e38f : 3e38f) / (float)(j + 1);
    cpu_quant_k8(x, 32, qk, dk);
    cpu_quant_v4(x, 32, qv, dv);
    ck_assert_int_eq(qk[0], 127);
    ck_assert_int_eq(qv[0] & 15, 0); /* the largest element maps to code 0 */
}
END_TEST

/* ---- sizes ---------------------------------------------------------------- */

/* Engine sizes: each beyond its limit, and a product of two accepted ones
 * past INT_MAX (n_slots x pages used to be an int and wrap). */
START_TEST(engine_size_limits)
{
    const char *dir = test_tmpdir();
    char src[1024];
    small_model(dir, "m.gguf", src, sizeof src);
    static const struct { int ctx, slots, chunk; const char *want; } cases[] = {
        {STRATA_MAX_CTX + 1, 1, 0, "-c 16777217 is more than strata supports"},
        {0, 1000000000, 0, "--batch 1000000000 is more than strata supports"},
        {0, 1, STRATA_MAX_CHUNK + 1, "--chunk 65537 is more than strata supports"},
        {STRATA_MAX_CTX, STRATA_MAX_SLOTS, 0, "KV pages per stage"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strata_params p = strata_params_default();
        p.model_path = src;
        p.backend = STRATA_BACKEND_CPU;
        p.quiet = 1;
        p.n_ctx = cases[i].ctx;
        p.n_slots = cases[i].slots;
        p.n_chunk = cases[i].chunk;
        strata_engine *e = NULL;
        strata_error err = {0};
        int rc = strata_open(&p, &e, &err);
        ck_assert_msg(rc == STRATA_E_ARG, "case %zu: rc %d (%s)", i, rc, err.msg);
        ck_assert_ptr_null(e);
        ck_assert_msg(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s'", i, err.msg);
    }
    rm_rf(dir);
}
END_TEST

/* The CLI: option products that wrapped now end with status 2 (bench) or
 * 1 (run, the engine's check) and a message, not SIGSEGV. */
START_TEST(cli_size_overflows)
{
    NEED_CLI();
    const char *dir = test_tmpdir();
    char src[1024];
    small_model(dir, "m.gguf", src, sizeof src);
    static const struct { const char *args; int status; const char *want; } cases[] = {
        {"bench --clients 4096 --rounds 1048576", 2, "4294967296 requests"},
        {"bench --clients 4 --batch 1000000000", 2, "KV tokens per stage"},
        {"bench --clients 2 --rounds 65536 --prompt-tokens 1000 --conversation-cache-mib 8", 2,
         "tokens per conversation"},
        {"bench --conversations --tokens 2147483647", 2, "--tokens '2147483647' is not an integer in"},
        {"bench --conversations --tokens 16777216", 2, "a conversation of more than"},
        {"run -p hi -n 1 --batch 1000000000", 2, "--batch 1000000000 does nothing in this command"},
        {"run -p hi -n 1 -c 1000000000", 1, "-c 1000000000 is more than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = test_runf(&out, "'%s' %s -m '%s' --backend cpu 2>&1", cli, cases[i].args, src);
        ck_assert_msg(rc == cases[i].status, "%s: exit %d: %s", cases[i].args, rc, out);
        ck_assert_msg(strstr(out, cases[i].want) != NULL, "%s: output: %s", cases[i].args, out);
        free(out);
    }
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
    TCase *l = tcase_create("load");
    tcase_add_test(l, load_refuses_fifo);
    tcase_add_test(l, load_rejects_absurd_hparams);
    tcase_add_test(l, load_rejects_vocab_and_layer_mismatch);
    tcase_add_test(l, load_cancel_stops_open);
    tcase_add_test(l, cli_truncated_model_reports);
    tcase_add_test(l, cli_ctrl_c_stops_load);
    tcase_add_test(l, cli_absurd_hparams_exit_1);
    tcase_set_timeout(l, 120);
    suite_add_tcase(s, l);
    TCase *z = tcase_create("sizes");
    tcase_add_test(z, engine_size_limits);
    tcase_add_test(z, cli_size_overflows);
    tcase_set_timeout(z, 120);
    suite_add_tcase(s, z);
    TCase *k = tcase_create("kv");
    tcase_add_test(k, kv_quant_defined_for_nan_inf);
    suite_add_tcase(s, k);
    return s;
}
TEST_SUITE(hardening_suite)
