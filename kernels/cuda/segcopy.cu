/* segcopy.cu: the staged copy's gather/scatter on the card (twin:
 * cpu_seg_copy, kernels/cpu/segcopy.c; the caller is engine/park_stage.c).
 *
 * Why: a 100K-token capture whose KV pages interleave with other
 * conversations' is ~12K pieces of 8-256 KiB per stage.  Copied one
 * cudaMemcpyAsync each over PCIe, they ran at 1/13 of the link's rate (the
 * per-copy cost dominates).  Gathered here into one staging buffer at HBM
 * speed (a 32 MiB chunk in ~15 us against ~600 us for its PCIe copy), the
 * link sees one long copy per chunk.
 *
 * One block per piece: the piece's part inside [lo, hi) is copied in the
 * widest word that divides both addresses and the length (16, 8, 4 or 1
 * bytes; KV rows are 8..256 bytes, pages 16 KiB and up), coalesced across
 * the block.  Bytes are moved, nothing computed: bit-exact with the twin. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

#define SEG_THREADS 256

template <typename W>
__device__ void seg_words(char *dst, const char *src, uint64_t bytes)
{
    W *d = (W *)dst;
    const W *s = (const W *)src;
    uint64_t n = bytes / sizeof(W);
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
        d[i] = s[i];
}

__global__ void seg_copy_kernel(const seg_copy *segs, uint64_t lo, uint64_t hi, char *stage,
                                int to_stage)
{
    seg_copy sg = segs[blockIdx.x];
    uint64_t a = sg.off > lo ? sg.off : lo;
    uint64_t z = sg.off + sg.len < hi ? sg.off + sg.len : hi;
    if (a >= z)
        return;
    char *s = stage + (a - lo);
    char *d = (char *)(uintptr_t)sg.dev + (a - sg.off);
    char *dst = to_stage ? s : d;
    const char *src = to_stage ? d : s;
    uint64_t n = z - a;
    uint64_t mis = (uintptr_t)dst | (uintptr_t)src | n;
    if (!(mis & 15))
        seg_words<uint4>(dst, src, n);
    else if (!(mis & 7))
        seg_words<uint2>(dst, src, n);
    else if (!(mis & 3))
        seg_words<uint32_t>(dst, src, n);
    else
        seg_words<char>(dst, src, n);
}

extern "C" int cuda_seg_copy(const seg_copy *d_segs, int n, uint64_t lo, uint64_t hi,
                             void *stage, int to_stage, cudaStream_t stream, strata_error *err)
{
    if (n <= 0)
        return 0;
    seg_copy_kernel<<<n, SEG_THREADS, 0, stream>>>(d_segs, lo, hi, (char *)stage, to_stage);
    CUDA_CHECK_LAUNCH(err, "seg_copy_kernel");
    return 0;
}
