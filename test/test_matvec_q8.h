/* test_matvec_q8.h: what the suites of the quantized-activation kernels
 * share (test_matvec_q8.c, test_matvec_q8k.c). */
#ifndef STRATA_TEST_MATVEC_Q8_H
#define STRATA_TEST_MATVEC_Q8_H

#include <stdint.h>

/* rows x cols of weight type `type`: random bytes with finite, non-zero
 * fp16 scales (and minima) in every block, so every code and scale bit
 * pattern the format allows; malloc'ed. */
uint8_t *q8_random_blocks(int type, int64_t rows, int64_t cols, uint64_t seed);

#endif
