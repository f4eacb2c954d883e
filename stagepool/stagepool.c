/* stagepool.c: the stage pool (see stagepool.h).
 *
 * One mutex and two condition variables coordinate everything:
 * - work_cv: the orchestration thread bumps `generation` and broadcasts;
 *   a worker that sees a generation it has not run yet runs the body once.
 *   A counter (not a flag) means a worker can never run the same call twice
 *   or miss one, whatever order the wake-ups arrive in.
 * - done_cv: each worker counts itself in `n_reported` when its body (or,
 *   at start, its worker_init) returns; the last one wakes the caller.
 * Nobody spins, and the lock is never held while a body runs: bodies only
 * write their own stage's slot, and the mutex hand-off around n_reported
 * orders those writes before the caller reads them. */
#include "stagepool/stagepool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct stage_slot {
    stagepool *pool;
    int stage;
    pthread_t thread;
    int started;        /* pthread_create succeeded: must be joined */
    int init_rc;        /* worker_init's status */
    int rc;             /* the last body's status */
    strata_error err;   /* written only by this stage's thread */
} stage_slot;

struct stagepool {
    int n_stages;
    int serial;
    stagepool_hooks hooks;

    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    int sync_ready;             /* mu and both condvars initialised */

    /* Guarded by mu. */
    unsigned long generation;   /* one per stagepool_run */
    int n_reported;             /* workers done with the current phase */
    int shutdown;
    stagepool_body body;
    void *body_ctx;

    stage_slot *slots;          /* [n_stages] */
};

/* The running body's error record on this thread (see stagepool.h).  It is
 * also how a nested stagepool_run from inside a body is caught. */
static _Thread_local strata_error *tls_stage_err;

strata_error *stagepool_stage_error(void)
{
    return tls_stage_err;
}

/* Copy a failing stage's status into the caller's record, prefixed with the
 * stage, inventing a message when the body left none. */
static int report_stage(int stage, int rc, const strata_error *stage_err,
                        strata_error *err)
{
    if (stage_err->msg[0])
        return strata_err(err, rc, "stage %d: %s", stage, stage_err->msg);
    return strata_err(err, rc, "stage %d: %s", stage, strata_strerror(rc));
}

/* ---- worker ------------------------------------------------------------ */

static void *worker_main(void *arg)
{
    stage_slot *s = arg;
    stagepool *p = s->pool;

    tls_stage_err = &s->err;
    strata_err_clear(&s->err);
    int init_rc = 0;
    if (p->hooks.worker_init)
        init_rc = p->hooks.worker_init(s->stage, p->hooks.ctx);

    pthread_mutex_lock(&p->mu);
    s->init_rc = init_rc;
    /* stagepool_new waits for every worker before returning, so no run
     * can have started yet: this is generation 0. */
    unsigned long seen = p->generation;
    p->n_reported++;
    pthread_cond_signal(&p->done_cv);

    while (init_rc == 0) {
        while (!p->shutdown && p->generation == seen)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->shutdown)
            break;
        seen = p->generation;
        stagepool_body body = p->body;
        void *ctx = p->body_ctx;
        pthread_mutex_unlock(&p->mu);

        strata_err_clear(&s->err);
        int rc = body(s->stage, ctx);

        pthread_mutex_lock(&p->mu);
        s->rc = rc;
        if (++p->n_reported == p->n_stages)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);

    if (init_rc == 0 && p->hooks.worker_fini)
        p->hooks.worker_fini(s->stage, p->hooks.ctx);
    tls_stage_err = NULL;
    return NULL;
}

/* ---- life cycle -------------------------------------------------------- */

static int sync_init(stagepool *p)
{
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&p->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return -1;
    }
    if (pthread_cond_init(&p->done_cv, NULL) != 0) {
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
        return -1;
    }
    p->sync_ready = 1;
    return 0;
}

static int env_serial(void)
{
    const char *v = getenv("STRATA_STAGE_COPY_PARALLEL");
    return v && strcmp(v, "0") == 0;
}

