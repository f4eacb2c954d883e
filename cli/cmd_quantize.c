/* cmd_quantize.c: `strata-cli quantize IN.gguf OUT.gguf TYPE`.
 *
 * Parses the options and prints the summary; the work is quantize_file
 * (model/make/quantize.c).  Progress goes to stderr, the summary to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/quant.h"
#include "model/make/quantize.h"

#define MAX_OVERRIDES 64

static int usage(FILE *f)
{
    fprintf(f,
            "usage: strata-cli quantize [options] IN.gguf OUT.gguf TYPE\n"
            "  TYPE: iq3_xxs, q2_0, q8_0, q4_0, f16 (also bf16, f32), or a K/IQ type:\n"
            "        q2_k q3_k q4_k q5_k q6_k iq2_xxs iq2_xs iq2_s iq3_s iq4_xs\n"
            "  --keep-type PATTERN=TYPE  tensors matching the glob get TYPE\n"
            "                            (e.g. 'blk.*.ffn_down.weight=q8_0'; repeatable)\n"
            "  --embed-type TYPE         token_embd/output type (default q8_0)\n"
            "  -t, --threads N           encoder threads (default: one per core)\n"
            "  -q, --quiet               no per-tensor progress\n"
            "Norms and other 1-D tensors stay F32.  A tensor whose rows do not\n"
            "fit TYPE's block (256 for IQ3_XXS and the K/IQ types) falls back to\n"
            "Q2_0 (IQ3_XXS), Q4_0 (K/IQ types to 4.5 bpw), Q8_0 or F16 and\n"
            "is counted in the summary.\n");
    return 2;
}

/* A type name the quantizer can produce, or -1 with a message. */
static int parse_type(const char *s, const char *what)
{
    const type_traits *t = type_traits_by_name(s);
    if (!t || !t->quant) {
        fprintf(stderr, "quantize: %s '%s' is not a type strata can write "
                        "(iq3_xxs, q2_0, q8_0, q4_0, f16, bf16, f32, q2_k..q6_k, iq2_xxs, iq2_xs, "
                        "iq2_s, iq3_s, iq4_xs)\n", what, s);
        return -1;
    }
    return t->id;
}

static void print_summary(const quantize_summary *s, int type)
{
    printf("quantized %d tensors, %llu parameters, to %s in %.1f s\n", s->n_tensors,
           (unsigned long long)s->n_params, type_name(type), s->seconds);
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
    if (s->n_fallback)
        printf("  fallback: %d tensors %s\n", s->n_fallback, s->fallback);
}

int cmd_quantize(int argc, char **argv)
{
    quantize_override ov[MAX_OVERRIDES];
    char *ov_copy[MAX_OVERRIDES];
    int n_ov = 0, quiet = 0, rc = 2;
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
    if ((p.type = parse_type(pos[2], "TYPE")) < 0)
        goto out;
    p.overrides = ov;
    p.n_overrides = n_ov;
    p.progress = quiet ? NULL : stderr;

    quantize_summary s;
    strata_error err = {0};
    if (quantize_file(pos[0], pos[1], &p, &s, &err)) {
        fprintf(stderr, "quantize: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    print_summary(&s, p.type);
    rc = 0;
out:
    for (int i = 0; i < n_ov; i++)
        free(ov_copy[i]);
    return rc;
}
