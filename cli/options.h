/* options.h: the engine and sampling options the front ends share, with
 * llama.cpp's flag names where they exist (-m -c -n -p -s --temp --top-k
 * --top-p --min-p --repeat-penalty -sys --chat-template). */
#ifndef STRATA_CLI_OPTIONS_H
#define STRATA_CLI_OPTIONS_H

#include "engine/sample.h"
#include "engine/strata.h"

typedef struct cli_opts {
    strata_params ep;
    sampler_params sp;
    const char *prompt;
    const char *file;
    const char *system;
    const char *chat_template;
    int n_predict;     /* -n; -1: until stop / context */
    int chat;          /* --chat: wrap the prompt in the chat format */
    int verbose;
    /* The conversation cache (--conversation-cache-mib, -slots): the front
     * ends on the scheduler pass them on (sched_params.cache_mib /
     * cache_slots); 0: off.  chat sets its default (256) before parsing. */
    size_t conv_cache_mib;
    int conv_cache_slots;
    char model_buf[1024];
} cli_opts;

void cli_opts_init(cli_opts *o);
/* Try to consume argv[*i] (and its value).  Returns 1 if consumed, 0 if not
 * an option of this set, -1 on a bad value (message printed). */
int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, int *i);
/* Parse a whole command line of shared options: returns -1 to go on, or
 * the exit status to return (0 after --help, 2 on a bad or unknown option). */
int cli_opts_parse_all(cli_opts *o, const char *cmd, int argc, char **argv,
                       void (*usage)(FILE *f));
/* Checks that need every option: --batch-groups divides --batch.  Returns
 * 0, or -1 with a message (cli_opts_parse_all calls it; front ends that
 * parse option by option call it after their loop). */
int cli_opts_check(const cli_opts *o, const char *cmd);
/* The help text for the shared options. */
void cli_opts_help(FILE *f);
/* Fill model_path with the demo model's cache path if -m was not given.
 * Returns 0, or -1 with a message when there is none. */
int cli_opts_default_model(cli_opts *o, const char *cmd);
/* A progress bar on stderr for weight loading. */
void cli_progress(uint64_t done, uint64_t total, void *user);

#endif
