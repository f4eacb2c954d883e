/* cmd_quantize.c: `strata-cli quantize IN.gguf OUT.gguf NAME`.
 *
 * Parses the options and prints the summary; the work is quantize_file
 * (model/make/quantize.c).  Progress goes to stderr, the summary to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/quant.h"
#include "model/make/imatrix.h"
#include "model/make/quantize.h"
#include "model/make/recipe.h"

#define MAX_OVERRIDES 64

static int usage(FILE *f)
{
    fprintf(f,
            "usage: strata-cli quantize [options] IN.gguf OUT.gguf NAME\n"
            "  NAME: a recipe (llama.cpp's file types: a type per tensor by its role\n"
            "        and layer, see doc/quant.md): iq3_xxs iq2_xxs iq2_s q2_0 q2_k\n"
            "        q3_k_m q4_k_m; or a type, for every weight matrix: q8_0 q4_0 f16\n"
            "        (also bf16, f32) q3_k q4_k q5_k q6_k iq2_xs iq3_s iq4_xs iq4_nl\n"
            "        q5_0 q5_1 (and, with --pure, every recipe name as its type)\n"
            "  --pure                    NAME is a type: every weight matrix gets it\n"
            "  --imatrix FILE            importance matrix (strata-cli imatrix): weights\n"
            "                            each quantizer's error and selects the\n"
            "                            recipes' with-imatrix rows\n"
            "  --keep-type PATTERN=TYPE  tensors matching the glob get TYPE\n"
            "                            (e.g. 'blk.*.ffn_down.weight=q8_0'; repeatable)\n"
            "  --embed-type TYPE         token_embd/output type (default: the recipe's;\n"
            "                            q8_0 for a single type)\n"
            "  -t, --threads N           encoder threads (default: one per core)\n"
            "  -q, --quiet               no per-tensor progress\n"
            "Norms and other 1-D tensors stay as they are (F32 with a single type).\n"
            "A tensor whose rows do not fit its type's block (256 for the K/IQ types)\n"
            "falls back: with a recipe as llama.cpp does (IQ types -> IQ4_NL; Q2_0,\n"
            "Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; else F16);\n"
            "with a single type to Q2_0 (IQ3_XXS), Q4_0 (K/IQ types to 4.5 bpw), Q8_0\n"
            "or F16.  The summary lists tensors and bytes per type.\n");
    return 2;
}

/* A type name the quantizer can produce, or -1 with a message. */
static int parse_type(const char *s, const char *what)
{
    const type_traits *t = type_traits_by_name(s);
    if (!t || !t->quant) {
        fprintf(stderr, "quantize: %s '%s' is not a type strata can write "
                        "(iq3_xxs, q2_0, q8_0, q4_0, q5_0, q5_1, iq4_nl, f16, bf16, f32, "
                        "q2_k..q6_k, iq2_xxs, iq2_xs, iq2_s, iq3_s, iq4_xs)\n", what, s);
        return -1;
    }
    return t->id;
}

static void print_summary(const quantize_summary *s, const char *what)
{
    printf("quantized %d tensors, %llu parameters, to %s in %.1f s\n", s->n_tensors,
           (unsigned long long)s->n_params, what, s->seconds);
    printf("  size: %.2f MiB -> %.2f MiB (tensor data)\n", s->bytes_in / 1048576.0,
           s->bytes_out / 1048576.0);
    if (s->n_params)
        printf("  bits per weight: %.3f -> %.3f\n", 8.0 * s->bytes_in / s->n_params,
               8.0 * s->bytes_out / s->n_params);
    printf("  mix:");
    for (int i = 0; i < 64; i++)
        if (s->params_by_type[i])
            printf(" %s %.1f%%", type_name(i), 100.0 * s->params_by_type[i] / s->n_params);
    printf("\n");
    for (int i = 0; i < 64; i++)
        if (s->tensors_by_type[i])
            printf("  type %-8s %4d tensors %12llu bytes (%.2f MiB)\n", type_name(i),
                   s->tensors_by_type[i], (unsigned long long)s->bytes_by_type[i],
                   s->bytes_by_type[i] / 1048576.0);
    if (s->n_weighted)
        printf("  imatrix: %d tensors quantized with importance weights\n", s->n_weighted);
    if (s->n_fallback)
        printf("  fallback: %d tensors %s\n", s->n_fallback, s->fallback);
}

