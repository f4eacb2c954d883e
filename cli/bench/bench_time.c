/* bench_time.c: the GPU benchmarks' timing (bench_time.h). */
#include "cli/bench/bench_time.h"

#ifdef STRATA_CUDA

#include <stdio.h>
#include <stdlib.h>

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define BT_CHECK(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s:%d: %s: %s\n", who, __FILE__, __LINE__, #call,                 \
                    cudaGetErrorString(e_));                                                       \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

double bench_graph_us(const char *who, bench_launch fn, void *ctx, int per_graph, int reps,
                      cudaStream_t s)
{
    cudaEvent_t ev[2 * BENCH_MAX_REPS];
    float ms[BENCH_MAX_REPS];
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    strata_error err = {0};
    double us = -1;
    int made = 0;
    if (reps < 1 || reps > BENCH_MAX_REPS || per_graph < 1) {
        fprintf(stderr, "%s: %d timed runs of %d launches (1..%d runs)\n", who, reps, per_graph,
                BENCH_MAX_REPS);
        return -1;
    }
    for (; made < 2 * reps; made++)
        BT_CHECK(cudaEventCreate(&ev[made]));
    if (fn(ctx, 0, s, &err)) { /* eager once: first-use setup outside the capture */
        fprintf(stderr, "%s: %s\n", who, err.msg);
        goto out;
    }
    BT_CHECK(cudaStreamSynchronize(s));
    BT_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; i++)
        if (fn(ctx, i, s, &err)) {
            fprintf(stderr, "%s: %s\n", who, err.msg);
            cudaStreamEndCapture(s, &graph);
            goto out;
        }
    BT_CHECK(cudaStreamEndCapture(s, &graph));
    BT_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < BENCH_WARM; i++)
        BT_CHECK(cudaGraphLaunch(exec, s));
    for (int i = 0; i < reps; i++) {
        BT_CHECK(cudaEventRecord(ev[2 * i], s));
        BT_CHECK(cudaGraphLaunch(exec, s));
        BT_CHECK(cudaEventRecord(ev[2 * i + 1], s));
    }
    BT_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++)
        BT_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    us = 1000.0 * ms[reps / 2] / per_graph;
out:
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    for (int i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    return us;
}

#else
/* ISO C forbids an empty translation unit */
typedef int bench_time_unused;
#endif
