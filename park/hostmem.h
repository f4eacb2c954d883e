/* hostmem.h: how much memory the machine has left, for the conversation
 * cache's floor (--conversation-cache-min-free-mib: the cache does not grow
 * while MemAvailable is under it; doc/convcache.md, "The host-memory
 * floor"). */
#ifndef STRATA_HOSTMEM_H
#define STRATA_HOSTMEM_H

#include <stdint.h>

/* MemAvailable of /proc/meminfo in bytes: 0 with *bytes, or -1 where it
 * cannot be read (then no floor applies).  Goes through the hook when set. */
int park_mem_available(uint64_t *bytes);

/* Test hook: when non-NULL, park_mem_available returns what it says. */
extern int (*park_mem_available_hook)(uint64_t *bytes);

#endif
