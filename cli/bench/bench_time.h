/* bench_time.h: the one way the GPU benchmarks time a launch
 * (bench_kernels.c, bench_attention.c).
 *
 * bench_graph_us captures `per_graph` launches (fn with i = 0..per_graph-1,
 * so a caller can rotate through copies of its data) into one CUDA graph,
 * as the engine replays its decode step.  Warm-up: one eager launch (first-
 * use setup stays outside the capture) and BENCH_WARM replays (the first
 * uploads the graph).  Then `reps` replays, each between its own pair of
 * events; the result is the median replay divided by per_graph, in
 * microseconds per launch, or -1 on an error (printed with the caller's
 * name).  Timing single eager launches instead adds the host's enqueue time
 * to short kernels; a graph of several launches spreads the replay's own
 * start over them. */
#ifndef STRATA_CLI_BENCH_TIME_H
#define STRATA_CLI_BENCH_TIME_H

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>

#include "base/error.h"

#define BENCH_WARM 3
#define BENCH_MAX_REPS 200

typedef int (*bench_launch)(void *ctx, int i, cudaStream_t s, strata_error *err);

double bench_graph_us(const char *who, bench_launch fn, void *ctx, int per_graph, int reps,
                      cudaStream_t s);
#endif

#endif
