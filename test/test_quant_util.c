/* test_quant_util.c: see test_quant_util.h. */
#include "test_quant_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static float *parse_floats(const char *s, int n)
{
    float *v = calloc((size_t)n, sizeof *v);
    ck_assert(v);
    char *end;
    for (int i = 0; i < n; i++) {
        v[i] = strtof(s, &end);
        ck_assert_msg(end != s, "short float line");
        s = end;
    }
    return v;
}

static uint8_t *parse_hex(const char *s, size_t *len)
{
    size_t n = strcspn(s, "\r\n") / 2;
    uint8_t *b = malloc(n ? n : 1);
    ck_assert(b);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

int tv_load(const char *name, tv_case *cases, int max)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test/data/%s", test_root(), name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char line[1 << 16];
    int nc = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            ck_assert(++nc < max);
            memset(&cases[nc], 0, sizeof cases[nc]);
            ck_assert(sscanf(line, "case %15s %15s %d", cases[nc].kind, cases[nc].type,
                             &cases[nc].n) == 3);
        } else if (nc >= 0 && !strncmp(line, "in ", 3)) {
            cases[nc].in = parse_floats(line + 3, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "out ", 4)) {
            cases[nc].out = parse_floats(line + 4, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "imatrix ", 8)) {
            cases[nc].imatrix = parse_floats(line + 8, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "bytes ", 6)) {
            cases[nc].bytes = parse_hex(line + 6, &cases[nc].nbytes);
        }
    }
    fclose(f);
    return nc + 1;
}

void tv_free(tv_case *c)
{
    free(c->in);
    free(c->out);
    free(c->imatrix);
    free(c->bytes);
}

double tv_round_trip_rel(quant_row_fn q, int type, const float *x, int64_t n, const float *im,
                         int64_t from, int64_t to)
{
    const type_traits *t = type_traits_get(type);
    ck_assert_msg(t && t->dequant, "type %d (%s): no decoder", type, type_name(type));
    uint8_t *b = malloc(type_row_bytes(type, n));
    float *y = malloc((size_t)n * sizeof *y);
    ck_assert(b && y);
    q(x, b, n, im);
    t->dequant(b, y, n);
    double se = 0, sx = 0;
    for (int64_t i = from; i < to; i++) {
        ck_assert_msg(isfinite(y[i]), "%s: element %lld decodes to %g", type_name(type),
                      (long long)i, y[i]);
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    free(b);
    free(y);
    return sqrt(se / sx);
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

void tv_python_compare(const char *who, int type, const void *blocks, int64_t n)
{
    const type_traits *t = type_traits_get(type);
    ck_assert_msg(t && t->dequant, "type %d: no decoder", type);
    char bpath[1024], fpath[1024], cmd[4096];
    snprintf(bpath, sizeof bpath, "%s/qc-%s.blocks", test_tmpdir(), t->name);
    snprintf(fpath, sizeof fpath, "%s/qc-%s.f32", test_tmpdir(), t->name);
    float *y = malloc((size_t)n * sizeof *y);
    ck_assert(y);
    t->dequant(blocks, y, n);
    write_file(bpath, blocks, type_row_bytes(t->id, n));
    write_file(fpath, y, (size_t)n * sizeof *y);
    free(y);
    snprintf(cmd, sizeof cmd, "python3 %s/test/scripts/quant_check.py compare %s %s %s",
             test_root(), t->name, bpath, fpath);
    char *out = NULL;
    const int rc = test_run(cmd, &out);
    printf("%s: python gguf: %s", who, out ? out : "(no output)\n");
    remove(bpath);
    remove(fpath);
    ck_assert_msg(rc == 0, "%s: %s", cmd, out ? out : "");
    free(out);
}
