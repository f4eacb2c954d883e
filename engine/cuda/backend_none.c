/* backend_none.c: the CUDA backend's entry points in a CPU-only build. */
#ifndef STRATA_CUDA
#include "engine/cuda/backend_cuda.h"

int cuda_backend_available(const char **why)
{
    if (why)
        *why = "built without CUDA (nvcc not found at build time, or CUDA=0)";
    return 0;
}

int cuda_device_free(int dev, uint64_t *bytes, strata_error *err)
{
    (void)dev;
    *bytes = 0;
    return strata_err(err, STRATA_E_UNSUPPORTED, "built without CUDA");
}

int cuda_engine_init(strata_engine *e, strata_error *err)
{
    (void)e;
    return strata_err(err, STRATA_E_UNSUPPORTED, "built without CUDA");
}

void cuda_engine_free(strata_engine *e) { (void)e; }

kv_allocator cuda_kv_allocator(strata_engine *e, stage *st)
{
    (void)e;
    (void)st;
    kv_allocator a = {0};
    return a;
}

void cuda_stagepool_hooks(strata_engine *e, stagepool_hooks *h)
{
    (void)e;
    (void)h;
}

int forward_cuda(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                 strata_error *err)
{
    (void)decode;
    (void)e;
    (void)rows;
    (void)n;
    (void)logits;
    return strata_err(err, STRATA_E_UNSUPPORTED, "built without CUDA");
}

int cuda_seq_sync_pages(strata_engine *e, strata_seq *s, strata_error *err)
{
    (void)e;
    (void)s;
    (void)err;
    return 0;
}

int cuda_can_sample(const struct sampler_params *p)
{
    (void)p;
    return 0;
}

int forward_cuda_sample(strata_engine *e, const fwd_row *rows, int n,
                        const struct sampler_params *const *params, const float *uniform,
                        int32_t *next, strata_error *err)
{
    (void)e;
    (void)rows;
    (void)n;
    (void)params;
    (void)uniform;
    (void)next;
    return strata_err(err, STRATA_E_UNSUPPORTED, "built without CUDA");
}

void cuda_seq_free(strata_engine *e, strata_seq *s)
{
    (void)e;
    (void)s;
}
#else
typedef int backend_none_is_empty_with_cuda;
#endif
