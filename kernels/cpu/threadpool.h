/* threadpool.h: the persistent worker threads behind cpu_matmul_fast.
 *
 * One process-wide pool, created on first use: STRATA_THREADS threads in
 * all (the caller counts as one), or the number of online CPUs.  Workers
 * spin briefly after a job (a decode step issues hundreds of short jobs
 * back to back) and then sleep on a condition variable.
 *
 * Callers: the pool serves one caller at a time.  A second thread that
 * calls tp_parallel_for while the pool is busy is not blocked and not an
 * error: it runs all its tasks itself, on its own thread.  Because the
 * tasks' results may not depend on which thread runs them (ops.h's
 * invariance rule), that only costs speed.
 *
 * Lifetime: the workers are joined by an atexit handler; the pool's state
 * is static (no heap), so nothing leaks under ASan either way.  A child
 * created by fork() starts with no workers and builds its own pool. */
#ifndef STRATA_THREADPOOL_H
#define STRATA_THREADPOOL_H

#include <stdint.h>

/* Runs fn(ctx, i) for every i in [0, n_tasks), spread over the pool's
 * threads (the calling thread included), and returns when all are done.
 * Tasks are handed out in order but to whichever thread asks first, so fn
 * must give the same result whichever thread runs a task. */
typedef void (*tp_task_fn)(void *ctx, int64_t task);
void tp_parallel_for(int64_t n_tasks, tp_task_fn fn, void *ctx);

/* Threads a job can use (the caller included), >= 1.  Starts the pool. */
int tp_threads(void);

/* Rebuild the pool with n threads (0: STRATA_THREADS or the CPU count).
 * For tests and benchmarks; call it when no other thread uses the pool. */
void tp_set_threads(int n);

#endif
