/* persist.c: the save directory behind a conversation cache (persist.h):
 * loading at start, the writer thread, the size cap and the age limit.
 *
 * The writer thread.  Writing an image costs a gather of its spans and a
 * file write with an fsync: tens of ms for a few MiB, seconds for
 * gigabytes.  The scheduler captures between decode steps, so a save
 * there would stall every other conversation; instead the orchestration
 * thread pins the committed image (the cache then never evicts it) and
 * queues it, and the writer thread reads the pinned image's spans (the
 * cache allows read-only accessors on a pinned image from any thread) and
 * writes the file.  Pins are plain counters of the orchestration thread, so
 * the writer only marks a job done and the orchestration thread unpins it
 * at its next capture or restore (persist_reap).  The queue is bounded
 * (PERSIST_QUEUE jobs): when the writer is that far behind, a new save is
 * dropped, counted and warned about once: the conversation stays in
 * memory, only its restart copy is missing.
 *
 * Failures of a save (a full disk, a removed directory) are warnings on
 * stderr, never errors of the request: the first failure after a success
 * is printed, the rest only counted. */
#include "park/persist.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "park/hostmem.h"

#define PERSIST_QUEUE 8
#define STALE_TEMP_S 3600 /* an interrupted save's temporary older than this goes */

typedef struct persist_job {
    convcache_image *img;
    char name[32], prefix[32]; /* the file, and the one it replaces ("" none) */
    int done;
} persist_job;

struct persist {
    persist_id id;
    convcache *cache;
    char *dir;
    size_t max_mib;
    int max_days;

    pthread_mutex_t mu;
    pthread_cond_t cv;           /* a job queued, a job done, or stop */
    pthread_t thread;
    int started, stop;
    persist_job jobs[PERSIST_QUEUE];
    uint64_t first, next, end;   /* [first, next) written or being written,
                                    [next, end) queued; first..end pinned */
    int warned_drop, last_failed;
    persist_stats st;
};

/* ---- the directory ------------------------------------------------------- */

typedef struct dir_file {
    char name[32];
    uint64_t bytes;
    time_t mtime;
} dir_file;

static int is_image_name(const char *n)
{
    size_t len = strlen(n);
    if (len != 16 + strlen(PERSIST_SUFFIX) || strcmp(n + 16, PERSIST_SUFFIX) != 0)
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
            return 0;
    return 1;
}

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* The image files of dir (and, with temps, remove the stale temporaries
 * safe_write leaves when a process is killed in the middle of a save). */
static int list_images(const char *dir, dir_file **out, int *n_out, int temps)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    dir_file *v = NULL;
    int n = 0, cap = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        int image = is_image_name(de->d_name);
        int temp = temps && !strncmp(de->d_name, ".strata-", 8);
        if (!image && !temp)
            continue;
        char *path = join(dir, de->d_name);
        struct stat st;
        if (!path || lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (temp) {
            if (now - st.st_mtime > STALE_TEMP_S)
                unlink(path);
            free(path);
            continue;
        }
        free(path);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            dir_file *t = realloc(v, (size_t)cap * sizeof *t);
            if (!t)
                break;
            v = t;
        }
        memcpy(v[n].name, de->d_name, strlen(de->d_name) + 1);   /* 20 bytes: checked */
        v[n].bytes = (uint64_t)st.st_size;
        v[n].mtime = st.st_mtime;
        n++;
    }
    closedir(d);
    *out = v;
    *n_out = n;
    return 0;
}

static int older_first(const void *a, const void *b)
{
    const dir_file *x = a, *y = b;
    if (x->mtime != y->mtime)
        return x->mtime < y->mtime ? -1 : 1;
    return strcmp(x->name, y->name);
}

int persist_enforce(const char *dir, size_t max_mib, int max_days)
{
    dir_file *v;
    int n, removed = 0;
    if (list_images(dir, &v, &n, 1) != 0)
        return 0;
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, older_first);
    uint64_t total = 0;
    time_t now = time(NULL);
    for (int i = 0; i < n; i++) {
        if (max_days > 0 && now - v[i].mtime > (time_t)max_days * 86400) {
            char *path = join(dir, v[i].name);
            if (path && unlink(path) == 0)
                removed++;
            free(path);
            v[i].bytes = 0;
            v[i].name[0] = 0;
        }
        total += v[i].bytes;
    }
    uint64_t cap = (uint64_t)max_mib << 20;
    for (int i = 0; max_mib && i < n && total > cap; i++) {
        if (!v[i].name[0])
            continue;
        char *path = join(dir, v[i].name);
        if (path && unlink(path) == 0) {
            removed++;
            total -= v[i].bytes;
        }
        free(path);
    }
    free(v);
    return removed;
}

