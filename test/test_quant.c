/* test_quant.c: suite "quant" — the type traits, the row codecs and the
 * quantizers (model/quant*.c), against ggml's own output (the 30 test
 * vectors of ../shared/formats/testvectors.txt, copied to test/data), the
 * Python gguf package's dequantizers, and error bounds on random data. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"

/* ---- test vectors --------------------------------------------------------- */

typedef struct tv_case {
    char kind[16], type[16];
    int n;
    float *in, *out, *imatrix;
    uint8_t *bytes;
    size_t nbytes;
} tv_case;

static float *parse_floats(const char *s, int n)
{
    float *v = calloc((size_t)n, sizeof *v);
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
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

/* Read every case of test/data/testvectors.txt; returns the count. */
static int tv_load(tv_case *cases, int max)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test/data/testvectors.txt", test_root());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char line[1 << 16];
    int nc = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            ck_assert(++nc < max);
            memset(&cases[nc], 0, sizeof cases[nc]);
            ck_assert(sscanf(line, "case %15s %15s %d", cases[nc].kind,
                             cases[nc].type, &cases[nc].n) == 3);
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

static void tv_free(tv_case *c)
{
    free(c->in);
    free(c->out);
    free(c->imatrix);
    free(c->bytes);
}

START_TEST(testvectors_bit_exact)
{
    static tv_case cases[64];
    int n = tv_load(cases, 64);
    ck_assert_int_eq(n, 30);
    int passed = 0;
    for (int i = 0; i < n; i++) {
        tv_case *c = &cases[i];
        const type_traits *t = type_traits_by_name(c->type);
        ck_assert_msg(t != NULL, "case %d: unknown type %s", i, c->type);
        ck_assert_uint_eq(type_row_bytes(t->id, c->n), c->nbytes);
        if (!strcmp(c->kind, "dequant")) {
            ck_assert_msg(t->dequant, "no decoder for %s", t->name);
            float *y = malloc((size_t)c->n * sizeof *y);
            t->dequant(c->bytes, y, c->n);
            for (int j = 0; j < c->n; j++)
                ck_assert_msg(!memcmp(&y[j], &c->out[j], 4),
                              "case %d %s: element %d is %.9g, want %.9g", i,
                              t->name, j, y[j], c->out[j]);
            free(y);
        } else {
            ck_assert_msg(t->quant, "no quantizer for %s", t->name);
            uint8_t *b = malloc(c->nbytes);
            t->quant(c->in, b, c->n, c->imatrix);
            for (size_t j = 0; j < c->nbytes; j++)
                ck_assert_msg(b[j] == c->bytes[j],
                              "case %d quant %s%s: byte %zu is %02x, want %02x",
                              i, t->name, c->imatrix ? " (imatrix)" : "", j,
                              b[j], c->bytes[j]);
            free(b);
        }
        passed++;
        tv_free(c);
    }
    ck_assert_int_eq(passed, 30);
}
END_TEST

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, testvectors_bit_exact);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(quant_suite)
