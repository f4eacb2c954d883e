/* bench_profile.c: `strata-cli bench --profile` — where a CPU step goes.
 *
 * Turns on the forward pass's per-op timer (engine/profile_cpu.h), reads
 * -p random tokens into a fresh sequence (the prompt: the engine's chunks)
 * and then runs -n decode steps of one sequence, each followed by sampling
 * its logits with the default sampler (as `run` does), and prints for each
 * phase what every op took per token (prompt) or per step (decode) and its
 * share of the phase's wall time: the matmuls by weight type, the output
 * head, attention, the KV store, norms, rope, the element-wise ops,
 * sampling, and the overhead (wall time no timer saw: the engine's
 * bookkeeping, stage hand-offs, the timer itself).  A warm-up prompt runs
 * first, untimed.  The timer reads the clock twice per region, about 2 x 20
 * ns, a few hundred regions per step: well under 1 % of a step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "engine/engine_internal.h"
#include "engine/generate.h"
#include "engine/profile_cpu.h"
#include "engine/sample.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"

#define PROFILE_USES (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE)

void bench_profile_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --profile [-m MODEL] [-p 128] [-n 64] [-t THREADS] "
               "[options]\n\n"
               "Times every op of the CPU forward pass: -p random prompt tokens read into a\n"
               "fresh sequence, then -n decode steps of one sequence, each sampled with the\n"
               "default sampler.  Prints per op the milliseconds per prompt token and per\n"
               "decode step and the share of the phase's wall time.\n\n"
               "options:\n"
               "  -p N                    prompt tokens (default 128)\n"
               "  -n N                    decode steps (default 64)\n"
               "  -c, --ctx-size N        the engine's context (default: what the run needs)\n");
    cli_opts_help(f, PROFILE_USES & ~CLI_USE_CTX);
}

typedef struct phase {
    cpu_profile p;
    double wall_ns, sample_ns;
    int units; /* tokens (prompt) or steps (decode) */
} phase;

static const char *op_names[PROF_N_OPS] = {
    [PROF_ATTN] = "attention", [PROF_KVSTORE] = "KV store", [PROF_NORM] = "norms",
    [PROF_ROPE] = "rope", [PROF_ELEM] = "embed/add/swiglu", [PROF_HEAD] = "output head",
};

static void row(const char *name, double a_ns, const phase *a, double b_ns, const phase *b)
{
    printf("  %-26s %9.3f %6.1f %%   %9.3f %6.1f %%\n", name, a_ns / a->units / 1e6,
           100.0 * a_ns / a->wall_ns, b_ns / b->units / 1e6, 100.0 * b_ns / b->wall_ns);
}

static void report(const phase *pr, const phase *de, int head_type)
{
    printf("%-28s %9s %8s   %9s %8s\n", "op", "prompt", "", "decode", "");
    printf("%-28s %9s %8s   %9s %8s\n", "", "ms/token", "share", "ms/step", "share");
    double seen_p = 0, seen_d = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!pr->p.matmul_calls[t] && !de->p.matmul_calls[t])
            continue;
        char name[64];
        snprintf(name, sizeof name, "matmul %s (%lld/step)", type_name(t),
                 (long long)(de->units ? de->p.matmul_calls[t] / de->units : 0));
        row(name, (double)pr->p.matmul_ns[t], pr, (double)de->p.matmul_ns[t], de);
        seen_p += (double)pr->p.matmul_ns[t];
        seen_d += (double)de->p.matmul_ns[t];
    }
    for (int k = 0; k < PROF_N_OPS; k++) {
        char name[64];
        snprintf(name, sizeof name, k == PROF_HEAD ? "%s (%s)" : "%s", op_names[k],
                 type_name(head_type));
        row(name, (double)pr->p.op_ns[k], pr, (double)de->p.op_ns[k], de);
        seen_p += (double)pr->p.op_ns[k];
        seen_d += (double)de->p.op_ns[k];
    }
    row("sampling", pr->sample_ns, pr, de->sample_ns, de);
    seen_p += pr->sample_ns;
    seen_d += de->sample_ns;
    row("overhead (untimed)", pr->wall_ns - seen_p, pr, de->wall_ns - seen_d, de);
    row("total", pr->wall_ns, pr, de->wall_ns, de);
    printf("prompt %.1f tok/s, decode %.1f tok/s (with sampling)\n",
           1e9 * pr->units / pr->wall_ns, 1e9 * de->units / de->wall_ns);
}

static void random_tokens(int32_t *ids, int n, int n_vocab, uint64_t *s)
{
    for (int i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((*s >> 33) % (uint64_t)n_vocab);
    }
}

