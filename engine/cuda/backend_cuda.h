/* backend_cuda.h: the engine's CUDA backend, as seen from the C engine.
 * Implemented in engine/cuda/backend_cuda.c when built with CUDA; without CUDA,
 * engine/cuda/backend_none.c says why it is unavailable. */
#ifndef STRATA_BACKEND_CUDA_H
#define STRATA_BACKEND_CUDA_H

#include "engine/engine_internal.h"

/* 1 if a usable CUDA device exists; else 0 and *why says why. */
int cuda_backend_available(const char **why);

/* Free memory on card dev now (cudaMemGetInfo), for --layer-split auto. */
int cuda_device_free(int dev, uint64_t *bytes, strata_error *err);
/* Upload every stage's weights, create streams and scratch. */
int cuda_engine_init(strata_engine *e, strata_error *err);
void cuda_engine_free(strata_engine *e);
/* Device memory for a stage's KV pool, on the stage's card. */
kv_allocator cuda_kv_allocator(strata_engine *e, stage *st);
/* Worker hooks for the stage pool: bind the card, make the copy stream. */
void cuda_stagepool_hooks(strata_engine *e, stagepool_hooks *h);
/* The forward pass on the cards (same contract as forward_cpu). */
int forward_cuda(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                 strata_error *err);
/* Keep a sequence's device page tables in step with its host ones. */
int cuda_seq_sync_pages(strata_engine *e, strata_seq *s, strata_error *err);
void cuda_seq_free(strata_engine *e, strata_seq *s);

/* Test hook: when > 0, every crossing between stages first spins the
 * receiving stage's stream for this many SM cycles, so it lags behind the
 * host and the sending stage (test_cuda_engine.c). */
extern long long cuda_test_cross_lag;

#endif
