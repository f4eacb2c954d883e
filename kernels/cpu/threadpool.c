/* threadpool.c: see threadpool.h.
 *
 * A job is published through one 64-bit word, `ticket`: the high half is a
 * generation, odd while a job is open and even when closed, the low half
 * counts the workers inside the job.  A worker joins with a CAS that only
 * succeeds while the generation it saw is still open, so a worker that
 * wakes late can never read the next job's fields half-written; the caller
 * closes the job (CAS to the next even generation) only when no worker is
 * inside.  Completion is counted in tasks, not workers: a worker that is
 * still asleep when the caller has done every task costs nothing.
 *
 * Workers spin for TP_SPIN_NS after a job before they sleep: a decode step
 * is hundreds of jobs of a few tens of microseconds each, and a futex
 * wake-up per job would cost about as much as the job. */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TP_MAX 64
#define TP_SPIN_NS 50000 /* 50 us: longer than the gaps between the matmuls of a step */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t th[TP_MAX];
    int n_workers;         /* threads besides the caller */
    int started;           /* the workers of this process exist */
    int n_sleeping;        /* under mu */
    _Atomic uint64_t ticket;
    atomic_int stop;
    atomic_flag busy;      /* held by the one caller the pool serves */
    /* the open job: written before the ticket opens it, read by workers
     * only after their CAS into it */
    tp_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next, done;
} tp = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .busy = ATOMIC_FLAG_INIT,
};

static pthread_once_t tp_hooks_once = PTHREAD_ONCE_INIT;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint32_t gen_of(uint64_t t) { return (uint32_t)(t >> 32); }

static void run_tasks(void)
{
    for (;;) {
        const int64_t i = atomic_fetch_add_explicit(&tp.next, 1, memory_order_relaxed);
        if (i >= tp.n_tasks)
            return;
        tp.fn(tp.ctx, i);
        /* release: the caller's acquire of `done` sees this task's output */
        atomic_fetch_add_explicit(&tp.done, 1, memory_order_release);
    }
}

/* Wait for a generation other than `seen` (or stop); returns the ticket. */
static uint64_t wait_new_gen(uint32_t seen)
{
    const int64_t t0 = now_ns();
    for (unsigned k = 1;; k++) {
        uint64_t t = atomic_load_explicit(&tp.ticket, memory_order_acquire);
        if (gen_of(t) != seen || atomic_load_explicit(&tp.stop, memory_order_relaxed))
            return t;
        cpu_relax();
        if ((k & 255) == 0 && now_ns() - t0 > TP_SPIN_NS)
            break;
    }
    /* the caller bumps the ticket before it looks at n_sleeping under the
     * mutex, and we look at the ticket under the mutex after counting
     * ourselves: one of the two sees the other, so no wake-up is lost */
    pthread_mutex_lock(&tp.mu);
    tp.n_sleeping++;
    while (gen_of(atomic_load(&tp.ticket)) == seen && !atomic_load(&tp.stop))
        pthread_cond_wait(&tp.wake, &tp.mu);
    tp.n_sleeping--;
    pthread_mutex_unlock(&tp.mu);
    return atomic_load_explicit(&tp.ticket, memory_order_acquire);
}

static void *worker_main(void *arg)
{
    uint32_t seen = (uint32_t)(uintptr_t)arg;
    for (;;) {
        uint64_t t = wait_new_gen(seen);
        if (atomic_load(&tp.stop))
            return NULL;
        const uint32_t g = gen_of(t);
        seen = g;
        if (!(g & 1))
            continue; /* closed before we got here */
        while (gen_of(t) == g) {
            if (atomic_compare_exchange_weak_explicit(&tp.ticket, &t, t + 1,
                                                      memory_order_acquire,
                                                      memory_order_relaxed)) {
                run_tasks();
                atomic_fetch_sub_explicit(&tp.ticket, 1, memory_order_release);
                break;
            }
        }
    }
}

