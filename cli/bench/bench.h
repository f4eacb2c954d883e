/* bench.h: the modes of `strata-cli bench`, one function each, each in its
 * own cli/bench/bench_NAME.c.  cmd_bench.c picks a mode by its flag (the table
 * bench_modes there) and calls it with the bench command's whole argv:
 * argv[0] is "bench" and the mode flag stays, since a mode may take a value
 * on it (--clients C), so a mode skips its own flag.  The function prints
 * its figures and returns the exit status (0 ok, 1 runtime error, 2 usage).
 *
 * cmd_bench.c references every mode weakly (#pragma weak, as cli/main.c does
 * for commands), so a mode whose file is not written yet reads "not built"
 * instead of breaking the link.  Adding a mode: write cli/bench/bench_NAME.c,
 * declare it here, add a row to bench_modes. */
#ifndef STRATA_CLI_BENCH_H
#define STRATA_CLI_BENCH_H

#include <stdio.h>

#include "cli/options.h"

/* Each mode's --help text, beside its parser so the two stay in step:
 * `bench MODE --help` prints it and runs nothing. */
void bench_quant_usage(FILE *f);
void bench_kernels_usage(FILE *f);
void bench_attention_usage(FILE *f);
void bench_clients_usage(FILE *f);
void bench_conversations_usage(FILE *f);
void bench_model_usage(FILE *f);
void bench_workload_usage(FILE *f);
void bench_profile_usage(FILE *f);
void bench_persistent_usage(FILE *f);

/* The shared options each mode reads (cli/options.h); -c is listed by the
 * modes themselves, since each sizes the context its own way. */
#define BENCH_MODEL_USES (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_GROUPS)
#define BENCH_CLIENTS_USES                                                         \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_VERBOSE | CLI_USE_SLOTS |      \
     CLI_USE_GROUPS | CLI_USE_CACHE)
#define BENCH_CONVERSATIONS_USES (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_SLOTS)
#define BENCH_WORKLOAD_USES                                                        \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_SLOTS | CLI_USE_GROUPS |     \
     CLI_USE_CACHE | CLI_USE_SAVE)

#define BENCH_MODEL_MAX_BATCH 64 /* the model bench's largest --batch */

/* A whole decimal integer in [lo, hi] for a mode's own option; -1 with a
 * message naming the option and the value otherwise. */
int bench_int(const char *mode, const char *opt, const char *v, long lo, long hi, long *out);

/* --quant: quantizer MB/s and CPU matvec GB/s per type (bench_quant.c) */
int bench_quant(int argc, char **argv);
/* --kernels: CUDA weight kernels vs the card's bandwidth (bench_kernels.c) */
int bench_kernels(int argc, char **argv);
/* --kernels, --attention: attention over the k8v4 cache (bench_attention.c) */
int bench_attention(int argc, char **argv);
/* --attention --kv F1,F2,..: each KV format's store, rotation, decode and
 * prefill per context and batch, against the first (bench_attention_kv.c);
 * names among k8v4, k8v4r, k8v4r2, f16; lists of at most BENCH_ATT_MAX_LIST */
#define BENCH_ATT_MAX_LIST 8
int bench_attention_kv(char *const *names, int n_fmt, const int *ctxs, int n_ctx,
                       const int *batches, int n_batch, int runs);
/* --clients: concurrent clients through the scheduler (bench_clients.c) */
int bench_clients(int argc, char **argv);
/* --conversations: parked conversations coming back (bench_conversations.c) */
int bench_conversations(int argc, char **argv);
/* --workload: served conversations and what parking costs in them
 * (bench_workload.c) */
int bench_workload(int argc, char **argv);
/* --profile: the CPU forward pass op by op (bench_profile.c) */
int bench_profile(int argc, char **argv);
/* --persistent: the decode matvec chain as one persistent launch against
 * separate kernels (bench_persistent.c) */
int bench_persistent(int argc, char **argv);
/* the default mode, -m MODEL: prompt and decode rates (cmd_bench.c) */
int bench_model(int argc, char **argv);


#endif
