/* cuda_testutil.h: device helpers the CUDA suites share (test_cuda_ops.c,
 * test_cuda_attention.c).  Only with STRATA_CUDA. */
#ifndef STRATA_CUDA_TESTUTIL_H
#define STRATA_CUDA_TESTUTIL_H
#ifdef STRATA_CUDA

#include <cuda_runtime_api.h>

#include "base/error.h"
#include "testutil.h"

/* A CUDA runtime call that must succeed; a strata call (with e_ as its
 * error record) that must return 0. */
#define CK(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)
#define OK(call)                                                                          \
    do {                                                                                  \
        strata_error e_;                                                                  \
        strata_err_clear(&e_);                                                            \
        int rc_ = (call);                                                                 \
        ck_assert_msg(rc_ == 0, "%s: %d %s", #call, rc_, e_.msg);                         \
    } while (0)

static inline void *dup_to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes)
        CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Poisoned (0xff bytes: NaN floats, -1 ints), so an unwritten output fails. */
static inline void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    CK(cudaMemset(d, 0xff, bytes ? bytes : 1));
    return d;
}

static inline void to_host(void *h, const void *d, size_t bytes)
{
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

#endif
#endif
