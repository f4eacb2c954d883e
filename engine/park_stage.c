/* park_stage.c: the staged copier (see park_stage.h for why and how). */
#include "park_stage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#endif

size_t park_stage_test_bytes = 0;
int park_stage_test_pieces = 0;

struct park_stager {
    int on_cuda;
    int dev;
    char *stage;              /* the staging buffer (device memory on a card) */
    size_t stage_bytes;
    seg_copy *pieces;         /* recorded pieces (pinned host memory on a card) */
    int n, cap;
    seg_copy *d_pieces;       /* their copy on the card (== pieces on the CPU) */
#ifdef STRATA_CUDA
    cudaEvent_t uploaded;     /* the last upload of `pieces` has been read */
#endif
    int upload_pending;
    /* the current span */
    park_copier direct;
    char *lin;
    size_t lin_bytes;
    int to_host, active;
};

size_t park_stager_bytes(size_t stage_bytes, int max_pieces)
{
    return stage_bytes + (size_t)max_pieces * sizeof(seg_copy);
}

/* ---- the two backends: where pieces, gathers and link copies go -------------- */

#ifdef STRATA_CUDA
static int cuda_alloc_on(park_stager *st, strata_error *err)
{
    CUDA_CHECK(err, cudaSetDevice(st->dev));
    CUDA_CHECK(err, cudaMalloc((void **)&st->stage, st->stage_bytes));
    CUDA_CHECK(err, cudaMalloc((void **)&st->d_pieces, (size_t)st->cap * sizeof(seg_copy)));
    CUDA_CHECK(err, cudaHostAlloc((void **)&st->pieces, (size_t)st->cap * sizeof(seg_copy),
                                  cudaHostAllocPortable));
    CUDA_CHECK(err, cudaEventCreateWithFlags(&st->uploaded, cudaEventDisableTiming));
    return 0;
}

/* On the stage's card, leaving the calling thread's current card as it was
 * (the orchestration thread's, which the engine relies on). */
static int cuda_alloc(park_stager *st, strata_error *err)
{
    int prev = 0;
    CUDA_CHECK(err, cudaGetDevice(&prev));
    int rc = cuda_alloc_on(st, err);
    cudaError_t ce = cudaSetDevice(prev);
    if (!rc && ce != cudaSuccess)
        rc = strata_cuda_fail(err, ce, "cudaSetDevice", __FILE__, __LINE__);
    return rc;
}

static void cuda_release(park_stager *st)
{
    /* best effort at teardown: nothing to report to */
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(st->dev);
    if (st->stage)
        cudaFree(st->stage);
    if (st->d_pieces)
        cudaFree(st->d_pieces);
    if (st->pieces)
        cudaFreeHost(st->pieces);
    if (st->uploaded)
        cudaEventDestroy(st->uploaded);
    if (prev >= 0)
        cudaSetDevice(prev);
    cudaGetLastError();
}

/* On a card the direct copier's ctx is its stream (park_cuda_copier). */
static cudaStream_t stream_of(const park_stager *st)
{
    return (cudaStream_t)st->direct.ctx;
}
#endif

/* Make the recorded pieces readable by the gather. */
static int upload(park_stager *st, strata_error *err)
{
#ifdef STRATA_CUDA
    if (st->on_cuda) {
        CUDA_CHECK(err, cudaMemcpyAsync(st->d_pieces, st->pieces, (size_t)st->n * sizeof(seg_copy),
                                        cudaMemcpyHostToDevice, stream_of(st)));
        CUDA_CHECK(err, cudaEventRecord(st->uploaded, stream_of(st)));
        st->upload_pending = 1;
        return 0;
    }
#endif
    (void)st;
    (void)err;
    return 0;
}

/* Before `pieces` is written again: the previous upload must have read it. */
static int pieces_writable(park_stager *st, strata_error *err)
{
#ifdef STRATA_CUDA
    if (st->upload_pending) {
        st->upload_pending = 0;
        CUDA_CHECK(err, cudaEventSynchronize(st->uploaded));
    }
#endif
    (void)st;
    (void)err;
    return 0;
}

/* Pieces [first, first + n) between the pages and span offsets [lo, hi) of
 * the staging buffer. */
static int gather(park_stager *st, int first, int n, uint64_t lo, uint64_t hi, int to_stage,
                  strata_error *err)
{
#ifdef STRATA_CUDA
    if (st->on_cuda)
        return cuda_seg_copy(st->d_pieces + first, n, lo, hi, st->stage, to_stage, stream_of(st),
                             err);
#endif
    (void)err;
    cpu_seg_copy(st->pieces + first, n, lo, hi, st->stage, to_stage);
    return 0;
}

/* Span offsets [a, z) between the span and the staging buffer (which holds
 * the chunk starting at span offset lo). */
static int link(park_stager *st, uint64_t lo, uint64_t a, uint64_t z, strata_error *err)
{
    char *span = st->lin + a, *stage = st->stage + (a - lo);
    void *dst = st->to_host ? span : stage;
    const void *src = st->to_host ? stage : span;
    return st->direct.copy2d(st->direct.ctx, dst, z - a, src, z - a, z - a, 1, err);
}

/* ---- the chunks ------------------------------------------------------------------ */

static uint64_t piece_end(const seg_copy *p) { return p->off + p->len; }

