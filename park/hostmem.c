/* hostmem.c: MemAvailable, read from /proc/meminfo (see hostmem.h).
 *
 * Why MemAvailable and not MemFree: the kernel's estimate of what can be
 * allocated without swapping counts the page cache it would drop, and the
 * conversation cache's saved files sit in that page cache right after they
 * are written. */
#include "park/hostmem.h"

#include <stdio.h>
#include <string.h>

int (*park_mem_available_hook)(uint64_t *bytes) = NULL;

int park_mem_available(uint64_t *bytes)
{
    if (park_mem_available_hook)
        return park_mem_available_hook(bytes);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *bytes = (uint64_t)kib << 10;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}