/* ---- the writer thread --------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void save_one(persist *ps, persist_job *j)
{
    double t0 = now_s();
    int n_tok = 0;
    convcache_image_tokens(j->img, &n_tok);
    strata_error err = {0};
    char *path = join(ps->dir, j->name);
    uint64_t bytes = 0;
    int rc = path ? persist_write_file(&ps->id, j->img, path, &bytes, &err)
                  : strata_err(&err, STRATA_E_NOMEM, "out of memory");
    int removed = 0;
    /* the file it updates goes only once the new one reads back whole */
    if (!rc && j->prefix[0] && strcmp(j->prefix, j->name) != 0 &&
        persist_verify_file(&ps->id, path, &err) == 0) {
        char *old = join(ps->dir, j->prefix);
        removed += old && unlink(old) == 0;
        free(old);
    }
    free(path);
    if (!rc)
        removed += persist_enforce(ps->dir, ps->max_mib, ps->max_days);
    double dt = now_s() - t0;
    pthread_mutex_lock(&ps->mu);
    ps->st.removed += (uint64_t)removed;
    if (rc) {
        ps->st.save_failures++;
        if (!ps->last_failed)
            fprintf(stderr, "strata: warning: conversation save: %s (the conversation stays in "
                            "memory; it will not survive a restart)\n", err.msg);
    } else {
        ps->st.saved++;
        ps->st.bytes_written += bytes;
        ps->st.tokens_saved += (uint64_t)n_tok;
        ps->st.save_seconds += dt;
        double ms = n_tok > 0 ? dt * 1e3 * 1e5 / n_tok : 0;
        if (ms > ps->st.save_ms100k_max)
            ps->st.save_ms100k_max = ms;
    }
    ps->last_failed = rc != 0;
    pthread_mutex_unlock(&ps->mu);
}

