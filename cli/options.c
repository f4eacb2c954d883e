/* options.c: shared engine and sampling options (see options.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "cli/options.h"
#include "sched/scheduler.h"

void cli_opts_init(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ep = strata_params_default();
    o->sp = sampler_defaults();
    o->sp.seed = 0;
    o->n_predict = -1;
    o->uses = ~0u;
    o->cmd = "run";
}

/* The group of each shared option (see CLI_USE_* in options.h). */
typedef struct opt_group {
    const char *name;
    unsigned group;
} opt_group;

static const opt_group opt_groups[] = {
    {"-m", CLI_USE_MODEL}, {"--model", CLI_USE_MODEL},
    {"-c", CLI_USE_CTX}, {"--ctx-size", CLI_USE_CTX}, {"--backend", CLI_USE_ENGINE},
    {"--kv", CLI_USE_ENGINE}, {"--kv-resident", CLI_USE_ENGINE},
    {"--layer-split", CLI_USE_ENGINE}, {"--devices", CLI_USE_ENGINE},
    {"--chunk", CLI_USE_ENGINE}, {"-t", CLI_USE_ENGINE}, {"--threads", CLI_USE_ENGINE},
    {"-v", CLI_USE_VERBOSE}, {"--verbose", CLI_USE_VERBOSE},
    {"--batch", CLI_USE_SLOTS}, {"--slots", CLI_USE_SLOTS}, {"-np", CLI_USE_SLOTS},
    {"--batch-groups", CLI_USE_GROUPS},
    {"--temp", CLI_USE_SAMPLING}, {"--top-k", CLI_USE_SAMPLING}, {"--top-p", CLI_USE_SAMPLING},
    {"--min-p", CLI_USE_SAMPLING}, {"--repeat-penalty", CLI_USE_SAMPLING},
    {"--repeat-last-n", CLI_USE_SAMPLING}, {"-s", CLI_USE_SAMPLING}, {"--seed", CLI_USE_SAMPLING},
    {"-n", CLI_USE_PREDICT}, {"--n-predict", CLI_USE_PREDICT},
    {"-p", CLI_USE_PROMPT}, {"--prompt", CLI_USE_PROMPT},
    {"-sys", CLI_USE_CHAT}, {"--system-prompt", CLI_USE_CHAT}, {"--chat-template", CLI_USE_CHAT},
    {"--chat", CLI_USE_CHATFLAG},
    {"--conversation-cache-mib", CLI_USE_CACHE}, {"--conversation-cache-slots", CLI_USE_CACHE},
    {"-f", CLI_USE_FILE}, {"--file", CLI_USE_FILE},
    {"--conversation-save", CLI_USE_SAVE}, {"--conversation-save-mib", CLI_USE_SAVE},
    {"--conversation-save-days", CLI_USE_SAVE},
    {"--conversation-cache-min-free-mib", CLI_USE_SAVE},
};

