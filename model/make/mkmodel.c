/* mkmodel.c: random-weight models of any supported shape (see mkmodel.h).
 *
 * Sections: defaults and checks; the tensor plan (names and shapes of
 * doc/formats.md §4.2); the seeded Gaussian; filling and quantizing
 * tensors on a few threads; metadata (§4.1, §5.1); writing.
 *
 * Weight scales.  A matrix {in, out} gets N(0, 1/in): each output of W.x is
 * then O(1) when x is O(1) (what RMSNorm delivers), so activations stay in a
 * sane range through any number of layers and quantization has ordinary
 * data to work on.  token_embd and output get N(0, 4/n_embd): the logits
 * (output . normalised x) come out with a standard deviation near 2, spread
 * enough that greedy decoding has clear winners, tied or not.  Norm weights
 * are 1 + N(0, 0.1^2), biases N(0, 0.2^2), the MoE router N(0, 1/n_embd).
 *
 * Speed.  Drawing and quantizing every weight is exact but slow for IQ3_XXS
 * (ggml's search); --block-pool N quantizes N Gaussian blocks per distinct
 * scale and fills matrices with random picks from them (see pool_get).
 *
 * Memory.  The GGUF writer references tensor data until it writes, so every
 * tensor is held in memory in its final (quantized) form: about the file
 * size (an 8B IQ3_XXS model ~3.5 GB, a 30B-A3B IQ3_XXS ~12 GB), plus one row
 * of floats per thread. */
#include "model/make/mkmodel.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/make/recipe.h"
#include "model/quant.h"

/* ---- defaults and checks ------------------------------------------------ */

static bool is_qwen(const char *arch)
{
    return !strncmp(arch, "qwen", 4);
}

static bool is_moe(const char *arch)
{
    return !strcmp(arch, "qwen3moe");
}

static bool is_gemma3(const char *arch)
{
    return !strcmp(arch, "gemma3");
}

/* Fill in the defaults the header promises. */
static void apply_defaults(mkmodel_params *p)
{
    bool q = p->arch && (is_qwen(p->arch) || is_gemma3(p->arch)); /* 1e6 and 1e-6 */
    if (p->n_head_kv == 0)
        p->n_head_kv = p->n_head;
    if (p->head_dim == 0 && p->n_head > 0)
        p->head_dim = p->n_embd / p->n_head;
    if (p->n_vocab == 0)
        p->n_vocab = MKMODEL_DEFAULT_VOCAB;
    if (p->n_ctx == 0)
        p->n_ctx = 4096;
    if (p->rope_base == 0)
        p->rope_base = q ? 1000000.0f : 10000.0f;
    if (p->rms_eps == 0)
        p->rms_eps = q ? 1e-6f : 1e-5f;
    if (p->arch && is_moe(p->arch) && p->n_ff == 0)
        p->n_ff = p->n_ff_exp * p->n_expert_used;
    if (!p->pre)
        p->pre = p->arch && is_qwen(p->arch) ? "qwen2" : "smollm";
    if (p->n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        p->n_threads = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }
}

/* Upper bound on any one dimension: keeps every size product far from
 * overflow (2^20 * 2^20 * 2^12 < 2^63) and catches typos like --dim 40960000. */
#define DIM_MAX (1 << 20)

static int check_dim(const char *name, int v, int lo, strata_error *err)
{
    if (v < lo || v > DIM_MAX)
        return strata_err(err, STRATA_E_ARG, "mkmodel: %s = %d is outside %d..%d", name, v, lo,
                          DIM_MAX);
    return 0;
}