static void *writer_main(void *arg)
{
    persist *ps = arg;
    pthread_mutex_lock(&ps->mu);
    for (;;) {
        while (!ps->stop && ps->next == ps->end)
            pthread_cond_wait(&ps->cv, &ps->mu);
        if (ps->next == ps->end)
            break;   /* stop, and nothing left to write */
        persist_job *j = &ps->jobs[ps->next % PERSIST_QUEUE];
        pthread_mutex_unlock(&ps->mu);
        save_one(ps, j);
        pthread_mutex_lock(&ps->mu);
        j->done = 1;
        ps->next++;
        pthread_cond_broadcast(&ps->cv);
    }
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

void persist_enqueue(persist *ps, convcache_image *img, int prefix_n)
{
    persist_reap(ps);
    pthread_mutex_lock(&ps->mu);
    if (ps->end - ps->first >= PERSIST_QUEUE) {
        ps->st.save_dropped++;
        if (!ps->warned_drop)
            fprintf(stderr, "strata: warning: conversation save: %d images wait to be written; "
                            "this one is not saved (it stays in memory)\n", PERSIST_QUEUE);
        ps->warned_drop = 1;
        pthread_mutex_unlock(&ps->mu);
        return;
    }
    persist_job *j = &ps->jobs[ps->end % PERSIST_QUEUE];
    int n;
    const int32_t *t = convcache_image_tokens(img, &n);
    persist_file_name(t, n, j->name, sizeof j->name);
    j->prefix[0] = 0;
    if (prefix_n > 0 && prefix_n < n)
        persist_file_name(t, prefix_n, j->prefix, sizeof j->prefix);
    j->img = img;
    j->done = 0;
    convcache_pin(img);
    ps->end++;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

void persist_reap(persist *ps)
{
    if (!ps)
        return;
    pthread_mutex_lock(&ps->mu);
    while (ps->first != ps->next && ps->jobs[ps->first % PERSIST_QUEUE].done) {
        convcache_unpin(ps->jobs[ps->first % PERSIST_QUEUE].img);
        ps->first++;
    }
    pthread_mutex_unlock(&ps->mu);
}

void persist_flush(persist *ps)
{
    if (!ps)
        return;
    pthread_mutex_lock(&ps->mu);
    while (ps->next != ps->end)
        pthread_cond_wait(&ps->cv, &ps->mu);
    pthread_mutex_unlock(&ps->mu);
    persist_reap(ps);
}

void persist_get_stats(persist *ps, persist_stats *st)
{
    pthread_mutex_lock(&ps->mu);
    *st = ps->st;
    pthread_mutex_unlock(&ps->mu);
}

/* ---- start and end ------------------------------------------------------- */

static int open_dir(const char *dir, strata_error *err)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return strata_err(err, STRATA_E_IO, "--conversation-save %s: cannot create the "
                          "directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return strata_err(err, STRATA_E_IO, "--conversation-save %s: not a directory", dir);
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return strata_err(err, STRATA_E_IO, "--conversation-save %s: %s", dir, strerror(errno));
    return 0;
}

/* Loading stops while the machine's available memory is under the floor:
 * loading grows the cache like a capture does. */
static int under_floor(const persist_params *pp)
{
    uint64_t avail;
    return pp->min_free_mib && park_mem_available(&avail) == 0 &&
           avail < ((uint64_t)pp->min_free_mib << 20);
}

/* Newest first, as many as the cache's budgets hold (what a longer run
 * would have kept), then loaded oldest first so the newest are the most
 * recently used.  A refused file is named with why and left in place
 * (another model's files may share the directory). */
static void load_dir(persist *ps, const persist_params *pp)
{
    dir_file *v;
    int n;
    if (list_images(ps->dir, &v, &n, 0) != 0)
        return;
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, older_first);
    convcache_stats cs;
    convcache_get_stats(ps->cache, &cs);
    uint64_t room = cs.bytes_max - cs.bytes_used;
    int slots = cs.images_max - cs.images, keep = n;
    for (int i = n - 1; i >= 0; i--) {
        char *path = join(ps->dir, v[i].name);
        strata_error err = {0};
        int toks = 0;
        uint64_t fb = 0;
        int rc = path ? persist_check_header(&ps->id, path, &toks, &fb, &err) : -1;
        free(path);
        /* the cache holds the K/V: the file less its header, checksum, tokens */
        uint64_t kv = rc ? 0 : fb - PERSIST_FILE_OVERHEAD - (uint64_t)toks * 4;
        if (rc) {
            fprintf(stderr, "strata: warning: conversation save: skipped %s\n", err.msg);
            ps->st.skipped++;
            v[i].name[0] = 0;
        } else if (slots <= 0 || kv > room) {
            keep = i;   /* this one and the older ones do not fit */
            break;
        } else {
            room -= kv;
            slots--;
        }
    }
    for (int i = keep == n ? 0 : keep + 1; i < n; i++) {
        if (!v[i].name[0])
            continue;
        if (under_floor(pp)) {
            fprintf(stderr, "strata: warning: conversation save: available memory is under "
                            "--conversation-cache-min-free-mib %zu; loading stops\n",
                    pp->min_free_mib);
            break;
        }
        char *path = join(ps->dir, v[i].name);
        strata_error err = {0};
        convcache_image *img = NULL;
        int rc = path ? persist_load_file(&ps->id, ps->cache, path, &img, &err) : -1;
        free(path);
        if (rc) {
            fprintf(stderr, "strata: warning: conversation save: skipped %s\n", err.msg);
            ps->st.skipped++;
        } else {
            ps->st.loaded++;
            int nt = 0;
            const int32_t *t = img ? convcache_image_tokens(img, &nt) : NULL;
            if (pp->on_load && t && nt > 0)
                pp->on_load(t, nt, convcache_image_pending(img), pp->load_user);
        }
    }
    free(v);
}

persist *persist_new(strata_engine *e, convcache *c, const persist_params *pp,
                     strata_error *err)
{
    int rc = open_dir(pp->dir, err);
    if (rc)
        return NULL;
    persist *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->dir = strdup(pp->dir))) {
        free(ps);
        strata_err(err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    ps->cache = c;
    ps->max_mib = pp->max_mib;
    ps->max_days = pp->max_days;
    pthread_mutex_init(&ps->mu, NULL);
    pthread_cond_init(&ps->cv, NULL);
    if (persist_identity(e, &ps->id, err)) {
        persist_free(ps);
        return NULL;
    }
    ps->st.removed += (uint64_t)persist_enforce(ps->dir, ps->max_mib, ps->max_days);
    load_dir(ps, pp);
    if (pthread_create(&ps->thread, NULL, writer_main, ps) != 0) {
        persist_free(ps);
        strata_err(err, STRATA_E_NOMEM, "conversation save: cannot start the writer thread");
        return NULL;
    }
    ps->started = 1;
    return ps;
}

void persist_free(persist *ps)
{
    if (!ps)
        return;
    if (ps->started) {
        pthread_mutex_lock(&ps->mu);
        ps->stop = 1;
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        pthread_join(ps->thread, NULL);   /* writes what was queued first */
    }
    persist_reap(ps);
    pthread_mutex_destroy(&ps->mu);
    pthread_cond_destroy(&ps->cv);
    free(ps->dir);
    free(ps);
}
