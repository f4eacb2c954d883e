/* kv_sim.c: a measurement-only path that simulates quantized KV formats on
 * top of the f16 cache, so each format's cost can be taken apart (K alone,
 * V alone, with or without the rotation, other V level tables) without a
 * pool layout per variant.  STRATA_KV_SIM holds comma-separated tokens:
 *   k8   K through Q8_0 (absmax scale), as k8v4 stores it
 *   k8s  K through Q8_0 with the squared-error-best scale
 *   v4   V through Q4_0 (ggml's recipe), as k8v4 stores it
 *   v4s  V through Q4_0's 16 uniform levels with the squared-error-best scale
 *   vnl  V through the IQ4_NL levels with the squared-error-best scale
 *   kr   q and k rotated (kernels/ops.h, "KV rotation") before K is stored
 *   vr   v rotated before it is stored, the attention output rotated back
 *   kb   the layer's K bias subtracted from k after RoPE (a fixed vector:
 *        every score of a query moves by the same -q.b, so the softmax
 *        does not change), before the rotation
 *   vb   the layer's V bias subtracted from v before it is stored and
 *        added to the attention output (the softmax weights sum to 1, so
 *        sum p (v - b) + b is the same output)
 * A quantized vector is decoded back to float and stored in f16, so the
 * figure differs from the real format only by the f16 rounding of decoded
 * values (about 2^-11 relative, far under the 4- and 8-bit steps).  Only
 * the CPU forward pass reads it, only with --kv f16; doc/perplexity.md
 * says what it measured. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_sim.h"
#include "kernels/ops.h"
#include "model/quant.h"

enum { SIM_K8 = 1, SIM_K8S = 2, SIM_V4 = 4, SIM_V4S = 8, SIM_VNL = 16, SIM_KR = 32, SIM_VR = 64, SIM_KB = 128, SIM_VB = 256 };

int kv_sim_flags(void)
{
    static int flags = -1;
    if (flags >= 0)
        return flags;
    int f = 0;
    const char *s = getenv("STRATA_KV_SIM");
    static const struct { const char *name; int bit; } names[] = {
        {"k8", SIM_K8}, {"k8s", SIM_K8S}, {"v4", SIM_V4}, {"v4s", SIM_V4S},
        {"vnl", SIM_VNL}, {"kr", SIM_KR}, {"vr", SIM_VR}, {"kb", SIM_KB}, {"vb", SIM_VB},
    };
    while (s && *s) {
        size_t len = strcspn(s, ",");
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && !strncmp(s, names[i].name, len))
                f |= names[i].bit;
        s += len + (s[len] == ',');
    }
    flags = f;
    return flags;
}

/* Nearest of n sorted float levels. */
static int nearest(const float *lv, int n, float x)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (fabsf(x - lv[i]) < fabsf(x - lv[best]))
            best = i;
    return best;
}

/* One block of 32 through levels lv[n] (sorted) times a scale d, d chosen
 * among ntry candidates around absmax/lv_extreme by least squares, the
 * error judged with d rounded to fp16 as the cache stores it. */
static void sim_block(float *x, const float *lv, int n, int ntry, float step)
{
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            mx = x[j];
        }
    if (amax == 0.0f)
        return;
    float ext = mx < 0 ? lv[0] : lv[n - 1]; /* the level the extreme maps to */
    float best_err = INFINITY, best_d = 0.0f;
    for (int t = -ntry; t <= ntry; t++) {
        float id = (ext + t * step * (ext < 0 ? -1.0f : 1.0f)) / mx;
        if (!(id > 0.0f))
            continue;
        double sqx = 0.0, sqq = 0.0;
        for (int j = 0; j < 32; j++) {
            float l = lv[nearest(lv, n, x[j] * id)];
            sqx += (double)l * x[j];
            sqq += (double)l * l;
        }
        if (sqq <= 0.0)
            continue;
        float d = fp16_to_f32(f32_to_fp16((float)(sqx / sqq)));
        if (!(d > 0.0f))
            continue;
        double err = 0.0;
        for (int j = 0; j < 32; j++) {
            float y = d * lv[nearest(lv, n, x[j] / d)];
            err += (double)(x[j] - y) * (x[j] - y);
        }
        if (err < best_err) {
            best_err = (float)err;
            best_d = d;
        }
    }
    for (int j = 0; j < 32; j++)
        x[j] = best_d * lv[nearest(lv, n, x[j] / best_d)];
}

static void sim_vec(float *x, int n, int how)
{
    static float q8[255], q4[16];
    if (q8[0] == 0.0f) {
        for (int i = 0; i < 255; i++)
            q8[i] = (float)(i - 127);
        for (int i = 0; i < 16; i++) {
            q4[i] = (float)(i - 8);
        }
    }
    int8_t q8c[512];
    uint8_t q4c[256];
    uint16_t d[16];
    switch (how) {
    case SIM_K8:
        cpu_quant_k8(x, n, q8c, d);
        cpu_dequant_k8(q8c, d, n, x);
        break;
    case SIM_V4:
        cpu_quant_v4(x, n, q4c, d);
        cpu_dequant_v4(q4c, d, n, x);
        break;
    case SIM_K8S:
        for (int b = 0; b < n / 32; b++)
            sim_block(x + 32 * b, q8, 255, 8, 1.0f);
        break;
    case SIM_V4S:
        for (int b = 0; b < n / 32; b++)
            sim_block(x + 32 * b, q4, 16, 8, 0.125f);
        break;
    case SIM_VNL:
        cpu_quant_v4nl(x, n, q4c, d);
        cpu_dequant_v4nl(q4c, d, n, x);
        break;
    }
}

void kv_sim_store(float *q, int n_head, float *k, float *v, int n_kv_head, int hd,
                  const float *bk, const float *bv)
{
    int f = kv_sim_flags();
    if ((f & SIM_VB) && bv)
        for (int i = 0; i < n_kv_head * hd; i++)
            v[i] -= bv[i];
    if ((f & SIM_KB) && bk)
        for (int i = 0; i < n_kv_head * hd; i++)
            k[i] -= bk[i];
    if (f & SIM_KR) {
        cpu_kv_rotate(q, n_head, hd);
        cpu_kv_rotate(k, n_kv_head, hd);
    }
    if (f & SIM_VR)
        cpu_kv_rotate(v, n_kv_head, hd);
    for (int h = 0; h < n_kv_head; h++) {
        if (f & (SIM_K8 | SIM_K8S))
            sim_vec(k + (size_t)h * hd, hd, f & SIM_K8 ? SIM_K8 : SIM_K8S);
        if (f & (SIM_V4 | SIM_V4S | SIM_VNL))
            sim_vec(v + (size_t)h * hd, hd, f & SIM_V4 ? SIM_V4 : f & SIM_V4S ? SIM_V4S : SIM_VNL);
    }
}

void kv_sim_output(float *att, int n_head, int n_kv_head, int hd, const float *bv)
{
    if (kv_sim_flags() & SIM_VR)
        cpu_kv_unrotate(att, n_head, hd);
    if ((kv_sim_flags() & SIM_VB) && bv)
        for (int h = 0; h < n_head; h++)
            for (int i = 0; i < hd; i++)
                att[h * hd + i] += bv[(h / (n_head / n_kv_head)) * hd + i];
}
