/* options.c: shared engine and sampling options (see options.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "cli/options.h"

void cli_opts_init(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ep = strata_params_default();
    o->sp = sampler_defaults();
    o->sp.seed = 0;
    o->n_predict = -1;
}

static int need(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "strata-cli %s: option %s needs a value\n", cmd, argv[*i]);
        return 0;
    }
    return 1;
}

static int to_int(const char *cmd, const char *opt, const char *v, int lo, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > 1 << 30) {
        fprintf(stderr, "strata-cli %s: %s '%s' is not an integer >= %d\n", cmd, opt, v, lo);
        return -1;
    }
    *out = (int)x;
    return 1;
}

static int to_float(const char *cmd, const char *opt, const char *v, float *out)
{
    char *end;
    float x = strtof(v, &end);
    if (!*v || *end) {
        fprintf(stderr, "strata-cli %s: %s '%s' is not a number\n", cmd, opt, v);
        return -1;
    }
    *out = x;
    return 1;
}

int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
#define IS(s) (!strcmp(a, s))
    if (IS("--chat")) {
        o->chat = 1;
        return 1;
    }
    if (IS("-v") || IS("--verbose")) {
        o->verbose = 1;
        return 1;
    }
    static const char *with_value[] = {"-m", "--model", "-p", "--prompt", "-f", "--file", "-n",
                                       "--n-predict", "-c", "--ctx-size", "--temp", "--top-k",
                                       "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
                                       "-s", "--seed", "-sys", "--system-prompt", "--chat-template",
                                       "--backend", "--kv", "--batch", "--slots", "-np",
                                       "--layer-split", "--devices", "--kv-resident", "-t",
                                       "--threads", "--chunk", "--conversation-cache-mib",
                                       "--conversation-cache-slots", "--batch-groups", NULL};
    int known = 0;
    for (int k = 0; with_value[k]; k++)
        known |= IS(with_value[k]);
    if (!known)
        return 0;
    if (!need(cmd, argc, argv, i))
        return -1;
    const char *v = argv[++*i];
    if (IS("-m") || IS("--model"))
        o->ep.model_path = v;
    else if (IS("-p") || IS("--prompt"))
        o->prompt = v;
    else if (IS("-f") || IS("--file"))
        o->file = v;
    else if (IS("-sys") || IS("--system-prompt"))
        o->system = v;
    else if (IS("--chat-template"))
        o->chat_template = v;
    else if (IS("-n") || IS("--n-predict"))
        return to_int(cmd, a, v, -1, &o->n_predict);
    else if (IS("-c") || IS("--ctx-size"))
        return to_int(cmd, a, v, 1, &o->ep.n_ctx);
    else if (IS("--temp"))
        return to_float(cmd, a, v, &o->sp.temp);
    else if (IS("--top-k"))
        return to_int(cmd, a, v, 0, &o->sp.top_k);
    else if (IS("--top-p"))
        return to_float(cmd, a, v, &o->sp.top_p);
    else if (IS("--min-p"))
        return to_float(cmd, a, v, &o->sp.min_p);
    else if (IS("--repeat-penalty"))
        return to_float(cmd, a, v, &o->sp.repeat_penalty);
    else if (IS("--repeat-last-n"))
        return to_int(cmd, a, v, 0, &o->sp.repeat_last_n);
    else if (IS("-s") || IS("--seed")) {
        int s;
        int rc = to_int(cmd, a, v, 0, &s);
        o->sp.seed = (uint64_t)s;
        return rc;
    } else if (IS("--backend")) {
        if (!strcmp(v, "auto"))
            o->ep.backend = STRATA_BACKEND_AUTO;
        else if (!strcmp(v, "cpu"))
            o->ep.backend = STRATA_BACKEND_CPU;
        else if (!strcmp(v, "cuda"))
            o->ep.backend = STRATA_BACKEND_CUDA;
        else {
            fprintf(stderr, "strata-cli %s: --backend '%s': expected auto, cpu or cuda\n", cmd, v);
            return -1;
        }
    } else if (IS("--kv")) {
        int t = strata_kv_parse(v);
        if (t < 0) {
            fprintf(stderr, "strata-cli %s: --kv '%s': expected k8v4r, k8v4, f16 or default\n",
                    cmd, v);
            return -1;
        }
        o->ep.kv_type = t;
    } else if (IS("--batch") || IS("--slots") || IS("-np"))
        return to_int(cmd, a, v, 1, &o->ep.n_slots);
    else if (IS("--batch-groups"))
        return to_int(cmd, a, v, 1, &o->ep.batch_groups);
    else if (IS("--layer-split"))
        o->ep.layer_split = v;
    else if (IS("--devices"))
        o->ep.devices = v;
    else if (IS("--kv-resident"))
        return to_int(cmd, a, v, 1, &o->ep.kv_resident);
    else if (IS("-t") || IS("--threads"))
        return to_int(cmd, a, v, 1, &o->ep.n_threads);
    else if (IS("--chunk"))
        return to_int(cmd, a, v, 1, &o->ep.n_chunk);
    else if (IS("--conversation-cache-mib")) {
        int mib;
        int rc = to_int(cmd, a, v, 0, &mib);
        o->conv_cache_mib = (size_t)mib;
        return rc;
    } else if (IS("--conversation-cache-slots"))
        return to_int(cmd, a, v, 0, &o->conv_cache_slots);
#undef IS
    return 1;
}

int cli_opts_parse_all(cli_opts *o, const char *cmd, int argc, char **argv,
                       void (*usage)(FILE *f))
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int r = cli_opts_parse(o, cmd, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r == 0) {
            fprintf(stderr, "strata-cli %s: unknown option '%s' (see --help)\n", cmd, argv[i]);
            return 2;
        }
    }
    return cli_opts_check(o, cmd) ? 2 : -1;
}

int cli_opts_check(const cli_opts *o, const char *cmd)
{
    int G = o->ep.batch_groups, N = o->ep.n_slots;
    if (G > 1 && (N < 1 || N % G)) {
        fprintf(stderr, "strata-cli %s: --batch-groups %d does not divide --batch %d (the slots "
                        "split into equal groups)\n", cmd, G, N);
        return -1;
    }
    return 0;
}

void cli_opts_help(FILE *f)
{
    fprintf(f,
            "model and engine:\n"
            "  -m, --model FILE        GGUF model (default: the demo model, `make model`)\n"
            "  -c, --ctx-size N        context per conversation (default: min(model, 4096))\n"
            "  -n, --n-predict N       tokens to generate at most (default -1: until a stop\n"
            "                          token or the context is full)\n"
            "  --backend auto|cpu|cuda (default auto: CUDA when a usable card exists)\n"
            "  --kv k8v4r|k8v4|f16     KV cache format (default k8v4r: K Q8_0, V Q4_0 after a\n"
            "                          Hadamard rotation per head; k8v4 without it)\n"
            "  --kv-resident TOKENS    KV pool capacity per stage (default ctx x slots)\n"
            "  --batch N, --slots N    conversations decoding together (default 1)\n"
            "  --batch-groups G        with --layer-split: a decode step's slots flow through\n"
            "                          the stages as a pipeline of G groups (stage k works on\n"
            "                          one group while stage k+1 works on another); G divides\n"
            "                          --batch (default 1: off)\n"
            "  --layer-split L1,L2,..|auto  first layer of each stage after the first; auto:\n"
            "                          one stage per --devices entry, weight bytes in proportion\n"
            "                          to each card's free memory\n"
            "  --devices D0,D1,..      CUDA device of each stage (default all 0)\n"
            "  --chunk N               prefill chunk in tokens (default 256)\n"
            "  -t, --threads N         CPU threads (default: all cores)\n"
            "  --conversation-cache-mib MIB  host memory for parked conversations (default 0:\n"
            "                          off; chat: 256); a finished turn's KV is kept there and\n"
            "                          the next turn of that conversation restores it instead\n"
            "                          of re-reading its history (front ends on the scheduler\n"
            "                          use it: chat, bench --clients)\n"
            "  --conversation-cache-slots K  most conversations kept (default 64 when the\n"
            "                          cache is on); least recently used go first\n"
            "sampling:\n"
            "  --temp T                temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K --top-p P --min-p P  (defaults 40, 0.95, 0.05)\n"
            "  --repeat-penalty R --repeat-last-n N  (defaults 1.0 = off, 64)\n"
            "  -s, --seed S            random seed (default 0)\n"
            "chat format:\n"
            "  -sys, --system-prompt T system message\n"
            "  --chat-template NAME    chatml, llama3 or gemma (default: from the model)\n");
}

int cli_opts_default_model(cli_opts *o, const char *cmd)
{
    if (o->ep.model_path)
        return 0;
    const char *home = getenv("HOME");
    snprintf(o->model_buf, sizeof o->model_buf, "%s/.cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : ".");
    struct stat st;
    if (stat(o->model_buf, &st) != 0) {
        fprintf(stderr, "strata-cli %s: no model given and the demo model is not at %s "
                        "(run `make model`, or pass -m FILE)\n", cmd, o->model_buf);
        return -1;
    }
    o->ep.model_path = o->model_buf;
    return 0;
}

void cli_progress(uint64_t done, uint64_t total, void *user)
{
    (void)user;
    if (!isatty(2))
        return;
    int w = 40, fill = total ? (int)(done * w / total) : w;
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", fill, "########################################",
            w - fill, "", total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fprintf(stderr, "\r%*s\r", w + 20, "");
}