static unsigned group_of(const char *a)
{
    for (size_t k = 0; k < sizeof opt_groups / sizeof opt_groups[0]; k++)
        if (!strcmp(a, opt_groups[k].name))
            return opt_groups[k].group;
    return 0;
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

/* A finite number in [lo, hi] (lo excluded when lo_open): NaN and the
 * infinities parse with strtof but mean nothing to a sampler. */
static int to_float(const char *cmd, const char *opt, const char *v, float lo, int lo_open,
                    float hi, float *out)
{
    char *end;
    float x = strtof(v, &end);
    if (!*v || *end || !isfinite(x)) {
        fprintf(stderr, "strata-cli %s: %s '%s' is not a number\n", cmd, opt, v);
        return -1;
    }
    if (x < lo || (lo_open && x == lo) || x > hi) {
        if (hi >= 1e30f)
            fprintf(stderr, "strata-cli %s: %s '%s' must be %s %g\n", cmd, opt, v,
                    lo_open ? "greater than" : "at least", lo);
        else
            fprintf(stderr, "strata-cli %s: %s '%s' must be in %c%g, %g]\n", cmd, opt, v,
                    lo_open ? '(' : '[', lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

/* NUMBER(,NUMBER)*, each >= 0: the engine's own parse accepts a trailing
 * comma ("5,") and would run one stage where the user asked for two. */
static int to_list(const char *cmd, const char *opt, const char *v, int allow_auto)
{
    if (allow_auto && !strcmp(v, "auto"))
        return 1;
    const char *p = v;
    for (;;) {
        const char *d = p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == d || p - d > 9)
            break;
        if (!*p)
            return 1;
        if (*p++ != ',')
            break;
    }
    fprintf(stderr, "strata-cli %s: %s '%s': expected numbers separated by commas%s\n", cmd, opt,
            v, allow_auto ? " or 'auto'" : "");
    return -1;
}

int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    o->cmd = cmd;
    unsigned g = group_of(a);
    if (!g)
        return 0;
    if (!(o->uses & g)) {
        int flag = g == CLI_USE_CHATFLAG || g == CLI_USE_VERBOSE;
        const char *v = !flag && *i + 1 < argc ? argv[*i + 1] : "";
        fprintf(stderr, "strata-cli %s: %s%s%s does nothing in this command (see "
                        "strata-cli %s --help)\n", cmd, a, *v ? " " : "", v, cmd);
        return -1;
    }
#define IS(s) (!strcmp(a, s))
    o->kv_given |= IS("--kv");
    o->temp_given |= IS("--temp");
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
                                       "--conversation-cache-slots", "--batch-groups",
                                       "--conversation-save", "--conversation-save-mib",
                                       "--conversation-save-days",
                                       "--conversation-cache-min-free-mib", NULL};
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
        return to_float(cmd, a, v, 0, 0, 1e30f, &o->sp.temp);
    else if (IS("--top-k"))
        return to_int(cmd, a, v, 0, &o->sp.top_k);
    else if (IS("--top-p"))
        return to_float(cmd, a, v, 0, 0, 1, &o->sp.top_p);
    else if (IS("--min-p"))
        return to_float(cmd, a, v, 0, 0, 1, &o->sp.min_p);
    else if (IS("--repeat-penalty"))
        /* 0 divides the logits by zero, negative flips them: "hihihi" */
        return to_float(cmd, a, v, 0, 1, 1e30f, &o->sp.repeat_penalty);
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
            fprintf(stderr, "strata-cli %s: --kv '%s': expected k8v4r2, k8v4r, k8v4, f16 or default\n",
                    cmd, v);
            return -1;
        }
        o->ep.kv_type = t;
    } else if (IS("--batch") || IS("--slots") || IS("-np"))
        return to_int(cmd, a, v, 1, &o->ep.n_slots);
    else if (IS("--batch-groups"))
        return to_int(cmd, a, v, 1, &o->ep.batch_groups);
    else if (IS("--layer-split")) {
        o->ep.layer_split = v;
        return to_list(cmd, a, v, 1);
    } else if (IS("--devices")) {
        o->ep.devices = v;
        return to_list(cmd, a, v, 0);
    }
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
    else if (IS("--conversation-save"))
        o->conv_save_dir = v;
    else if (IS("--conversation-save-mib"))
        return to_int(cmd, a, v, 0, &o->conv_save_mib);
    else if (IS("--conversation-save-days"))
        return to_int(cmd, a, v, 0, &o->conv_save_days);
    else if (IS("--conversation-cache-min-free-mib"))
        return to_int(cmd, a, v, 0, &o->conv_min_free_mib);
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
    /* run reads the chat options only to wrap the prompt with --chat */
    if ((o->uses & CLI_USE_CHATFLAG) && !o->chat && (o->system || o->chat_template)) {
        fprintf(stderr, "strata-cli %s: %s '%s' needs --chat (without it the prompt is plain "
                        "text)\n", cmd, o->system ? "-sys" : "--chat-template",
                o->system ? o->system : o->chat_template);
        return -1;
    }
    if ((o->conv_save_mib || o->conv_save_days) && !o->conv_save_dir) {
        fprintf(stderr, "strata-cli %s: --conversation-save-%s needs --conversation-save DIR\n",
                cmd, o->conv_save_mib ? "mib" : "days");
        return -1;
    }
    if (o->conv_save_dir && !o->conv_cache_mib) {
        fprintf(stderr, "strata-cli %s: --conversation-save '%s' saves the conversation cache, "
                        "which --conversation-cache-mib 0 turns off\n", cmd, o->conv_save_dir);
        return -1;
    }
    if (o->ep.devices && o->ep.backend == STRATA_BACKEND_CPU) {
        fprintf(stderr, "strata-cli %s: --devices '%s' names CUDA devices, but --backend is cpu\n",
                cmd, o->ep.devices);
        return -1;
    }
    return 0;
}