static void tp_stop(void)
{
    if (!tp.started)
        return;
    atomic_store(&tp.stop, 1);
    pthread_mutex_lock(&tp.mu);
    pthread_cond_broadcast(&tp.wake);
    pthread_mutex_unlock(&tp.mu);
    for (int i = 0; i < tp.n_workers; i++)
        pthread_join(tp.th[i], NULL);
    atomic_store(&tp.stop, 0);
    tp.n_workers = 0;
    tp.started = 0;
}

/* fork() copies the pool's state but not its threads: the child starts
 * over (the parent's workers are not its to join). */
static void tp_after_fork_child(void)
{
    pthread_mutex_init(&tp.mu, NULL);
    pthread_cond_init(&tp.wake, NULL);
    tp.n_workers = 0;
    tp.started = 0;
    tp.n_sleeping = 0;
    atomic_store(&tp.ticket, 0);
    atomic_store(&tp.stop, 0);
    atomic_flag_clear(&tp.busy);
}

static void tp_register_hooks(void)
{
    atexit(tp_stop);
    pthread_atfork(NULL, NULL, tp_after_fork_child);
}

static int default_threads(void)
{
    const char *s = getenv("STRATA_THREADS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 1)
            return v > TP_MAX ? TP_MAX : (int)v;
    }
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > TP_MAX ? TP_MAX : (int)c;
}

/* Called with `busy` held. */
static void tp_start(int n)
{
    pthread_once(&tp_hooks_once, tp_register_hooks);
    if (n <= 0)
        n = default_threads();
    const uint32_t g = gen_of(atomic_load(&tp.ticket));
    tp.n_workers = 0;
    for (int i = 0; i < n - 1; i++) {
        /* a thread that cannot be created only costs speed */
        if (pthread_create(&tp.th[tp.n_workers], NULL, worker_main,
                           (void *)(uintptr_t)g) != 0)
            break;
        tp.n_workers++;
    }
    tp.started = 1;
}

static int tp_acquire(void)
{
    return !atomic_flag_test_and_set_explicit(&tp.busy, memory_order_acquire);
}

static void tp_release(void)
{
    atomic_flag_clear_explicit(&tp.busy, memory_order_release);
}

void tp_parallel_for(int64_t n_tasks, tp_task_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (!tp_acquire()) {
        /* another thread has the pool: do the work here */
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i);
        return;
    }
    if (!tp.started)
        tp_start(0);
    if (tp.n_workers == 0 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i);
        tp_release();
        return;
    }
    tp.fn = fn;
    tp.ctx = ctx;
    tp.n_tasks = n_tasks;
    atomic_store_explicit(&tp.next, 0, memory_order_relaxed);
    atomic_store_explicit(&tp.done, 0, memory_order_relaxed);
    const uint32_t g = gen_of(atomic_load(&tp.ticket)) + 1; /* odd: open */
    atomic_store_explicit(&tp.ticket, (uint64_t)g << 32, memory_order_release);
    pthread_mutex_lock(&tp.mu);
    if (tp.n_sleeping)
        pthread_cond_broadcast(&tp.wake);
    pthread_mutex_unlock(&tp.mu);

    run_tasks();
    /* the last tasks may be running on a worker that lost its core (a busy
     * machine): spin a little, then yield to it */
    for (unsigned k = 0;
         atomic_load_explicit(&tp.done, memory_order_acquire) < n_tasks; k++) {
        if (k < 256)
            cpu_relax();
        else
            sched_yield();
    }
    /* close: wait for workers still inside (they find no task left) */
    for (unsigned k = 0;; k++) {
        uint64_t open = (uint64_t)g << 32;
        if (atomic_compare_exchange_weak_explicit(&tp.ticket, &open, (uint64_t)(g + 1) << 32,
                                                  memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
        if (k < 256)
            cpu_relax();
        else
            sched_yield();
    }
    tp_release();
}

int tp_threads(void)
{
    if (!tp_acquire())
        return 1; /* busy: a concurrent caller runs on its own thread */
    if (!tp.started)
        tp_start(0);
    const int n = tp.n_workers + 1;
    tp_release();
    return n;
}

void tp_set_threads(int n)
{
    while (!tp_acquire())
        sched_yield();
    tp_stop();
    tp_start(n);
    tp_release();
}
