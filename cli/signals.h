/* signals.h: what strata-cli does about signals that are not Ctrl-C during
 * an answer: a model file truncated under its mapping (SIGBUS), and the test
 * hook that pauses a load so the tests can truncate or interrupt it at a
 * known point. */
#ifndef STRATA_CLI_SIGNALS_H
#define STRATA_CLI_SIGNALS_H

/* Exit status when a model file changed on disk while in use (sysexits'
 * EX_IOERR): distinct from 1 (an error reported by the library) and from a
 * death by signal. */
#define CLI_EXIT_MODEL_CHANGED 74
/* Exit status when Ctrl-C stopped a load (128 + SIGINT, as a shell reports
 * a process that SIGINT killed). */
#define CLI_EXIT_INTERRUPTED 130

/* Install the SIGBUS handler: a bus error at an address inside a mapped
 * model file prints "model file FILE changed on disk while in use" and
 * exits with CLI_EXIT_MODEL_CHANGED; any other bus error kills the process
 * as before.  main() calls it once. */
void cli_install_sigbus(void);

/* Test hook: when STRATA_TEST_PAUSE_IN_LOAD names a file, create it and wait
 * (at most 60 s) until someone removes it.  The load calls this once, after
 * the model is mapped and before its weights are read. */
void cli_test_pause_in_load(void);

#endif
