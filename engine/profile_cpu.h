/* profile_cpu.h: the CPU forward pass's per-op timer (`strata-cli bench
 * --profile`).  Off by default: each timed region then costs one load and
 * a not-taken branch (no clock read), so the hot path is unchanged.  On,
 * each region reads CLOCK_MONOTONIC at both ends and adds the difference
 * to its bucket.  Process-wide and not thread-safe: one engine, driven by
 * one thread, is profiled at a time (the bench). */
#ifndef STRATA_PROFILE_CPU_H
#define STRATA_PROFILE_CPU_H

#include <stdint.h>

#include "model/quant.h"

enum {
    PROF_ATTN,     /* cpu_attention over the KV cache (and k8v4r unrotate) */
    PROF_KVSTORE,  /* quantizing/writing this step's K and V */
    PROF_NORM,     /* rmsnorms (attention, FFN, q/k heads, output) */
    PROF_ROPE,     /* rope (and k8v4r rotation of q, k, v) */
    PROF_ELEM,     /* embedding, bias, residual adds, swiglu, MoE routing */
    PROF_HEAD,     /* the output matmul (vocabulary logits) */
    PROF_N_OPS
};

typedef struct cpu_profile {
    int64_t matmul_ns[GGML_TYPE_COUNT]; /* the layers' matmuls by weight type */
    int64_t matmul_calls[GGML_TYPE_COUNT];
    int64_t op_ns[PROF_N_OPS];
} cpu_profile;

extern int cpu_prof_on;
extern cpu_profile cpu_prof;

int64_t cpu_prof_now(void); /* monotonic ns */

/* t = PROF_T0(); ...; PROF_ADD(op_ns[PROF_NORM], t); */
#define PROF_T0() (cpu_prof_on ? cpu_prof_now() : 0)
#define PROF_ADD(field, t0)                                                        \
    do {                                                                           \
        if (cpu_prof_on)                                                           \
            cpu_prof.field += cpu_prof_now() - (t0);                               \
    } while (0)

#endif
