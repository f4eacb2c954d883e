/* ops.c: CPU reference for the element-wise, normalisation and RoPE
 * operations of kernels/ops.h.  Written to be read; every CUDA twin is
 * checked against these. */
#include "kernels/ops.h"

#include <math.h>

void cpu_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y)
{
    /* Sum of squares in double: a fixed, precise reference. */
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
}

void cpu_rmsnorm_heads(float *x, const float *w, int n_heads, int head_dim, float eps)
{
    for (int h = 0; h < n_heads; h++)
        cpu_rmsnorm(x + (int64_t)h * head_dim, w, head_dim, eps, x + (int64_t)h * head_dim);
}

/* theta_i = pos * scale * base^(-2i/n_rot) [/ freq_factors[i]] (doc/formats.md
 * §4.4).  NORM rotates adjacent pairs (2i, 2i+1): the llama converter
 * permuted Q/K rows so this matches HF's half split; NEOX rotates (i,
 * i + n_rot/2). */
void cpu_rope_table(int32_t pos, const rope_params *rp, float *cs)
{
    int half = rp->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double inv = pow((double)rp->freq_base, -2.0 * i / rp->n_rot);
        if (rp->freq_factors)
            inv /= rp->freq_factors[i];
        double theta = (double)pos * rp->freq_scale * inv;
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void cpu_rope_apply(float *x, int n_heads, int head_dim, const rope_params *rp, const float *cs)
{
    int half = rp->n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int a = rp->neox ? i : 2 * i;
            int b = rp->neox ? i + half : 2 * i + 1;
            float va = v[a], vb = v[b];
            v[a] = va * c - vb * s;
            v[b] = va * s + vb * c;
        }
    }
}

void cpu_rope(float *x, int n_heads, int head_dim, int32_t pos, const rope_params *rp)
{
    float cs[ROPE_MAX_DIM];
    cpu_rope_table(pos, rp, cs);
    cpu_rope_apply(x, n_heads, head_dim, rp, cs);
}

void cpu_swiglu(const float *gate, const float *up, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

float cpu_gelu_tanh(float x)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

void cpu_geglu(const float *gate, const float *up, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = cpu_gelu_tanh(gate[i]) * up[i];
}

void cpu_softcap(float *x, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}

void cpu_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void cpu_softmax(float *x, int64_t n)
{
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

int32_t cpu_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}
