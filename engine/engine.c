/* engine.c: open a model, place its layers on stages, allocate each stage's
 * KV pool, and run sequences through it (see strata.h). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/engine_internal.h"
#include "text/tokenizer.h"

strata_params strata_params_default(void)
{
    strata_params p;
    memset(&p, 0, sizeof p);
    p.backend = STRATA_BACKEND_AUTO;
    p.kv_type = STRATA_KV_DEFAULT;
    p.n_slots = 1;
    return p;
}

static const char *const kv_names[] = {"k8v4", "f16", "k8v4r", "default", "k8v4r2"};
_Static_assert((int)STRATA_KV_K8V4 == (int)KV_K8V4 && (int)STRATA_KV_F16 == (int)KV_F16,
               "the public KV types keep the kernels' values for k8v4 and f16");

const char *strata_kv_name(int kv_type)
{
    if (kv_type < 0 || kv_type >= (int)(sizeof kv_names / sizeof kv_names[0]))
        return NULL;
    return kv_names[kv_type];
}

int strata_kv_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof kv_names / sizeof kv_names[0]); i++)
        if (!strcmp(name, kv_names[i]))
            return i;
    return -1;
}

/* DEFAULT -> k8v4r2 where the head dim takes the rotation (a power of two,
 * 32..KV_ROT_MAX_DIM), k8v4 where it does not.  k8v4r2 keeps k8v4's bytes
 * and is within 0.5 % of the f16 cache's perplexity on both models
 * measured (demo +0.45 %, Qwen2.5-0.5B -0.30 %, where k8v4 costs +0.75 %
 * and +2.60 %: doc/perplexity.md); on the card its store and attention
 * were brought to within the 3 % of k8v4's decode speed it had to meet
 * (doc/engine.md, "The KV cache").  An explicit rotated type the head dim
 * cannot take is an error. */
static int resolve_kv_type(strata_engine *e, strata_error *err)
{
    int hd = e->m->hp.head_dim;
    switch (e->p.kv_type) {
    case STRATA_KV_DEFAULT:
        e->p.kv_type = kv_rot_supported(hd) ? STRATA_KV_K8V4R2 : STRATA_KV_K8V4;
        return 0;
    case STRATA_KV_K8V4R:
    case STRATA_KV_K8V4R2:
        if (!kv_rot_supported(hd))
            return strata_err(err, STRATA_E_UNSUPPORTED, "kv type %s: head_dim %d is not a "
                              "power of two in 32..%d (use --kv k8v4)",
                              strata_kv_name(e->p.kv_type), hd, KV_ROT_MAX_DIM);
        return 0;
    case STRATA_KV_K8V4:
    case STRATA_KV_F16:
        return 0;
    default:
        return strata_err(err, STRATA_E_ARG, "kv_type %d is not an enum strata_kv_type",
                          e->p.kv_type);
    }
}

/* k8v4r2 stores k - R b_k (kv_view.kshift): a model's K bias is the same
 * for every token, and Qwen2.5's reaches 145 on a few channels, which set
 * the Q8_0 scale of every K block around them.  RoPE turns the bias a
 * little with the position (its large channels sit in the slowest pairs),
 * so what is stored is k - R b_k, not the unbiased product; any fixed
 * vector would be as exact, since q.(k - s) moves all of a query's scores
 * by the same q.s.  Computed once here; the CUDA backend uploads it. */
static int make_kshift(strata_engine *e, strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    int has_bias = 0;
    for (int il = 0; il < hp->n_layer; il++)
        has_bias |= e->m->layers[il].bk != NULL;
    if (!engine_kv_shifted(e->p.kv_type) || !has_bias)
        return 0;
    size_t dkv = (size_t)hp->n_head_kv * hp->head_dim;
    e->kshift = calloc((size_t)hp->n_layer * dkv, sizeof(float));
    if (!e->kshift)
        return strata_err(err, STRATA_E_NOMEM, "out of memory for the K shift (%d layers)",
                          hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++) {
        float *s = e->kshift + (size_t)il * dkv;
        if (e->m->layers[il].bk)
            memcpy(s, e->m->layers[il].bk, dkv * sizeof(float));
        cpu_kv_rotate(s, hp->n_head_kv, hp->head_dim);
    }
    return 0;
}