/* Issue the recorded pieces, chunk by chunk (park_stage.h). */
static int flush(park_stager *st, strata_error *err)
{
    int n = st->n, rc = upload(st, err);
    const seg_copy *ps = st->pieces;
    int i = 0;
    uint64_t c = n ? ps[0].off : 0;
    while (!rc && i < n) {
        if (c < ps[i].off)
            c = ps[i].off;   /* skip a gap between pieces */
        uint64_t hi = c + st->stage_bytes;
        if (hi > piece_end(&ps[n - 1]))
            hi = piece_end(&ps[n - 1]);
        int j = i;           /* pieces [i, j) reach into [c, hi) */
        while (j < n && ps[j].off < hi)
            j++;
        if (st->to_host) {
            rc = gather(st, i, j - i, c, hi, 1, err);
            /* one copy per gap-free run of the chunk */
            for (int k = i; !rc && k < j;) {
                uint64_t a = ps[k].off > c ? ps[k].off : c, z = piece_end(&ps[k]);
                while (k + 1 < j && ps[k + 1].off == z)
                    z = piece_end(&ps[++k]);
                k++;
                rc = link(st, c, a, z < hi ? z : hi, err);
            }
        } else {
            rc = link(st, c, c, hi, err);
            if (!rc)
                rc = gather(st, i, j - i, c, hi, 0, err);
        }
        while (i < n && piece_end(&ps[i]) <= hi)
            i++;
        c = hi;
    }
    st->n = 0;
    return rc;
}

/* ---- the copier ------------------------------------------------------------------ */

static int record(park_stager *st, uint64_t off, uint64_t dev, uint64_t len, strata_error *err)
{
    if (!len)
        return 0;
    int rc = 0;
    if (st->n && (off < piece_end(&st->pieces[st->n - 1]) || st->n == st->cap))
        rc = flush(st, err);   /* out of order (not planned so) or full */
    if (!rc && st->n == 0)
        rc = pieces_writable(st, err);
    if (rc)
        return rc;
    seg_copy *last = st->n ? &st->pieces[st->n - 1] : NULL;
    if (last && piece_end(last) == off && last->dev + last->len == dev) {
        last->len += len;      /* continues the previous piece on both sides */
        return 0;
    }
    st->pieces[st->n++] = (seg_copy){off, len, dev};
    return 0;
}

static int st_copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                     size_t width, size_t height, strata_error *err)
{
    park_stager *st = ctx;
    if (!st->active)
        return st->direct.copy2d(st->direct.ctx, dst, dpitch, src, spitch, width, height, err);
    const char *lin_side = st->to_host ? dst : src;
    const char *pool_side = st->to_host ? src : dst;
    size_t lpitch = st->to_host ? dpitch : spitch, ppitch = st->to_host ? spitch : dpitch;
    for (size_t r = 0; r < height; r++) {
        uint64_t off = (uint64_t)(lin_side + r * lpitch - st->lin);
        if (off + width > st->lin_bytes)
            return strata_err(err, STRATA_E_ARG, "staged copy: %zu bytes at offset %llu leave "
                              "the span of %zu bytes", width, (unsigned long long)off,
                              st->lin_bytes);
        int rc = record(st, off, (uint64_t)(uintptr_t)(pool_side + r * ppitch), width, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int st_sync(void *ctx, strata_error *err)
{
    park_stager *st = ctx;
    return st->direct.sync(st->direct.ctx, err);
}

static int st_span_begin(void *ctx, char *lin, size_t bytes, int to_host, strata_error *err)
{
    (void)err;
    park_stager *st = ctx;
    st->lin = lin;
    st->lin_bytes = bytes;
    st->to_host = to_host;
    st->active = 1;
    st->n = 0;
    return 0;
}

static int st_span_end(void *ctx, int do_flush, strata_error *err)
{
    park_stager *st = ctx;
    int rc = do_flush ? flush(st, err) : 0;
    st->n = 0;
    st->active = 0;
    return rc;
}

void park_stager_copier(park_stager *st, const park_copier *direct, park_copier *out)
{
    st->direct = *direct;
    st->active = 0;
    *out = (park_copier){st_copy2d, st_sync, st, st_span_begin, st_span_end};
}

/* ---- life cycle ------------------------------------------------------------------ */

park_stager *park_stager_new(int on_cuda, int dev, size_t stage_bytes, int max_pieces,
                             strata_error *err)
{
    park_stager *st = calloc(1, sizeof *st);
    if (!st) {
        strata_err(err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    st->on_cuda = on_cuda;
    st->dev = dev;
    st->stage_bytes = stage_bytes;
    st->cap = max_pieces;
    int rc = 0;
#ifdef STRATA_CUDA
    if (on_cuda)
        rc = cuda_alloc(st, err);
    else
#endif
    {
        st->stage = malloc(stage_bytes);
        st->pieces = malloc((size_t)max_pieces * sizeof *st->pieces);
        st->d_pieces = st->pieces;
        if (!st->stage || !st->pieces)
            rc = strata_err(err, STRATA_E_NOMEM, "out of memory");
    }
    if (rc) {
        park_stager_free(st);
        return NULL;
    }
    return st;
}

void park_stager_free(park_stager *st)
{
    if (!st)
        return;
#ifdef STRATA_CUDA
    if (st->on_cuda) {
        cuda_release(st);
        free(st);
        return;
    }
#endif
    free(st->stage);
    free(st->pieces);
    free(st);
}