int cmd_quantize(int argc, char **argv)
{
    quantize_override ov[MAX_OVERRIDES];
    char *ov_copy[MAX_OVERRIDES];
    int n_ov = 0, quiet = 0, pure = 0, rc = 2;
    const char *imatrix_path = NULL;
    imatrix *im = NULL;
    quantize_params p = {.embed_type = -1};
    const char *pos[3];
    int n_pos = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--pure")) {
            pure = 1;
        } else if (!strcmp(a, "--imatrix")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "quantize: --imatrix needs a value\n");
                goto out;
            }
            imatrix_path = argv[++i];
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && i + 1 < argc) {
            /* atoi read "abc" as 0 (one thread per core) without a word */
            char *end = NULL;
            const char *v = argv[++i];
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > 4096) {
                fprintf(stderr, "quantize: %s '%s' is not a thread count in 1..4096\n", a, v);
                goto out;
            }
            p.n_threads = (int)n;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads") || !strcmp(a, "--embed-type") ||
                    !strcmp(a, "--keep-type")) && i + 1 >= argc) {
            fprintf(stderr, "quantize: %s needs a value\n", a);
            goto out;
        } else if (!strcmp(a, "--embed-type") && i + 1 < argc) {
            if ((p.embed_type = parse_type(argv[++i], "--embed-type")) < 0)
                goto out;
        } else if (!strcmp(a, "--keep-type") && i + 1 < argc) {
            char *eq = strrchr(argv[++i], '=');
            if (!eq || eq == argv[i] || n_ov == MAX_OVERRIDES) {
                fprintf(stderr, "quantize: --keep-type wants PATTERN=TYPE, got '%s'\n", argv[i]);
                goto out;
            }
            ov_copy[n_ov] = strndup(argv[i], (size_t)(eq - argv[i]));
            ov[n_ov].pattern = ov_copy[n_ov];
            n_ov++;
            if ((ov[n_ov - 1].type = parse_type(eq + 1, "--keep-type")) < 0)
                goto out;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "quantize: unknown option '%s'\n", a);
            usage(stderr);
            goto out;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            usage(stderr);
            goto out;
        }
    }
    if (n_pos != 3) {
        usage(stderr);
        goto out;
    }
    p.recipe = pure ? RECIPE_NONE : recipe_by_name(pos[2]);
    if (!p.recipe && (p.type = parse_type(pos[2], "NAME")) < 0)
        goto out;
    p.overrides = ov;
    p.n_overrides = n_ov;
    p.progress = quiet ? NULL : stderr;

    quantize_summary s;
    strata_error err = {0};
    if (imatrix_path) {
        if (imatrix_load(imatrix_path, &im, &err)) {
            fprintf(stderr, "quantize: %s\n", err.msg);
            rc = 1;
            goto out;
        }
        p.imatrix = imatrix_lookup;
        p.imatrix_ctx = im;
    }
    if (quantize_file(pos[0], pos[1], &p, &s, &err)) {
        fprintf(stderr, "quantize: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    char what[64];
    if (p.recipe)
        snprintf(what, sizeof what, "recipe %s%s", recipe_name(p.recipe),
                 im ? " with imatrix" : "");
    else
        snprintf(what, sizeof what, "%s%s", type_name(p.type), im ? " with imatrix" : "");
    print_summary(&s, what);
    rc = 0;
out:
    imatrix_free(im);
    for (int i = 0; i < n_ov; i++)
        free(ov_copy[i]);
    return rc;
}
