/* quantize_search.c: the scale searches shared by the K- and IQ-quantizers
 * (declared in quantize_search.h).  Written for bit-exact agreement with
 * ggml's reference quantizers: -std=c11 keeps gcc from contracting a*b+c
 * into an FMA, and every expression keeps ggml's association. */
#include "model/quantize_search.h"

#include <math.h>
#include <string.h>

#include "model/quant_codecs.h"

float qs_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                   float *the_min, float rmin, float rdelta, int nstep, int mad)
{
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            /* clamp before rounding: the min of a previous fit may sit
             * near max, so v can be far out of nearest_int's range */
            const float v = iscale * (x[i] - min);
            const int l = v > 0 ? quant_nearest_int(v < nmax ? v : (float)nmax) : 0;
            aux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * aux[i] + this_min - x[i];
                diff = mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best) {
                memcpy(L, aux, (size_t)n);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

float qs_positive(int n, int nmax, const float *x, uint8_t *L, const float *w)
{
    float max = 0;
    for (int i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    if (max < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)quant_nearest_int(iscale * x[i]); /* wraps, as ggml */
    const float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        best += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l; /* the signed l, not the stored byte */
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i];
            float sl2 = suml2 - w[i] * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int l = quant_nearest_int(x[i] * sl2 / slx);
                l = l < nmax ? l : nmax;
                if (l != L[i]) {
                    slx += w[i] * x[i] * l;
                    sl2 += w[i] * l * l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    return suml2 > 0 ? sumlx / suml2 : 0;
}

/* The value of largest magnitude, sign kept (first one wins ties). */
static float signed_max(int n, const float *x, float *amax)
{
    float max = 0, a = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > a) {
            a = ax;
            max = x[i];
        }
    }
    *amax = a;
    return max;
}

static int clamp_signed(int l, int nmax)
{
    return l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
}

float qs_signed(int n, int nmax, const float *x, int8_t *L, const float *w)
{
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp_signed(quant_nearest_int(iscale * x[i]), nmax);
        L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp_signed(quant_nearest_int(iscale * x[i]), nmax);
            sumlx += w[i] * x[i] * l;
            suml2 += w[i] * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clamp_signed(quant_nearest_int(iscale * x[i]), nmax));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float qs_signed_refine(int n, int nmax, const float *x, int8_t *L)
{
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp_signed(quant_nearest_int(iscale * x[i]), nmax);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int l = clamp_signed(quant_nearest_int(x[i] * sl2 / slx), nmax);
                if (l != L[i]) {
                    slx += w * x[i] * l;
                    sl2 += w * l * l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

int qs_nearest16(const int8_t *t, float v)
{
    if (v <= t[0])
        return 0;
    if (v >= t[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < t[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}
