/* cmd_run.c: strata-cli run — generate from one prompt, streaming the text
 * to stdout and the rates to stderr. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "engine/generate.h"
#include "cli/frontend.h"
#include "text/tokenizer.h"
#include "cli/options.h"
#include "cli/signals.h"

#define RUN_USES                                                                  \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_VERBOSE | CLI_USE_SAMPLING |  \
     CLI_USE_PREDICT | CLI_USE_PROMPT | CLI_USE_CHAT | CLI_USE_CHATFLAG)

/* Ctrl-C ends the answer where it is: generation polls the flag between
 * tokens, and the stats line still comes (as chat's Ctrl-C). */
static void on_sigint(int sig)
{
    (void)sig;
    frontend_interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli run [-m MODEL] -p PROMPT [-n N] [--chat] [options]\n\n"
               "Reads the prompt, then streams the continuation to stdout; prompt and decode\n"
               "rates go to stderr.  Ctrl-C stops the answer and still prints the rates (exit\n"
               "status 130).  --chat wraps the prompt as one user turn of the model's chat\n"
               "format.\n\n");
    cli_opts_help(f, RUN_USES);
}

int cmd_run(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = RUN_USES;
    o.cmd = "run";
    int status = cli_opts_parse_all(&o, "run", argc, argv, usage);
    if (status >= 0)
        return status;
    if (!o.prompt) {
        fprintf(stderr, "strata-cli run: no prompt (-p TEXT)\n");
        return 2;
    }
    if (cli_opts_default_model(&o, "run"))
        return 1;
    cli_opts_demo_defaults(&o);
    frontend fe;
    strata_error err = {0};
    /* SIGINT blocked while the engine starts its threads, which inherit the
     * mask: the Ctrl-C then reaches this thread, as in chat. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int open_rc = frontend_open(&fe, &o, &err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (open_rc) {
        fprintf(stderr, "strata-cli run: %s\n", err.msg);
        return err.code == STRATA_E_CANCELLED ? CLI_EXIT_INTERRUPTED : 1;
    }
    /* After loading (unblocked above: a Ctrl-C while the weights loaded
     * ends the program, as before).  Nothing here blocks in a read. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    tok_ids ids = {0};
    int rc = o.chat ? frontend_chat_first_turn(&fe, o.system, o.prompt, &ids, &err)
                    : frontend_encode_prompt(&fe, o.prompt, &ids, &err);
    gen_stats st = {0};
    if (!rc)
        rc = frontend_answer(&fe, ids.ids, (int)ids.n, o.n_predict, &st, &err);
    if (rc)
        fprintf(stderr, "\nstrata-cli run: %s\n", err.msg);
    else
        frontend_print_stats(&fe, &st, stderr);
    tok_ids_free(&ids);
    frontend_close(&fe);
    return rc ? 1 : st.cancelled ? 130 : 0;
}
