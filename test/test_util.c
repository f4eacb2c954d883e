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
#include "model/make/mkmodel.h"
#include "model/quant.h"

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>
#endif

void test_note_skip(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
    const char *log = getenv("STRATA_SKIP_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s: %s\n", name, why);
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

const char *test_tmpdir(void)
{
    static char dir[64];
    strcpy(dir, "/tmp/strata-test-XXXXXX");
    if (!mkdtemp(dir))
        return "/tmp";
    return dir;
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

const char *test_tiny_llama(const char *name, int n_vocab, uint64_t seed)
{
    char *path = malloc(1024); /* one per model for the process's life */
    ck_assert_ptr_nonnull(path);
    snprintf(path, 1024, "%s/%s.gguf", test_tmpdir(), name);
    mkmodel_params mp;
    memset(&mp, 0, sizeof mp);
    mp.arch = "llama";
    mp.n_layer = 4;
    mp.n_embd = 128;
    mp.n_head = 4;
    mp.n_head_kv = 2;
    mp.n_ff = 256;
    mp.n_vocab = n_vocab;
    mp.type = GGML_TYPE_Q8_0;
    mp.seed = seed;
    mp.n_threads = 1;
    strata_error err = {0};
    int rc = mkmodel_write(&mp, path, &err);
    ck_assert_msg(rc == 0, "mkmodel: %s", err.msg);
    return path;
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
