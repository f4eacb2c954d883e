/* matvec_fast.c: cpu_matmul_fast, the same product as cpu_matmul
 * (kernels/cpu/matvec.c), on a persistent thread pool with fused block
 * kernels.
 *
 *  - Threads: kernels/cpu/threadpool.c, created once.  The rows are cut
 *    into tasks of whole rows handed out dynamically (a loaded machine
 *    slows threads unevenly); small products stay on the calling thread,
 *    where waking a worker would cost more than it saves.
 *  - Activations: with AVX2, for Q4_0 Q4_1 Q5_0 Q8_0 Q4_K Q6_K each activation row is
 *    quantized once per call to blocks of 32 codes, 16-bit by default or
 *    int8 with STRATA_MATMUL_ACT=8 (act_q8.h), and the weights are dotted
 *    against the codes in integers, in tiles of up to 8 activation rows
 *    (dot_q8_tile_avx2.c; with AVX512-VNNI its dpwssd / dpbusd twins, the
 *    same bits; STRATA_MATMUL_VNNI=0 keeps AVX2).  Q4_K and Q6_K rows of a
 *    multiple of 256 columns take act_q8k instead (one scale per 256, a
 *    super-block summed in int32: dot_q8k_avx2.c) with the int8 codes, or
 *    always with STRATA_MATMUL_Q8K=1 (CPU_Q8K_*).  The other types (and all
 *    of them with STRATA_MATMUL_F32=1) keep float activations.  The codes live in a per-thread buffer that grows to the
 *    largest call and is then reused: no allocation in a step.
 *  - Kernels: every block type (Q8_0, Q4_x, Q5_x, IQ4_NL, Q2_0, the
 *    K-quants, the IQ2/IQ3/IQ4_XS types) decodes each 32-weight sub-block
 *    straight into registers and multiply-accumulates it with every
 *    activation row of the call (kernels/cpu/dot_avx2*.c with AVX2, FMA
 *    and F16C, chosen at run time; dot_scalar*.c otherwise).  The float
 *    types decode 256-element chunks with their own decoder and dot them
 *    (f32 dot, AVX2 when available), each chunk used for all n rows.
 *
 * Invariance: every output element is computed by one thread, by the
 * same sequence of operations whatever n, the task split or the thread
 * count (dot_kernels.h), so prompt chunking and batching change no bit.
 * Results differ from the reference by f32 partial sums: the tolerance is
 * in test/test_matvec.c. */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "model/quant.h"

#define FAST_CHUNK 256          /* fallback decode chunk: whole blocks of every type */
#define FAST_MIN_ROWS 16        /* rows per task, at least */
#define FAST_TASKS_PER_THREAD 8 /* dynamic balance on a busy machine */
#define FAST_L1_ROWS 16         /* rows revisited per activation tile when n > 1 */
/* Below this many multiply-adds (rows * cols * n) one thread is quicker:
 * a job costs a few microseconds of hand-off, a 64K-weight Q4_1 product
 * about 10 us on one core. */
#define FAST_INLINE_WORK (64 * 1024)

/* -1: not chosen yet; 0 scalar; 1 AVX2 */
static atomic_int fast_isa = -1;

static int isa_level(void)
{
    int l = atomic_load_explicit(&fast_isa, memory_order_relaxed);
    if (l < 0) {
        l = fast_cpu_avx2_ok() ? 1 : 0;
        atomic_store_explicit(&fast_isa, l, memory_order_relaxed);
    }
    return l;
}

int cpu_fast_isa(void) { return isa_level(); }

int cpu_matmul_fast_set_isa(int level)
{
    const int l = level != 0 && fast_cpu_avx2_ok() ? 1 : 0;
    atomic_store(&fast_isa, l);
    return l;
}

/* -1: not chosen yet; else CPU_ACT_F32, CPU_ACT_Q8 or CPU_ACT_Q16 (act_q8.h) */
static atomic_int fast_q8 = -1;

static int q8_level(void)
{
    int l = atomic_load_explicit(&fast_q8, memory_order_relaxed);
    if (l < 0) {
        const char *e = getenv("STRATA_MATMUL_F32"), *a = getenv("STRATA_MATMUL_ACT");
        l = e && !strcmp(e, "1")   ? CPU_ACT_F32
            : a && !strcmp(a, "8")  ? CPU_ACT_Q8
            : a && !strcmp(a, "16") ? CPU_ACT_Q16
                                    : CPU_ACT_DEFAULT;
        atomic_store_explicit(&fast_q8, l, memory_order_relaxed);
    }
    return l;
}

