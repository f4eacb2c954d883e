/* park_internal.h: what park.c and park_save.c share (not public). */
#ifndef STRATA_PARK_INTERNAL_H
#define STRATA_PARK_INTERNAL_H

#include <stddef.h>

#include "cache/arena.h"
#include "park/park.h"
#include "park/persist.h"

struct strata_park {
    strata_engine *e;
    convcache *cache;
    /* the cache's bytes when they come from one block (pinned on CUDA):
     * the arena that carves it; block NULL: per-part allocation */
    void *block;
    arena block_arena;
    int verify;
    park_stats st;
    persist *persist;        /* the save directory, or NULL */
    size_t min_free_mib;     /* the host-memory floor, 0: none */
    int under_floor;         /* warned for this stretch under the floor */
    int pageable_warned;     /* a part could not be pinned: said once */
    int partial;             /* restores take the longest common prefix
                                (park_set_partial_restore) */
    park_observer observe;   /* park_set_observer */
    void *observe_user;
    /* pinned staging of the shuttle's host round trip, one per stage */
    void **stage_buf;
    size_t *stage_cap;
};

/* The host-memory floor before a capture of `need` new bytes (park_save.c):
 * 0 to go on (evicting first when under the floor), or STRATA_E_LIMIT. */
int park_floor_room(strata_park *p, size_t need, const convcache_image *prefix,
                    strata_error *err);
/* A line on the locked-memory limit, for the messages of failed pinning. */
void park_memlock_note(char *buf, size_t cap);

#endif
