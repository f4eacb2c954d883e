/* cmd_run.c: strata-cli run — generate from one prompt, streaming the text
 * to stdout and the rates to stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "engine/generate.h"
#include "cli/frontend.h"
#include "text/tokenizer.h"
#include "cli/options.h"

#define RUN_USES                                                                  \
    (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_SAMPLING | CLI_USE_PREDICT | \
     CLI_USE_PROMPT | CLI_USE_CHAT | CLI_USE_CHATFLAG)

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli run [-m MODEL] -p PROMPT [-n N] [--chat] [options]\n\n"
               "Reads the prompt, then streams the continuation to stdout; prompt and decode\n"
               "rates go to stderr (Ctrl-C stops the answer and still prints them).  --chat\n"
               "wraps the prompt as one user turn of the model's chat format.\n\n");
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
    frontend fe;
    strata_error err = {0};
    if (frontend_open(&fe, &o, &err)) {
        fprintf(stderr, "strata-cli run: %s\n", err.msg);
        return 1;
    }
    tok_ids ids = {0};
    int rc = o.chat ? frontend_chat_first_turn(&fe, o.system, o.prompt, &ids, &err)
                    : frontend_encode_prompt(&fe, o.prompt, &ids, &err);
    gen_stats st;
    if (!rc)
        rc = frontend_answer(&fe, ids.ids, (int)ids.n, o.n_predict, &st, &err);
    if (rc)
        fprintf(stderr, "\nstrata-cli run: %s\n", err.msg);
    else
        frontend_print_stats(&fe, &st, stderr);
    tok_ids_free(&ids);
    frontend_close(&fe);
    return rc ? 1 : 0;
}
