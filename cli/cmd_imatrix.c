/* cmd_imatrix.c: strata-cli imatrix — the importance matrix of a model over
 * a text, for `quantize --imatrix`.
 *
 * The text is read as `perplexity` reads it (tokenized once, bos first when
 * the model asks for it, cut into windows of CTX tokens, each window's
 * first token replaced by bos and read into a fresh sequence), and the
 * engine's matmul tap hands every weight product's input rows to the
 * collector (model/make/imatrix.c), which keeps per weight and per input
 * column the sum of squares and the number of rows: MoE experts each get
 * their own, from the rows routed to them.  The file holds the means. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/text_file.h"
#include "engine/generate.h"
#include "engine/strata.h"
#include "model/make/imatrix.h"
#include "text/tokenizer.h"

#define IMATRIX_USES (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_FILE)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata-cli imatrix [-m MODEL] -f TEXT -o FILE [-c CTX] [--chunks N] [options]\n\n"
            "The importance matrix of the model over a text: for every weight matrix of the\n"
            "layers, the mean square of each input column's activation (MoE: per expert,\n"
            "over the tokens routed to it).  The text is cut into windows of CTX tokens as\n"
            "perplexity does (each read into a fresh sequence, bos first); every token of\n"
            "every window counts.  `strata-cli quantize --imatrix FILE` reads the result.\n"
            "Runs on the CPU (--backend cuda is refused).\n\n"
            "  -f, --file TEXT         the text (UTF-8)\n"
            "  -o, --output FILE       the imatrix file to write (GGUF, doc/quant.md)\n"
            "  -c, --ctx-size CTX      the window in tokens (default 512, at least 2)\n"
            "  --chunks N              read at most N windows (default: all)\n\n");
    cli_opts_help(f, IMATRIX_USES & ~(CLI_USE_FILE | CLI_USE_CTX));
}

static void tap(void *user, const char *weight, int expert, int n_mat, const float *x, int n,
                int64_t cols)
{
    imatrix_add(user, weight, expert, n_mat, x, n, cols);
}

int cmd_imatrix(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = IMATRIX_USES;
    o.cmd = "imatrix";
    int max_windows = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int c = cli_parse_chunks("imatrix", argc, argv, &i, &max_windows);
        if (c < 0)
            return 2;
        if (c > 0)
            continue;
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "strata-cli imatrix: %s needs a value\n", argv[i]);
                return 2;
            }
            out = argv[++i];
            continue;
        }
        int r = cli_opts_parse(&o, "imatrix", argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 0) {
            fprintf(stderr, "strata-cli imatrix: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (cli_opts_check(&o, "imatrix"))
        return 2;
    if (!o.file || !out) {
        fprintf(stderr, "strata-cli imatrix: %s\n", !o.file ? "no text (-f FILE)" : "no output (-o FILE)");
        return 2;
    }
    const int ctx = o.ep.n_ctx ? o.ep.n_ctx : 512;
    if (ctx < 2) {
        fprintf(stderr, "strata-cli imatrix: -c %d is too small (at least 2)\n", ctx);
        return 2;
    }
    if (o.ep.backend == STRATA_BACKEND_CUDA) {
        fprintf(stderr, "strata-cli imatrix: --backend cuda: the importance matrix is collected "
                        "on the CPU only\n");
        return 2;
    }
    o.ep.backend = STRATA_BACKEND_CPU;
    o.ep.n_ctx = ctx;
    size_t text_len = 0;
    char *text = cli_load_text(&o, "imatrix", &text_len);
    if (!text)
        return 1;
    strata_error err = {0};
    if (!o.ep.quiet)
        o.ep.progress = cli_progress;
    imatrix *im = imatrix_new();
    o.ep.matmul_tap = tap;
    o.ep.matmul_tap_user = im;

    strata_engine *e = NULL;
    strata_seq *seq = NULL;
    tok_ids ids = {0};
    int add_bos = 0, rc;
    if (!im)
        rc = strata_err(&err, STRATA_E_NOMEM, "out of memory");
    else
        rc = cli_open_on_text(&o, "imatrix", text, text_len, &e, &seq, &ids, &add_bos, &err);
    const tokenizer *tok = e ? strata_tokenizer(e) : NULL;
    free(text);
    if (rc) {
        fprintf(stderr, "strata-cli imatrix: %s\n", err.msg);
        goto done;
    }
    int n_windows = (int)(ids.n / (size_t)ctx);
    if (n_windows < 1) {
        fprintf(stderr, "strata-cli imatrix: text '%s' has %zu tokens, less than one window of "
                        "-c %d\n", o.file, ids.n, ctx);
        rc = STRATA_E_ARG;
        goto done;
    }
    if (max_windows && max_windows < n_windows)
        n_windows = max_windows;
    fprintf(stderr, "strata: imatrix over %s: %zu tokens, %d windows of %d%s\n", o.file, ids.n,
            n_windows, ctx, add_bos ? " (bos first)" : "");
    const double t0 = strata_now();
    for (int w = 0; w < n_windows; w++) {
        rc = cli_feed_window(seq, &ids, w, ctx, add_bos, tokenizer_bos(tok), NULL, &err);
        if (!rc)
            rc = imatrix_status(im, &err);
        if (rc) {
            fprintf(stderr, "\nstrata-cli imatrix: window %d: %s\n", w + 1, err.msg);
            goto done;
        }
        const double dt = strata_now() - t0;
        fprintf(stderr, "\r[%d/%d] %d tokens, %.1f tok/s, %d weights", w + 1, n_windows,
                (w + 1) * ctx, (w + 1) * (double)ctx / dt, imatrix_count(im));
    }
    fprintf(stderr, "\n");
    if ((rc = imatrix_write(im, out, o.file, n_windows, ctx, &err))) {
        fprintf(stderr, "strata-cli imatrix: %s\n", err.msg);
        goto done;
    }
    printf("imatrix: %d weights, %d windows of %d tokens (%d tokens) from %s -> %s\n",
           imatrix_count(im), n_windows, ctx, n_windows * ctx, o.file, out);
done:
    tok_ids_free(&ids);
    strata_seq_free(seq);
    strata_close(e);
    imatrix_free(im);
    return rc ? 1 : 0;
}