static int check_params(const mkmodel_params *p, strata_error *err)
{
    int rc;
    if (!p->arch || (strcmp(p->arch, "llama") && strcmp(p->arch, "qwen2") &&
                     strcmp(p->arch, "qwen3") && strcmp(p->arch, "qwen3moe") &&
                     strcmp(p->arch, "gemma3")))
        return strata_err(err, STRATA_E_ARG,
                          "mkmodel: --arch '%s' is not one of llama, qwen2, qwen3, qwen3moe, gemma3",
                          p->arch ? p->arch : "(none)");
    if (p->swa_window < 0 || p->swa_window > DIM_MAX || (p->swa_window && !is_gemma3(p->arch)))
        return strata_err(err, STRATA_E_ARG, "mkmodel: --window %d (gemma3 only, 0..%d)",
                          p->swa_window, DIM_MAX);
    if ((rc = check_dim("--layers", p->n_layer, 1, err)) ||
        (rc = check_dim("--dim", p->n_embd, 1, err)) ||
        (rc = check_dim("--heads", p->n_head, 1, err)) ||
        (rc = check_dim("--kv-heads", p->n_head_kv, 1, err)) ||
        (rc = check_dim("--head-dim", p->head_dim, 2, err)) ||
        (rc = check_dim("--ctx", p->n_ctx, 1, err)))
        return rc;
    if (p->n_head % p->n_head_kv)
        return strata_err(err, STRATA_E_ARG,
                          "mkmodel: --heads %d is not a multiple of --kv-heads %d", p->n_head,
                          p->n_head_kv);
    if (p->head_dim % 2)
        return strata_err(err, STRATA_E_ARG, "mkmodel: head dim %d is odd (RoPE rotates pairs)",
                          p->head_dim);
    if (p->n_vocab < MKMODEL_MIN_VOCAB || p->n_vocab > MKMODEL_MAX_VOCAB)
        return strata_err(err, STRATA_E_ARG,
                          "mkmodel: --vocab %d is outside %d..%d (3 special + 256 byte tokens is "
                          "the minimum)", p->n_vocab, MKMODEL_MIN_VOCAB, MKMODEL_MAX_VOCAB);
    if (p->block_pool < 0 || p->block_pool > (1 << 24))
        return strata_err(err, STRATA_E_ARG, "mkmodel: --block-pool %d is outside 0..%d",
                          p->block_pool, 1 << 24);
    if (!(p->rope_base > 0) || !(p->rms_eps > 0))
        return strata_err(err, STRATA_E_ARG, "mkmodel: --rope-base and --eps must be > 0");
    if (is_moe(p->arch)) {
        if ((rc = check_dim("--experts", p->n_expert, 1, err)) ||
            (rc = check_dim("--experts-used", p->n_expert_used, 1, err)) ||
            (rc = check_dim("--ff-exp", p->n_ff_exp, 1, err)))
            return rc;
        if (p->n_expert_used > p->n_expert)
            return strata_err(err, STRATA_E_ARG, "mkmodel: --experts-used %d > --experts %d",
                              p->n_expert_used, p->n_expert);
        if (p->n_ff < 0 || p->n_ff > DIM_MAX)
            return strata_err(err, STRATA_E_ARG, "mkmodel: --ff %d is outside 0..%d", p->n_ff,
                              DIM_MAX);
    } else {
        if (p->n_expert || p->n_expert_used || p->n_ff_exp)
            return strata_err(err, STRATA_E_ARG,
                              "mkmodel: --experts/--experts-used/--ff-exp need --arch qwen3moe");
        if ((rc = check_dim("--ff", p->n_ff, 1, err)))
            return rc;
    }
    if (p->ftype < 0 || p->ftype >= RECIPE_COUNT)
        return strata_err(err, STRATA_E_ARG, "mkmodel: ftype %d is not a recipe", p->ftype);
    const type_traits *tt = type_traits_get(p->type);
    int offs[2];
    if (!tt || (!tt->quant && !(tt->dequant && type_fp16_scales(tt->id, offs))))
        return strata_err(err, STRATA_E_ARG,
                          "mkmodel: --type %s: strata can neither quantize nor decode it (use "
                          "f32, f16, q8_0, q4_0, q2_0, iq3_xxs, or a type strata decodes such "
                          "as q4_k)", tt ? tt->name : "?");
    return 0;
}

int mkmodel_check(const mkmodel_params *params, strata_error *err)
{
    mkmodel_params p = *params;
    apply_defaults(&p);
    return check_params(&p, err);
}

/* ---- the tensor plan ----------------------------------------------------- */