int bench_profile(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = PROFILE_USES;
    o.cmd = "bench";
    long n_prompt = 128, steps = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--profile"))
            continue;
        if (!strcmp(a, "-p") || !strcmp(a, "-n")) {
            if (bench_int("--profile", a, i + 1 < argc ? argv[i + 1] : NULL, 1, 1 << 16,
                          a[1] == 'p' ? &n_prompt : &steps))
                return 2;
            i++;
            continue;
        }
        int r = cli_opts_parse(&o, "bench", argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 0) {
            fprintf(stderr, "strata-cli bench --profile: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (o.ep.backend == STRATA_BACKEND_AUTO)
        o.ep.backend = STRATA_BACKEND_CPU; /* the timer is the CPU backend's */
    if (o.ep.backend != STRATA_BACKEND_CPU) {
        fprintf(stderr, "strata-cli bench --profile times the CPU backend only\n");
        return 2;
    }
    if (cli_opts_check(&o, "bench") || cli_opts_default_model(&o, "bench"))
        return 2;
    const int need = (int)(n_prompt > 32 + steps ? n_prompt : 32 + steps) + 1;
    if (!o.ep.n_ctx)
        o.ep.n_ctx = need;
    if (o.ep.n_ctx < need) {
        fprintf(stderr, "strata-cli bench --profile: -c %d is less than the %d tokens the run "
                        "needs\n", o.ep.n_ctx, need);
        return 2;
    }
    o.ep.progress = cli_progress;

    strata_error err = {0};
    strata_engine *e = NULL;
    strata_seq *sq = NULL;
    int rc = strata_open(&o.ep, &e, &err);
    const int V = rc ? 0 : strata_n_vocab(e);
    int32_t *ids = rc ? NULL : malloc(sizeof *ids * (size_t)need);
    float *logits = rc ? NULL : malloc(sizeof *logits * (size_t)V);
    if (!rc && (!ids || !logits))
        rc = strata_err(&err, STRATA_E_NOMEM, "out of memory for %d logits", V);
    if (!rc) {
        sq = strata_seq_new(e, &err);
        rc = sq ? 0 : err.code;
    }
    uint64_t rng = 0x5eed;
    phase pr = {.units = (int)n_prompt}, de = {.units = (int)steps};
    sampler_params sp = sampler_defaults();
    sampler smp;
    sampler_init(&smp, &sp);
    if (!rc) { /* warm-up: first touches of the pages, the pool's threads */
        random_tokens(ids, 32, V, &rng);
        rc = strata_seq_feed(sq, ids, 32, logits, NULL, &err);
    }
    if (!rc) {
        strata_seq_reset(sq);
        random_tokens(ids, (int)n_prompt, V, &rng);
        memset(&cpu_prof, 0, sizeof cpu_prof);
        cpu_prof_on = 1;
        int64_t t0 = cpu_prof_now();
        rc = strata_seq_feed(sq, ids, (int)n_prompt, logits, NULL, &err);
        pr.wall_ns = (double)(cpu_prof_now() - t0);
        cpu_prof_on = 0;
        pr.p = cpu_prof;
    }
    if (!rc) {
        strata_seq_reset(sq);
        random_tokens(ids, 32, V, &rng);
        rc = strata_seq_feed(sq, ids, 32, logits, NULL, &err);
        int32_t tok = ids[31];
        memset(&cpu_prof, 0, sizeof cpu_prof);
        cpu_prof_on = 1;
        int64_t t0 = cpu_prof_now();
        for (long s = 0; s < steps && !rc; s++) {
            rc = strata_decode_batch(&sq, &tok, 1, logits, &err);
            int64_t ts = cpu_prof_now();
            tok = rc ? 0 : sampler_sample(&smp, logits, V, NULL, 0);
            de.sample_ns += (double)(cpu_prof_now() - ts);
            if (tok < 0)
                rc = strata_err(&err, STRATA_E_NOMEM, "sampler out of memory");
        }
        de.wall_ns = (double)(cpu_prof_now() - t0);
        cpu_prof_on = 0;
        de.p = cpu_prof;
    }
    if (!rc) {
        printf("model %s, CPU backend, %d threads, kv %s, %s activations\n", o.ep.model_path,
               tp_threads(), strata_kv_name(strata_kv_type(e)),
               cpu_matmul_int8_activations() == 2   ? "16-bit"
               : cpu_matmul_int8_activations() ? "int8"
                                               : "float");
        report(&pr, &de, strata_model(e)->output.type);
    } else {
        fprintf(stderr, "strata-cli bench --profile: %s\n", err.msg);
    }
    sampler_free(&smp);
    strata_seq_free(sq);
    free(ids);
    free(logits);
    strata_close(e);
    return rc ? 1 : 0;
}