void cli_opts_warn_opened(const cli_opts *o, const char *cmd, const strata_engine *e)
{
    int train = strata_model(e)->hp.n_ctx_train;
    if (o->ep.n_ctx > 0 && train > 0 && o->ep.n_ctx > train)
        fprintf(stderr, "strata-cli %s: warning: -c %d is above the %d tokens the model was "
                        "trained on; past those its answers degrade\n", cmd, o->ep.n_ctx, train);
    if (o->ep.devices && strata_backend(e) != STRATA_BACKEND_CUDA)
        fprintf(stderr, "strata-cli %s: warning: --devices '%s' does nothing on the CPU "
                        "backend\n", cmd, o->ep.devices);
}

/* The help lines of each group, in the order printed. */
typedef struct opt_help {
    unsigned group;
    const char *text;
} opt_help;

static const opt_help opt_help_lines[] = {
    {CLI_USE_MODEL,
     "  -m, --model FILE        GGUF model (default: the demo model, `make model`)\n"},
    {CLI_USE_CTX,
     "  -c, --ctx-size N        context per conversation (default: min(model, 4096))\n"},
    {CLI_USE_PROMPT, "  -p, --prompt TEXT       the prompt\n"},
    {CLI_USE_FILE, "  -f, --file TEXT         the text (UTF-8)\n"},
    {CLI_USE_PREDICT,
     "  -n, --n-predict N       tokens to generate at most (default -1: until a stop\n"
     "                          token or the context is full)\n"},
    {CLI_USE_ENGINE,
     "  --backend auto|cpu|cuda (default auto: CUDA when a usable card exists)\n"
     "  --kv k8v4r2|k8v4|k8v4r|f16  KV cache format (default k8v4r2: k8v4's bytes,\n"
     "                          rotated, K minus its bias, V in IQ4_NL levels,\n"
     "                          closest to f16; k8v4 where the head dim is not a\n"
     "                          power of two; k8v4: K Q8_0, V Q4_0; k8v4r: k8v4\n"
     "                          after a Hadamard rotation per head; the demo model:\n"
     "                          k8v4 on a card, f16 on the CPU)\n"
     "  --kv-resident TOKENS    KV pool capacity per stage (default ctx x slots)\n"},
    {CLI_USE_SLOTS,
     "  --batch N, --slots N, -np N  conversations decoding together (default 1)\n"},
    {CLI_USE_GROUPS,
     "  --batch-groups G        with --layer-split: a decode step's slots flow through\n"
     "                          the stages as a pipeline of G groups (stage k works on\n"
     "                          one group while stage k+1 works on another); G divides\n"
     "                          --batch (default 1: off)\n"},
    {CLI_USE_ENGINE,
     "  --layer-split L1,L2,..|auto  first layer of each stage after the first; auto:\n"
     "                          one stage per --devices entry, weight bytes in proportion\n"
     "                          to each card's free memory\n"
     "  --devices D0,D1,..      CUDA device of each stage (default all 0)\n"
     "  --chunk N               prefill chunk in tokens (default 256)\n"
     "  -t, --threads N         CPU threads (default: all cores)\n"},
    {CLI_USE_VERBOSE,
     "  -v, --verbose           describe the engine (backend, stages, budgets) on stderr\n"},
    {CLI_USE_CACHE,
     "  --conversation-cache-mib MIB  host memory for parked conversations; a finished\n"
     "                          turn's KV is kept there and the next turn of that\n"
     "                          conversation restores it instead of re-reading its\n"
     "                          history (0: off)\n"
     "  --conversation-cache-slots K  most conversations kept (default 64 when the\n"
     "                          cache is on); least recently used go first\n"},
    {CLI_USE_SAVE,
     "  --conversation-cache-min-free-mib N  the cache does not grow while the\n"
     "                          machine's available memory is under N MiB: a new\n"
     "                          conversation evicts older ones or is not kept\n"
     "                          (default 0: no floor)\n"
     "  --conversation-save DIR  also write each kept conversation to DIR (made if\n"
     "                          missing) and load DIR's conversations at start, so a\n"
     "                          follow-up after a restart reads only its new tokens;\n"
     "                          files of another model or KV type are skipped\n"
     "  --conversation-save-mib N  at most N MiB of files in DIR, oldest removed\n"
     "                          first (default 0: no cap)\n"
     "  --conversation-save-days D  remove files older than D days (default 0: keep)\n"},
    {CLI_USE_SAMPLING,
     "sampling:\n"
     "  --temp T                temperature, >= 0 (default 0.8, run and chat on the demo\n"
     "                          model 0; 0 = greedy)\n"
     "  --top-k K               keep the K likeliest tokens, 0 = all (default 40)\n"
     "  --top-p P               nucleus cut, 0..1 (default 0.95; 1 = off)\n"
     "  --min-p P               drop tokens below P x the likeliest's, 0..1 (default 0.05)\n"
     "  --repeat-penalty R      > 0; above 1 pushes recent tokens down (default 1.0 = off)\n"
     "  --repeat-last-n N       tokens the penalty looks back (default 64)\n"
     "  -s, --seed S            random seed (default 0)\n"},
    {CLI_USE_CHAT | CLI_USE_CHATFLAG, "chat format:\n"},
    {CLI_USE_CHATFLAG,
     "  --chat                  wrap the prompt as one user turn of the chat format\n"},
    {CLI_USE_CHAT,
     "  -sys, --system-prompt T system message\n"
     "  --chat-template NAME    chatml, llama3 or gemma (default: from the model)\n"},
};

