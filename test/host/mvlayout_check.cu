/* mvlayout_check.cu: the decode kernel's shared-memory layout (wt::mv_layout,
 * kernels/cuda/wtile.cuh) on the host, for `make blocks-check`: for every
 * type the kernels take, shapes from 16 x 256 to 151936 x 5120 and three
 * places the dynamic shared memory may start in the window, no two regions
 * overlap (activations, the IQ3_XXS tables, the 16 warps' rings), every one
 * is 16-byte aligned and inside the block's bytes, the tables sit on a 64 KiB
 * boundary of the window, and the block fits the H200's 227 KiB.  No card
 * needed; exits 1 on the first failure. */
#include <stdio.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

/* the plan's constants as the process reads them without STRATA_MV_* */
namespace wt {
int plan_blocks() { return BLOCK_TARGET; }
int plan_segs() { return SEGS_FIT; }
int plan_tps_min() { return TPS_MIN; }
} /* namespace wt */

using namespace wt;

int main()
{
    static const int64_t shapes[][2] = {{16, 256},     {37, 512},     {300, 1280},    {768, 2048},
                                        {2048, 768},   {1024, 4096},  {4096, 4096},   {4100, 2048},
                                        {4096, 14336}, {131072, 4096}, {151936, 5120}, {8192, 32768}};
    int checked = 0;
    for (int type = 0; type < GGML_TYPE_COUNT; type++) {
        if (!geo(type).kt || type == GGML_TYPE_F32)
            continue;
        for (const auto &sh : shapes)
            for (int lo : {0, 1024, 2048}) {
                Plan p;
                if (plan_make(type, sh[0], sh[1], &p))
                    continue;
                const MvLayout l = mv_layout(type, p, lo);
                const Geo gm = geo(type);
                const int seg_k = p.tps * gm.kt;
                const int act = gm.i8 ? MV_COLS * l.xstride + 2 * MV_COLS * (seg_k / gm.xb) * 4
                                      : MV_COLS * l.xstride * 2;
                int a[MV_WARPS + 2], b[MV_WARPS + 2], n = 0;
                a[n] = l.off_xq, b[n++] = l.off_xq + act;
                if (type == GGML_TYPE_IQ3_XXS) {
                    a[n] = l.off_tab, b[n++] = l.off_tab + TAB_BYTES;
                    if ((l.off_tab + lo) % TAB_BYTES) {
                        printf("mvlayout-check: %s %lld x %lld: tables at %d (+%d) not 64 KiB aligned\n",
                               type_name(type), (long long)sh[0], (long long)sh[1], l.off_tab, lo);
                        return 1;
                    }
                }
                for (int w = 0; w < MV_WARPS; w++)
                    a[n] = mv_ring_off(l, w), b[n++] = mv_ring_off(l, w) + l.ring_warp;
                for (int i = 0; i < n; i++) {
                    if (a[i] < 0 || a[i] % 16 || b[i] > l.bytes) {
                        printf("mvlayout-check: %s %lld x %lld: region %d [%d, %d) outside %d bytes or unaligned\n",
                               type_name(type), (long long)sh[0], (long long)sh[1], i, a[i], b[i], l.bytes);
                        return 1;
                    }
                    for (int j = i + 1; j < n; j++)
                        if (a[i] < b[j] && a[j] < b[i]) {
                            printf("mvlayout-check: %s %lld x %lld: regions %d and %d overlap\n", type_name(type),
                                   (long long)sh[0], (long long)sh[1], i, j);
                            return 1;
                        }
                }
                if (l.bytes + lo > 227 * 1024) {
                    printf("mvlayout-check: %s %lld x %lld: %d bytes + %d\n", type_name(type), (long long)sh[0],
                           (long long)sh[1], l.bytes, lo);
                    return 1;
                }
                checked++;
            }
    }
    printf("mvlayout-check: %d layouts, no overlap, tables 64 KiB aligned: OK\n", checked);
    return 0;
}
