/* cmd_chat.c: strata-cli chat — an interactive conversation in the model's
 * chat format.  The conversation's KV stays in the engine between turns, so
 * a turn reads only its own new tokens.  Works on a terminal and on a pipe. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "frontend.h"
#include "options.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: strata-cli chat [-m MODEL] [options]\n\n"
               "Interactive chat; with no -m, the demo model (`make model`).  Commands:\n"
               "  /reset        forget the conversation\n"
               "  /system TEXT  set the system prompt (starts a new conversation)\n"
               "  /stats        rates, context use and memory budgets\n"
               "  /help         this list\n"
               "  /quit         leave (Ctrl-D too); Ctrl-C stops the current answer\n\n");
    cli_opts_help(f);
}

static void on_sigint(int sig)
{
    (void)sig;
    frontend_interrupted = 1;
}

/* Read one line (without its newline) into a growing buffer.  Returns 1 on a
 * line, 0 on EOF, -1 when interrupted at the prompt. */
static int read_line(char **buf, size_t *cap)
{
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 1024;
            char *nb = realloc(*buf, nc);
            if (!nb)
                return 0;
            *buf = nb;
            *cap = nc;
        }
        errno = 0;
        int c = fgetc(stdin);
        if (c == EOF) {
            if (errno == EINTR) {
                clearerr(stdin);
                return -1;
            }
            (*buf)[n] = '\0';
            return n > 0 ? 1 : 0;
        }
        if (c == '\n')
            break;
        (*buf)[n++] = (char)c;
    }
    (*buf)[n] = '\0';
    return 1;
}

typedef struct chat_state {
    frontend fe;
    const char *system;
    char *system_buf;
    gen_stats last;
    int have_last;
} chat_state;

static void print_stats(chat_state *c)
{
    char d[1024];
    strata_describe(c->fe.e, d, sizeof d);
    printf("%s\n", d);
    if (c->have_last)
        frontend_print_stats(&c->fe, &c->last, stdout);
    else
        printf("no answer yet; context %d/%d\n", strata_seq_len(c->fe.seq), strata_n_ctx(c->fe.e));
}

/* Returns 1 to quit. */
static int command(chat_state *c, const char *line)
{
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
        return 1;
    if (!strcmp(line, "/reset")) {
        strata_seq_reset(c->fe.seq);
        printf("(conversation reset)\n");
    } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
        free(c->system_buf);
        c->system_buf = line[7] ? strdup(line + 8) : NULL;
        c->system = c->system_buf;
        strata_seq_reset(c->fe.seq);
        printf("(system prompt %s; conversation reset)\n", c->system ? "set" : "cleared");
    } else if (!strcmp(line, "/stats")) {
        print_stats(c);
    } else if (!strcmp(line, "/help")) {
        usage(stdout);
    } else {
        printf("unknown command %s (/help lists them)\n", line);
    }
    fflush(stdout);
    return 0;
}

static void turn(chat_state *c, const char *line)
{
    tok_ids ids = {0};
    strata_error err = {0};
    int first = strata_seq_len(c->fe.seq) == 0;
    int rc = first ? frontend_chat_first_turn(&c->fe, c->system, line, &ids, &err)
                   : frontend_chat_next_turn(&c->fe, line, &ids, &err);
    if (!rc)
        rc = frontend_answer(&c->fe, ids.ids, (int)ids.n, c->fe.o->n_predict, &c->last, &err);
    if (rc) {
        fprintf(stderr, "strata-cli chat: %s\n", err.msg);
        if (rc == STRATA_E_LIMIT)
            fprintf(stderr, "(use /reset to start over)\n");
    } else {
        c->have_last = 1;
        if (c->last.cancelled)
            fprintf(stderr, "(answer stopped)\n");
    }
    tok_ids_free(&ids);
}

int cmd_chat(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    int st = cli_opts_parse_all(&o, "chat", argc, argv, usage);
    if (st >= 0)
        return st;
    if (cli_opts_default_model(&o, "chat"))
        return 1;
    o.chat = 1;
    chat_state c;
    memset(&c, 0, sizeof c);
    c.system = o.system;
    strata_error err = {0};
    if (frontend_open(&c.fe, &o, &err)) {
        fprintf(stderr, "strata-cli chat: %s\n", err.msg);
        return 1;
    }
    /* No SA_RESTART: Ctrl-C at the prompt interrupts the read. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    int tty = isatty(0);
    if (tty)
        fprintf(stderr, "strata chat (%s, %s). /help for commands, Ctrl-C stops an answer, "
                        "Ctrl-D or /quit leaves.\n", strata_model(c.fe.e)->arch_name,
                strata_backend(c.fe.e) == STRATA_BACKEND_CUDA ? "cuda" : "cpu");
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        frontend_interrupted = 0;
        int r = read_line(&line, &cap);
        if (r < 0) {
            printf("\n(Ctrl-D or /quit to leave)\n");
            continue;
        }
        if (r == 0)
            break;
        if (!line[0])
            continue;
        if (line[0] == '/') {
            if (command(&c, line))
                break;
            continue;
        }
        turn(&c, line);
    }
    if (tty)
        printf("\n");
    free(line);
    free(c.system_buf);
    frontend_close(&c.fe);
    return 0;
}
