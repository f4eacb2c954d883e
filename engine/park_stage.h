/* park_stage.h: the staged copier — how a capture or restore moves one
 * stage's K/V between its KV pages and a linear span of host memory in a
 * few long copies instead of thousands of short ones.
 *
 * Why: the pages of conversations prefilled at the same time interleave in
 * the pool, so a 100K-token span is ~12K pieces of 8-256 KiB per stage (a
 * page of one (layer, buffer), or one head's rows of a partly filled page).
 * One cudaMemcpyAsync per piece ran the H200's host link at 1/13 of its
 * rate.  The stager records the pieces while engine/park.c plans them
 * (copy_lb), then per chunk of the span (32 MiB on a card):
 *   span -> host (capture):  gather the chunk's pieces into the staging
 *       buffer on the card (kernels/cuda/segcopy.cu, at HBM speed), then one
 *       copy per gap-free run of it to the host (one per chunk, normally);
 *   host -> span (restore):  one copy of the chunk's whole range of the span
 *       into the staging buffer, then scatter its pieces into the pages
 *       (bytes in a gap between pieces are read, never written).
 * Everything is issued on the body's copy stream, in order, so a chunk's
 * gather never overwrites the staging buffer before the previous chunk's
 * copy has read it.  The bytes that land are exactly those of the direct
 * copies (tests: suites park and park_cuda).
 *
 * One stager per stage, used only by that stage's body (one thread at a
 * time).  On the CPU backend the same logic runs over a malloc'd buffer with
 * cpu_seg_copy (a test hook turns it on, so CI runs the chunking). */
#ifndef STRATA_PARK_STAGE_H
#define STRATA_PARK_STAGE_H

#include <stddef.h>

#include "engine/park.h"
#include "kernels/ops.h"

typedef struct park_stager park_stager;

/* A stager for one stage: on_cuda, a staging buffer of stage_bytes and room
 * for max_pieces descriptors on card dev; else host memory.  NULL with err
 * set when the memory cannot be had (the caller copies directly then). */
park_stager *park_stager_new(int on_cuda, int dev, size_t stage_bytes, int max_pieces,
                             strata_error *err);
void park_stager_free(park_stager *st);   /* NULL ok */

/* A copier that stages the copies between park_copier.span_begin and
 * span_end and hands every other copy to `direct` (whose stream, on a
 * card, it shares). */
void park_stager_copier(park_stager *st, const park_copier *direct, park_copier *out);

/* Device bytes a stager of these sizes holds (for the engine's report). */
size_t park_stager_bytes(size_t stage_bytes, int max_pieces);

/* Test hooks: when > 0, park_new gives every stage a stager of this many
 * bytes and pieces, CPU engines too (tiny, odd sizes push every chunking
 * edge). */
extern size_t park_stage_test_bytes;
extern int park_stage_test_pieces;

#endif
