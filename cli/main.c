/* main.c: strata-cli, the command dispatcher.  Each command lives in
 * cli/cmd_NAME.c and parses its own options. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/signals.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"chat", cmd_chat, "interactive multi-turn chat (default: the demo model)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (chat, completions, metrics)"},
    {"run", cmd_run, "generate from a prompt, stream to stdout"},
    {"perplexity", cmd_perplexity, "perplexity of a model over a text file"},
    {"bench", cmd_bench, "benchmarks: kernels, prompt/decode rates, clients"},
    {"inspect", cmd_inspect, "print a GGUF file's header, metadata and tensors"},
    {"imatrix", cmd_imatrix, "importance matrix of a model over a text (for quantize)"},
    {"quantize", cmd_quantize, "requantize a GGUF by a recipe (Q4_K_M, IQ3_XXS, ...) or type"},
    {"mkmodel", cmd_mkmodel, "write a random-weight model of any shape"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli COMMAND [OPTIONS]\n\n"
               "strata: an LLM inference engine (GGUF, IQ3_XXS/Q2_0, CUDA).\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`strata-cli COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv)
{
    cli_install_sigbus();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "strata-cli: unknown command '%s' (see strata-cli --help)\n", argv[1]);
    return 2;
}
