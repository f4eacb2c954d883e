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

/* --quant: quantizer MB/s and CPU matvec GB/s per type (bench_quant.c) */
int bench_quant(int argc, char **argv);
/* --kernels: CUDA weight kernels vs the card's bandwidth (bench_kernels.c) */
int bench_kernels(int argc, char **argv);
/* --kernels, --attention: attention over the k8v4 cache (bench_attention.c) */
int bench_attention(int argc, char **argv);
/* --clients: concurrent clients through the scheduler (bench_clients.c) */
int bench_clients(int argc, char **argv);
/* --conversations: parked conversations coming back (bench_conversations.c) */
int bench_conversations(int argc, char **argv);
/* the default mode, -m MODEL: prompt and decode rates (cmd_bench.c) */
int bench_model(int argc, char **argv);

/* Parse a mode's integer option: the whole of v, decimal, in [lo, hi].
 * Returns 0, or -1 after "strata-cli bench: OPT 'V' must be an integer from
 * LO to HI" on stderr (atoi took "2147483647" and garbage alike). */
int bench_int_arg(const char *opt, const char *v, long long lo, long long hi, long long *out);

#endif