enum tkind {
    K_MATRIX, /* quantized to p->type (or a fallback) */
    K_EMBED,  /* token_embd / output: a matrix with the logit scale */
    K_ROUTER, /* MoE router: kept F32, as llama.cpp's quantizer keeps it */
    K_NORM,   /* F32, 1 + N(0, 0.1^2) */
    K_BIAS,   /* F32, N(0, 0.2^2) */
};

typedef struct tplan {
    char name[GGUF_MAX_NAME + 1];
    enum tkind kind;
    uint32_t n_dims;
    int64_t ne[3];
    uint32_t type;      /* chosen ggml type */
    void *data;         /* filled by make_tensor */
    uint64_t nbytes;
} tplan;

typedef struct plan {
    tplan *t;
    size_t n, cap;
} plan;

static int plan_add(plan *pl, enum tkind kind, uint32_t n_dims, int64_t ne0, int64_t ne1,
                    int64_t ne2, const char *fmt, int layer)
{
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        tplan *t = realloc(pl->t, cap * sizeof *t);
        if (!t)
            return STRATA_E_NOMEM;
        pl->t = t;
        pl->cap = cap;
    }
    tplan *t = &pl->t[pl->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->kind = kind;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    return 0;
}

/* doc/formats.md §4.2, in the order llama.cpp's converter writes them. */
static int plan_build(const mkmodel_params *p, plan *pl)
{
    const int64_t D = p->n_embd, V = p->n_vocab;
    const int64_t Dq = (int64_t)p->n_head * p->head_dim;
    const int64_t Dkv = (int64_t)p->n_head_kv * p->head_dim;
    const bool qwen2 = !strcmp(p->arch, "qwen2");
    const bool gemma = is_gemma3(p->arch);
    const bool qknorm = !strcmp(p->arch, "qwen3") || is_moe(p->arch) || gemma;
    int rc = 0;
#define ADD(kind, nd, a, b, c, fmt, il) \
    if ((rc = plan_add(pl, kind, nd, a, b, c, fmt, il))) return rc
    ADD(K_EMBED, 2, D, V, 1, "token_embd.weight", 0);
    for (int il = 0; il < p->n_layer; il++) {
        ADD(K_NORM, 1, D, 1, 1, "blk.%d.attn_norm.weight", il);
        ADD(K_MATRIX, 2, D, Dq, 1, "blk.%d.attn_q.weight", il);
        ADD(K_MATRIX, 2, D, Dkv, 1, "blk.%d.attn_k.weight", il);
        ADD(K_MATRIX, 2, D, Dkv, 1, "blk.%d.attn_v.weight", il);
        if (qwen2) {
            ADD(K_BIAS, 1, Dq, 1, 1, "blk.%d.attn_q.bias", il);
            ADD(K_BIAS, 1, Dkv, 1, 1, "blk.%d.attn_k.bias", il);
            ADD(K_BIAS, 1, Dkv, 1, 1, "blk.%d.attn_v.bias", il);
        }
        if (qknorm) {
            ADD(K_NORM, 1, p->head_dim, 1, 1, "blk.%d.attn_q_norm.weight", il);
            ADD(K_NORM, 1, p->head_dim, 1, 1, "blk.%d.attn_k_norm.weight", il);
        }
        ADD(K_MATRIX, 2, Dq, D, 1, "blk.%d.attn_output.weight", il);
        if (gemma)
            ADD(K_NORM, 1, D, 1, 1, "blk.%d.post_attention_norm.weight", il);
        ADD(K_NORM, 1, D, 1, 1, "blk.%d.ffn_norm.weight", il);
        if (is_moe(p->arch)) {
            const int64_t E = p->n_expert, F = p->n_ff_exp;
            ADD(K_ROUTER, 2, D, E, 1, "blk.%d.ffn_gate_inp.weight", il);
            ADD(K_MATRIX, 3, D, F, E, "blk.%d.ffn_gate_exps.weight", il);
            ADD(K_MATRIX, 3, D, F, E, "blk.%d.ffn_up_exps.weight", il);
            ADD(K_MATRIX, 3, F, D, E, "blk.%d.ffn_down_exps.weight", il);
        } else {
            ADD(K_MATRIX, 2, D, p->n_ff, 1, "blk.%d.ffn_gate.weight", il);
            ADD(K_MATRIX, 2, D, p->n_ff, 1, "blk.%d.ffn_up.weight", il);
            ADD(K_MATRIX, 2, p->n_ff, D, 1, "blk.%d.ffn_down.weight", il);
        }
        if (gemma)
            ADD(K_NORM, 1, D, 1, 1, "blk.%d.post_ffw_norm.weight", il);
    }
    ADD(K_NORM, 1, D, 1, 1, "output_norm.weight", 0);
    if (!p->tied)
        ADD(K_EMBED, 2, D, V, 1, "output.weight", 0);
#undef ADD
    return 0;
}

