/* park_testutil.h: the K/V of a sequence read the slow way, row by row,
 * for the park suites (test_park.c on the CPU, test_park_cuda.c on a card,
 * where the pool is first read back whole into a host mirror). */
#ifndef STRATA_PARK_TESTUTIL_H
#define STRATA_PARK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "cache/kvcache.h"

/* The span [t0, t1) of one stage in park.h's image layout (malloc'd). */
char *park_ref_span(const kv_pool *p, const int32_t *pages, int t0, int t1, size_t *bytes);
/* Every K/V row of tokens [0, n) of one stage, in token order (malloc'd). */
char *park_dump_stage(const kv_pool *p, const int32_t *pages, int n, size_t *bytes);

#endif
