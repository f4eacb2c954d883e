/* test_park.h: the K/V of a sequence read the slow way, row by row,
 * shared by the park suites (test_park.c on the CPU, which implements
 * these; test_park_cuda.c on a card, where the pool is first read back
 * whole into a host mirror). */
#ifndef STRATA_TEST_PARK_H
#define STRATA_TEST_PARK_H

#include <stddef.h>
#include <stdint.h>

#include "cache/kvcache.h"
#include "engine/engine_internal.h"
#include "park/park.h"

/* The span [t0, t1) of one stage in park.h's image layout (malloc'd). */
char *park_ref_span(const kv_pool *p, const int32_t *pages, int t0, int t1, size_t *bytes);
/* Every K/V row of tokens [0, n) of one stage, in token order (malloc'd). */
char *park_dump_stage(const kv_pool *p, const int32_t *pages, int n, size_t *bytes);

/* How a suite reads stage i's pool on the host: the pool itself (CPU) or a
 * mirror read back from the card (CUDA); release (may be NULL) drops it. */
typedef struct park_pool_reader {
    kv_pool *(*get)(const strata_engine *e, int stage);
    void (*release)(kv_pool *p);
} park_pool_reader;

/* The last span of the cached image of s's tokens starts at t0, verifies,
 * and equals park_ref_span of every stage. */
void park_assert_span_matches(const park_pool_reader *rd, strata_park *pk, const strata_seq *s,
                              int t0);
/* Tokens [0, n) of a and b (one engine) hold the same K/V on every stage. */
void park_assert_same_kv(const park_pool_reader *rd, const strata_seq *a, const strata_seq *b,
                         int n);

#endif