/* The type of one tensor: the requested one when its block divides ne[0];
 * else Q8_0 (32-element blocks divide every real model's rows), else F32. */
static uint32_t pick_type(const mkmodel_params *p, const tplan *t)
{
    if (t->kind == K_NORM || t->kind == K_BIAS || t->kind == K_ROUTER)
        return GGML_TYPE_F32;
    if (p->ftype) { /* the recipe's choice, its row-length fallback included */
        const recipe_model m = {.n_layer = p->n_layer, .n_head = p->n_head,
                                .n_head_kv = p->n_head_kv, .n_expert = p->n_expert,
                                .tied = p->tied};
        const int rt = recipe_type(p->ftype, t->name, t->n_dims, t->ne[0], &m, NULL);
        return rt < 0 ? GGML_TYPE_F32 : (uint32_t)rt;
    }
    const type_traits *tt = type_traits_get(p->type);
    if (t->ne[0] % tt->blck == 0)
        return (uint32_t)p->type;
    if (t->ne[0] % QK8_0 == 0 && type_traits_get(GGML_TYPE_Q8_0)->quant)
        return GGML_TYPE_Q8_0;
    return GGML_TYPE_F32;
}

/* ---- the seeded Gaussian ------------------------------------------------- */

/* splitmix64: a fine mixer and a fine stream for this purpose. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Row r of a tensor has its own stream, seeded from (seed, name, r): the
 * bytes do not depend on how rows are spread over threads, nor on the order
 * of tensors in the file. */
static void fill_row(uint64_t tensor_seed, int64_t row, float *x, int64_t n, float mean,
                     float std)
{
    uint64_t s = tensor_seed ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix64(&s);
    for (int64_t i = 0; i < n; i += 2) {
        /* Box-Muller on two 32-bit uniforms; u1 in (0, 1] so log is finite. */
        uint64_t r = splitmix64(&s);
        double u1 = ((double)(r >> 32) + 1.0) / 4294967296.0;
        double u2 = (double)(r & 0xFFFFFFFFu) / 4294967296.0;
        double rad = sqrt(-2.0 * log(u1));
        x[i] = mean + std * (float)(rad * cos(6.283185307179586 * u2));
        if (i + 1 < n)
            x[i + 1] = mean + std * (float)(rad * sin(6.283185307179586 * u2));
    }
}

/* ---- filling and quantizing on threads ------------------------------------ */

/* One fill job: `rows` rows of `n` elements of N(mean, std^2) quantized to
 * `tt` into dst (row_bytes each).  With a pool, each block of a row is
 * instead a copy of a block picked at random from the pool. */
typedef struct job {
    const type_traits *tt;
    uint8_t *dst;
    int64_t n, rows;
    size_t row_bytes;
    uint64_t seed;
    float mean, std;
    const uint8_t *pool;   /* NULL, or pool_n quantized blocks */
    int64_t pool_n;
    atomic_llong next;     /* next chunk of rows to take */
    atomic_int failed;
} job;

#define ROWS_PER_CHUNK 16

static void fill_row_from_pool(const job *j, int64_t row, uint8_t *dst)
{
    uint64_t s = j->seed ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix64(&s);
    const int64_t nb = j->n / j->tt->blck;
    for (int64_t b = 0; b < nb; b++) {
        uint64_t pick = splitmix64(&s) % (uint64_t)j->pool_n;
        memcpy(dst + b * j->tt->bytes, j->pool + pick * (uint64_t)j->tt->bytes,
               (size_t)j->tt->bytes);
    }
}

