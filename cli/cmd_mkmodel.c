/* cmd_mkmodel.c: `strata-cli mkmodel`, a random-weight model of any shape
 * (the library part is model/make/mkmodel.c; doc/mkmodel.md has examples). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/make/mkmodel.h"
#include "model/make/recipe.h"
#include "model/quant.h"

static void mkmodel_usage(FILE *f)
{
    fprintf(f,
        "usage: strata-cli mkmodel --arch ARCH --layers L --dim D --heads H --kv-heads K\n"
        "                          [--head-dim HD] --ff F (--type T | --ftype R) -o OUT.gguf\n"
        "                          [options]\n"
        "\n"
        "Write a model with random weights (seeded Gaussian, quantized to T) and a small\n"
        "real byte-level BPE vocabulary with ChatML special tokens.\n"
        "\n"
        "  --arch ARCH          llama | qwen2 | qwen3 | qwen3moe | gemma3\n"
        "  --layers L           number of blocks\n"
        "  --dim D              embedding width (n_embd)\n"
        "  --heads H            query heads\n"
        "  --kv-heads K         key/value heads (H a multiple of K; default H)\n"
        "  --head-dim HD        head width (default D/H; written as key/value_length;\n"
        "                       the k8v4 KV cache wants a multiple of 32)\n"
        "  --ff F               dense FFN width (qwen3moe: only the metadata value)\n"
        "  --experts E --experts-used U --ff-exp FE\n"
        "                       qwen3moe: experts, top-k, per-expert FFN width\n"
        "  --vocab V            vocabulary size, >= %d (default %d): 3 special tokens,\n"
        "                       256 byte tokens, merges learned from a built-in text,\n"
        "                       then padding merges of token pairs up to V\n"
        "  --ctx C              context_length (default 4096)\n"
        "  --rope-base B        RoPE base (default 10000 llama, 1e6 qwen, gemma3)\n"
        "  --eps E              RMSNorm epsilon (default 1e-5 llama, 1e-6 qwen, gemma3)\n"
        "  --window W           gemma3: sliding window of 5 layers in 6 (default: none,\n"
        "                       every layer global; the real models use 512 or 1024)\n"
        "  --type T             weight type: f32 f16 q8_0 q4_0 q2_0 iq3_xxs (any type with a\n"
        "                       quantizer), or a type strata only decodes (q4_1 q5_0 q5_1\n"
        "                       iq4_nl q2_k q3_k q4_k q5_k q6_k iq2_xxs iq2_xs iq2_s iq3_s\n"
        "                       iq4_xs): random blocks scaled to the weight's spread;\n"
        "                       matrices whose rows are not a multiple of T's block fall\n"
        "                       back to q8_0 (or f32) and are listed\n"
        "  --ftype R            instead of --type: recipe R (iq3_xxs iq2_xxs iq2_s q2_0\n"
        "                       q2_k q3_k_m q4_k_m) gives each tensor its type as\n"
        "                       `quantize` without an imatrix would (doc/quant.md)\n"
        "  --tied               no output.weight: the logits reuse token_embd\n"
        "  --pre NAME           tokenizer.ggml.pre (default smollm for llama, qwen2 for qwen)\n"
        "  --seed S             random seed (default 1); same arguments -> same bytes\n"
        "  --threads N          quantizer threads (default: all CPUs; no effect on the bytes)\n"
        "  --block-pool N       fast mode for big models: quantize N Gaussian blocks per\n"
        "                       weight scale, fill the matrices with seeded random picks\n"
        "                       from them (default 0: quantize every weight)\n"
        "  -o, --output FILE    the GGUF to write (atomically)\n"
        "  -q, --quiet          no progress on stderr\n"
        "\n"
        "8B-class dense:  --arch llama --layers 32 --dim 4096 --heads 32 --kv-heads 8\n"
        "                 --ff 14336 --vocab 128256 --rope-base 500000 --type iq3_xxs\n"
        "                 --block-pool 16384\n"
        "30B-A3B-class:   --arch qwen3moe --layers 48 --dim 2048 --heads 32 --kv-heads 4\n"
        "                 --head-dim 128 --experts 128 --experts-used 8 --ff-exp 768\n"
        "                 --ff 6144 --vocab 151936 --type iq3_xxs --block-pool 16384\n",
        MKMODEL_MIN_VOCAB, MKMODEL_DEFAULT_VOCAB);
}

/* Whole-string integer in [lo, hi]; 0 on success. */
static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) {
        fprintf(stderr, "strata-cli mkmodel: %s '%s' is not an integer in %lld..%lld\n", opt, s,
                lo, hi);
        return -1;
    }
    *v = x;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *v)
{
    char *end;
    errno = 0;
    float x = strtof(s, &end);
    if (errno || end == s || *end || !(x > 0)) {
        fprintf(stderr, "strata-cli mkmodel: %s '%s' is not a positive number\n", opt, s);
        return -1;
    }
    *v = x;
    return 0;
}

