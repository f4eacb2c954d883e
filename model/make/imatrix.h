/* imatrix.h: the importance matrix — for every weight matrix, the mean
 * square of each input column's activation over a text (llama.cpp's
 * imatrix, E[a^2] per column).  The quantizers weight their error by it,
 * so the columns that carry large activations are reproduced best.
 *
 * Two halves: the collector (imatrix_new / imatrix_add, fed by the
 * engine's matmul tap while `strata-cli imatrix` runs a text through the
 * model) and the file (imatrix_write / imatrix_load / imatrix_lookup, read
 * by `quantize --imatrix`).  The file is a GGUF, laid out in doc/quant.md
 * ("The importance matrix file"). */
#ifndef STRATA_IMATRIX_H
#define STRATA_IMATRIX_H

#include <stdint.h>

#include "base/error.h"

typedef struct imatrix imatrix;

/* An empty collector. */
imatrix *imatrix_new(void);
void imatrix_free(imatrix *im);

/* Accumulate n rows of `cols` floats, the input of weight `name` (matrix
 * `expert` of n_mat, or expert -1 / n_mat 1 for a plain matrix): per
 * column the sum of squares, per matrix the row count.  Thread-safe.
 * Returns 0, or a negative STRATA_E_* when the weight's shape changed or
 * memory ran out (the first error is kept: imatrix_status). */
int imatrix_add(imatrix *im, const char *name, int expert, int n_mat, const float *x,
                int n, int64_t cols);
/* The first error imatrix_add met (0 if none), with its message. */
int imatrix_status(const imatrix *im, strata_error *err);

/* Entries collected so far, and the rows seen by entry i's matrices (sum
 * over experts). */
int imatrix_count(const imatrix *im);

/* Write the means to `path` (atomically): only blk.* weights, as
 * llama.cpp's imatrix; `dataset` (the text's name), chunks and chunk size
 * go into the metadata. */
int imatrix_write(const imatrix *im, const char *path, const char *dataset, int n_chunks,
                  int chunk_size, strata_error *err);

/* Open an imatrix file for quantize (kept open until imatrix_free). */
int imatrix_load(const char *path, imatrix **out, strata_error *err);

/* The quantize callback (quantize_imatrix_fn): the n_mat * ne0 means of
 * weight `tensor`, or NULL when the file has none for it or its shape
 * differs. */
const float *imatrix_lookup(void *ctx, const char *tensor, int64_t ne0, int64_t n_mat);

/* The means of one weight from a collector or a loaded file: *cols and
 * *n_mat set, NULL if absent.  For tests and tools. */
const float *imatrix_values(const imatrix *im, const char *tensor, int64_t *cols, int *n_mat);

#endif
