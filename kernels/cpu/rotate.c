/* rotate.c: CPU reference of the KV rotation (kernels/ops.h, "KV rotation").
 *
 * Why: K and V head vectors of real models carry a few outlier channels.  A
 * Q8_0/Q4_0 block takes its scale from its largest element, so one outlier
 * leaves the other 31 elements of its block with a handful of codes.  An
 * orthogonal rotation spreads every channel over all of them first; the
 * blocks then hold values of similar size and quantize far better, and
 * because R is orthogonal, (R q).(R k) = q.k and R^T sum_i p_i (R v_i) =
 * sum_i p_i v_i: attention is unchanged up to the quantization.
 *
 * R = (1/sqrt(d)) H_d diag(s): flip the signs of x by the fixed pattern s,
 * apply the Walsh-Hadamard butterflies (d log2 d adds), scale.  The signs
 * break the Hadamard matrix's symmetry (without them a vector that is
 * already a Hadamard row would concentrate into one channel).
 *
 * Bit-exactness with the CUDA twin: sign flips and the scale by a power of
 * two are exact; the butterflies are adds and subtracts in a fixed order
 * (stage by stage, pairs (j, j + len)); the scale for d = 128 or 512 is one
 * rounded product by the float nearest 1/sqrt(d).  Same operations, same
 * order: same bits. */
#include "kernels/ops.h"

#include "kernels/cpu/dot_kernels.h"

#include <math.h>
#include <stddef.h>

int kv_rot_supported(int head_dim)
{
    return head_dim >= 32 && head_dim <= KV_ROT_MAX_DIM && (head_dim & (head_dim - 1)) == 0;
}

/* splitmix64's output number k (from 0) for state KV_ROT_SEED: a standard,
 * easily reproduced generator (test/scripts/ref_forward.py spells it too). */
uint64_t kv_rot_sign_word(int k)
{
    uint64_t z = KV_ROT_SEED + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float kv_rot_scale(int head_dim)
{
    return (float)(1.0 / sqrt((double)head_dim));
}

/* In place: the unnormalised Walsh-Hadamard transform of x[d]. */
static void fwht(float *x, int d)
{
    for (int len = 1; len < d; len <<= 1)
        for (int j0 = 0; j0 < d; j0 += 2 * len)
            for (int j = j0; j < j0 + len; j++) {
                float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
}

static void flip_signs(float *x, int d)
{
    for (int w = 0; w < (d + 63) / 64; w++) {
        uint64_t bits = kv_rot_sign_word(w);
        for (int i = 64 * w; i < d && i < 64 * w + 64; i++)
            if ((bits >> (i - 64 * w)) & 1)
                x[i] = -x[i];
    }
}

void cpu_kv_rotate_c(float *x, int n_heads, int head_dim)
{
    float sc = kv_rot_scale(head_dim);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        flip_signs(xh, head_dim);
        fwht(xh, head_dim);
        for (int i = 0; i < head_dim; i++)
            xh[i] *= sc;
    }
}

void cpu_kv_unrotate_c(float *x, int n_heads, int head_dim)
{
    float sc = kv_rot_scale(head_dim);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        fwht(xh, head_dim);
        for (int i = 0; i < head_dim; i++)
            xh[i] *= sc;
        flip_signs(xh, head_dim);
    }
}

/* The AVX2 twins (kv_avx2.c) give these bits; the engine takes them where
 * the fast kernels run. */
void cpu_kv_rotate(float *x, int n_heads, int head_dim)
{
    (cpu_fast_isa() ? cpu_kv_rotate_avx2 : cpu_kv_rotate_c)(x, n_heads, head_dim);
}

void cpu_kv_unrotate(float *x, int n_heads, int head_dim)
{
    (cpu_fast_isa() ? cpu_kv_unrotate_avx2 : cpu_kv_unrotate_c)(x, n_heads, head_dim);
}
