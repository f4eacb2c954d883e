/* options.h: the engine and sampling options the front ends share, with
 * llama.cpp's flag names where they exist (-m -c -n -p -s --temp --top-k
 * --top-p --min-p --repeat-penalty -sys --chat-template). */
#ifndef STRATA_CLI_OPTIONS_H
#define STRATA_CLI_OPTIONS_H

#include <stdio.h>

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
    /* --conversation-save DIR (-mib, -days) and
     * --conversation-cache-min-free-mib: sched_params' save_dir, save_mib,
     * save_days, min_free_mib (cli_opts_sched_cache). */
    const char *conv_save_dir;
    int conv_save_mib, conv_save_days, conv_min_free_mib;
    /* Which shared options this command reads (CLI_USE_*): the others are
     * refused by name, and its --help lists only these.  An option a
     * command would ignore silently is worse than one it rejects. */
    unsigned uses;
    const char *cmd;   /* the command's name for messages (cli_opts_parse sets it) */
    int kv_given, temp_given; /* --kv / --temp on the command line */
    char model_buf[1024];
} cli_opts;

/* Option groups for cli_opts.uses. */
#define CLI_USE_MODEL    0x001u /* -m */
#define CLI_USE_CTX      0x400u /* -c (commands with their own default print
                                   their own help line for it) */
#define CLI_USE_ENGINE   0x002u /* --backend --kv --kv-resident --layer-split
                                   --devices --chunk -t */
#define CLI_USE_VERBOSE  0x1000u /* -v */
#define CLI_USE_SLOTS    0x004u /* --batch/--slots/-np */
#define CLI_USE_GROUPS   0x800u /* --batch-groups */
#define CLI_USE_SAMPLING 0x008u /* --temp --top-k --top-p --min-p --repeat-penalty
                                   --repeat-last-n -s */
#define CLI_USE_PREDICT  0x010u /* -n */
#define CLI_USE_PROMPT   0x020u /* -p */
#define CLI_USE_CHAT     0x040u /* -sys --chat-template */
#define CLI_USE_CHATFLAG 0x080u /* --chat */
#define CLI_USE_CACHE    0x100u /* --conversation-cache-mib/-slots */
#define CLI_USE_FILE     0x200u /* -f */
#define CLI_USE_SAVE     0x2000u /* --conversation-save(-mib, -days),
                                    --conversation-cache-min-free-mib */

struct sched_params;
/* The conversation cache's options into a scheduler's parameters:
 * cache_mib, cache_slots, and the save directory and memory floor. */
void cli_opts_sched_cache(const cli_opts *o, struct sched_params *sp);

/* Sets uses to every group; each command narrows it before parsing. */
void cli_opts_init(cli_opts *o);
/* Try to consume argv[*i] (and its value).  Returns 1 if consumed, 0 if not
 * an option of this set, -1 on a bad value (message printed). */
int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, int *i);
/* Parse a whole command line of shared options: returns -1 to go on, or
 * the exit status to return (0 after --help, 2 on a bad or unknown option). */
int cli_opts_parse_all(cli_opts *o, const char *cmd, int argc, char **argv,
                       void (*usage)(FILE *f));
/* Checks that need every option: --batch-groups divides --batch; -sys
 * without --chat in a command that has --chat; --devices with --backend
 * cpu.  Returns 0, or -1 with a message (cli_opts_parse_all calls it; front
 * ends that parse option by option call it after their loop). */
int cli_opts_check(const cli_opts *o, const char *cmd);
/* Warnings that need the open engine: -c above the model's trained
 * context, --devices when the engine ended up on the CPU. */
void cli_opts_warn_opened(const cli_opts *o, const char *cmd, const strata_engine *e);
/* The help text for the shared options of the groups in uses. */
void cli_opts_help(FILE *f, unsigned uses);
/* Fill model_path with the demo model's cache path if -m was not given.
 * Returns 0, or -1 with a message when there is none. */
int cli_opts_default_model(cli_opts *o, const char *cmd);
/* The file name of the demo model (SmolLM2-135M-Instruct, Q4_1). */
#define CLI_DEMO_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"
/* The front ends' defaults for the demo model, where the user gave none:
 * --kv f16 and --temp 0, and float activations on the CPU (on the card:
 * k8v4; options.c says why).  At 135M parameters the model loses the thread
 * when both K and V are quantized (k8v4) and when it samples; the engine's
 * defaults (k8v4, 0.8) stay for the models they are meant for.  Returns 1
 * when it changed something. */
int cli_opts_demo_defaults(cli_opts *o);
/* A progress bar on stderr for weight loading. */
void cli_progress(uint64_t done, uint64_t total, void *user);

#endif
