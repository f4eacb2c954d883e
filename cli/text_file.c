/* text_file.c: see text_file.h. */
#include "cli/text_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_chunks(const char *cmd, int argc, char **argv, int *i, int *max_windows)
{
    if (strcmp(argv[*i], "--chunks"))
        return 0;
    char *end = NULL;
    long v = *i + 1 < argc ? strtol(argv[*i + 1], &end, 10) : 0;
    if (*i + 1 >= argc || !*argv[*i + 1] || *end || v < 1 || v > 1 << 30) {
        fprintf(stderr, "strata-cli %s: --chunks needs an integer >= 1\n", cmd);
        return -1;
    }
    *max_windows = (int)v;
    (*i)++;
    return 1;
}

char *cli_read_text(const char *path, size_t *len, strata_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        strata_err(err, STRATA_E_IO, "cannot open text '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            strata_err(err, STRATA_E_NOMEM, "out of memory reading '%s'", path);
            fclose(f);
            return NULL;
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        strata_err(err, STRATA_E_IO, "cannot read text '%s'", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *cli_load_text(cli_opts *o, const char *cmd, size_t *len)
{
    strata_error err = {0};
    char *text = cli_read_text(o->file, len, &err);
    if (!text) {
        fprintf(stderr, "strata-cli %s: %s\n", cmd, err.msg);
        return NULL;
    }
    if (*len == 0) {
        fprintf(stderr, "strata-cli %s: text '%s' is empty\n", cmd, o->file);
        free(text);
        return NULL;
    }
    if (cli_opts_default_model(o, cmd)) {
        free(text);
        return NULL;
    }
    return text;
}

int cli_open_on_text(cli_opts *o, const char *cmd, const char *text, size_t text_len,
                     strata_engine **e, strata_seq **seq, tok_ids *ids, int *add_bos,
                     strata_error *err)
{
    *add_bos = 0;
    int rc = strata_open(&o->ep, e, err);
    if (rc)
        return rc;
    cli_opts_warn_opened(o, cmd, *e);
    *seq = strata_seq_new(*e, err);
    if (!*seq)
        return err->code;
    const tokenizer *tok = strata_tokenizer(*e);
    *add_bos = tokenizer_add_bos(tok) && tokenizer_bos(tok) >= 0;
    return tokenizer_encode(tok, text, text_len, *add_bos ? TOK_ENCODE_ADD_BOS : 0, ids, err);
}

int cli_feed_window(strata_seq *seq, tok_ids *ids, int w, int ctx, int add_bos, int32_t bos,
                    float *logits, strata_error *err)
{
    int32_t *win = ids->ids + (size_t)w * ctx;
    const int32_t saved = win[0];
    if (add_bos)
        win[0] = bos;
    strata_seq_reset(seq);
    const int rc = strata_seq_feed(seq, win, ctx, NULL, logits, err);
    win[0] = saved;
    return rc;
}
