/* test_util.c: helpers shared by the suites (see testutil.h). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>
#endif

/* The reason classes TEST_SKIP knows (testutil.h). */
/* "other": a one-argument TEST_SKIP whose reason names none of the others */
/* "gemma3": the Gemma 3 270M file (make gemma3-model), apart from "model" (the
 * demo) because the card machines get the demo carried but not this one */
static const char *const skip_classes[] = {"python", "model", "gemma3", "gpu",  "cli",
                                           "tool",   "cpu",   "slow",   "other"};

static int known_class(const char *c, size_t n)
{
    for (size_t i = 0; i < sizeof skip_classes / sizeof *skip_classes; i++)
        if (strlen(skip_classes[i]) == n && !strncmp(skip_classes[i], c, n))
            return 1;
    return 0;
}

const char *test_skip_class_of(const char *why)
{
    static const struct {
        const char *word, *cls;
    } words[] = {
        {"python", "python"}, {"STRATA_SLOW_TESTS", "slow"}, {"demo model", "model"},
        {"CUDA", "gpu"},      {"GPU", "gpu"},                {"strata-cli", "cli"},
        {"tmux", "tool"},     {"objdump", "tool"},           {"AVX", "cpu"},
        {"x86", "cpu"},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (why && strstr(why, words[i].word))
            return words[i].cls;
    return "other";
}

int test_required(const char *cls)
{
    const char *v = getenv("STRATA_REQUIRE");
    size_t n = strlen(cls);
    while (v && *v) {
        size_t len = strcspn(v, ",");
        if (len == n && !strncmp(v, cls, n))
            return 1;
        v += len + (v[len] == ',');
    }
    return 0;
}

int test_check_require(void)
{
    const char *v = getenv("STRATA_REQUIRE");
    while (v && *v) {
        size_t len = strcspn(v, ",");
        if (len && !known_class(v, len)) {
            fprintf(stderr, "STRATA_REQUIRE: unknown class \"%.*s\" (known: python, model, gpu, "
                            "cli, tool, cpu, slow, other)\n", (int)len, v);
            return -1;
        }
        v += len + (v[len] == ',');
    }
    return 0;
}

void test_note_skip(const char *name, const char *cls, const char *why)
{
    if (!known_class(cls, strlen(cls)))
        ck_abort_msg("%s: skip with unknown class \"%s\": %s", name, cls, why);
    /* START_TEST(x) defines x_fn: name the test as it is written */
    size_t n = strlen(name);
    int len = (int)(n > 3 && !strcmp(name + n - 3, "_fn") ? n - 3 : n);
    /* a required dependency missing is a failure, not a skip */
    if (test_required(cls))
        ck_abort_msg("%.*s: needs %s (STRATA_REQUIRE=%s): %s", len, name, cls,
                     getenv("STRATA_REQUIRE"), why);
    printf("SKIP %.*s [%s]: %s\n", len, name, cls, why);
    fflush(stdout);
    const char *log = getenv("STRATA_SKIP_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%.*s [%s]: %s\n", len, name, cls, why);
        fclose(f);
    }
}

static int file_exists(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *test_demo_model(void)
{
    static char path[1024];
    const char *env = getenv("STRATA_MODEL");
    if (env && *env)
        return file_exists(env) ? env : NULL;
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : "/root");
    return file_exists(path) ? path : NULL;
}

tokenizer *test_demo_tokenizer(void)
{
    const char *path = test_demo_model();
    gguf *g = NULL;
    tokenizer *t = NULL;
    strata_error err = {0};
    if (!path)
        return NULL;
    ck_assert_msg(gguf_open(path, &g, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_from_gguf(g, &t, &err) == 0, "%s", err.msg);
    gguf_close(g); /* the tokenizer keeps copies, not pointers into the file */
    return t;
}

const char *test_cli(void)
{
    const char *p = getenv("STRATA_CLI");
    return file_exists(p) ? p : NULL;
}

const char *test_root(void)
{
    const char *p = getenv("STRATA_ROOT");
    return p && *p ? p : ".";
}

int test_have_python(const char *mods)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 -c 'import %s' >/dev/null 2>&1", mods);
    return system(cmd) == 0;
}

int test_small(void)
{
    const char *v = getenv("STRATA_TEST_SMALL");
    return v && *v && strcmp(v, "0") != 0;
}

int test_run(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
    }
    if (buf)
        buf[len] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int test_runf(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1; /* a truncated command must not run */
    return test_run(cmd, out);
}

uint64_t test_rand_u64(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float test_rand_normal(uint64_t *s)
{
    double u1 = ((test_rand_u64(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (test_rand_u64(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void test_fill_normal(float *x, size_t n, float scale, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float v = test_rand_normal(&s) * scale;
        x[i] = v != 0.0f ? v : scale * 1e-3f;
    }
}

strata_params test_params(const char *model, int backend)
{
    strata_params p = strata_params_default();
    p.model_path = model;
    p.backend = backend;
    p.quiet = 1;
    return p;
}

strata_engine *test_open(const strata_params *p)
{
    strata_engine *e = NULL;
    strata_error err = {0};
    int rc = strata_open(p, &e, &err);
    ck_assert_msg(rc == 0 && e, "strata_open(%s, %s, split %s, %d slots): %s",
                  p->model_path ? p->model_path : "(no model)",
                  p->backend == STRATA_BACKEND_CUDA  ? "cuda"
                  : p->backend == STRATA_BACKEND_CPU ? "cpu"
                                                     : "auto",
                  p->layer_split ? p->layer_split : "none", p->n_slots, err.msg);
    return e;
}

int test_have_gpu(const char **why)
{
#ifdef STRATA_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why)
            *why = "no CUDA device available";
        return 0;
    }
    return 1;
#else
    if (why)
        *why = "built without CUDA (nvcc not found or CUDA=0)";
    return 0;
#endif
}
