/* test_quant.h: what the quantizer suites share (test_quant.c,
 * test_quantize_types.c): the reader of the test-vector files, the
 * relative error of a round trip, and the comparison with the Python gguf
 * package's decoders. */
#ifndef STRATA_TEST_QUANT_H
#define STRATA_TEST_QUANT_H

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "testutil.h"

/* One record of a test-vector file (test/data/testvectors.txt,
 * test/data/quant_vectors.txt): a line 'case KIND TYPE N' (KIND quant or
 * dequant), then any of 'in', 'out', 'imatrix' (N floats each) and 'bytes'
 * (hex).  What a record lacks stays NULL. */
typedef struct tv_case {
    char kind[16], type[16];
    int n;
    float *in, *out, *imatrix;
    uint8_t *bytes;
    size_t nbytes;
} tv_case;

static inline float *tv_parse_floats(const char *s, int n)
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

static inline uint8_t *tv_parse_hex(const char *s, size_t *len)
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

/* Read every record of test/data/NAME into cases (at most max; more fails
 * the test); returns the count. */
static inline int tv_load(const char *name, tv_case *cases, int max)
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
            cases[nc].in = tv_parse_floats(line + 3, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "out ", 4)) {
            cases[nc].out = tv_parse_floats(line + 4, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "imatrix ", 8)) {
            cases[nc].imatrix = tv_parse_floats(line + 8, cases[nc].n);
        } else if (nc >= 0 && !strncmp(line, "bytes ", 6)) {
            cases[nc].bytes = tv_parse_hex(line + 6, &cases[nc].nbytes);
        }
    }
    fclose(f);
    return nc + 1;
}

static inline void tv_free(tv_case *c)
{
    free(c->in);
    free(c->out);
    free(c->imatrix);
    free(c->bytes);
}

/* ||decode(q(x)) - x|| / ||x|| over elements [from, to) of an n-element row
 * of `type`, decoded by the traits table (every decoded value must be
 * finite). */
static inline double tv_round_trip_rel(quant_row_fn q, int type, const float *x, int64_t n,
                                       const float *im, int64_t from, int64_t to)
{
    const type_traits *t = type_traits_get(type);
    ck_assert_msg(t && t->dequant, "type %d (%s): no decoder", type, type_name(type));
    uint8_t *b = malloc(type_row_bytes(type, n));
    float *y = malloc((size_t)n * sizeof *y);
    ck_assert(b && y);
    q(x, b, n, im);
    t->dequant(b, y, n);
    double se = 0, sx = 0;
    int64_t bad = -1; /* one check after the loop: a check per element
                       * would cost a message to libcheck's parent each */
    for (int64_t i = from; i < to; i++) {
        if (bad < 0 && !isfinite(y[i]))
            bad = i;
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    ck_assert_msg(bad < 0, "%s: element %lld decodes to %g", type_name(type), (long long)bad,
                  bad < 0 ? 0.0 : y[bad]);
    free(b);
    free(y);
    return sqrt(se / sx);
}

static inline void tv_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Decode n elements of `type` from blocks with the traits table, write the
 * blocks and the floats to files under test_tmpdir() (removed after), and
 * have test/scripts/quant_check.py decode the blocks with
 * gguf.quants.dequantize and compare bit for bit; prints "WHO: python gguf:
 * " and its verdict.  The caller skips without python3, gguf and numpy. */
static inline void tv_python_compare(const char *who, int type, const void *blocks, int64_t n)
{
    const type_traits *t = type_traits_get(type);
    ck_assert_msg(t && t->dequant, "type %d: no decoder", type);
    char bpath[1024], fpath[1024], cmd[4096];
    snprintf(bpath, sizeof bpath, "%s/qc-%s.blocks", test_tmpdir(), t->name);
    snprintf(fpath, sizeof fpath, "%s/qc-%s.f32", test_tmpdir(), t->name);
    float *y = malloc((size_t)n * sizeof *y);
    ck_assert(y);
    t->dequant(blocks, y, n);
    tv_write_file(bpath, blocks, type_row_bytes(t->id, n));
    tv_write_file(fpath, y, (size_t)n * sizeof *y);
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

#endif
