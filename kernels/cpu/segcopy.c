/* segcopy.c: CPU reference of the staged copy (kernels/ops.h, seg_copy).
 * The CUDA twin is kernels/cuda/segcopy.cu; the CPU backend's staged
 * copier (engine/park_stage.c) runs this one. */
#include "kernels/ops.h"

#include <string.h>

void cpu_seg_copy(const seg_copy *segs, int n, uint64_t lo, uint64_t hi, void *stage,
                  int to_stage)
{
    for (int i = 0; i < n; i++) {
        uint64_t a = segs[i].off > lo ? segs[i].off : lo;
        uint64_t z = segs[i].off + segs[i].len < hi ? segs[i].off + segs[i].len : hi;
        if (a >= z)
            continue;
        char *s = (char *)stage + (a - lo);
        char *d = (char *)(uintptr_t)segs[i].dev + (a - segs[i].off);
        if (to_stage)
            memcpy(s, d, z - a);
        else
            memcpy(d, s, z - a);
    }
}
