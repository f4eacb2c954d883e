/* cmd_bench.c: strata-cli bench — the dispatcher over the benchmark modes
 * declared in bench.h.  With no mode flag it runs the model bench
 * (bench_model.c: prompt and decode rates of a model). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"

/* A mode whose file is not in the tree yet links as NULL (see bench.h). */
#pragma weak bench_quant
#pragma weak bench_kernels
#pragma weak bench_attention
#pragma weak bench_clients
#pragma weak bench_conversations

#ifdef STRATA_CUDA
static const int built_with_cuda = 1;
#else
static const int built_with_cuda = 0;
#endif

typedef struct bench_mode {
    const char *flag;
    int (*fn)(int argc, char **argv);
    const char *what;
    int needs_cuda; /* measures a card: only called in a CUDA build */
} bench_mode;

/* The modes, in the order `--help` lists them.  Rows sharing a flag run in
 * turn (--kernels is the weight kernels, then attention). */
static const bench_mode bench_modes[] = {
    {"--quant", bench_quant, "quantizer MB/s and CPU matvec GB/s per weight type", 0},
    {"--kernels", bench_kernels, "CUDA weight kernels against the card's bandwidth", 1},
    {"--kernels", bench_attention, "CUDA attention over the k8v4 cache", 1},
    {"--attention", bench_attention, "CUDA attention over the k8v4 cache only", 1},
    {"--clients", bench_clients, "concurrent clients through the scheduler", 0},
    {"--conversations", bench_conversations, "parked conversations returning (cache)", 0},
};
#define N_BENCH_MODES (sizeof bench_modes / sizeof bench_modes[0])

static const char *mode_status(const bench_mode *m)
{
    if (m->needs_cuda && !built_with_cuda)
        return " (needs a CUDA build)";
    return m->fn ? "" : " (not built)";
}

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench -m MODEL [-p 512] [-n 128] [--batch 1,2,4,8] [--ctx 0,4096]\n"
               "                        [--reps 3] [--json] [engine options]\n"
               "       strata-cli bench MODE [mode options]\n\n"
               "Without a mode: prompt tok/s (-p random tokens into a fresh sequence) and decode\n"
               "tok/s per context and batch size (each sequence prefilled with that many tokens\n"
               "plus a short prompt, then -n steps of one token per sequence), the median of\n"
               "--reps runs after a warm-up, with the bytes one decode step reads (weights + KV\n"
               "at that context) and the GB/s that makes; on a card also its fraction of the read\n"
               "bandwidth measured in the same run.  --json prints the same as one JSON object.\n\n"
               "modes:\n");
    for (size_t i = 0; i < N_BENCH_MODES; i++)
        fprintf(f, "  %-16s %s%s\n", bench_modes[i].flag, bench_modes[i].what,
                mode_status(&bench_modes[i]));
    fprintf(f, "\n");
    cli_opts_help(f);
}

/* Run every row of the mode `flag` with the whole argv: modes take values
 * on their flag (--clients C), so the flag stays for them to parse. */
static int run_mode(const char *flag, int argc, char **argv)
{
    int rc = 0;
    for (size_t i = 0; i < N_BENCH_MODES && !rc; i++) {
        const bench_mode *m = &bench_modes[i];
        if (strcmp(m->flag, flag) != 0)
            continue;
        if (m->needs_cuda && !built_with_cuda) {
            fprintf(stderr, "strata-cli bench %s: %s needs a CUDA build (nvcc; make CUDA=1)\n",
                    flag, m->what);
            rc = 1;
        } else if (!m->fn) {
            fprintf(stderr, "strata-cli bench %s: %s: not built\n", flag, m->what);
            rc = 1;
        } else {
            rc = m->fn(argc, argv);
        }
    }
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        for (size_t k = 0; k < N_BENCH_MODES; k++)
            if (!strcmp(argv[i], bench_modes[k].flag))
                return run_mode(argv[i], argc, argv);
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    }
    return bench_model(argc, argv);
}

int bench_int_arg(const char *opt, const char *v, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "strata-cli bench: %s '%s' must be an integer from %lld to %lld\n", opt,
                v ? v : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}
