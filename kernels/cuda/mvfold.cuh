/* mvfold.cuh: the decode matvec's k-segment fold through global memory,
 * shared by matvec.cu and matvec_mix.cu.  cell: the (pair, row-block)'s
 * ticket; part: the stream's partial sums (mv_fold_scratch). */
#pragma once

#include <stddef.h>

#include "base/error.h"
#include "kernels/cuda/wtile.cuh"

/* The k-segments of row-block rb (nseg > 1) through global memory: each
 * segment block stores its partial sums, and the last of the nseg to take
 * the row-block's ticket adds them up in segment order, v = ((0 + s0) + s1)
 * + ..., exactly prefill's sum (and that of the thread-block clusters that
 * did this before), and puts the ticket back to 0 for the next launch (as
 * the split attention folds its chunks).
 * No block waits for another, so the blocks need not be co-resident: the
 * plan may use every SM, or more blocks than SMs.  seg: this block's
 * segment (blockIdx.y in the matvec kernels; the work item's in the
 * persistent chain, mvchain.cu).  res set: the last block writes res[row] +
 * v, the bits of cuda_add after the fold (the chain's residual add).
 * Returns true in the block that wrote the row-block. */
__device__ __forceinline__ bool mv_fold(unsigned *tick, float *part, float *ay, size_t cell, int rb, int n, int rows,
                                        int nseg, int seg, const float (&acc)[4], int warp, int lane,
                                        const float *res = nullptr)
{
    using namespace wt;
    const int g = lane >> 2, t = lane & 3;
    const size_t span = (size_t)n * BLOCK_ROWS; /* one segment's partials */
    float *pb = part + cell * nseg * span;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int col = 2 * t + (i & 1);
        if (col < n)
            pb[seg * span + (size_t)col * BLOCK_ROWS + warp * 16 + g + 8 * (i >> 1)] = acc[i];
    }
    /* as a grid barrier does it: the block's stores reach thread 0 through
     * the barrier, its fence (cumulative) puts them before the ticket, and
     * the last block's fence after its ticket before its loads (L2: ld.cg) */
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(tick + cell, 1u) == (unsigned)nseg - 1;
        if (last)
            __threadfence();
    }
    if (!__syncthreads_or(last))
        return false;
    for (int i = threadIdx.x; i < (int)span; i += MV_THREADS) {
        const int c = i / BLOCK_ROWS, rl = i - c * BLOCK_ROWS, row = rb * BLOCK_ROWS + rl;
        if (row < rows) {
            /* every segment's load in flight at once (one L2 round trip,
             * not nseg), then the sum in segment order */
            float p[MAX_SEGS];
#pragma unroll
            for (int sg = 0; sg < MAX_SEGS; ++sg)
                p[sg] = sg < nseg ? __ldcg(pb + sg * span + i) : 0.f;
            float v = 0.f;
#pragma unroll
            for (int sg = 0; sg < MAX_SEGS; ++sg)
                if (sg < nseg)
                    v += p[sg];
            ay[(size_t)c * rows + row] = res ? __fadd_rn(v, __ldcg(res + (size_t)c * rows + row)) : v;
        }
    }
    if (threadIdx.x == 0)
        tick[cell] = 0u; /* every block of this row-block has taken it */
    return true;
}

/* The stream's fold scratch (matvec.cu): its tickets, its partial sums and
 * how many floats those hold; allocated on first use outside a capture. */
int mv_fold_scratch(cudaStream_t stream, unsigned **tick, float **part, size_t *floats, strata_error *err);

/* Where a decode kernel's dynamic shared memory starts in the shared window
 * (the block's reserved bytes), which MvLayout aligns the IQ3_XXS tables
 * by; per device, looked up once (matvec.cu). */
int mv_smem_lo(int *out, strata_error *err);