/* Types strata decodes but cannot quantize (Q4_K, Q6_K, Q2_K, IQ2_S, ...):
 * each block is random bytes whose fp16 scale fields are then set so the
 * block's decoded RMS is the row's std.  Every decoded value is linear in
 * those fields (type_fp16_scales), so one decode at scale 1 measures it.
 * Not Gaussian, but finite weights of the right size in the type's own
 * bit layout, which is what a test or a benchmark of the type needs. */
static void random_blocks_row(const job *j, int64_t row, uint8_t *dst)
{
    uint64_t s = j->seed ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix64(&s);
    const int bytes = j->tt->bytes, blck = j->tt->blck;
    int offs[2];
    const int ns = type_fp16_scales(j->tt->id, offs);
    float y[256];
    for (int64_t b = 0; b < j->n / blck; b++) {
        uint8_t *blk = dst + b * bytes;
        for (int k = 0; k < bytes; k += 8) {
            const uint64_t r = splitmix64(&s);
            memcpy(blk + k, &r, bytes - k < 8 ? (size_t)(bytes - k) : 8);
        }
        uint16_t one = f32_to_fp16(1.0f);
        for (int k = 0; k < ns; k++)
            memcpy(blk + offs[k], &one, 2);
        j->tt->dequant(blk, y, blck);
        double ss = 0;
        for (int i = 0; i < blck; i++)
            ss += (double)y[i] * y[i];
        const double rms = sqrt(ss / blck);
        const uint16_t h = f32_to_fp16(rms > 0 ? (float)(j->std / rms) : 0.0f);
        for (int k = 0; k < ns; k++)
            memcpy(blk + offs[k], &h, 2);
    }
}

static void *job_worker(void *arg)
{
    job *j = arg;
    if (!j->pool && !j->tt->quant) {
        for (;;) {
            const int64_t r0 = atomic_fetch_add(&j->next, ROWS_PER_CHUNK);
            if (r0 >= j->rows)
                break;
            for (int64_t r = r0; r < r0 + ROWS_PER_CHUNK && r < j->rows; r++)
                random_blocks_row(j, r, j->dst + (size_t)r * j->row_bytes);
        }
        return NULL;
    }
    float *x = j->pool ? NULL : malloc((size_t)j->n * sizeof *x);
    if (!j->pool && !x) {
        atomic_store(&j->failed, 1);
        return NULL;
    }
    for (;;) {
        int64_t r0 = atomic_fetch_add(&j->next, ROWS_PER_CHUNK);
        if (r0 >= j->rows)
            break;
        int64_t r1 = r0 + ROWS_PER_CHUNK < j->rows ? r0 + ROWS_PER_CHUNK : j->rows;
        for (int64_t r = r0; r < r1; r++) {
            uint8_t *dst = j->dst + (size_t)r * j->row_bytes;
            if (j->pool) {
                fill_row_from_pool(j, r, dst);
            } else {
                fill_row(j->seed, r, x, j->n, j->mean, j->std);
                j->tt->quant(x, dst, j->n, NULL);
            }
        }
    }
    free(x);
    return NULL;
}

static int run_job(job *j, int n_threads)
{
    atomic_init(&j->next, 0);
    atomic_init(&j->failed, 0);
    /* Small jobs are not worth a thread. */
    if (j->n * j->rows < (1 << 18))
        n_threads = 1;
    pthread_t th[64];
    int started = 0;
    for (; started < n_threads - 1 && started < 64; started++)
        if (pthread_create(&th[started], NULL, job_worker, j))
            break;
    job_worker(j); /* the caller works too; also covers a failed create */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return atomic_load(&j->failed) ? STRATA_E_NOMEM : 0;
}

