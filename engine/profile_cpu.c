/* profile_cpu.c: the per-op timer's state (engine/profile_cpu.h). */
#include "engine/profile_cpu.h"

#include <time.h>

int cpu_prof_on;
cpu_profile cpu_prof;

int64_t cpu_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
