/* moe.c: CPU reference for mixture-of-experts routing and the steps around
 * the expert products (kernels/ops.h), the twins of kernels/cuda/moe.cu.
 *
 * The arithmetic is the one the card repeats bit for bit (moe.cu's header):
 * cpu_softmax, then the k largest probabilities by repeated selection
 * (lowest index on ties), renormalised by their float sum in slot order;
 * combine adds w * y products from 0 in slot order. */
#include "kernels/ops.h"

void cpu_moe_route(float *logits, int n_tok, int n_expert, int k, int32_t *sel, float *w)
{
    for (int t = 0; t < n_tok; t++) {
        float *p = logits + (int64_t)t * n_expert;
        int32_t *s = sel + (int64_t)t * k;
        float *wt = w + (int64_t)t * k;
        cpu_softmax(p, n_expert);
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int i = 0; i < n_expert; i++) {
                int taken = 0;
                for (int q = 0; q < j; q++)
                    taken |= s[q] == i;
                if (!taken && (best < 0 || p[i] > p[best]))
                    best = i;
            }
            s[j] = best;
            wt[j] = p[best];
        }
        float sum = 0.0f;
        for (int j = 0; j < k; j++)
            sum += wt[j];
        for (int j = 0; j < k; j++)
            wt[j] = wt[j] / sum;
    }
}

void cpu_moe_group(const int32_t *sel, int n_tok, int k, int n_expert, int32_t *offsets,
                   int32_t *rows, int32_t *inv)
{
    int n = n_tok * k;
    for (int e = 0; e <= n_expert; e++)
        offsets[e] = 0;
    for (int i = 0; i < n; i++)
        offsets[sel[i] + 1]++;
    for (int e = 0; e < n_expert; e++)
        offsets[e + 1] += offsets[e];
    /* a counting sort, stable: within an expert, flat indices ascend */
    for (int e = 0, r = 0; e < n_expert; e++)
        for (int i = 0; i < n; i++)
            if (sel[i] == e) {
                rows[r] = i;
                inv[i] = r++;
            }
}

void cpu_moe_gather(const float *x, int n_tok, int k, int64_t D, const int32_t *rows, float *xg)
{
    for (int r = 0; r < n_tok * k; r++) {
        const float *src = x + (int64_t)(rows[r] / k) * D;
        float *dst = xg + (int64_t)r * D;
        for (int64_t i = 0; i < D; i++)
            dst[i] = src[i];
    }
}

void cpu_moe_combine(const float *y, const float *w, const int32_t *inv, int n_tok, int k,
                     int64_t D, float *out)
{
    for (int t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < D; i++) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int64_t r = inv ? inv[t * k + j] : (int64_t)t * k + j;
                acc += w[t * k + j] * y[r * D + i];
            }
            out[(int64_t)t * D + i] = acc;
        }
}