/* Block pools (--block-pool N): N blocks of N(0, std^2) quantized once per
 * (type, std); a tensor's blocks are then random picks from its pool.  The
 * weights keep the value distribution of quantized Gaussians, at the cost of
 * a memcpy per block instead of a quantizer search (IQ3_XXS's search runs
 * at well under a million weights per second per thread, which would make
 * an 8B model take many minutes). */
typedef struct pool {
    int type;
    float std;
    uint8_t *blocks;
} pool;

typedef struct pools {
    pool p[16];
    int n;
} pools;

static const uint8_t *pool_get(pools *ps, const mkmodel_params *p, int type, float std,
                               strata_error *err)
{
    for (int i = 0; i < ps->n; i++)
        if (ps->p[i].type == type && ps->p[i].std == std)
            return ps->p[i].blocks;
    if (ps->n == (int)(sizeof ps->p / sizeof ps->p[0])) {
        strata_err(err, STRATA_E_LIMIT, "mkmodel: too many distinct block pools");
        return NULL;
    }
    const type_traits *tt = type_traits_get(type);
    job j = {0};
    j.tt = tt;
    j.n = tt->blck;
    j.rows = p->block_pool;
    j.row_bytes = (size_t)tt->bytes;
    j.std = std;
    uint32_t bits;
    memcpy(&bits, &std, 4);
    uint64_t s = p->seed ^ 0x706F6F6C00000000ull ^ ((uint64_t)type << 32) ^ bits;
    j.seed = splitmix64(&s);
    j.dst = malloc((size_t)j.rows * j.row_bytes);
    if (!j.dst || run_job(&j, p->n_threads)) {
        free(j.dst);
        strata_err(err, STRATA_E_NOMEM, "mkmodel: out of memory for a block pool");
        return NULL;
    }
    ps->p[ps->n] = (pool){type, std, j.dst};
    return ps->p[ps->n++].blocks;
}

static void pools_free(pools *ps)
{
    for (int i = 0; i < ps->n; i++)
        free(ps->p[i].blocks);
    ps->n = 0;
}

static int make_tensor(const mkmodel_params *p, pools *ps, tplan *t, strata_error *err)
{
    job j = {0};
    j.tt = type_traits_get((int)t->type);
    j.n = t->ne[0];
    j.rows = t->ne[1] * t->ne[2];
    j.row_bytes = type_row_bytes((int)t->type, t->ne[0]);
    uint64_t s = p->seed ^ hash_name(t->name);
    j.seed = splitmix64(&s);
    switch (t->kind) {
    case K_MATRIX: j.std = (float)(1.0 / sqrt((double)t->ne[0])); break;
    case K_EMBED: j.std = (float)(2.0 / sqrt((double)t->ne[0])); break;
    case K_ROUTER: j.std = (float)(1.0 / sqrt((double)t->ne[0])); break;
    case K_NORM: j.mean = 1.0f; j.std = 0.1f; break;
    case K_BIAS: j.std = 0.2f; break;
    }
    t->nbytes = (uint64_t)j.row_bytes * (uint64_t)j.rows;
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->data)
        return strata_err(err, STRATA_E_NOMEM, "mkmodel: %s: cannot allocate %" PRIu64 " bytes",
                          t->name, t->nbytes);
    j.dst = t->data;
    if (p->block_pool > 0 && j.tt->blck > 1 && (t->kind == K_MATRIX || t->kind == K_EMBED)) {
        if (!(j.pool = pool_get(ps, p, (int)t->type, j.std, err)))
            return err ? err->code : STRATA_E_NOMEM;
        j.pool_n = p->block_pool;
    }
    if (run_job(&j, p->n_threads))
        return strata_err(err, STRATA_E_NOMEM, "mkmodel: %s: out of memory", t->name);
    return 0;
}

/* ---- metadata ----------------------------------------------------------- */

/* ChatML (doc/formats.md §5.5): the template text strata recognises by its
 * "<|im_start|>"; written like the usual HF Jinja template so other tools
 * accept it too. */
static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int set_key_u32(gguf_writer *w, const char *arch, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_writer_set_u32(w, key, v);
}

static int set_key_f32(gguf_writer *w, const char *arch, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_writer_set_f32(w, key, v);
}