const model *strata_model(const strata_engine *e) { return e->m; }
struct tokenizer *strata_tokenizer(const strata_engine *e) { return e->tok; }
int strata_n_ctx(const strata_engine *e) { return e->n_ctx; }
int strata_n_vocab(const strata_engine *e) { return e->m->hp.n_vocab; }
int strata_backend(const strata_engine *e) { return e->backend; }
int strata_cuda_available(const char **why) { return backend_cuda.available(why); }
int strata_kv_type(const strata_engine *e) { return e->p.kv_type; }
int strata_n_stages(const strata_engine *e) { return e->n_stages; }
int strata_n_slots(const strata_engine *e) { return e->p.n_slots; }
int strata_n_chunk(const strata_engine *e) { return e->p.n_chunk; }
int strata_batch_groups(const strata_engine *e) { return forward_groups(e, 1); }

/* ---- placement ----------------------------------------------------------- */

/* "auto": cut the layers so each stage's share of the weight bytes follows
 * shares[] (its card's free memory; NULL: equal shares).  Boundary s falls
 * at the first layer where the bytes so far reach the first s stages'
 * share of the total. */
static int split_auto(const model *m, int n_stages, const double *shares, int *starts)
{
    double total_share = 0, below = 0;
    for (int i = 0; i < n_stages; i++)
        total_share += shares ? shares[i] : 1.0;
    uint64_t total = model_layer_bytes(m, 0, m->hp.n_layer), acc = 0;
    int s = 1;
    below = shares ? shares[0] : 1.0;
    for (int il = 0; il < m->hp.n_layer && s < n_stages; il++) {
        acc += model_layer_bytes(m, il, il + 1);
        if ((double)acc >= (double)total * below / total_share && il + 1 < m->hp.n_layer) {
            starts[s - 1] = il + 1;
            below += shares ? shares[s] : 1.0;
            s++;
        }
    }
    return s;
}

int parse_layer_split(const char *spec, const model *m, int max_stages, const double *shares,
                      int *starts, strata_error *err)
{
    if (!spec || !*spec)
        return 1;
    if (!strcmp(spec, "auto"))
        return split_auto(m, max_stages, shares, starts);
    int n = 0, prev = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return strata_err(err, STRATA_E_ARG, "--layer-split '%s': expected numbers "
                              "separated by commas or 'auto'", spec);
        if (v <= prev || v >= m->hp.n_layer)
            return strata_err(err, STRATA_E_ARG, "--layer-split '%s': %ld must be greater than "
                              "%d and less than the layer count %d", spec, v, prev, m->hp.n_layer);
        if (n + 1 >= max_stages)
            return strata_err(err, STRATA_E_ARG, "--layer-split '%s': more than %d stages",
                              spec, max_stages);
        starts[n++] = (int)v;
        prev = (int)v;
        p = *end ? end + 1 : end;
    }
    return n + 1;
}

static int parse_devices(const char *spec, int n_stages, int *dev, strata_error *err)
{
    for (int i = 0; i < n_stages; i++)
        dev[i] = 0;
    if (!spec || !*spec)
        return 0;
    int n = 0;
    const char *p = spec;
    while (*p && n < n_stages) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || (*end && *end != ','))
            return strata_err(err, STRATA_E_ARG, "--devices '%s': expected device numbers "
                              "separated by commas", spec);
        dev[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n != n_stages)
        return strata_err(err, STRATA_E_ARG, "--devices '%s' names %d devices for %d stages",
                          spec, n, n_stages);
    return 0;
}

static int count_list(const char *spec)
{
    int n = spec && *spec ? 1 : 0;
    for (const char *p = spec; p && *p; p++)
        n += *p == ',';
    return n;
}

/* ---- open / close -------------------------------------------------------- */

static int choose_backend(strata_engine *e, strata_error *err)
{
    int want = e->p.backend;
    const char *why = NULL;
    int have = backend_cuda.available(&why);
    if (want == STRATA_BACKEND_CUDA && !have)
        return strata_err(err, STRATA_E_UNSUPPORTED, "--backend cuda: %s", why);
    if (e->p.matmul_tap) { /* only the CPU's forward calls the tap */
        if (want == STRATA_BACKEND_CUDA)
            return strata_err(err, STRATA_E_UNSUPPORTED,
                              "--backend cuda: the matmul tap (imatrix) runs on the CPU only");
        want = STRATA_BACKEND_CPU;
    }
    e->be = want != STRATA_BACKEND_CPU && have ? &backend_cuda : &backend_cpu;
    e->backend = e->be->kind;
    if (!e->p.quiet && want == STRATA_BACKEND_AUTO) {
        if (have)
            fprintf(stderr, "strata: backend cuda\n");
        else
            fprintf(stderr, "strata: %s; using the CPU\n", why);
    }
    return 0;
}

/* Each stage's share for --layer-split auto: on the cards, the free memory
 * of its card divided among the stages that share the card (so a card with
 * twice the room takes twice the weights); on the CPU, equal shares. */
