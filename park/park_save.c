/* park_save.c: the conversation cache's save directory (park/persist.h)
 * and host-memory floor, as park.c's capture uses them (doc/convcache.md,
 * "Conversations on disk" and "The host-memory floor"). */
#include <stdio.h>
#include <sys/resource.h>

#include "park/hostmem.h"
#include "park/park_internal.h"

/* The locked-memory limit, for the messages of a failed pinning: where
 * cudaHostAlloc fails it is usually this limit (containers often set a
 * small one), and the user raises it, not strata. */
void park_memlock_note(char *buf, size_t cap)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        snprintf(buf, cap, "the locked-memory limit could not be read");
    else if (rl.rlim_cur == RLIM_INFINITY)
        snprintf(buf, cap, "RLIMIT_MEMLOCK is unlimited: the machine is short of memory");
    else
        snprintf(buf, cap, "RLIMIT_MEMLOCK is %llu KiB; raise it with `ulimit -l unlimited` "
                 "(or the container's memlock limit, e.g. docker --ulimit memlock=-1)",
                 (unsigned long long)(rl.rlim_cur >> 10));
}

int park_persist_start(strata_park *p, const persist_params *pp, strata_error *err)
{
    if (p->persist)
        return strata_err(err, STRATA_E_ARG, "conversation save: already started");
    persist_params q = *pp;
    if (!q.min_free_mib)
        q.min_free_mib = p->min_free_mib;
    p->persist = persist_new(p->e, p->cache, &q, err);
    return p->persist ? 0 : err->code;
}

void park_persist_flush(strata_park *p)
{
    persist_flush(p->persist);
}

void park_set_partial_restore(strata_park *p, int on)
{
    p->partial = on;
}

void park_set_min_free(strata_park *p, size_t mib)
{
    p->min_free_mib = mib;
}

/* The host-memory floor: while MemAvailable is under it the cache does not
 * grow.  A capture of `need` new bytes first evicts least recently used
 * images (not its prefix) until the cache holds `need` bytes less, and is
 * declined (STRATA_E_LIMIT) when it cannot; said once per stretch under the
 * floor, not per capture. */
int park_floor_room(strata_park *p, size_t need, const convcache_image *prefix,
                      strata_error *err)
{
    uint64_t avail;
    if (!p->min_free_mib || park_mem_available(&avail) != 0 ||
        avail >= ((uint64_t)p->min_free_mib << 20)) {
        p->under_floor = 0;
        return 0;
    }
    if (!p->under_floor) {
        fprintf(stderr, "strata: warning: conversation cache: available memory %llu MiB is under "
                        "--conversation-cache-min-free-mib %zu; the cache stops growing (it "
                        "evicts to make room, or parks nothing)\n",
                (unsigned long long)(avail >> 20), p->min_free_mib);
        p->under_floor = 1;
        p->st.floor_warnings++;
    }
    convcache_stats cs;
    convcache_get_stats(p->cache, &cs);
    size_t before = cs.bytes_used;
    if (need <= before && convcache_evict_to(p->cache, before - need, prefix) <= before - need) {
        p->st.floor_evictions++;
        return 0;
    }
    p->st.floor_declines++;
    return strata_err(err, STRATA_E_LIMIT, "conversation cache: not parked: available memory "
                      "%llu MiB is under --conversation-cache-min-free-mib %zu and the cache "
                      "cannot give %zu bytes back", (unsigned long long)(avail >> 20),
                      p->min_free_mib, need);
}

