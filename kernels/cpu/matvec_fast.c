/* matvec_fast.c: cpu_matmul_fast, the same product as cpu_matmul
 * (kernels/cpu/matvec.c), on a persistent thread pool with fused block
 * kernels.
 *
 *  - Threads: kernels/cpu/threadpool.c, created once.  The rows are cut
 *    into tasks of whole rows handed out dynamically (a loaded machine
 *    slows threads unevenly); small products stay on the calling thread,
 *    where waking a worker would cost more than it saves.  Several
 *    products of one X (a layer's Q, K and V: cpu_matmul_fast_multi) are
 *    one job with the codes made once, and gate/up one job with the GLU
 *    applied inside each task (cpu_matmul_fast_glu): fewer hand-offs, and
 *    the GLU on every thread.
 *  - Activations: with AVX2, for Q4_0 Q4_1 Q5_0 Q8_0 Q4_K Q6_K each activation row is
 *    quantized once per call to blocks of 32 codes, 16-bit by default or
 *    int8 with STRATA_MATMUL_ACT=8 (act_q8.h), and the weights are dotted
 *    against the codes in integers, in tiles of up to 8 activation rows
 *    (dot_q8_tile_avx2.c; with AVX512-VNNI its dpwssd / dpbusd twins, the
 *    same bits; STRATA_MATMUL_VNNI=0 keeps AVX2).  Q4_K and Q6_K rows of a
 *    multiple of 256 columns take one scale per 256 instead, a super-block
 *    summed in int32: act_q16k with the 16-bit codes (dot_q16k_avx2.c),
 *    act_q8k with the int8 ones or with STRATA_MATMUL_Q8K=1
 *    (dot_q8k_avx2.c), the scale per 32 with STRATA_MATMUL_Q8K=0
 *    (CPU_Q8K_*).  The other types (and all
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
 * CPU_Q8K_SAME_WIDTH (act_q8.h): when the 256-weight types (Q4_K, Q6_K)
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
    q16k_rows_fn q16k;      /* non-NULL: 16-bit codes, a scale per 256, in xq16k */
    const act_q16k *xq16k;
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
    if (j->q8 || j->q16 || j->q8k || j->q16k) {
        const int64_t step = j->n > 1 ? FAST_L1_ROWS : r1 - r0;
        for (int64_t r = r0; r < r1; r += step) {
            const int64_t nr = r1 - r < step ? r1 - r : step;
            if (j->q16k)
                j->q16k(j->w + r * j->row_bytes, j->row_bytes, nr, j->cols, j->xq16k, j->n,
                        j->y + r, j->rows);
            else if (j->q8k)
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

/* ---- choosing and making the activation codes ---------------------------- */

enum { FMT_F32, FMT_Q8K, FMT_Q16K, FMT_Q16, FMT_Q8, FMT_N };

/* Which codes a product of this type takes, with its rows kernel set in j
 * (the buffers come later, shared between matrices of one call). */
static int choose_act(fast_job *j, int type, int64_t cols, int avx2)
{
    /* int8 activations with AVX2 only: the plain C twins are the tests'
     * reference, and without maddubs the float kernels are as quick */
    const int act = q8_level();
    const int k8l = q8k_level();
    const int k256 = act && avx2 && cols % 256 == 0;
    const int use_k8 = k8l == CPU_Q8K_ALWAYS || (k8l == CPU_Q8K_SAME_WIDTH && act == CPU_ACT_Q8);
    q8k_rows_fn k8 = k256 && use_k8 ? q8k_rows_avx2(type) : NULL;
    if (k8) {
        j->q8k = k8;
        return FMT_Q8K;
    }
    const int use_k16 = k8l == CPU_Q8K_SAME_WIDTH && act == CPU_ACT_Q16;
    q16k_rows_fn k16 = k256 && use_k16 ? q16k_rows_avx2(type) : NULL;
    if (k16) {
        j->q16k = k16;
        return FMT_Q16K;
    }
    if (act == CPU_ACT_Q16 && avx2 && cols % 32 == 0) {
        j->q16 = vnni_level() ? q16_rows_avx512(type) : q16_rows_avx2(type);
        return j->q16 ? FMT_Q16 : FMT_F32;
    }
    if (act && avx2 && cols % 32 == 0) {
        j->q8 = vnni_level() ? q8_rows_avx512(type) : q8_rows_avx2(type);
        return j->q8 ? FMT_Q8 : FMT_F32;
    }
    return FMT_F32;
}

static size_t act_bytes(int fmt, int64_t n, int64_t cols)
{
    const size_t b = fmt == FMT_Q8K    ? (size_t)(cols / 256) * sizeof(act_q8k)
                     : fmt == FMT_Q16K ? (size_t)(cols / 256) * sizeof(act_q16k)
                     : fmt == FMT_Q16 ? (size_t)(cols / 32) * sizeof(act_q16)
                     : fmt == FMT_Q8  ? (size_t)(cols / 32) * sizeof(act_q8)
                                      : 0;
    return (b * (size_t)n + 63) & ~(size_t)63; /* the next format starts aligned */
}

static void act_quantize(int fmt, const float *x, int64_t n, int64_t cols, void *buf)
{
    for (int64_t i = 0; i < n; i++) {
        if (fmt == FMT_Q8K)
            act_q8k_quantize_avx2(x + i * cols, cols, (act_q8k *)buf + i * (cols / 256));
        else if (fmt == FMT_Q16K)
            act_q16k_quantize_avx2(x + i * cols, cols, (act_q16k *)buf + i * (cols / 256));
        else if (fmt == FMT_Q16)
            act_q16_quantize_avx2(x + i * cols, cols, (act_q16 *)buf + i * (cols / 32));
        else if (fmt == FMT_Q8)
            act_q8_quantize_avx2(x + i * cols, cols, (act_q8 *)buf + i * (cols / 32));
    }
}

/* Quantizes x once per format the jobs take (into this thread's buffer)
 * and hands each job its codes; out of memory, every job keeps the float
 * kernels. */
static void share_codes(fast_job *jobs, const int *fmt, int n_jobs, const float *x, int64_t n,
                        int64_t cols)
{
    size_t off[FMT_N] = {0}, total = 0;
    int used[FMT_N] = {0};
    for (int i = 0; i < n_jobs; i++)
        used[fmt[i]] = 1;
    for (int f = FMT_Q8K; f < FMT_N; f++)
        if (used[f]) {
            off[f] = total;
            total += act_bytes(f, n, cols);
        }
    uint8_t *buf = total ? q8_scratch(total) : NULL;
    for (int f = FMT_Q8K; f < FMT_N && buf; f++)
        if (used[f])
            act_quantize(f, x, n, cols, buf + off[f]);
    for (int i = 0; i < n_jobs; i++) {
        fast_job *j = &jobs[i];
        if (!buf) {
            j->q8k = NULL;
            j->q16k = NULL;
            j->q16 = NULL;
            j->q8 = NULL;
            continue;
        }
        j->xq8k = fmt[i] == FMT_Q8K ? (const act_q8k *)(buf + off[FMT_Q8K]) : NULL;
        j->xq16k = fmt[i] == FMT_Q16K ? (const act_q16k *)(buf + off[FMT_Q16K]) : NULL;
        j->xq16 = fmt[i] == FMT_Q16 ? (const act_q16 *)(buf + off[FMT_Q16]) : NULL;
        j->xq = fmt[i] == FMT_Q8 ? (const act_q8 *)(buf + off[FMT_Q8]) : NULL;
    }
}

/* One product's job, its codes not made yet; returns their format. */
static int job_init(fast_job *j, const cpu_mm *m, int64_t cols, const float *x, int64_t n)
{
    const type_traits *t = type_traits_get(m->type);
    assert(t && t->dequant && cols % t->blck == 0);
    const int avx2 = isa_level();
    *j = (fast_job){
        .kern = avx2 ? fast_rows_vec(m->type) : fast_rows_scalar(m->type),
        .t = t, .w = m->w, .row_bytes = type_row_bytes(m->type, cols),
        .rows = m->rows, .cols = cols, .n = n, .chunk = m->rows,
        .x = x, .y = m->y, .dot = avx2 ? fast_dot_f32_avx2 : fast_dot_f32,
    };
    return choose_act(j, m->type, cols, avx2);
}

/* ---- one hand-off for several products ---------------------------------- */

#define FAST_MAX_MATS 4

typedef struct multi_job {
    fast_job j[FAST_MAX_MATS];
    int n_mats;
    int glu;              /* 0: rows one matrix after another; 1 swiglu, 2 geglu of j[0], j[1] */
    int64_t off[FAST_MAX_MATS + 1]; /* first task row of each matrix */
    int64_t total, chunk; /* task rows in all, per task */
} multi_job;

/* Task rows [g0, g1): rows of the matrices one after another, or with a
 * GLU the same rows of gate and up, then the activation on them. */
static void multi_rows(const multi_job *m, int64_t g0, int64_t g1)
{
    if (m->glu) {
        const fast_job *g = &m->j[0], *u = &m->j[1];
        fast_rows(g, g0, g1);
        fast_rows(u, g0, g1);
        for (int64_t i = 0; i < g->n; i++) {
            float *y = g->y + i * g->rows + g0;
            (m->glu == 2 ? cpu_geglu : cpu_swiglu)(y, u->y + i * u->rows + g0, g1 - g0, y);
        }
        return;
    }
    for (int i = 0; i < m->n_mats; i++) {
        const int64_t lo = g0 > m->off[i] ? g0 : m->off[i];
        const int64_t hi = g1 < m->off[i + 1] ? g1 : m->off[i + 1];
        if (lo < hi)
            fast_rows(&m->j[i], lo - m->off[i], hi - m->off[i]);
    }
}

static void multi_task(void *ctx, int64_t k)
{
    const multi_job *m = ctx;
    const int64_t g0 = k * m->chunk;
    multi_rows(m, g0, g0 + m->chunk < m->total ? g0 + m->chunk : m->total);
}

/* Small products stay on the calling thread; else tasks of at least
 * FAST_MIN_ROWS rows, FAST_TASKS_PER_THREAD per thread. */
static void multi_run(multi_job *m, int64_t work)
{
    const int nt = work < FAST_INLINE_WORK || m->total < 2 * FAST_MIN_ROWS ? 1 : tp_threads();
    if (nt <= 1) {
        multi_rows(m, 0, m->total);
        return;
    }
    const int64_t chunk = (m->total + nt * FAST_TASKS_PER_THREAD - 1) / (nt * FAST_TASKS_PER_THREAD);
    m->chunk = chunk < FAST_MIN_ROWS ? FAST_MIN_ROWS : chunk;
    tp_parallel_for((m->total + m->chunk - 1) / m->chunk, multi_task, m);
}

static void multi_prepare(multi_job *m, const cpu_mm *mats, int n_mats, int64_t cols,
                          const float *x, int64_t n)
{
    int fmt[FAST_MAX_MATS];
    m->n_mats = n_mats;
    m->off[0] = 0;
    for (int i = 0; i < n_mats; i++) {
        fmt[i] = job_init(&m->j[i], &mats[i], cols, x, n);
        m->off[i + 1] = m->off[i] + mats[i].rows;
    }
    share_codes(m->j, fmt, n_mats, x, n, cols);
}

void cpu_matmul_fast_multi(const cpu_mm *mats, int n_mats, int64_t cols, const float *x,
                           int64_t n)
{
    if (n <= 0)
        return;
    for (int i0 = 0; i0 < n_mats; i0 += FAST_MAX_MATS) {
        const int k = n_mats - i0 < FAST_MAX_MATS ? n_mats - i0 : FAST_MAX_MATS;
        multi_job m = {.glu = 0};
        multi_prepare(&m, mats + i0, k, cols, x, n);
        m.total = m.off[k];
        if (m.total > 0)
            multi_run(&m, m.total * cols * n);
    }
}

void cpu_matmul_fast_glu(const cpu_mm *gate, const cpu_mm *up, int64_t cols, const float *x,
                         int64_t n, int gelu)
{
    assert(gate->rows == up->rows);
    if (gate->rows <= 0 || n <= 0)
        return;
    const cpu_mm mats[2] = {*gate, *up};
    multi_job m = {.glu = gelu ? 2 : 1};
    multi_prepare(&m, mats, 2, cols, x, n);
    m.total = gate->rows;
    multi_run(&m, 2 * m.total * cols * n);
}

void cpu_matmul_fast(int type, const void *w, int64_t rows, int64_t cols,
                     const float *x, int64_t n, float *y)
{
    const cpu_mm m = {.type = type, .w = w, .rows = rows, .y = y};
    cpu_matmul_fast_multi(&m, 1, cols, x, n);
}
