/* backend.h: what the engine asks of the machine that runs it — one table of
 * operations per backend, so the engine, parking and the scheduler never ask
 * "which backend is this?".
 *
 *   backend_cpu   engine/backend_cpu.c: the reference forward pass
 *                 (engine/forward_cpu.c), host memory, memcpy;
 *   backend_cuda  engine/cuda/backend_cuda.c: weights, KV pools and the
 *                 forward pass on the cards, pinned host memory, copies on a
 *                 per-thread stream.  In a build without nvcc,
 *                 engine/cuda/backend_none.c defines it with `available`
 *                 saying why, and nothing else is ever called.
 *
 * The engine picks one at strata_open (e->be) and calls through it. */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include "cache/convcache.h"
#include "engine/engine_internal.h"

struct sampler_params;

/* One stage body's copies between the KV pools and host memory: issue any
 * number, then sync once.  height rows of width bytes, dst/src rows dpitch and
 * spitch apart. */
typedef struct backend_copier {
    int (*copy2d)(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                  size_t width, size_t height, strata_error *err);
    int (*sync)(void *ctx, strata_error *err);
    void *ctx;
} backend_copier;

typedef struct backend {
    int kind;            /* STRATA_BACKEND_CPU or STRATA_BACKEND_CUDA */
    const char *name;    /* "cpu", "cuda" */
    int pins_host;       /* 1: host memory the devices copy from must be pinned */

    /* 1 if the backend can run here; else 0 and *why says why. */
    int (*available)(const char **why);
    /* Free memory on device dev now, for --layer-split auto (CPU: 0 bytes,
     * so every stage gets an equal share). */
    int (*device_free)(int dev, uint64_t *bytes, strata_error *err);

    /* After the stages are cut and before the KV pools: weights, streams,
     * activation scratch for e->max_rows rows.  free undoes it (also after a
     * failed init). */
    int (*init)(strata_engine *e, strata_error *err);
    void (*free)(strata_engine *e);
    /* Where stage st's KV pool lives. */
    kv_allocator (*kv_allocator)(strata_engine *e, stage *st);
    /* The stage pool's worker hooks (bind the stage's device). */
    void (*stagepool_hooks)(strata_engine *e, stagepool_hooks *h);

    /* The forward pass over every stage (the contract is in
     * engine_internal.h, above stage_forward_cpu). */
    int (*forward)(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits,
                   strata_error *err);
    /* 1 if a decode step with these sampling parameters can be sampled
     * where the logits are (forward_sample); the CPU says 0, and the engine
     * samples on the host. */
    int (*can_sample)(const struct sampler_params *p);
    /* A decode forward that samples on the device: row i uses params[i]
     * and, for temp > 0, the uniform number uniform[i]; ids land in next. */
    int (*forward_sample)(strata_engine *e, const fwd_row *rows, int n,
                          const struct sampler_params *const *params, const float *uniform,
                          int32_t *next, strata_error *err);

    /* Keep a sequence's device-side page tables in step with its host ones
     * (after its pages change), and free them with the sequence. */
    int (*seq_sync)(strata_engine *e, strata_seq *s, strata_error *err);
    void (*seq_free)(strata_engine *e, strata_seq *s);

    /* Host memory for parked conversations: one block of the conversation
     * cache's whole budget (an arena is carved out of it), and single
     * buffers (staging, the fallback when the block cannot be had). */
    int (*host_block)(size_t bytes, void **out, strata_error *err);
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* The calling thread's copier for stage `stage`'s KV pool (on CUDA a
     * non-blocking stream of its own, made on first use), and the end of the
     * calling thread's copy state. */
    int (*copier)(const strata_engine *e, int stage, backend_copier *c, strata_error *err);
    void (*thread_fini)(void);
} backend;

extern const backend backend_cpu;
extern const backend backend_cuda;

#endif