static int write_metadata(const mkmodel_params *p, const mkmodel_vocab *v, gguf_writer *w,
                          bool explicit_head_dim)
{
    const char *a = p->arch;
    char name[160];
    snprintf(name, sizeof name, "strata-mkmodel %s L%d D%d H%d/%d %s seed %" PRIu64, a,
             p->n_layer, p->n_embd, p->n_head, p->n_head_kv,
             p->ftype ? recipe_name(p->ftype) : type_name(p->type), p->seed);
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", a);
    rc |= gguf_writer_set_str(w, "general.name", name);
    rc |= gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= set_key_u32(w, a, "block_count", (uint32_t)p->n_layer);
    rc |= set_key_u32(w, a, "context_length", (uint32_t)p->n_ctx);
    rc |= set_key_u32(w, a, "embedding_length", (uint32_t)p->n_embd);
    rc |= set_key_u32(w, a, "feed_forward_length", (uint32_t)p->n_ff);
    rc |= set_key_u32(w, a, "attention.head_count", (uint32_t)p->n_head);
    rc |= set_key_u32(w, a, "attention.head_count_kv", (uint32_t)p->n_head_kv);
    if (explicit_head_dim || !strcmp(a, "qwen3") || is_moe(a) || is_gemma3(a)) {
        rc |= set_key_u32(w, a, "attention.key_length", (uint32_t)p->head_dim);
        rc |= set_key_u32(w, a, "attention.value_length", (uint32_t)p->head_dim);
    }
    rc |= set_key_f32(w, a, "rope.freq_base", p->rope_base);
    if (p->swa_window > 0)
        rc |= set_key_u32(w, a, "attention.sliding_window", (uint32_t)p->swa_window);
    rc |= set_key_u32(w, a, "rope.dimension_count", (uint32_t)p->head_dim);
    rc |= set_key_f32(w, a, "attention.layer_norm_rms_epsilon", p->rms_eps);
    rc |= set_key_u32(w, a, "vocab_size", (uint32_t)p->n_vocab);
    if (is_moe(a)) {
        rc |= set_key_u32(w, a, "expert_count", (uint32_t)p->n_expert);
        rc |= set_key_u32(w, a, "expert_used_count", (uint32_t)p->n_expert_used);
        rc |= set_key_u32(w, a, "expert_feed_forward_length", (uint32_t)p->n_ff_exp);
    }
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= gguf_writer_set_str(w, "tokenizer.ggml.pre", p->pre);
    rc |= gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                    v->n);
    rc |= gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_I32, v->types, v->n);
    rc |= gguf_writer_set_str_array(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                    v->n_merges);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", MKMODEL_TOKEN_BOS);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", MKMODEL_TOKEN_EOS);
    rc |= gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", MKMODEL_TOKEN_EOS);
    rc |= gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    rc |= gguf_writer_set_str(w, "tokenizer.chat_template", chatml_template);
    return rc ? STRATA_E_NOMEM : 0;
}

/* ---- writing ------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Tell the user once per (ne[0], fallback type) which tensors could not take
 * the requested type (doc/formats.md §2.9). */
static void log_fallbacks(const mkmodel_params *p, const plan *pl)
{
    if (!p->log || p->ftype) /* a recipe's mix is its own, not a fallback */
        return;
    for (size_t i = 0; i < pl->n; i++) {
        const tplan *t = &pl->t[i];
        if (t->kind != K_MATRIX && t->kind != K_EMBED)
            continue;
        if (t->type == (uint32_t)p->type)
            continue;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = (pl->t[k].kind == K_MATRIX || pl->t[k].kind == K_EMBED) &&
                   pl->t[k].ne[0] == t->ne[0] && pl->t[k].type == t->type;
        if (seen)
            continue;
        int count = 0;
        for (size_t k = i; k < pl->n; k++)
            count += (pl->t[k].kind == K_MATRIX || pl->t[k].kind == K_EMBED) &&
                     pl->t[k].ne[0] == t->ne[0] && pl->t[k].type == t->type;
        fprintf(p->log,
                "mkmodel: %d tensor(s) with rows of %" PRId64 " (e.g. %s) are not a multiple of "
                "%s's %d-element block: written as %s\n",
                count, t->ne[0], t->name, type_name(p->type), type_traits_get(p->type)->blck,
                type_name((int)t->type));
    }
}