void cli_opts_help(FILE *f, unsigned uses)
{
    fprintf(f, "model and engine:\n");
    for (size_t k = 0; k < sizeof opt_help_lines / sizeof opt_help_lines[0]; k++)
        if (uses & opt_help_lines[k].group)
            fputs(opt_help_lines[k].text, f);
}

int cli_opts_default_model(cli_opts *o, const char *cmd)
{
    if (o->ep.model_path)
        return 0;
    const char *home = getenv("HOME");
    snprintf(o->model_buf, sizeof o->model_buf, "%s/.cache/strata/" CLI_DEMO_MODEL,
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

int cli_opts_demo_defaults(cli_opts *o)
{
    const char *p = o->ep.model_path;
    if (!p)
        return 0;
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    if (strcmp(base, CLI_DEMO_MODEL) != 0)
        return 0;
    /* The 135M demo model's greedy answers flip with changes of ~1e-2 in its
     * logits ("What is the capital of France?": 0.08 between "The" and "L"
     * at logits near 25).  On the CPU, whose matmuls take 16-bit activation
     * codes (as close to float64 as float activations; int8 codes lose
     * Paris, doc/cpu.md), the f16 cache keeps Paris; on the card, whose
     * matvecs take fp16/int8 activations (logits ~1e-2 from the CPU's), f16
     * lost it and k8v4 kept it (README, "The demo model"). */
    int on_card = o->ep.backend == STRATA_BACKEND_CUDA ||
                  (o->ep.backend == STRATA_BACKEND_AUTO && strata_cuda_available(NULL));
    int want = on_card ? STRATA_KV_K8V4 : STRATA_KV_F16;
    int changed = 0;
    if (!o->kv_given && o->ep.kv_type != want) {
        o->ep.kv_type = want;
        changed = 1;
    }
    if (!o->temp_given && o->sp.temp != 0.0f) {
        o->sp.temp = 0.0f;
        changed = 1;
    }
    return changed;
}

void cli_opts_sched_cache(const cli_opts *o, sched_params *sp)
{
    sp->cache_mib = o->conv_cache_mib;
    sp->cache_slots = o->conv_cache_slots;
    sp->save_dir = o->conv_save_dir;
    sp->save_mib = (size_t)o->conv_save_mib;
    sp->save_days = o->conv_save_days;
    sp->min_free_mib = (size_t)o->conv_min_free_mib;
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