static int auto_shares(strata_engine *e, int n, double *shares, strata_error *err)
{
    int dev[64];
    int rc = parse_devices(e->p.devices, n, dev, err);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t free_b = 0;
        int users = 0;
        rc = e->be->device_free(dev[i], &free_b, err);
        for (int j = 0; j < n; j++)
            users += dev[j] == dev[i];
        shares[i] = free_b ? (double)free_b / users : 1.0; /* no devices: equal shares */
    }
    if (!rc && !e->p.quiet && e->be->kind == STRATA_BACKEND_CUDA && n > 1) {
        fprintf(stderr, "strata: --layer-split auto: weight shares by free memory:");
        for (int i = 0; i < n; i++)
            fprintf(stderr, " cuda:%d %.1f GiB", dev[i], shares[i] / (1 << 30));
        fprintf(stderr, "\n");
    }
    return rc;
}

static int make_stages(strata_engine *e, strata_error *err)
{
    const model *m = e->m;
    int starts[64];
    int max_stages = 64;
    double shares[64], *sh = NULL;
    if (e->p.layer_split && !strcmp(e->p.layer_split, "auto")) {
        max_stages = count_list(e->p.devices) > 0 ? count_list(e->p.devices) : 1;
        if (max_stages > 64)
            return strata_err(err, STRATA_E_ARG, "--devices: more than 64 stages");
        int rc = auto_shares(e, max_stages, shares, err);
        if (rc)
            return rc;
        sh = shares;
    }
    int n = parse_layer_split(e->p.layer_split, m, max_stages, sh, starts, err);
    if (n < 0)
        return n;
    e->n_stages = n;
    e->stages = calloc((size_t)n, sizeof *e->stages);
    if (!e->stages)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    int dev[64];
    int rc = parse_devices(e->p.devices, n, dev, err);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        stage *st = &e->stages[i];
        st->index = i;
        st->l0 = i == 0 ? 0 : starts[i - 1];
        st->l1 = i == n - 1 ? m->hp.n_layer : starts[i];
        st->device = dev[i];
    }
    return 0;
}

static int make_kv_pools(strata_engine *e, strata_error *err)
{
    const model_hparams *hp = &e->m->hp;
    /* Default: every slot can hold a whole context; a sequence takes whole
     * pages, so round per slot, not once for all of them.  In 64 bits: the
     * product of two accepted sizes can pass INT_MAX (it used to wrap). */
    int64_t pages = (int64_t)e->p.n_slots * (((int64_t)e->n_ctx + KV_PAGE - 1) / KV_PAGE);
    if (e->p.kv_resident > 0)
        pages = ((int64_t)e->p.kv_resident + KV_PAGE - 1) / KV_PAGE;
    if (pages > INT_MAX)
        return strata_err(err, STRATA_E_ARG, "--batch %d x -c %d needs %lld KV pages per stage, "
                          "more than strata can index (%d); lower them or set --kv-resident",
                          e->p.n_slots, e->n_ctx, (long long)pages, INT_MAX);
    for (int i = 0; i < e->n_stages; i++) {
        stage *st = &e->stages[i];
        kv_allocator a = e->be->kv_allocator(e, st);
        int rc = kv_pool_new(&st->kv, engine_kv_block(e->p.kv_type), st->l1 - st->l0, hp->n_head_kv, hp->head_dim,
                             (int)pages, a.alloc ? &a : NULL, err);
        if (rc)
            return rc;
    }
    return 0;
}

