/* matvec_fast.c: cpu_matmul_fast, the same product as cpu_matmul
 * (kernels/cpu/matvec.c), spread over threads by rows, with an AVX2+FMA dot
 * product when the CPU has it.
 *
 * Decode speed is the type's own row decoder (bit-exact, scalar); what this
 * file adds is (1) each row is decoded once per call and dotted with all n
 * activation vectors while it is hot in L1, and (2) the rows are split over
 * up to one thread per core.  The AVX2 function is compiled with
 * __attribute__((target("avx2,fma"))) and only called after
 * __builtin_cpu_supports says so, so the binary runs on any x86-64.
 *
 * Results differ from the reference only by f32 partial sums (8 lanes per
 * 256-element chunk, then added in double): test/test_matvec.c states the
 * tolerance. */
#include <assert.h>
#include <pthread.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "model/quant.h"

#define FAST_CHUNK 256      /* whole blocks of every type, as in matvec.c */
#define FAST_MIN_ROWS 16    /* below this many rows per thread, fewer threads */
#define FAST_MAX_THREADS 64

/* ---- dot products of one decoded chunk ---------------------------------- */

static float dot_plain(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma")))
static float dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    /* horizontal sum of the 8 lanes */
    __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    __m128 s4 = _mm_add_ps(lo, hi);
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    float s = _mm_cvtss_f32(s1);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static float (*pick_dot(void))(const float *, const float *, int64_t)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return dot_avx2;
    return dot_plain;
}
#else
static float (*pick_dot(void))(const float *, const float *, int64_t)
{
    return dot_plain;
}
#endif

/* ---- one thread's share of rows ----------------------------------------- */

typedef struct fast_job {
    const type_traits *t;
    const uint8_t *w;       /* rows x row_bytes */
    size_t row_bytes;
    int64_t rows, cols, n;  /* full shape; this job does rows [r0, r1) */
    int64_t r0, r1;
    const float *x;         /* n x cols */
    float *y;               /* n x rows */
    float (*dot)(const float *, const float *, int64_t);
} fast_job;

static void *fast_rows(void *arg)
{
    const fast_job *j = arg;
    float wbuf[FAST_CHUNK];
    double acc[16];
    for (int64_t r = j->r0; r < j->r1; r++) {
        const uint8_t *row = j->w + r * j->row_bytes;
        /* tokens in groups of 16 so the accumulators stay on the stack */
        for (int64_t i0 = 0; i0 < j->n; i0 += 16) {
            const int64_t ni = j->n - i0 < 16 ? j->n - i0 : 16;
            for (int64_t i = 0; i < ni; i++)
                acc[i] = 0.0;
            for (int64_t c0 = 0; c0 < j->cols; c0 += FAST_CHUNK) {
                const int64_t len = j->cols - c0 < FAST_CHUNK ? j->cols - c0 : FAST_CHUNK;
                j->t->dequant(row + type_row_bytes(j->t->id, c0), wbuf, len);
                for (int64_t i = 0; i < ni; i++)
                    acc[i] += j->dot(wbuf, j->x + (i0 + i) * j->cols + c0, len);
            }
            for (int64_t i = 0; i < ni; i++)
                j->y[(i0 + i) * j->rows + r] = (float)acc[i];
        }
    }
    return NULL;
}

static int fast_n_threads(int64_t rows)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t by_rows = rows / FAST_MIN_ROWS;
    int64_t n = cores < 1 ? 1 : cores;
    n = n < by_rows ? n : by_rows;
    n = n < FAST_MAX_THREADS ? n : FAST_MAX_THREADS;
    return n < 1 ? 1 : (int)n;
}

void cpu_matmul_fast(int type, const void *w, int64_t rows, int64_t cols,
                     const float *x, int64_t n, float *y)
{
    const type_traits *t = type_traits_get(type);
    assert(t && t->dequant && cols % t->blck == 0);
    const int nt = fast_n_threads(rows);
    fast_job jobs[FAST_MAX_THREADS];
    pthread_t tid[FAST_MAX_THREADS];
    int started[FAST_MAX_THREADS] = {0};
    float (*dot)(const float *, const float *, int64_t) = pick_dot();

    for (int k = 0; k < nt; k++) {
        jobs[k] = (fast_job){
            .t = t, .w = w, .row_bytes = type_row_bytes(type, cols),
            .rows = rows, .cols = cols, .n = n,
            .r0 = rows * k / nt, .r1 = rows * (k + 1) / nt,
            .x = x, .y = y, .dot = dot,
        };
    }
    /* job 0 runs on the calling thread; a job whose thread cannot be
     * created runs here too, so a failed pthread_create only costs speed */
    for (int k = 1; k < nt; k++)
        started[k] = pthread_create(&tid[k], NULL, fast_rows, &jobs[k]) == 0;
    fast_rows(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            fast_rows(&jobs[k]);
    }
}