int mkmodel_write(const mkmodel_params *params, const char *path, strata_error *err)
{
    mkmodel_params p = *params;
    bool explicit_head_dim = p.head_dim != 0;
    apply_defaults(&p);
    int rc = check_params(&p, err);
    if (rc)
        return rc;
    double t0 = now_s();

    plan pl = {0};
    mkmodel_vocab voc = {0};
    gguf_writer *w = NULL;
    pools ps = {0};
    if ((rc = plan_build(&p, &pl))) {
        rc = strata_err(err, rc, "mkmodel: out of memory planning tensors");
        goto done;
    }
    for (size_t i = 0; i < pl.n; i++)
        pl.t[i].type = pick_type(&p, &pl.t[i]);
    log_fallbacks(&p, &pl);
    if (p.log && p.head_dim % 32)
        fprintf(p.log, "mkmodel: note: head dim %d is not a multiple of 32; strata's k8v4 KV "
                       "cache (32-element blocks per head) will refuse this model\n", p.head_dim);

    if ((rc = mkmodel_vocab_build(p.n_vocab, &voc, err)))
        goto done;
    if (!(w = gguf_writer_new(0))) {
        rc = strata_err(err, STRATA_E_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    if ((rc = write_metadata(&p, &voc, w, explicit_head_dim))) {
        rc = strata_err(err, rc, "mkmodel: cannot set metadata (out of memory)");
        goto done;
    }

    /* Progress lines only where there is time to watch them. */
    uint64_t planned = 0;
    for (size_t i = 0; i < pl.n; i++)
        planned += type_row_bytes((int)pl.t[i].type, pl.t[i].ne[0]) *
                   (uint64_t)(pl.t[i].ne[1] * pl.t[i].ne[2]);
    const bool progress = p.log && planned > (256ull << 20);
    if (progress)
        fprintf(p.log, "mkmodel: %zu tensors, %.1f MiB, %d threads%s\n", pl.n,
                (double)planned / 1048576.0, p.n_threads,
                p.block_pool ? ", weights from block pools" : "");
    if (progress && !p.block_pool && planned > (1ull << 30))
        fprintf(p.log, "mkmodel: hint: --block-pool 16384 writes a model this size much "
                       "faster (see --help)\n");
    uint64_t total = 0, n_params = 0;
    for (size_t i = 0; i < pl.n; i++) {
        tplan *t = &pl.t[i];
        if ((rc = make_tensor(&p, &ps, t, err)))
            goto done;
        if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                         t->nbytes, err)))
            goto done;
        total += t->nbytes;
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
        if (progress && pl.n >= 8 && (i + 1) % (pl.n / 8) == 0)
            fprintf(p.log, "mkmodel: %zu/%zu tensors, %.0f MiB, %.1fs\n", i + 1, pl.n,
                    (double)total / 1048576.0, now_s() - t0);
    }
    if ((rc = gguf_writer_write(w, path, err)))
        goto done;
    if (p.log)
        fprintf(p.log,
                "mkmodel: wrote %s: %s, %d layers, dim %d, heads %d/%d x %d, %s %d, vocab %d "
                "(%" PRIu64 " learned merges), %.2f M params, %.1f MiB of tensors, %.1fs\n",
                path, p.arch, p.n_layer, p.n_embd, p.n_head, p.n_head_kv, p.head_dim,
                is_moe(p.arch) ? "ff_exp" : "ff", is_moe(p.arch) ? p.n_ff_exp : p.n_ff,
                p.n_vocab, voc.n_learned, (double)n_params * 1e-6, (double)total / 1048576.0,
                now_s() - t0);
done:
    pools_free(&ps);
    gguf_writer_free(w);
    mkmodel_vocab_free(&voc);
    for (size_t i = 0; i < pl.n; i++)
        free(pl.t[i].data);
    free(pl.t);
    return rc;
}
