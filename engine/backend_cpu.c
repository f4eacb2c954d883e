/* backend_cpu.c: the CPU backend's table (engine/backend.h) — the reference
 * forward pass of engine/forward_cpu.c (driven stage by stage here, with
 * the batch groups' order) on weights read straight from the mapped file, KV pools and parked conversations in ordinary host memory,
 * and copies that are memcpy. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "kernels/cpu/threadpool.h"

/* Touch the mapped weights page by page so the load shows progress and the
 * first token does not pay for page faults; p->load_cancel (Ctrl-C) can stop
 * it between tensors. */
static int prefault(const model *m, const strata_params *p, strata_error *err)
{
    uint64_t total = 0, done = 0, last = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(m->g); i++)
        total += gguf_tensor_at(m->g, i)->nbytes;
    long pg = sysconf(_SC_PAGESIZE);
    volatile unsigned char sink = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(m->g); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        if (p->load_cancel && p->load_cancel(p->load_cancel_user))
            return strata_err(err, STRATA_E_CANCELLED, "%s: loading stopped (interrupted)",
                              p->model_path);
        const unsigned char *d = t->data;
        for (uint64_t o = 0; o < t->nbytes; o += (uint64_t)pg)
            sink ^= d[o];
        done += t->nbytes;
        if (p->progress && (done - last > (4u << 20) || done == total)) {
            p->progress(done, total, p->progress_user);
            last = done;
        }
    }
    (void)sink;
    return 0;
}

static int cpu_available(const char **why)
{
    if (why)
        *why = NULL;
    return 1;
}

static int cpu_device_free(int dev, uint64_t *bytes, strata_error *err)
{
    (void)dev;
    (void)err;
    *bytes = 0;
    return 0;
}

static int cpu_init(strata_engine *e, strata_error *err)
{
    int rc = prefault(e->m, &e->p, err);
    /* -t N: the matmul pool's size (process-wide; 0 keeps STRATA_THREADS or
     * the CPU count) */
    if (!rc && e->p.n_threads > 0 && e->p.n_threads != tp_threads())
        tp_set_threads(e->p.n_threads);
    return rc ? rc : cpu_scratch_init(&e->cpu, e->m, e->max_rows, err);
}

static void cpu_free(strata_engine *e) { cpu_scratch_free(&e->cpu); }

static kv_allocator cpu_kv_allocator(strata_engine *e, stage *st)
{
    (void)e;
    (void)st;
    kv_allocator a = {0}; /* host memory (cache/kvcache.c's default) */
    return a;
}

static void cpu_stagepool_hooks(strata_engine *e, stagepool_hooks *h)
{
    (void)e;
    (void)h; /* the workers have no device to bind */
}

/* The stages one after another in this thread: the hidden state simply
 * stays in the scratch's x (no copies), so the split logic runs with the
 * same per-stage code at every split. */
static int cpu_forward(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                       strata_error *err)
{
    if (n > e->cpu.rows)
        return strata_err(err, STRATA_E_ARG, "forward: %d rows > scratch %d", n, e->cpu.rows);
    int G = forward_groups(e, decode);
    /* Batch groups: the wavefront order of the cards (for each group, each
     * stage runs it), issued serially.  On the cards stage k+1 works on
     * group g while stage k starts on g+1; here nothing overlaps and no
     * threads are used on purpose: the CPU backend exists to test the split
     * logic (same order of operations, same bits), and each matmul already
     * uses every core.  A group finishes every stage and the head before
     * the next one starts, so it can use rows [0, len) of the scratch.
     * Without groups (G = 1) this is the whole call through each stage. */
    for (int g = 0; g < G; g++) {
        int off, len;
        group_rows(n, G, g, &off, &len);
        if (!len)
            continue;
        for (int si = 0; si < e->n_stages; si++) {
            stage_forward_cpu(e, &e->stages[si], rows + off, len);
            if (G > 1)
                e->group_runs++;
        }
        head_cpu(e, rows + off, len, decode, logits);
    }
    return 0;
}

static int cpu_can_sample(const struct sampler_params *p)
{
    (void)p;
    return 0; /* the logits are already on the host */
}

static int cpu_forward_sample(strata_engine *e, const fwd_row *rows, int n,
                              const struct sampler_params *const *params, const float *uniform,
                              int32_t *next, strata_error *err)
{
    (void)e;
    (void)rows;
    (void)n;
    (void)params;
    (void)uniform;
    (void)next;
    return strata_err(err, STRATA_E_UNSUPPORTED, "the CPU backend samples on the host");
}

static int cpu_seq_sync(strata_engine *e, strata_seq *s, strata_error *err)
{
    (void)e;
    (void)s;
    (void)err;
    return 0; /* the page tables the kernels read are the host ones */
}

static void cpu_seq_free(strata_engine *e, strata_seq *s)
{
    (void)e;
    (void)s;
}

static int cpu_host_block(size_t bytes, void **out, strata_error *err)
{
    /* page-aligned like cudaHostAlloc's blocks, so an arena over it loses
     * nothing to alignment; the cache's budget is whole MiB */
    size_t page = 4096, n = (bytes + page - 1) / page * page;
    *out = aligned_alloc(page, n);
    return *out ? 0 : strata_err(err, STRATA_E_NOMEM, "out of memory for a %zu MiB block",
                                 bytes >> 20);
}

static void *cpu_host_alloc(size_t bytes) { return malloc(bytes); }
static void cpu_host_free(void *p) { free(p); }

static int cpu_copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                      size_t width, size_t height, strata_error *err)
{
    (void)ctx;
    (void)err;
    if (dpitch == width && spitch == width) {
        memcpy(dst, src, width * height);
        return 0;
    }
    for (size_t r = 0; r < height; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return 0;
}

static int cpu_sync(void *ctx, strata_error *err)
{
    (void)ctx;
    (void)err;
    return 0; /* memcpy is done when it returns */
}

static int cpu_copier(const strata_engine *e, int stage, backend_copier *c, strata_error *err)
{
    (void)e;
    (void)stage;
    (void)err;
    *c = (backend_copier){cpu_copy2d, cpu_sync, NULL};
    return 0;
}

static void cpu_thread_fini(void) {}

const backend backend_cpu = {
    .kind = STRATA_BACKEND_CPU,
    .name = "cpu",
    .pins_host = 0,
    .available = cpu_available,
    .device_free = cpu_device_free,
    .init = cpu_init,
    .free = cpu_free,
    .kv_allocator = cpu_kv_allocator,
    .stagepool_hooks = cpu_stagepool_hooks,
    .forward = cpu_forward,
    .can_sample = cpu_can_sample,
    .forward_sample = cpu_forward_sample,
    .seq_sync = cpu_seq_sync,
    .seq_free = cpu_seq_free,
    .host_block = cpu_host_block,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .copier = cpu_copier,
    .thread_fini = cpu_thread_fini,
};
