/* cmd_perplexity.c: strata-cli perplexity — how well a model predicts a
 * text, as exp(mean negative log-likelihood per token).
 *
 * The method is llama.cpp's `perplexity` tool, so the numbers compare:
 *   - the whole file is tokenized once (bos first when the model asks for
 *     it, and each window's first token is then replaced by bos);
 *   - the tokens are cut into consecutive windows of CTX tokens; a text tail
 *     shorter than a window is not used;
 *   - each window is read into a fresh sequence with the logits of every
 *     position, and only the second half is scored (positions CTX/2 ..
 *     CTX-2 predict tokens CTX/2+1 .. CTX-1), so every scored token has at
 *     least CTX/2 tokens of context: the first tokens of a window, predicted
 *     from almost nothing, would otherwise dominate the figure.
 * The error estimate is the standard error of the mean NLL carried through
 * exp (ppl * stderr(nll)), as llama.cpp prints it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "engine/generate.h"
#include "text/tokenizer.h"
#include "cli/options.h"
#include "cli/text_file.h"

/* No sampling, no prompt, no chat: perplexity only reads logits. */
#define PPL_USES (CLI_USE_MODEL | CLI_USE_CTX | CLI_USE_ENGINE | CLI_USE_FILE)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata-cli perplexity [-m MODEL] -f TEXT [-c CTX] [--chunks N] [options]\n\n"
            "Perplexity of the model over a text file, computed as llama.cpp does: the text's\n"
            "tokens are cut into windows of CTX tokens (default 512; each read into a fresh\n"
            "sequence), and the SECOND HALF of each window is scored, so every scored token\n"
            "sees at least CTX/2 tokens of context.  The text needs at least 2 windows.\n"
            "Prints the running perplexity after each window and a final line\n"
            "  final: ppl=P +/- E tokens=N windows=W ctx=C tok/s=R\n"
            "where E is the standard error, N the tokens scored, R the tokens read per second.\n\n"
            "  -f, --file TEXT         the text (UTF-8)\n"
            "  -c, --ctx-size CTX      the window in tokens (default 512, at least 4)\n"
            "  --chunks N              score at most N windows (default: all)\n"
            "  (--chunk N is the engine's prefill chunk, below)\n\n");
    cli_opts_help(f, PPL_USES & ~(CLI_USE_FILE | CLI_USE_CTX));
}

/* -log softmax(logits)[target], in double: a 49k-entry sum of exponentials
 * in float loses the low digits the comparison of quantizations needs. */
static double token_nll(const float *logits, int n_vocab, int32_t target)
{
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    return log(sum) + mx - logits[target];
}

typedef struct ppl_acc {
    double sum, sum2; /* of the NLL and its square */
    long n;
} ppl_acc;

static double ppl_value(const ppl_acc *a)
{
    return exp(a->sum / a->n);
}

/* ppl * standard error of the mean NLL (first-order error through exp). */
static double ppl_error(const ppl_acc *a)
{
    if (a->n < 2)
        return 0;
    double mean = a->sum / a->n, var = a->sum2 / a->n - mean * mean;
    return ppl_value(a) * sqrt(var > 0 ? var / (a->n - 1) : 0);
}

int cmd_perplexity(int argc, char **argv)
{
    cli_opts o;
    cli_opts_init(&o);
    o.uses = PPL_USES;
    o.cmd = "perplexity";
    int max_windows = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int c = cli_parse_chunks("perplexity", argc, argv, &i, &max_windows);
        if (c < 0)
            return 2;
        if (c > 0)
            continue;
        int r = cli_opts_parse(&o, "perplexity", argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 0) {
            fprintf(stderr, "strata-cli perplexity: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (cli_opts_check(&o, "perplexity"))
        return 2;
    if (!o.file) {
        fprintf(stderr, "strata-cli perplexity: no text (-f FILE)\n");
        return 2;
    }
    const int ctx = o.ep.n_ctx ? o.ep.n_ctx : 512;
    if (ctx < 4) {
        fprintf(stderr, "strata-cli perplexity: -c %d is too small (at least 4)\n", ctx);
        return 2;
    }
    o.ep.n_ctx = ctx;
    size_t text_len = 0;
    char *text = cli_load_text(&o, "perplexity", &text_len);
    if (!text)
        return 1;
    strata_error err = {0};
    if (!o.ep.quiet)
        o.ep.progress = cli_progress;

    strata_engine *e = NULL;
    strata_seq *seq = NULL;
    tok_ids ids = {0};
    float *logits = NULL;
    int add_bos = 0;
    int rc = cli_open_on_text(&o, "perplexity", text, text_len, &e, &seq, &ids, &add_bos, &err);
    const tokenizer *tok = e ? strata_tokenizer(e) : NULL;
    free(text);
    if (rc) {
        fprintf(stderr, "strata-cli perplexity: %s\n", err.msg);
        goto done;
    }
    int n_windows = (int)(ids.n / (size_t)ctx);
    if (n_windows < 2) {
        fprintf(stderr, "strata-cli perplexity: text '%s' has %zu tokens; 2 windows of -c %d need "
                        "at least %d (use a longer text or a smaller -c)\n",
                o.file, ids.n, ctx, 2 * ctx);
        rc = STRATA_E_ARG;
        goto done;
    }
    if (max_windows && max_windows < n_windows)
        n_windows = max_windows;
    const int n_vocab = strata_n_vocab(e);
    logits = malloc(sizeof(float) * (size_t)ctx * (size_t)n_vocab);
    if (!logits) {
        fprintf(stderr, "strata-cli perplexity: out of memory for %d x %d logits\n", ctx, n_vocab);
        rc = STRATA_E_NOMEM;
        goto done;
    }
    const int first = ctx / 2;
    fprintf(stderr, "strata: perplexity over %s: %zu tokens, %d windows of %d, scoring positions "
                    "%d..%d of each%s\n", o.file, ids.n, n_windows, ctx, first + 1, ctx - 1,
            add_bos ? " (bos first)" : "");
    ppl_acc acc = {0, 0, 0};
    double t_feed = 0;
    for (int w = 0; w < n_windows; w++) {
        const int32_t *win = ids.ids + (size_t)w * ctx;
        double t0 = strata_now();
        rc = cli_feed_window(seq, &ids, w, ctx, add_bos, tokenizer_bos(tok), logits, &err);
        t_feed += strata_now() - t0;
        if (rc) {
            fprintf(stderr, "\nstrata-cli perplexity: window %d: %s\n", w + 1, err.msg);
            goto done;
        }
        for (int j = first; j < ctx - 1; j++) {
            double nll = token_nll(logits + (size_t)j * n_vocab, n_vocab, win[j + 1]);
            acc.sum += nll;
            acc.sum2 += nll * nll;
            acc.n++;
        }
        printf("[%d/%d] ppl %.4f +/- %.4f (%ld tokens, %.1f tok/s)\n", w + 1, n_windows,
               ppl_value(&acc), ppl_error(&acc), acc.n, (w + 1) * (double)ctx / t_feed);
        fflush(stdout);
    }
    printf("final: ppl=%.4f +/- %.4f tokens=%ld windows=%d ctx=%d tok/s=%.1f\n", ppl_value(&acc),
           ppl_error(&acc), acc.n, n_windows, ctx, n_windows * (double)ctx / t_feed);
done:
    free(logits);
    tok_ids_free(&ids);
    strata_seq_free(seq);
    strata_close(e);
    return rc ? 1 : 0;
}
