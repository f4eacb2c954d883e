/* text_file.h: what `perplexity` and `imatrix` share: their --chunks
 * option, a text file read whole, and an engine with one sequence and the
 * text's tokens. */
#ifndef STRATA_CLI_TEXT_FILE_H
#define STRATA_CLI_TEXT_FILE_H

#include <stddef.h>

#include "cli/options.h"
#include "engine/strata.h"
#include "text/tokenizer.h"

/* --chunks N (at most N windows) at argv[*i], as cli_opts_parse reads an
 * option: 1 when it was --chunks with a good N (*max_windows set, *i moved
 * past the value), 0 when argv[*i] is something else, -1 after printing
 * "strata-cli CMD: --chunks needs an integer >= 1". */
int cli_parse_chunks(const char *cmd, int argc, char **argv, int *i, int *max_windows);

/* The whole file, NUL-terminated (*len bytes); NULL with err set. */
char *cli_read_text(const char *path, size_t *len, strata_error *err);

/* The command's text (-f, o->file): read whole and not empty, and the
 * model path defaulted (the text first: a missing file should not cost a
 * model load).  NULL after printing why ("strata-cli CMD: ..."; the
 * command exits 1). */
char *cli_load_text(cli_opts *o, const char *cmd, size_t *len);

/* Open o's engine (a warning line for what it ignored, as every command),
 * one sequence on it, and text's tokens — BOS first when the model's
 * tokenizer adds one (*add_bos says so; a window that starts mid-text gets
 * it written over its first token by the caller).  0, or a nonzero code
 * with err set; whatever was opened is in *e, *seq, *ids for the caller to
 * free either way. */
int cli_open_on_text(cli_opts *o, const char *cmd, const char *text, size_t text_len,
                     strata_engine **e, strata_seq **seq, tok_ids *ids, int *add_bos,
                     strata_error *err);

/* Read window w of ids (ctx tokens from w * ctx) into seq from empty,
 * logits as strata_seq_feed.  With add_bos, bos is written over the
 * window's first token for the feed (as llama.cpp does: that token is
 * context only, never scored) and put back after. */
int cli_feed_window(strata_seq *seq, tok_ids *ids, int w, int ctx, int add_bos, int32_t bos,
                    float *logits, strata_error *err);

#endif
