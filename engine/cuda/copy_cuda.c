/* copy_cuda.c: the CUDA backend's copies between the KV pools and host
 * memory — thread-local copy streams and pinned host memory, for parking
 * conversations in the conversation cache (park/).
 *
 * Why thread-local streams: the stage pool runs every stage's copy body on
 * its own persistent worker, and each of them must copy on a stream nobody
 * else waits on (the engine's compute streams keep decoding; a shared
 * per-stage stream would serialise two bodies that share a card).  Each
 * thread keeps one non-blocking stream per device, created on first use
 * (park_new warms every stage pool worker's up front), and destroyed when the thread
 * exits (a pthread key destructor) or by cuda_copy_thread_fini.  Serial
 * mode runs the bodies on the orchestration thread, which gets its own
 * streams the same way.
 *
 * Why cudaMemcpyDefault: the cache's host memory, the KV pools and a peer
 * card's pools all live in one unified address space, so one copy call
 * serves D2H, H2D and D2D without the body knowing which it is doing. */
#ifdef STRATA_CUDA
#include <pthread.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "engine/cuda/backend_cuda.h"
#include "engine/cuda/cuda_stage.h"
#include "kernels/cuda/cuda_check.h"

#define COPY_MAX_DEVICES 64

typedef struct thread_streams {
    cudaStream_t s[COPY_MAX_DEVICES];
    cudaEvent_t after[COPY_MAX_DEVICES]; /* a stage's compute, for the copy to wait on */
} thread_streams;

static _Thread_local thread_streams *tl_streams;
static pthread_key_t streams_key;
static pthread_once_t streams_once = PTHREAD_ONCE_INIT;
static int streams_key_ok;

static void streams_destroy(void *v)
{
    thread_streams *ts = v;
    if (!ts)
        return;
    int prev = -1;
    cudaGetDevice(&prev);
    for (int d = 0; d < COPY_MAX_DEVICES; d++)
        if (ts->s[d]) {
            /* best effort at thread exit: nothing to report to */
            if (cudaSetDevice(d) == cudaSuccess) {
                cudaStreamDestroy(ts->s[d]);
                if (ts->after[d])
                    cudaEventDestroy(ts->after[d]);
            }
        }
    if (prev >= 0)
        cudaSetDevice(prev);
    cudaGetLastError();
    free(ts);
}

static void streams_key_make(void)
{
    streams_key_ok = pthread_key_create(&streams_key, streams_destroy) == 0;
}

static int thread_stream(int dev, cudaStream_t *out, strata_error *err)
{
    if (dev < 0 || dev >= COPY_MAX_DEVICES)
        return strata_err(err, STRATA_E_ARG, "copy stream: device %d out of range", dev);
    if (!tl_streams) {
        pthread_once(&streams_once, streams_key_make);
        tl_streams = calloc(1, sizeof *tl_streams);
        if (!tl_streams)
            return strata_err(err, STRATA_E_NOMEM, "out of memory");
        if (streams_key_ok)
            pthread_setspecific(streams_key, tl_streams);
    }
    CUDA_CHECK(err, cudaSetDevice(dev));
    if (!tl_streams->s[dev]) {
        CUDA_CHECK(err, cudaStreamCreateWithFlags(&tl_streams->s[dev], cudaStreamNonBlocking));
        CUDA_CHECK(err, cudaEventCreateWithFlags(&tl_streams->after[dev], cudaEventDisableTiming));
    }
    *out = tl_streams->s[dev];
    return 0;
}

void cuda_copy_thread_fini(void)
{
    if (!tl_streams)
        return;
    if (streams_key_ok)
        pthread_setspecific(streams_key, NULL);
    streams_destroy(tl_streams);
    tl_streams = NULL;
}

/* ---- the copier ---------------------------------------------------------------- */

static int cu_copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                     size_t width, size_t height, strata_error *err)
{
    cudaStream_t s = ctx;
    if (dpitch == width && spitch == width)
        CUDA_CHECK(err, cudaMemcpyAsync(dst, src, width * height, cudaMemcpyDefault, s));
    else
        CUDA_CHECK(err, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                          cudaMemcpyDefault, s));
    return 0;
}

static int cu_sync(void *ctx, strata_error *err)
{
    CUDA_CHECK(err, cudaStreamSynchronize((cudaStream_t)ctx));
    return 0;
}