stagepool *stagepool_new(int n_stages, const stagepool_hooks *hooks,
                         strata_error *err)
{
    if (n_stages < 1 || n_stages > STAGEPOOL_MAX_STAGES) {
        strata_err(err, STRATA_E_ARG, "stage pool: %d stages (want 1..%d)",
                   n_stages, STAGEPOOL_MAX_STAGES);
        return NULL;
    }
    stagepool *p = calloc(1, sizeof *p);
    if (!p) {
        strata_err(err, STRATA_E_NOMEM, "stage pool: out of memory");
        return NULL;
    }
    p->n_stages = n_stages;
    p->serial = env_serial();
    if (hooks)
        p->hooks = *hooks;
    p->slots = calloc((size_t)n_stages, sizeof *p->slots);
    if (!p->slots || sync_init(p) != 0) {
        strata_err(err, STRATA_E_NOMEM, "stage pool: out of memory");
        stagepool_free(p);
        return NULL;
    }

    int n_started = 0, create_failed = 0;
    for (int i = 0; i < n_stages; i++) {
        stage_slot *s = &p->slots[i];
        s->pool = p;
        s->stage = i;
        if (pthread_create(&s->thread, NULL, worker_main, s) != 0) {
            create_failed = 1;
            break;
        }
        s->started = 1;
        n_started++;
    }

    /* Wait for every started worker's worker_init, successful or not. */
    pthread_mutex_lock(&p->mu);
    while (p->n_reported < n_started)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);

    for (int i = 0; i < n_started; i++) {
        stage_slot *s = &p->slots[i];
        if (s->init_rc != 0) {
            report_stage(i, s->init_rc, &s->err, err);
            stagepool_free(p);
            return NULL;
        }
    }
    if (create_failed) {
        strata_err(err, STRATA_E_NOMEM,
                   "stage pool: cannot start the worker of stage %d",
                   n_started);
        stagepool_free(p);
        return NULL;
    }
    return p;
}

void stagepool_free(stagepool *p)
{
    if (!p)
        return;
    if (p->sync_ready) {
        pthread_mutex_lock(&p->mu);
        p->shutdown = 1;
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_stages; i++)
            if (p->slots[i].started)
                pthread_join(p->slots[i].thread, NULL);
        pthread_cond_destroy(&p->done_cv);
        pthread_cond_destroy(&p->work_cv);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->slots);
    free(p);
}

/* ---- running ----------------------------------------------------------- */

/* The serial loop: stage 0 first, every stage runs, the first failure wins. */
static int run_serial(int n_stages, stagepool_body body, void *ctx,
                      strata_error *err)
{
    strata_error cur, first;
    int first_rc = 0, first_stage = -1;
    for (int i = 0; i < n_stages; i++) {
        strata_err_clear(&cur);
        tls_stage_err = &cur;
        int rc = body(i, ctx);
        tls_stage_err = NULL;
        if (rc != 0 && first_rc == 0) {
            first_rc = rc;
            first_stage = i;
            first = cur;
        }
    }
    if (first_rc != 0)
        return report_stage(first_stage, first_rc, &first, err);
    return 0;
}

static int run_parallel(stagepool *p, stagepool_body body, void *ctx,
                        strata_error *err)
{
    pthread_mutex_lock(&p->mu);
    p->body = body;
    p->body_ctx = ctx;
    p->n_reported = 0;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    while (p->n_reported < p->n_stages)
        pthread_cond_wait(&p->done_cv, &p->mu);
    p->body = NULL;
    p->body_ctx = NULL;
    pthread_mutex_unlock(&p->mu);

    for (int i = 0; i < p->n_stages; i++)
        if (p->slots[i].rc != 0)
            return report_stage(i, p->slots[i].rc, &p->slots[i].err, err);
    return 0;
}

int stagepool_run(stagepool *p, stagepool_body body, void *ctx,
                  strata_error *err)
{
    if (!p || !body)
        return strata_err(err, STRATA_E_ARG, "stage pool: %s is NULL",
                          p ? "body" : "pool");
    /* A body that called us would wait for itself for ever. */
    if (tls_stage_err)
        return strata_err(err, STRATA_E_ARG,
                          "stage pool: run called from inside a stage body");
    if (p->serial)
        return run_serial(p->n_stages, body, ctx, err);
    return run_parallel(p, body, ctx, err);
}

int stagepool_for_each(stagepool *p, int n_stages, stagepool_body body,
                       void *ctx, strata_error *err)
{
    if (p) {
        if (n_stages != p->n_stages)
            return strata_err(err, STRATA_E_ARG,
                              "stage pool: %d stages asked of a pool of %d",
                              n_stages, p->n_stages);
        return stagepool_run(p, body, ctx, err);
    }
    if (!body || n_stages < 0)
        return strata_err(err, STRATA_E_ARG,
                          "stage pool: bad serial loop (%d stages)", n_stages);
    if (tls_stage_err)
        return strata_err(err, STRATA_E_ARG,
                          "stage pool: loop called from inside a stage body");
    return run_serial(n_stages, body, ctx, err);
}

void stagepool_set_serial(stagepool *p, int serial)
{
    if (p)
        p->serial = serial != 0;
}

int stagepool_is_serial(const stagepool *p)
{
    return p ? p->serial : 1;
}

int stagepool_n_stages(const stagepool *p)
{
    return p ? p->n_stages : 0;
}