int strata_open(const strata_params *p, strata_engine **out, strata_error *err)
{
    *out = NULL;
    if (!p->model_path)
        return strata_err(err, STRATA_E_ARG, "no model given (-m FILE)");
    strata_engine *e = calloc(1, sizeof *e);
    if (!e)
        return strata_err(err, STRATA_E_NOMEM, "out of memory");
    e->p = *p;
    /* Range checks before anything is sized from these (the model's own
     * context is clamped below, so only an explicit -c can be too big). */
    const char *bad = NULL;
    long long v = 0, max = 0;
    if (p->n_ctx > STRATA_MAX_CTX)
        bad = "-c", v = p->n_ctx, max = STRATA_MAX_CTX;
    else if (p->n_slots > STRATA_MAX_SLOTS)
        bad = "--batch", v = p->n_slots, max = STRATA_MAX_SLOTS;
    else if (p->n_chunk > STRATA_MAX_CHUNK)
        bad = "--chunk", v = p->n_chunk, max = STRATA_MAX_CHUNK;
    if (bad) {
        int rc = strata_err(err, STRATA_E_ARG, "%s %lld is more than strata supports (at most "
                            "%lld)", bad, v, max);
        free(e);
        return rc;
    }
    if (e->p.n_slots < 1)
        e->p.n_slots = 1;
    if (e->p.n_chunk <= 0)
        e->p.n_chunk = 256;
    if (e->p.batch_groups < 0 || (e->p.batch_groups > 1 && e->p.n_slots % e->p.batch_groups)) {
        int rc = strata_err(err, STRATA_E_ARG, "--batch-groups %d: must be at least 1 and divide "
                            "--batch %d (the slots split into equal groups)", e->p.batch_groups,
                            e->p.n_slots);
        free(e);
        return rc;
    }
    int rc = model_load(p->model_path, &e->m, err);
    if (!rc)
        rc = tokenizer_from_gguf(e->m->g, &e->tok, err);
    if (!rc) {
        int train = e->m->hp.n_ctx_train > 0 ? e->m->hp.n_ctx_train : 4096;
        /* the default never exceeds 4096; the check above bounds -c */
        e->n_ctx = p->n_ctx > 0 ? p->n_ctx : (train < 4096 ? train : 4096);
    }
    if (!rc)
        rc = resolve_kv_type(e, err);
    if (!rc)
        rc = make_kshift(e, err);
    if (!rc)
        rc = choose_backend(e, err);
    if (!rc)
        rc = make_stages(e, err);
    e->max_rows = e->p.n_chunk > e->p.n_slots ? e->p.n_chunk : e->p.n_slots;
    if (!rc)
        rc = e->be->init(e, err);
    if (!rc)
        rc = make_kv_pools(e, err);
    if (!rc && e->n_stages > 1) {
        stagepool_hooks hooks;
        memset(&hooks, 0, sizeof hooks);
        e->be->stagepool_hooks(e, &hooks);
        e->pool = stagepool_new(e->n_stages, &hooks, err);
        if (!e->pool)
            rc = err && err->code ? err->code : STRATA_E_NOMEM;
    }
    if (rc) {
        strata_close(e);
        return rc;
    }
    if (!e->p.quiet && e->p.batch_groups > 1) {
        int G = e->p.batch_groups;
        if (e->n_stages > 1)
            fprintf(stderr, "strata: batch groups on: a decode step of %d slots runs through the "
                            "%d stages as a pipeline of %d groups of %d\n", e->p.n_slots,
                    e->n_stages, G, e->p.n_slots / G);
        else
            fprintf(stderr, "strata: --batch-groups %d has no effect with one stage "
                            "(add --layer-split)\n", G);
    }
    *out = e;
    return 0;
}

void strata_close(strata_engine *e)
{
    if (!e)
        return;
    stagepool_free(e->pool);
    for (int i = 0; e->stages && i < e->n_stages; i++)
        kv_pool_free(e->stages[i].kv);
    if (e->be)
        e->be->free(e);
    free(e->stages);
    tokenizer_free(e->tok);
    model_free(e->m);
    free(e->kshift);
    free(e);
}

void strata_describe(const strata_engine *e, char *buf, size_t cap)
{
    const model_hparams *hp = &e->m->hp;
    size_t n = (size_t)snprintf(buf, cap, "%s %s, %d layers, %.1f MiB weights; backend %s; "
                                "ctx %d per sequence, %d slot(s); KV %s, %d pages of %d tokens "
                                "per stage (%.1f MiB per stage); stages:",
                                e->m->arch_name, hp->n_expert ? "MoE" : "dense", hp->n_layer,
                                (double)e->m->weight_bytes / 1048576.0,
                                e->be->name, e->n_ctx,
                                e->p.n_slots, strata_kv_name(e->p.kv_type),
                                e->stages[0].kv->n_pages, KV_PAGE,
                                (double)kv_page_bytes(e->stages[0].kv) *
                                    e->stages[0].kv->n_pages / 1048576.0);
    for (int i = 0; i < e->n_stages && n < cap; i++) {
        const stage *st = &e->stages[i];
        if (e->be->kind == STRATA_BACKEND_CUDA)
            n += (size_t)snprintf(buf + n, cap - n, " [%d: layers %d-%d on cuda:%d]", i, st->l0,
                                  st->l1 - 1, st->device);
        else
            n += (size_t)snprintf(buf + n, cap - n, " [%d: layers %d-%d]", i, st->l0, st->l1 - 1);
    }
    if (forward_groups(e, 1) > 1 && n < cap)
        snprintf(buf + n, cap - n, "; decode in %d pipelined batch groups", forward_groups(e, 1));
}
