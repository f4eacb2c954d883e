/* test_quant_util.h: what the quantizer suites share (test_quant.c,
 * test_quantize_types.c; definitions in test_quant_util.c): the reader of
 * the test-vector files, the relative error of a round trip, and the
 * comparison with the Python gguf package's decoders. */
#ifndef STRATA_TEST_QUANT_UTIL_H
#define STRATA_TEST_QUANT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "model/quant.h"

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

/* Read every record of test/data/NAME into cases (at most max; more fails
 * the test); returns the count. */
int tv_load(const char *name, tv_case *cases, int max);
void tv_free(tv_case *c);

/* ||decode(q(x)) - x|| / ||x|| over elements [from, to) of an n-element row
 * of `type`, decoded by the traits table (every decoded value must be
 * finite). */
double tv_round_trip_rel(quant_row_fn q, int type, const float *x, int64_t n, const float *im,
                         int64_t from, int64_t to);

/* Decode n elements of `type` from blocks with the traits table, write the
 * blocks and the floats to files under test_tmpdir() (removed after), and
 * have test/scripts/quant_check.py decode the blocks with
 * gguf.quants.dequantize and compare bit for bit; prints "WHO: python gguf:
 * " and its verdict.  The caller skips without python3, gguf and numpy. */
void tv_python_compare(const char *who, int type, const void *blocks, int64_t n);

#endif
