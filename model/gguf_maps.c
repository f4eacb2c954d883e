/* gguf_maps.c: the registry of mapped model files (see gguf_maps.h). */
#include "model/gguf_maps.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "model/gguf.h"

/* Every file gguf_open maps is listed here so that a SIGBUS handler (the
 * CLI's) can tell "this address lies in model file X, which was truncated
 * under us" from any other bus error.  The handler reads the table without
 * a lock: an entry is published base last and withdrawn base first, so a
 * reader never pairs a base with a stale size or path. */
#define MAX_MAPS 64
static _Atomic(uintptr_t) map_base[MAX_MAPS];
static _Atomic(size_t) map_size[MAX_MAPS];
static _Atomic(const char *) map_path[MAX_MAPS];
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

void gguf_maps_add(const void *base, size_t size, const char *path)
{
    pthread_mutex_lock(&map_lock);
    for (int i = 0; i < MAX_MAPS; i++) {
        if (atomic_load(&map_base[i]))
            continue;
        atomic_store(&map_size[i], size);
        atomic_store(&map_path[i], path);
        atomic_store(&map_base[i], (uintptr_t)base);
        break;
    }
    /* more than MAX_MAPS files at once: the extra ones are not reported by
     * name (a bus error there stays a bus error) */
    pthread_mutex_unlock(&map_lock);
}

void gguf_maps_remove(const void *base)
{
    pthread_mutex_lock(&map_lock);
    for (int i = 0; i < MAX_MAPS; i++)
        if (atomic_load(&map_base[i]) == (uintptr_t)base)
            atomic_store(&map_base[i], 0);
    pthread_mutex_unlock(&map_lock);
}

const char *gguf_mapped_file_at(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < MAX_MAPS; i++) {
        uintptr_t b = atomic_load(&map_base[i]);
        if (b && a >= b && a - b < atomic_load(&map_size[i]))
            return atomic_load(&map_path[i]);
    }
    return NULL;
}
