/* matvec.c: the plain reference for y = W x on weights in any type strata
 * decodes (doc/formats.md §2), and the embedding lookup.
 *
 * Written to be read, not to be fast: a row of W is dequantized with the
 * type's own decoder (model/quant*.c, bit-exact with ggml) a chunk at a time,
 * and dotted with x accumulating in double, so the only rounding left is the
 * final conversion to f32.  Every faster kernel (cpu_matmul_fast, the CUDA
 * ones) is tested against this. */
#include <assert.h>

#include "kernels/ops.h"
#include "model/quant.h"

/* 256 elements is a whole number of blocks for every type (block sizes 1,
 * 32, 64, 256) and divides no row length we need it to: a row of `cols`
 * (a multiple of the block) splits into chunks of min(256, rest). */
#define MATVEC_CHUNK 256

/* One output element: row (cols elements in the type's blocks) dot x. */
static double row_dot(const type_traits *t, const uint8_t *row, int64_t cols,
                      const float *x)
{
    float w[MATVEC_CHUNK];
    double sum = 0.0;
    for (int64_t c0 = 0; c0 < cols; c0 += MATVEC_CHUNK) {
        const int64_t len = cols - c0 < MATVEC_CHUNK ? cols - c0 : MATVEC_CHUNK;
        t->dequant(row + type_row_bytes(t->id, c0), w, len);
        for (int64_t c = 0; c < len; c++)
            sum += (double)w[c] * (double)x[c0 + c];
    }
    return sum;
}

void cpu_matvec(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, float *y)
{
    cpu_matmul(type, w, rows, cols, x, 1, y);
}

void cpu_matmul(int type, const void *w, int64_t rows, int64_t cols,
                const float *x, int64_t n, float *y)
{
    const type_traits *t = type_traits_get(type);
    /* the loader refuses types without a decoder; reaching here with one is
     * a programming error */
    assert(t && t->dequant && cols % t->blck == 0);
    const size_t row_bytes = type_row_bytes(type, cols);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++)
            y[i * rows + r] = (float)row_dot(t, (const uint8_t *)w + r * row_bytes,
                                             cols, x + i * cols);
}

void cpu_embed(int type, const void *table, int64_t cols, int32_t token,
               float *out)
{
    const type_traits *t = type_traits_get(type);
    assert(t && t->dequant && cols % t->blck == 0 && token >= 0);
    const size_t row_bytes = type_row_bytes(type, cols);
    t->dequant((const uint8_t *)table + (size_t)token * row_bytes, out, cols);
}
