/* backend_cuda.h: the CUDA backend's functions, which fill the backend_cuda
 * table (engine/backend.h) in engine/cuda/backend_cuda.c.  Setup and
 * teardown are in cuda_setup.c, the forward pass in backend_cuda.c, the
 * copies for parking in copy_cuda.c.  Without CUDA, backend_none.c defines
 * the table with only `available`, which says why. */
#ifndef STRATA_BACKEND_CUDA_H
#define STRATA_BACKEND_CUDA_H

#include "engine/backend.h"

/* cuda_setup.c */
int cuda_backend_available(const char **why);
int cuda_device_free(int dev, uint64_t *bytes, strata_error *err);
int cuda_engine_init(strata_engine *e, strata_error *err);
void cuda_engine_free(strata_engine *e);
kv_allocator cuda_kv_allocator(strata_engine *e, stage *st);
void cuda_stagepool_hooks(strata_engine *e, stagepool_hooks *h);
int cuda_seq_sync_pages(strata_engine *e, strata_seq *s, strata_error *err);
void cuda_seq_free(strata_engine *e, strata_seq *s);

/* backend_cuda.c */
int forward_cuda(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                 strata_error *err);
int cuda_can_sample(const struct sampler_params *p);
int forward_cuda_sample(strata_engine *e, const fwd_row *rows, int n,
                        const struct sampler_params *const *params, const float *uniform,
                        int32_t *next, strata_error *err);

/* copy_cuda.c */
int cuda_copier(const strata_engine *e, int stage, backend_copier *c, strata_error *err);
void cuda_copy_thread_fini(void);
int cuda_host_block(size_t bytes, void **out, strata_error *err);
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);
/* Pinned copy bandwidth between dev and the host (to_host: D2H, else H2D),
 * best of reps runs of `bytes`, GB/s: the limit the benches compare with. */
int cuda_link_bandwidth(int dev, size_t bytes, int to_host, int reps, double *gbps,
                        strata_error *err);

/* Test hook: when > 0, every crossing between stages first spins the
 * receiving stage's stream for this many SM cycles, so it lags behind the
 * host and the sending stage (test_cuda_engine.c). */
extern long long cuda_test_cross_lag;

#endif
