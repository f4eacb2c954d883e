/* pdl.cuh: programmatic dependent launch (sm_90), the two device halves.
 *
 * A decode step is a chain of kernels in one stream (one graph), each
 * waiting for the one before.  A weight matvec spends its first
 * microseconds on work that needs nothing from its predecessor: the
 * launch itself, building the IQ3_XXS tables in shared memory, and issuing
 * the copies of its first weight tiles.  Launched with the attribute
 * cudaLaunchAttributeProgrammaticStreamSerialization (matvec.cu), it may
 * start that while the predecessor still runs, once every block of the
 * predecessor has executed pdl_trigger(); it then calls pdl_wait() before
 * its first read of anything the predecessor writes (the activations, an
 * expert id) and before its first write.  pdl_wait() returns when the
 * predecessor grid has completed and its memory is visible, so the chain's
 * order of effects is unchanged — only idle time goes.
 *
 * pdl_trigger() in a kernel whose successor was launched without the
 * attribute does nothing, and pdl_wait() in a kernel launched without it
 * returns at once; on older cards both compile to nothing. */
#ifndef STRATA_PDL_CUH
#define STRATA_PDL_CUH

#include <utility>

#include <cuda_runtime.h>

__device__ __forceinline__ void pdl_trigger()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* STRATA_NO_PDL=1 (read once by the engine, engine/cuda/cuda_setup.c): launch
 * without the attribute, every kernel waiting for its predecessor as
 * usual — to tell a PDL ordering bug from any other. */
extern "C" int strata_pdl_off;

/* Launch k with the programmatic attribute.  Every kernel launched this
 * way must call pdl_wait() before it touches memory its predecessors write;
 * the small kernels of the decode chain call it first thing, so for them
 * only the launch latency overlaps the predecessor. */
template <typename... P, typename... A>
static inline cudaError_t pdl_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t s, A &&...args)
{
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = strata_pdl_off ? 0 : 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

#endif
