/* l2prefetch.cuh: a weight kernel's bytes set moving into L2 before it may
 * read anything its predecessor writes.
 *
 * A decode matvec's weights are no kernel's output, so under programmatic
 * dependent launch (pdl.cuh) a block may start reading them while the
 * previous kernel still runs.  Its ring (wtile.cuh, ring_prime) already
 * copies a warp's first D - 1 tiles there; the rest of the warp's share
 * waited for the ring to turn.  cp.async.bulk.prefetch.L2 (sm_90) asks the
 * copy engine to bring a whole byte range into L2 with one instruction and
 * no register or shared memory: the DRAM stream starts at once and the
 * ring's later copies find their tiles in L2.  A prefetch moves no data
 * into the kernel and changes no result: the bits are those of a kernel
 * without it.  Measured on the H200 it made every decode step slower (8B
 * IQ3_XXS batch 1 -4.6 %, doc/BENCHMARKS.md), so it is off unless
 * STRATA_L2_PREFETCH=KiB (weights.cu) asks for it: kept for the experiments
 * that are to find out why.
 *
 * ptxas moves griddepcontrol.wait above plain loads, so a plain load
 * before pdl_wait does not overlap the predecessor; the bulk prefetch is an
 * asm statement like the ring's cp.async, which it keeps in place
 * (doc/cuda-kernels.md, "Weights into L2 before the wait"). */
#ifndef STRATA_L2PREFETCH_CUH
#define STRATA_L2PREFETCH_CUH

#include <stdint.h>

#include "kernels/cuda/wtile.cuh"

namespace wt {

constexpr int L2PF_KIB = 0; /* plan_l2_prefetch's default: off (above) */

/* Bytes a warp may prefetch for its first pass over the row-blocks (0:
 * off): STRATA_L2_PREFETCH KiB, read once per process (weights.cu).  A cap,
 * because the tallest matrices (the output head: 132 blocks x 16 warps x
 * its share) would otherwise ask for more than L2 holds and evict their own
 * first tiles. */
int plan_l2_prefetch();

/* [p, p + bytes) into L2: p 16-byte aligned, bytes a multiple of 16 (the
 * instruction's rules; a range that breaks them is skipped, never issued).
 * In pieces of at most 64 KiB: the SASS (UBLKPF) keeps the size as 16-byte
 * units in 16 bits, so one instruction covers less than 1 MiB. */
__device__ __forceinline__ void l2_prefetch(const void *p, uint32_t bytes)
{
#if __CUDA_ARCH__ >= 900
    if (((uintptr_t)p | bytes) & 15)
        return;
    const uint8_t *q = (const uint8_t *)p;
    for (uint32_t at = 0; at < bytes; at += 65536) {
        const uint32_t b = bytes - at < 65536 ? bytes - at : 65536;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(q + at), "r"(b) : "memory");
    }
#endif
}

/* The tiles of m-tile R in k-tiles [t0, t1) after the ring's first D - 1,
 * at most cap bytes.  Packed tiles: an m-tile's k-tiles are contiguous
 * (raw_load's address), one prefetch by lane 0.  F16 / BF16 (row-major):
 * lane r < 16 prefetches row R * 16 + r's columns, cap / 16 bytes of it. */
template <int TYPE>
__device__ __forceinline__ void tiles_l2_prefetch(const Wsrc &ws, int R, int t0, int t1, int cap, int lane)
{
    constexpr int D = Ring<TYPE>::D;
    constexpr Geo gm = geo(TYPE);
    const int ta = t0 + D - 1;
    if (cap <= 0 || ta >= t1)
        return;
    if constexpr (gm.tile > 0) {
        if (lane == 0) {
            const size_t want = (size_t)(t1 - ta) * gm.tile;
            const uint32_t b = (uint32_t)(want < (size_t)cap ? want : (size_t)cap) & ~15u;
            l2_prefetch(ws.w + ((size_t)R * ws.ntk + ta) * gm.tile, b);
        }
    } else {
        const int row = R * 16 + lane, k0 = ta * gm.kt, k1 = min(t1 * gm.kt, ws.cols);
        if (lane < 16 && row < ws.rows && k0 < k1) {
            const size_t want = (size_t)(k1 - k0) * 2;
            const size_t lim = (size_t)cap / 16;
            const uint32_t b = (uint32_t)(want < lim ? want : lim) & ~15u;
            l2_prefetch((const uint16_t *)ws.w + (size_t)row * ws.cols + k0, b);
        }
    }
}

/* Block `part` of `parts` of an expert's matrix the next launch will read
 * (cuda_matvec_experts2's "next": the MoE down projection, whose expert ids
 * only this launch and later ones may read), each warp lane 0 one piece. */
__device__ __forceinline__ void next_l2_prefetch(const uint8_t *w, size_t bytes, int part, int parts, int warp,
                                                 int lane)
{
    if (!w || lane != 0)
        return;
    const size_t pieces = (size_t)parts * MV_WARPS;
    const size_t piece = (bytes + pieces * 16 - 1) / (pieces * 16) * 16;
    const size_t at = ((size_t)part * MV_WARPS + warp) * piece;
    if (at >= bytes)
        return;
    const size_t b = bytes - at < piece ? bytes - at : piece;
    l2_prefetch(w + at, (uint32_t)(b & ~(size_t)15));
}

} /* namespace wt */

#endif