int cuda_copier(const strata_engine *e, int stage, backend_copier *c, strata_error *err)
{
    int dev = e->stages[stage].device;
    cudaStream_t s;
    int rc = thread_stream(dev, &s, err);
    if (rc)
        return rc;
    /* A forward call that asks for no logits returns while the stage's
     * compute stream may still be writing K/V (the host queues the next
     * chunk meanwhile), and this stream is non-blocking: without this wait a
     * capture or a shuttle could copy pages the last chunk has not written
     * yet (seen as a restored conversation whose logits differ from a
     * re-read's, depending on timing). */
    cudaEvent_t after = tl_streams->after[dev];
    CUDA_CHECK(err, cudaEventRecord(after, ((const cuda_stage *)e->stages[stage].cuda)->compute));
    CUDA_CHECK(err, cudaStreamWaitEvent(s, after, 0));
    c->copy2d = cu_copy2d;
    c->sync = cu_sync;
    c->ctx = s;
    return 0;
}

/* ---- pinned host memory -------------------------------------------------------- */

/* Why the conversation cache pins ONE block (cuda_host_block, at
 * park_new) and carves its parts out of it with cache/arena.c instead of
 * calling cudaHostAlloc per part: page-locking is far slower than copying.
 * cudaHostAlloc has the driver pin and map every page of the block for
 * every card, and on an H200 `bench --conversations` (2 stages, 100K-token
 * conversations, 26 KiB/token) captured at 1.6 GB/s against a pinned D2H
 * limit of 55 GB/s when each capture pinned its own gigabytes.  Pinning the
 * cache's whole byte budget once moves that cost to start-up, where it is
 * paid once; a capture then allocates in microseconds.  The speedup is
 * expected, not yet measured on a GPU (the `conversations` entry of
 * `make bench` will say).  Per-part cudaHostAlloc (cuda_host_allocator)
 * stays as the fallback when the whole block cannot be pinned.
 *
 * Portable: pinned for every card, since each stage's card copies its own
 * part of the same image. */
int cuda_host_block(size_t bytes, void **out, strata_error *err)
{
    *out = NULL;
    cudaError_t ce = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    if (ce != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure must not linger as the last error */
        *out = NULL;
        return strata_cuda_fail(err, ce, "cudaHostAlloc of the conversation cache's block",
                                __FILE__, __LINE__);
    }
    return 0;
}

/* Per part (the fallback): the same portable pinning, one call per part. */
void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

void cuda_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        cudaGetLastError();
}

/* ---- the copy's limit ------------------------------------------------------------- */

/* One direction, bytes at a time, between a device buffer on dev and pinned
 * host memory, on this thread's copy stream: the best of `reps` timed runs
 * after one warm-up, in GB/s (1e9 bytes). */
int cuda_link_bandwidth(int dev, size_t bytes, int to_host, int reps, double *gbps,
                        strata_error *err)
{
    cudaStream_t s;
    int rc = thread_stream(dev, &s, err);
    if (rc)
        return rc;
    void *d = NULL, *h = NULL;
    cudaEvent_t a = NULL, b = NULL;
    float best = 0;
    *gbps = 0;
    cudaError_t ce = cudaMalloc(&d, bytes);
    if (ce == cudaSuccess)
        ce = cudaHostAlloc(&h, bytes, cudaHostAllocPortable);
    if (ce == cudaSuccess)
        ce = cudaEventCreate(&a);
    if (ce == cudaSuccess)
        ce = cudaEventCreate(&b);
    for (int i = 0; i <= reps && ce == cudaSuccess; i++) {
        ce = cudaEventRecord(a, s);
        if (ce == cudaSuccess)
            ce = cudaMemcpyAsync(to_host ? h : d, to_host ? d : h, bytes,
                                 to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s);
        if (ce == cudaSuccess)
            ce = cudaEventRecord(b, s);
        if (ce == cudaSuccess)
            ce = cudaEventSynchronize(b);
        float ms = 0;
        if (ce == cudaSuccess)
            ce = cudaEventElapsedTime(&ms, a, b);
        if (ce == cudaSuccess && i > 0 && (best == 0 || ms < best))
            best = ms;
    }
    if (ce != cudaSuccess)
        rc = strata_cuda_fail(err, ce, "pinned copy bandwidth", __FILE__, __LINE__);
    else
        *gbps = (double)bytes / (best * 1e-3) / 1e9;
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    if (h)
        cudaFreeHost(h);
    if (d)
        cudaFree(d);
    cudaGetLastError();
    return rc;
}
#else
typedef int copy_cuda_is_empty_without_cuda;
#endif