int cmd_mkmodel(int argc, char **argv)
{
    mkmodel_params p = {0};
    p.type = -1;
    p.seed = 1;
    p.log = stderr;
    const char *out = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            mkmodel_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied")) {
            p.tied = true;
            continue;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            p.log = NULL;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "strata-cli mkmodel: %s needs a value (or is unknown; see --help)\n",
                    a);
            return 2;
        }
        const char *val = argv[++i];
        long long v = 0;
        int bad = 0;
        struct { const char *name; int *dst; long long lo; } ints[] = {
            {"--layers", &p.n_layer, 1},     {"--dim", &p.n_embd, 1},
            {"--heads", &p.n_head, 1},       {"--kv-heads", &p.n_head_kv, 1},
            {"--head-dim", &p.head_dim, 2},  {"--ff", &p.n_ff, 1},
            {"--experts", &p.n_expert, 1},   {"--experts-used", &p.n_expert_used, 1},
            {"--ff-exp", &p.n_ff_exp, 1},    {"--vocab", &p.n_vocab, 1},
            {"--ctx", &p.n_ctx, 1},          {"--threads", &p.n_threads, 1},
            {"--block-pool", &p.block_pool, 0}, {"--window", &p.swa_window, 1},
        };
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].name))
                continue;
            matched = 1;
            bad = parse_int(a, val, ints[k].lo, INT_MAX, &v);
            if (!bad)
                *ints[k].dst = (int)v;
        }
        if (matched) {
            if (bad)
                return 2;
            continue;
        }
        if (!strcmp(a, "--arch")) {
            p.arch = val;
        } else if (!strcmp(a, "--pre")) {
            p.pre = val;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = val;
        } else if (!strcmp(a, "--rope-base")) {
            if (parse_float(a, val, &p.rope_base))
                return 2;
        } else if (!strcmp(a, "--eps")) {
            if (parse_float(a, val, &p.rms_eps))
                return 2;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            p.seed = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-') {
                fprintf(stderr, "strata-cli mkmodel: --seed '%s' is not an unsigned integer\n",
                        val);
                return 2;
            }
        } else if (!strcmp(a, "--type")) {
            const type_traits *tt = type_traits_by_name(val);
            int offs[2];
            if (!tt || (!tt->quant && !(tt->dequant && type_fp16_scales(tt->id, offs)))) {
                fprintf(stderr,
                        "strata-cli mkmodel: --type '%s': %s (use f32, f16, q8_0, q4_0, q2_0, "
                        "iq3_xxs, or a type strata decodes such as q4_k)\n", val,
                        tt ? "strata can neither quantize nor decode it" : "unknown type");
                return 2;
            }
            p.type = tt->id;
        } else if (!strcmp(a, "--ftype")) {
            if (!(p.ftype = recipe_by_name(val))) {
                fprintf(stderr, "strata-cli mkmodel: --ftype '%s' is not a recipe (iq3_xxs "
                                "iq2_xxs iq2_s q2_0 q2_k q3_k_m q4_k_m)\n", val);
                return 2;
            }
        } else {
            fprintf(stderr, "strata-cli mkmodel: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (p.ftype)
        p.type = recipe_base_type(p.ftype); /* --ftype decides every tensor's type */
    const char *missing = !p.arch ? "--arch" : !p.n_layer ? "--layers" : !p.n_embd ? "--dim"
                        : !p.n_head ? "--heads" : p.type < 0 ? "--type or --ftype" : !out ? "-o" : NULL;
    if (missing) {
        fprintf(stderr, "strata-cli mkmodel: %s is required (see --help)\n", missing);
        return 2;
    }
    strata_error err = {0};
    if (mkmodel_check(&p, &err)) {
        fprintf(stderr, "strata-cli %s\n", err.msg);
        return 2;
    }
    int rc = mkmodel_write(&p, out, &err);
    if (rc) {
        fprintf(stderr, "strata-cli %s\n", err.msg);
        return rc == STRATA_E_ARG ? 2 : 1;
    }
    return 0;
}
