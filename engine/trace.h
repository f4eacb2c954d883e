/* trace.h: STRATA_TRACE=1 prints, after each step of a forward pass, the
 * sum and sum of squares of the first row's vector, on stderr — so the CPU
 * and CUDA paths can be compared step by step when they disagree.  Off (one
 * getenv) otherwise. */
#ifndef STRATA_TRACE_H
#define STRATA_TRACE_H

#include <stdio.h>
#include <stdlib.h>

static inline int trace_on(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("STRATA_TRACE") != NULL;
    return on;
}

static inline void trace_vec(const char *what, int layer, const float *x, long n)
{
    double s = 0, ss = 0;
    for (long i = 0; i < n; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
    }
    fprintf(stderr, "trace L%d %-10s n=%ld sum=%.6g sumsq=%.6g\n", layer, what, n, s, ss);
    /* STRATA_TRACE_DIR: also write the vector, one file per step, to diff. */
    const char *dir = getenv("STRATA_TRACE_DIR");
    if (dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/L%d-%s.f32", dir, layer, what);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(x, sizeof *x, (size_t)n, f);
            fclose(f);
        }
    }
}

#endif
