/* wblocks_sass.cu: the instruction count of the block-tile decoders, for
 * scripts/wblocks-sass.sh (compiled to a cubin for sm_90, never run).  One
 * kernel per type runs wt::tile_any over tiles in shared memory with one
 * token's fp16 activations in shared memory, as the decode kernel does;
 * the script counts the SASS of the tile loop: what one lane issues per
 * tile (two rows x 128 values), the 16 HMMA included. */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

template <int TYPE> __global__ void probe(const uint8_t *__restrict__ gw, const __half *__restrict__ gx, float *out, int ntile)
{
    constexpr int RB = wb::rb(TYPE);
    extern __shared__ __align__(16) uint8_t sm[];
    __half *xs = (__half *)(sm + 16 * RB * 2);
    uint8_t *grid = sm + 16 * RB * 2 + 8 * 256 * 2 * 2; /* the IQ types' grid, as the kernels keep it */
    for (int i = threadIdx.x; i < 16 * RB * 2; i += 32)
        sm[i] = gw[i];
    for (int i = threadIdx.x; i < 8 * 256 * 2; i += 32)
        xs[i] = gx[i];
    wb::grid_init<TYPE>(grid);
    __syncwarp();
    const int lane = threadIdx.x & 31;
    wt::Act a{};
    a.h = xs;
    a.cs = 256 * 2;
    float acc[1][4] = {};
#pragma unroll 1
    for (int T = 0; T < ntile; ++T) {
        wt::Raw<TYPE> r;
        r.p = sm + (T & 1) * 16 * RB; /* two slots, as a ring */
        wt::tile_any<TYPE, 1, false>(r, a, (T & 1) * 256, 0, acc, grid, lane);
    }
    out[threadIdx.x] = acc[0][0] + acc[0][1] + acc[0][2] + acc[0][3];
}
#define WB_PROBE(T) template __global__ void probe<T>(const uint8_t *, const __half *, float *, int);
WB_FOR_EACH(WB_PROBE)
#undef WB_PROBE
