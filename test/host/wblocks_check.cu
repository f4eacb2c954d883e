/* wblocks_check.cu: `make blocks-check` (CUDA builds; runs on the host, no
 * card needed) — the block-tile packer (cuda_weight_pack) and the decoders
 * of kernels/cuda/wblocks.cuh, compiled for the host, against the CPU
 * decoders of model/quant*.c, bit for bit: random blocks with finite random
 * fp16 scales (every code, high bit, grid index and sign), 19 rows (a
 * partial 16-row tile), widths with a partial last 256-column k-tile where
 * the block allows one; the padding rows must decode to 0.  The card runs
 * the same decoders (cuda_embed, suite cuda_types, checks them there). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

static uint64_t st = 88172645463325252ull;
static uint64_t rnd(void)
{
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
}

/* One type: the number of values that differ (0 passes). */
static long check_type(int type)
{
    const type_traits *tt = type_traits_get(type);
    const int64_t rows = 19, cols = tt->blck == 32 ? 32 * 13 : 768;
    const size_t rowb = type_row_bytes(type, cols);
    uint8_t *w = (uint8_t *)malloc(rowb * rows);
    for (size_t i = 0; i < rowb * rows; i++)
        w[i] = (uint8_t)rnd();
    int offs[2];
    const int ns = type_fp16_scales(type, offs);
    for (size_t b = 0; b < rowb * rows / tt->bytes; b++)
        for (int k = 0; k < ns; k++) {
            const float v = ((int)(rnd() % 2001) - 1000) * 1e-5f;
            const uint16_t h = f32_to_fp16(v != 0.f ? v : 1e-3f);
            memcpy(w + b * tt->bytes + offs[k], &h, 2);
        }
    const size_t pb = cuda_weight_bytes(type, rows, cols);
    uint8_t *pk = (uint8_t *)malloc(pb);
    float *ref = (float *)malloc(cols * sizeof *ref);
    strata_error err = {};
    long diff = 0, n = 0;
    if (!pb || cuda_weight_pack(type, rows, cols, w, pk, &err)) {
        printf("%s: pack failed: %s\n", type_name(type), err.msg);
        diff = 1;
        goto out;
    }
    {
        const int ntk = (int)((cols + 255) / 256), RB = wb::rb(type);
        for (int64_t r = 0; r < rows + 16 - rows % 16; r++) {
            if (r < rows)
                tt->dequant(w + r * rowb, ref, cols);
            for (int e = 0; e < ntk * 256; e += 8) {
                float v[8];
                const uint8_t *c = pk + (((size_t)(r / 16) * ntk + e / 256) * 16 + r % 16) * RB;
                wb::dec8_any(type, c, e & 255, v);
                for (int i = 0; i < 8; i++, n++) {
                    const bool pad = r >= rows || e + i >= cols;
                    const float want = pad ? 0.f : ref[e + i];
                    if (pad ? v[i] != 0.f : memcmp(&v[i], &want, sizeof want) != 0) {
                        if (diff++ < 3)
                            printf("%s row %lld element %d: %.9g, the CPU decoder %.9g\n", type_name(type),
                                   (long long)r, e + i, v[i], want);
                    }
                }
            }
        }
    }
    printf("%-8s %ld values, %ld differ", type_name(type), n, diff);
    {
        /* the fp16 decoder the matrix kernels use (dec8h, where the type has
         * one) against the exact values: within fp16 roundings of the scale,
         * offset and result (||h - f|| / ||f|| < 1e-3), and no value off by
         * more than 1/64 of its row chunk's largest (a misread code is) */
        const int ntk = (int)((cols + 255) / 256), RB = wb::rb(type);
        double num = 0, den = 0;
        long gross = 0, nh = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int T = 0; T < ntk; T++) {
                const uint8_t *c = pk + (((size_t)(r / 16) * ntk + T) * 16 + r % 16) * RB;
                float f[256], mx = 0.f;
                for (int e = 0; e < 256; e += 8) {
                    float v[8];
                    wb::dec8_any(type, c, e, v);
                    for (int i = 0; i < 8; i++) {
                        f[e + i] = v[i];
                        mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
                    }
                }
                for (int e = 0; e < 256; e += 8) {
                    uint4 h;
                    if (wb::dec8h_any(type, c, e, h))
                        break;
                    const uint32_t wd[4] = {h.x, h.y, h.z, h.w};
                    for (int i = 0; i < 8; i++, nh++) {
                        const __half2 p2 = wb::bits2h2(wd[i / 2]);
                        const float hv = i % 2 ? __high2float(p2) : __low2float(p2), d = hv - f[e + i];
                        num += (double)d * d;
                        den += (double)f[e + i] * f[e + i];
                        if (fabsf(d) > mx / 64 && gross++ < 3)
                            printf("\n  %s fp16 decoder: row %lld element %d: %.6g, exact %.6g", type_name(type),
                                   (long long)r, 256 * T + e + i, hv, f[e + i]);
                    }
                }
            }
        if (nh) {
            const double rel = sqrt(num / (den > 0 ? den : 1));
            printf("; fp16 decoder: %ld values, rel err %.2g, %ld off", nh, rel, gross);
            diff += gross + (rel >= 1e-3);
        }
    }
    printf("\n");
out:
    free(w);
    free(pk);
    free(ref);
    return diff;
}

int main(void)
{
    int bad = 0;
#define WB_CHECK(T) bad += check_type(T) != 0;
    WB_FOR_EACH(WB_CHECK)
#undef WB_CHECK
    printf(bad ? "blocks-check: %d types FAIL\n" : "blocks-check: OK\n", bad);
    return bad != 0;
}
