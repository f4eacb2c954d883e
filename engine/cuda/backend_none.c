/* backend_none.c: the CUDA backend's table in a build without nvcc — it
 * says why it is unavailable, and the engine never calls anything else. */
#ifndef STRATA_CUDA
#include "engine/backend.h"

static int none_available(const char **why)
{
    if (why)
        *why = "built without CUDA (nvcc not found at build time, or CUDA=0)";
    return 0;
}

const backend backend_cuda = {
    .kind = STRATA_BACKEND_CUDA,
    .name = "cuda",
    .available = none_available,
};
#else
typedef int backend_none_is_empty_with_cuda;
#endif
