/* cmd_bench.c: strata-cli bench — the dispatcher over the benchmark modes
 * declared in bench.h.  With no mode flag it runs the model bench
 * (bench_model.c: prompt and decode rates of a model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/cuda/backend_cuda.h"

/* A mode whose file is not in the tree yet links as NULL (see bench.h). */
#pragma weak bench_quant
#pragma weak bench_kernels
#pragma weak bench_attention
#pragma weak bench_clients
#pragma weak bench_conversations
#pragma weak bench_workload
#pragma weak bench_quant_usage
#pragma weak bench_kernels_usage
#pragma weak bench_attention_usage
#pragma weak bench_clients_usage
#pragma weak bench_conversations_usage
#pragma weak bench_workload_usage
#pragma weak bench_persistent
#pragma weak bench_persistent_usage

#ifdef STRATA_CUDA
static const int built_with_cuda = 1;
#else
static const int built_with_cuda = 0;
#endif

typedef struct bench_mode {
    const char *flag;
    int (*fn)(int argc, char **argv);
    void (*usage)(FILE *f);
    const char *what;
    int needs_cuda; /* measures a card: only called in a CUDA build */
} bench_mode;

/* The modes, in the order `--help` lists them.  Rows sharing a flag run in
 * turn (--kernels is the weight kernels, then attention); --help lists such
 * a flag once. */
static const bench_mode bench_modes[] = {
    {"--quant", bench_quant, bench_quant_usage,
     "quantizer MB/s and CPU matvec GB/s per weight type", 0},
    {"--kernels", bench_kernels, bench_kernels_usage,
     "CUDA weight kernels vs the card's bandwidth, then --attention", 1},
    {"--kernels", bench_attention, bench_attention_usage, NULL, 1},
    {"--attention", bench_attention, bench_attention_usage,
     "CUDA attention over the k8v4 cache only", 1},
    {"--clients", bench_clients, bench_clients_usage,
     "concurrent clients through the scheduler", 0},
    {"--conversations", bench_conversations, bench_conversations_usage,
     "parked conversations returning (cache)", 0},
    {"--workload", bench_workload, bench_workload_usage,
     "served conversations: parking's costs inside them", 0},
    {"--persistent", bench_persistent, bench_persistent_usage,
     "the decode step's matvecs as one persistent CUDA launch against separate kernels", 1},
    {"--profile", bench_profile, bench_profile_usage,
     "the CPU forward pass op by op: each op's share of a prompt token and a decode step", 0},
};
#define N_BENCH_MODES (sizeof bench_modes / sizeof bench_modes[0])

static const char *mode_status(const bench_mode *m)
{
    if (m->needs_cuda && !built_with_cuda)
        return " (needs a CUDA build)";
    return m->fn ? "" : " (not built)";
}

void bench_model_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench [-m MODEL] [-p 512] [-n 128] [--batch 1,2,4,8]\n"
               "                        [--ctx 0,4096] [--reps 3] [--json] [options]\n"
               "       strata-cli bench MODE [mode options]   (MODE --help for its options)\n\n"
               "Without a mode: prompt tok/s (-p random tokens into a fresh sequence) and decode\n"
               "tok/s per context and batch size (each sequence prefilled with that many tokens\n"
               "plus a short prompt, then -n steps of one token per sequence), the median of\n"
               "--reps runs after a warm-up, with the bytes one decode step reads (weights + KV\n"
               "at that context) and the GB/s that makes; on a card also its fraction of the read\n"
               "bandwidth measured in the same run.\n\n"
               "modes:\n");
    for (size_t i = 0; i < N_BENCH_MODES; i++)
        if (bench_modes[i].what)
            fprintf(f, "  %-16s %s%s\n", bench_modes[i].flag, bench_modes[i].what,
                    mode_status(&bench_modes[i]));
    fprintf(f, "\nthe model bench's options:\n"
               "  -p N                    prompt tokens (default 512)\n"
               "  -n N                    decode steps per run (default 128)\n"
               "  --batch B1,B2,..        batch sizes, 1..%d (default 1,2,4,8)\n"
               "  --ctx C1,C2,..          contexts to decode at (default 0)\n"
               "  --reps N                runs per figure, the median printed (default 3)\n"
               "  --json                  print one JSON object instead of the table\n"
               "  -c, --ctx-size N        the engine's context (default: what the runs need)\n",
            BENCH_MODEL_MAX_BATCH);
    cli_opts_help(f, BENCH_MODEL_USES & ~CLI_USE_CTX);
}

static int is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

/* Run every row of the mode `flag` with the whole argv: modes take values
 * on their flag (--clients C), so the flag stays for them to parse.  With
 * --help anywhere, print each row's help instead and run nothing. */
static int run_mode(const char *flag, int argc, char **argv)
{
    int help = 0;
    for (int i = 1; i < argc; i++)
        help |= is_help(argv[i]);
    int rc = 0;
    const char *why = NULL;
    for (size_t i = 0; i < N_BENCH_MODES && !rc; i++) {
        const bench_mode *m = &bench_modes[i];
        if (strcmp(m->flag, flag) != 0)
            continue;
        if (help) {
            if (m->usage)
                m->usage(stdout);
            else
                printf("strata-cli bench %s: not built\n", flag);
        } else if (m->needs_cuda && !built_with_cuda) {
            fprintf(stderr, "strata-cli bench %s needs a CUDA build (nvcc; make CUDA=1)\n", flag);
            rc = 1;
        } else if (!m->fn) {
            fprintf(stderr, "strata-cli bench %s: not built\n", flag);
            rc = 1;
        } else if (m->needs_cuda && !cuda_backend_available(&why)) {
            /* the runtime's own words without a driver ("CUDA driver
             * version is insufficient ...") read like a version clash */
            fprintf(stderr, "strata-cli bench %s needs a CUDA card: %s\n", flag, why);
            rc = 1;
        } else {
            rc = m->fn(argc, argv);
        }
    }
    return rc;
}

int bench_int(const char *mode, const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "strata-cli bench %s: %s '%s' is not an integer in %ld..%ld\n", mode, opt,
                v ? v : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        for (size_t k = 0; k < N_BENCH_MODES; k++)
            if (!strcmp(argv[i], bench_modes[k].flag))
                return run_mode(argv[i], argc, argv);
    }
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            bench_model_usage(stdout);
            return 0;
        }
    }
    return bench_model(argc, argv);
}

