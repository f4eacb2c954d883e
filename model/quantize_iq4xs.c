/* quantize_iq4xs.c: IQ4_XS quantizer (ggml's quantize_row_iq4_nl_impl with
 * a 256-element super-block, 32-element blocks and 7 extra tries).
 *
 * IQ4_XS is IQ4_NL's 16 non-linear levels T under a signed 6-bit scale per
 * 32 elements and one fp16 per 256.  Per sub-block: a least-squares scale
 * for the levels nearest to x/d, tried for d = vmax/(127 - k), k = -7..7
 * (vmax the value of largest magnitude, sign kept); the best weighted fit
 * wins.  Then the eight sub-block scales are coded as d*(l) with
 * d = -(largest-magnitude scale)/32, and every element is re-rounded to
 * the level nearest x/(d*l).  Layout: d | scales_h (u16) | scales_l[4] |
 * qs[128]. */
#include "model/quantize_types.h"

#include <math.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_search.h"

static const int8_t iq4_levels[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* The best scale for 32 values on the levels T, the codes in Lb: the
 * least-squares scale of the levels nearest x/d, for d = vmax/T[0] and
 * 15 stretched tries around it; the best weighted fit wins.  0 (and zero
 * codes) for an all-zero block.  Shared by IQ4_XS and IQ4_NL. */
static float iq4_fit(const float *xb, const float *w, uint8_t *Lb)
{
    const int8_t *T = iq4_levels;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < 1e-15f) {
        memset(Lb, 0, 32);
        return 0;
    }
    float d = -max / T[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = qs_nearest16(T, id * xb[j]);
        Lb[j] = (uint8_t)l;
        const float q = T[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = (itry + T[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = T[qs_nearest16(T, id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The weights of one 32-block: qw * sqrt(sigma2 + x^2) with an importance
 * matrix, x^2 without; sigma2 is twice the mean square over the super-block. */
static void iq4_weights(const float *xb, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < 32; j++)
        w[j] = qw ? qw[j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
}

static void iq4_xs_block(const float *x, const float *qw, uint8_t *b)
{
    const int8_t *T = iq4_levels;
    uint8_t L[QK_K];
    float scales[8], w[32];
    float sigma2 = 0;
    for (int j = 0; j < QK_K; j++)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / QK_K;
    memset(b, 0, 136);

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        iq4_weights(x + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, w);
        const float d = iq4_fit(x + 32 * ib, w, L + 32 * ib);
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }

    /* an all-zero super-block stores d = -0 (0x8000), as ggml */
    const float d = -max_scale / 32;
    const uint16_t dh = f32_to_fp16(d);
    memcpy(b, &dh, 2);
    const float id = d ? 1 / d : 0.f;
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ib++) {
        int l = quant_nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        const float dl = d * l;
        const float idl = dl ? 1 / dl : 0.f;
        for (int j = 0; j < 32; j++)
            L[32 * ib + j] = (uint8_t)qs_nearest16(T, idl * x[32 * ib + j]);
        l += 32;
        b[4 + ib / 2] |= (uint8_t)((l & 0xf) << 4 * (ib % 2));
        scales_h |= (uint16_t)((l >> 4) << 2 * ib);
    }
    memcpy(b + 2, &scales_h, 2);
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++)
            b[8 + 16 * ib + j] = (uint8_t)(L[32 * ib + j] | L[32 * ib + 16 + j] << 4);
}

void quant_row_iq4_xs(const float *src, void *dst, int64_t n, const float *imatrix)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        iq4_xs_block(src + i * QK_K, imatrix ? imatrix + i * QK_K : NULL, b + 136 * i);
}

/* IQ4_NL: the same fit with one fp16 scale per 32 values (ggml's
 * quantize_iq4_nl: super-block = block = 32), then every value re-rounded
 * to the level nearest x/d.  Nibble j holds element j, its high half j+16.
 * The row-length fallback of the IQ types (doc/quant.md, "Recipes"). */
void quant_row_iq4_nl(const float *src, void *dst, int64_t n, const float *imatrix)
{
    block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        const float *x = src + i * QK4_NL;
        uint8_t L[QK4_NL];
        float w[QK4_NL], sigma2 = 0;
        for (int j = 0; j < QK4_NL; j++)
            sigma2 += x[j] * x[j];
        sigma2 *= 2.f / QK4_NL;
        iq4_weights(x, imatrix ? imatrix + i * QK4_NL : NULL, sigma2, w);
        const float d = iq4_fit(x, w, L);
        b[i].d = f32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        for (int j = 0; j < QK4_NL; j++)
            L[j] = (uint8_t)qs_nearest16(iq4_levels, id * x[j]);
        for (int j = 0; j < QK4_NL / 2; j++)
            b[i].qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
    }
}