int cpu_matmul_int8_activations(void) { return isa_level() ? q8_level() : 0; }

int cpu_matmul_fast_set_q8(int on)
{
    atomic_store(&fast_q8, on);
    return q8_level();
}

/* -1: not chosen yet; else CPU_Q8K_NEVER, CPU_Q8K_ALWAYS or
 * CPU_Q8K_WITH_INT8 (act_q8.h): when the 256-weight types (Q4_K, Q6_K)
 * take act_q8k (int8 codes, one scale per 256) */
static atomic_int fast_q8k = -1;

static int q8k_level(void)
{
    int l = atomic_load_explicit(&fast_q8k, memory_order_relaxed);
    if (l < 0) {
        const char *e = getenv("STRATA_MATMUL_Q8K");
        l = e && !strcmp(e, "0")   ? CPU_Q8K_NEVER
            : e && !strcmp(e, "1") ? CPU_Q8K_ALWAYS
                                   : CPU_Q8K_DEFAULT;
        atomic_store_explicit(&fast_q8k, l, memory_order_relaxed);
    }
    return l;
}

int cpu_matmul_fast_set_q8k(int on)
{
    atomic_store(&fast_q8k, on);
    return q8k_level();
}

/* -1: not chosen yet; 0 the AVX2 int8 kernels; 1 their AVX512-VNNI twins
 * (the same bits) where the CPU has them, unless STRATA_MATMUL_VNNI=0 */
static atomic_int fast_vnni = -1;

static int vnni_level(void)
{
    int l = atomic_load_explicit(&fast_vnni, memory_order_relaxed);
    if (l < 0) {
        const char *e = getenv("STRATA_MATMUL_VNNI");
        l = e && !strcmp(e, "0") ? 0 : fast_cpu_vnni_ok();
        atomic_store_explicit(&fast_vnni, l, memory_order_relaxed);
    }
    return l;
}

/* The calling thread's buffer for quantized activations, grown on demand
 * and freed when the thread ends. */
typedef struct q8_buf {
    void *p;
    size_t cap; /* bytes */
} q8_buf;

static pthread_key_t q8_key;
static pthread_once_t q8_once = PTHREAD_ONCE_INIT;

static void q8_buf_free(void *v)
{
    q8_buf *b = v;
    free(b->p);
    free(b);
}

static void q8_key_init(void) { (void)pthread_key_create(&q8_key, q8_buf_free); }

/* NULL if out of memory (the caller then keeps float activations). */
static void *q8_scratch(size_t bytes)
{
    pthread_once(&q8_once, q8_key_init);
    q8_buf *b = pthread_getspecific(q8_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_setspecific(q8_key, b)) {
            free(b);
            return NULL;
        }
    }
    if (b->cap < bytes) {
        void *p = realloc(b->p, bytes);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = bytes;
    }
    return b->p;
}

typedef struct fast_job {
    q8_rows_fn q8;          /* non-NULL: int8 activations in xq */
    const act_q8 *xq;       /* n x cols/32 blocks */
    q16_rows_fn q16;        /* non-NULL: 16-bit activations in xq16 */
    const act_q16 *xq16;
    q8k_rows_fn q8k;        /* non-NULL: Q8_K-style activations in xq8k */
    const act_q8k *xq8k;
    fast_rows_fn kern;      /* NULL: the decode-a-chunk fallback */
    const type_traits *t;
    const uint8_t *w;       /* rows x row_bytes */
    size_t row_bytes;
    int64_t rows, cols, n, chunk;
    const float *x;         /* n x cols */
    float *y;               /* n x rows */
    float (*dot)(const float *, const float *, int64_t);
} fast_job;

/* The fallback for types without a fused kernel: a row is decoded 256
 * elements at a time, each chunk dotted in f32 with all n activation rows
 * and added in double. */
