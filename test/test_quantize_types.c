/* test_quantize_types.c: suite "quantize_types" -- the K- and IQ-type
 * quantizers (model/quantize_*.c): ggml's bytes for every quant vector of
 * test/data/quant_vectors.txt, with and without an importance matrix, and
 * the round trip quantize -> decode on random rows. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/quant.h"
#include "model/quantize_types.h"

/* ---- the vectors ---------------------------------------------------------- */

typedef struct qv_case {
    char type[16];
    int n;
    float *in, *imatrix;
    uint8_t *bytes;
    size_t nbytes;
} qv_case;

static float *read_floats(const char *s, int n)
{
    float *v = malloc((size_t)n * sizeof *v);
    char *end;
    for (int i = 0; i < n; i++) {
        v[i] = strtof(s, &end);
        ck_assert_msg(end != s, "short float line");
        s = end;
    }
    return v;
}

static uint8_t *read_hex(const char *s, size_t *len)
{
    const size_t n = strcspn(s, "\r\n") / 2;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

static int qv_load(qv_case *c, int max)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test/data/quant_vectors.txt", test_root());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char line[1 << 16];
    int nc = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case quant ", 11)) {
            ck_assert(++nc < max);
            memset(&c[nc], 0, sizeof c[nc]);
            ck_assert(sscanf(line, "case quant %15s %d", c[nc].type, &c[nc].n) == 2);
        } else if (nc >= 0 && !strncmp(line, "in ", 3)) {
            c[nc].in = read_floats(line + 3, c[nc].n);
        } else if (nc >= 0 && !strncmp(line, "imatrix ", 8)) {
            c[nc].imatrix = read_floats(line + 8, c[nc].n);
        } else if (nc >= 0 && !strncmp(line, "bytes ", 6)) {
            c[nc].bytes = read_hex(line + 6, &c[nc].nbytes);
        }
    }
    fclose(f);
    return nc + 1;
}

static void qv_free(qv_case *c)
{
    free(c->in);
    free(c->imatrix);
    free(c->bytes);
}

static void expect_bytes(const uint8_t *got, const uint8_t *want, size_t n,
                         const char *what)
{
    for (size_t j = 0; j < n; j++)
        ck_assert_msg(got[j] == want[j], "%s: byte %zu is %02x, want %02x", what, j,
                      got[j], want[j]);
}

/* ggml's IQ3_S bytes with the misplacement undone: in a super-block whose
 * sub-block z is all zero, ggml writes sub-blocks z+1..7's 8 index bytes
 * and 4 sign bytes into slots z..6 and leaves slot 7 zero; the correct
 * block has slot z zero and each later sub-block in its own slot.  qh, the
 * scales and d are placed by sub-block in both. */
static void iq3_s_unshift(uint8_t *b, const float *x)
{
    for (int z = 7; z >= 0; z--) {
        int empty = 1;
        for (int i = 0; i < 32; i++)
            empty &= x[32 * z + i] == 0;
        if (!empty)
            continue;
        memmove(b + 2 + 8 * (z + 1), b + 2 + 8 * z, (size_t)8 * (7 - z));
        memset(b + 2 + 8 * z, 0, 8);
        memmove(b + 74 + 4 * (z + 1), b + 74 + 4 * z, (size_t)4 * (7 - z));
        memset(b + 74 + 4 * z, 0, 4);
    }
}

START_TEST(vectors_bit_exact)
{
    static qv_case cases[32];
    const int n = qv_load(cases, 32);
    ck_assert_int_eq(n, 16);
    int with_imatrix = 0, iq3_s_fixed = 0;
    for (int i = 0; i < n; i++) {
        qv_case *c = &cases[i];
        const type_traits *t = type_traits_by_name(c->type);
        ck_assert_msg(t && t->quant, "case %d: no quantizer for %s", i, c->type);
        ck_assert_uint_eq(type_row_bytes(t->id, c->n), c->nbytes);
        uint8_t *b = malloc(c->nbytes);
        char what[64];
        snprintf(what, sizeof what, "case %d quant %s %d%s", i, t->name, c->n,
                 c->imatrix ? " (imatrix)" : "");
        t->quant(c->in, b, c->n, c->imatrix);
        if (t->id == 21) {
            /* IQ3_S: ggml's layout reproduced by the _ggml variant, and the
             * traits' quantizer gives the same block with the misplaced
             * bytes back in their slots (equal where nothing is empty) */
            uint8_t *g = malloc(c->nbytes);
            quant_row_iq3_s_ggml(c->in, g, c->n, c->imatrix);
            expect_bytes(g, c->bytes, c->nbytes, what);
            uint8_t *want = malloc(c->nbytes);
            memcpy(want, c->bytes, c->nbytes);
            for (int k = 0; k < c->n / 256; k++)
                iq3_s_unshift(want + 110 * k, c->in + 256 * k);
            iq3_s_fixed += memcmp(want, c->bytes, c->nbytes) != 0;
            expect_bytes(b, want, c->nbytes, what);
            free(g);
            free(want);
        } else {
            expect_bytes(b, c->bytes, c->nbytes, what);
        }
        with_imatrix += c->imatrix != NULL;
        free(b);
        qv_free(c);
    }
    ck_assert_int_eq(with_imatrix, 10);
    ck_assert_int_eq(iq3_s_fixed, 1); /* the 512 case has the empty sub-block */
}
END_TEST

static Suite *quantize_types_suite(void)
{
    Suite *s = suite_create("quantize_types");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, vectors_bit_exact);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(quantize_types_suite)
