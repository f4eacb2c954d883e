/* cuda_check.h: turn a cudaError_t into a strata_error with file:line.
 *
 * Every CUDA runtime call and every kernel launch in strata goes through one
 * of these, so a failure names the call, the place and CUDA's own words:
 *
 *     CUDA_CHECK(err, cudaMemsetAsync(p, 0, n, stream));
 *     kernel<<<grid, block, smem, stream>>>(...);
 *     CUDA_CHECK_LAUNCH(err, "matvec_q8_0");
 *
 * Both macros `return` STRATA_E_DEVICE from the enclosing function (which
 * must return int) with err->msg = "file.cu:123: <call>: <cudaGetErrorString>".
 * CUDA_CHECK_LAUNCH reads cudaGetLastError(): it catches bad launch
 * configurations at once; faults inside the kernel surface at the next
 * synchronising call, which is checked too.  Plain C and CUDA C++ can both
 * include this header (it needs only cuda_runtime_api.h). */
#ifndef STRATA_CUDA_CHECK_H
#define STRATA_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "base/error.h"
#ifdef __cplusplus
}
#endif

/* Fill err from a failed CUDA status; returns STRATA_E_DEVICE. */
static inline int strata_cuda_fail(strata_error *err, cudaError_t e, const char *what,
                                   const char *file, int line)
{
    return strata_err(err, STRATA_E_DEVICE, "%s:%d: %s: %s", file, line, what,
                      cudaGetErrorString(e));
}

#define CUDA_CHECK(err, call)                                                        \
    do {                                                                             \
        cudaError_t cuda_check_e_ = (call);                                          \
        if (cuda_check_e_ != cudaSuccess)                                            \
            return strata_cuda_fail((err), cuda_check_e_, #call, __FILE__, __LINE__); \
    } while (0)

#define CUDA_CHECK_LAUNCH(err, kernel_name)                                          \
    do {                                                                             \
        cudaError_t cuda_check_e_ = cudaGetLastError();                              \
        if (cuda_check_e_ != cudaSuccess)                                            \
            return strata_cuda_fail((err), cuda_check_e_, "launch " kernel_name,     \
                                    __FILE__, __LINE__);                             \
    } while (0)

#endif