static void chunk_rows(const fast_job *j, int64_t r0, int64_t r1)
{
    float wbuf[FAST_CHUNK];
    double acc[16];
    for (int64_t r = r0; r < r1; r++) {
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
}

static void fast_rows(const fast_job *j, int64_t r0, int64_t r1)
{
    if (j->q8 || j->q16 || j->q8k) {
        const int64_t step = j->n > 1 ? FAST_L1_ROWS : r1 - r0;
        for (int64_t r = r0; r < r1; r += step) {
            const int64_t nr = r1 - r < step ? r1 - r : step;
            if (j->q8k)
                j->q8k(j->w + r * j->row_bytes, j->row_bytes, nr, j->cols, j->xq8k, j->n,
                       j->y + r, j->rows);
            else if (j->q16)
                j->q16(j->w + r * j->row_bytes, j->row_bytes, nr, j->cols, j->xq16, j->n,
                       j->y + r, j->rows);
            else
                j->q8(j->w + r * j->row_bytes, j->row_bytes, nr, j->cols, j->xq, j->n,
                      j->y + r, j->rows);
        }
        return;
    }
    if (!j->kern) {
        chunk_rows(j, r0, r1);
        return;
    }
    /* with a batch, a few rows at a time so they stay in L1 while every
     * activation tile passes; a row's arithmetic is the same either way */
    const int64_t step = j->n > 1 ? FAST_L1_ROWS : r1 - r0;
    for (int64_t r = r0; r < r1; r += step) {
        const int64_t nr = r1 - r < step ? r1 - r : step;
        j->kern(j->w + r * j->row_bytes, j->row_bytes, nr, j->cols, j->x, j->n,
                j->y + r, j->rows);
    }
}

static void fast_task(void *ctx, int64_t k)
{
    const fast_job *j = ctx;
    const int64_t r0 = k * j->chunk;
    const int64_t r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
    fast_rows(j, r0, r1);
}

void cpu_matmul_fast(int type, const void *w, int64_t rows, int64_t cols,
                     const float *x, int64_t n, float *y)
{
    const type_traits *t = type_traits_get(type);
    assert(t && t->dequant && cols % t->blck == 0);
    if (rows <= 0 || n <= 0)
        return;
    const int avx2 = isa_level();
    fast_job j = {
        .kern = avx2 ? fast_rows_vec(type) : fast_rows_scalar(type),
        .t = t, .w = w, .row_bytes = type_row_bytes(type, cols),
        .rows = rows, .cols = cols, .n = n, .chunk = rows,
        .x = x, .y = y, .dot = avx2 ? fast_dot_f32_avx2 : fast_dot_f32,
    };
    /* int8 activations with AVX2 only: the plain C twins are the tests'
     * reference, and without maddubs the float kernels are as quick */
    const int act = q8_level();
    const int k8l = q8k_level();
    const int use_k8 = k8l == CPU_Q8K_ALWAYS || (k8l == CPU_Q8K_WITH_INT8 && act == CPU_ACT_Q8);
    q8k_rows_fn k8 = act && avx2 && cols % 256 == 0 && use_k8 ? q8k_rows_avx2(type) : NULL;
    act_q8k *xk = k8 ? q8_scratch((size_t)(n * (cols / 256)) * sizeof *xk) : NULL;
    if (xk) {
        for (int64_t i = 0; i < n; i++)
            act_q8k_quantize_avx2(x + i * cols, cols, xk + i * (cols / 256));
        j.q8k = k8;
        j.xq8k = xk;
    } else if (act == CPU_ACT_Q16 && avx2 && cols % 32 == 0) {
        q16_rows_fn k = vnni_level() ? q16_rows_avx512(type) : q16_rows_avx2(type);
        act_q16 *xq = k ? q8_scratch((size_t)(n * (cols / 32)) * sizeof *xq) : NULL;
        if (xq) {
            for (int64_t i = 0; i < n; i++)
                act_q16_quantize_avx2(x + i * cols, cols, xq + i * (cols / 32));
            j.q16 = k;
            j.xq16 = xq;
        }
    } else if (act && avx2 && cols % 32 == 0) {
        q8_rows_fn k = vnni_level() ? q8_rows_avx512(type) : q8_rows_avx2(type);
        act_q8 *xq = k ? q8_scratch((size_t)(n * (cols / 32)) * sizeof *xq) : NULL;
        if (xq) {
            for (int64_t i = 0; i < n; i++)
                act_q8_quantize_avx2(x + i * cols, cols, xq + i * (cols / 32));
            j.q8 = k;
            j.xq = xq;
        }
    }
    if (rows * cols * n < FAST_INLINE_WORK || rows < 2 * FAST_MIN_ROWS) {
        fast_rows(&j, 0, rows);
        return;
    }
    const int nt = tp_threads();
    if (nt <= 1) {
        fast_rows(&j, 0, rows);
        return;
    }
    int64_t chunk = (rows + nt * FAST_TASKS_PER_THREAD - 1) / (nt * FAST_TASKS_PER_THREAD);
    j.chunk = chunk < FAST_MIN_ROWS ? FAST_MIN_ROWS : chunk;
    tp_parallel_for((rows + j.chunk - 1) / j.chunk, fast_task, &j);
}
