/* stagepool.h: one persistent worker thread per stage, running a per-stage
 * body on every stage at the same time.
 *
 * Why a pool and not a thread per call: each worker binds its stage's card
 * once and keeps its thread-local copy stream for its whole life (through
 * the worker_init hook the engine passes in); a thread per call would create
 * and leak a stream per stage per call.  This part knows nothing of CUDA:
 * all binding happens in the hooks.
 *
 * Threading contract:
 * - stagepool_run / stagepool_for_each / stagepool_set_serial / _free are
 *   called from ONE orchestration thread, never from inside a body.
 * - Bodies of different stages run at the same time and must share nothing
 *   mutable; the pool holds no lock while a body runs.
 * - Each stage has its own error record (stagepool_stage_error()), so a body
 *   can write its message without touching another stage's.
 *
 * Errors: a failing body does not stop the others.  When all are done, the
 * run returns the status of the lowest-index failing stage, as a serial
 * loop over the stages would, with "stage N: <its message>" in err.
 *
 * Serial mode: STRATA_STAGE_COPY_PARALLEL=0 in the environment (read once, at
 * creation) or stagepool_set_serial(p, 1) runs the bodies one after another
 * on the calling thread, stage 0 first: the baseline that must give
 * byte-identical results.  The calling thread has not run worker_init, so a
 * body must not depend on thread-local state that only worker_init sets up
 * (the same holds for stagepool_for_each without a pool). */
#ifndef STRATA_STAGEPOOL_H
#define STRATA_STAGEPOOL_H

#include "base/error.h"

typedef struct stagepool stagepool;

/* The work done on each stage: 0, or a negative STRATA_E_* code with a
 * message written into stagepool_stage_error(). */
typedef int (*stagepool_body)(int stage, void *ctx);

typedef struct stagepool_hooks {
    /* Run once on each worker thread when it starts, before any body (the
     * engine binds the stage's card and creates the copy stream here).
     * 0 or a negative STRATA_E_* code; may write stagepool_stage_error(). */
    int (*worker_init)(int stage, void *ctx);
    /* Run once on each worker thread at shutdown, only on the workers whose
     * worker_init succeeded (or when there is no worker_init). */
    void (*worker_fini)(int stage, void *ctx);
    void *ctx;
} stagepool_hooks;

/* Start n_stages workers (1..STAGEPOOL_MAX_STAGES) and wait until every
 * worker_init has returned.  If any worker_init fails, or a thread cannot be
 * started, every started worker is shut down and joined, NULL is returned
 * and err holds the lowest failing stage's message.  hooks may be NULL. */
#define STAGEPOOL_MAX_STAGES 256
stagepool *stagepool_new(int n_stages, const stagepool_hooks *hooks,
                         strata_error *err);

/* Run body(stage, ctx) on every stage at the same time; return when all are
 * done.  0, or the lowest failing stage's status (see the top of the file). */
int stagepool_run(stagepool *p, stagepool_body body, void *ctx,
                  strata_error *err);

/* stagepool_run when p is non-NULL (n_stages must match the pool's), else
 * a serial loop over n_stages stages on the calling thread (one stage: no
 * pool).  Same error rule either way. */
int stagepool_for_each(stagepool *p, int n_stages, stagepool_body body,
                       void *ctx, strata_error *err);

/* The error record of the stage whose body (or worker_init) is running on
 * the calling thread; NULL outside a body, which strata_err() accepts. */
strata_error *stagepool_stage_error(void);

/* 1: run bodies serially on the calling thread; 0: in parallel on the
 * workers.  Overrides the environment variable (for tests). */
void stagepool_set_serial(stagepool *p, int serial);
int stagepool_is_serial(const stagepool *p);
int stagepool_n_stages(const stagepool *p);

/* Ask every worker to stop, run worker_fini on each, join them.  NULL ok. */
void stagepool_free(stagepool *p);

#endif
