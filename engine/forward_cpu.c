/* forward_cpu.c: the forward pass on the CPU — the reference every GPU path
 * is compared with.  Follow one token: embed -> for each layer (attention
 * block, FFN block) -> output norm -> logits.  Rows are independent except
 * through the KV cache, and each row's arithmetic is the same however many
 * rows share the call (the invariance rule). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kernels/ops.h"
#include "kernels/cpu/threadpool.h"
#include "model/quant.h"
#include "engine/profile_cpu.h"
#include "engine/trace.h"
#include "engine/kv_sim.h"

int cpu_scratch_init(cpu_scratch *s, const model *m, int rows, strata_error *err)
{
    const model_hparams *hp = &m->hp;
    size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    size_t ff = (size_t)(hp->n_expert ? hp->n_ff_exp : hp->n_ff);
    if (ff < (size_t)hp->n_ff)
        ff = (size_t)hp->n_ff;
    memset(s, 0, sizeof *s);
    s->rows = rows;
    size_t r = (size_t)rows, wide = dq > (size_t)hp->n_embd ? dq : (size_t)hp->n_embd;
    s->x = malloc(r * hp->n_embd * sizeof(float));
    s->xb = malloc(r * wide * sizeof(float));
    s->q = malloc(r * dq * sizeof(float));
    s->k = malloc(r * dkv * sizeof(float));
    s->v = malloc(r * dkv * sizeof(float));
    s->att = malloc(r * dq * sizeof(float));
    s->hb = malloc(r * ff * sizeof(float));
    s->hb2 = malloc(r * ff * sizeof(float));
    s->router = malloc(((size_t)hp->n_expert + 1) * sizeof(float));
    s->rope_cs = malloc(r * hp->n_rot * sizeof(float));
    s->rope_pos = malloc(r * sizeof(int32_t));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 || !s->router ||
        !s->rope_cs || !s->rope_pos) {
        cpu_scratch_free(s);
        return strata_err(err, STRATA_E_NOMEM, "out of memory for %d rows of activations", rows);
    }
    return 0;
}

void cpu_scratch_free(cpu_scratch *s)
{
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    free(s->router);
    free(s->rope_cs);
    free(s->rope_pos);
    memset(s, 0, sizeof *s);
}

/* y[n x rows] = x[n x cols] W^T, for one matrix of a (possibly stacked)
 * weight; the tap (strata_params.matmul_tap, the imatrix) sees x first. */
static void matmul(const strata_engine *e, const weight *w, int64_t mat, const float *x, int n,
                   float *y)
{
    if (e->p.matmul_tap)
        e->p.matmul_tap(e->p.matmul_tap_user, w->name, w->n_mat > 1 ? (int)mat : -1,
                        (int)w->n_mat, x, n, w->cols);
    const char *data = (const char *)w->data + (uint64_t)mat * w->mat_bytes;
    const int64_t t = PROF_T0();
    cpu_matmul_fast(w->type, data, w->rows, w->cols, x, n, y);
    if (cpu_prof_on) {
        cpu_prof.matmul_ns[w->type] += cpu_prof_now() - t;
        cpu_prof.matmul_calls[w->type]++;
    }
}

/* Products of one x by several weights (Q, K, V; or gate and up with the
 * GLU applied, glu 1 SiLU, 2 GELU) in one hand-off to the thread pool.
 * The profile books the whole call under the first weight's type (the
 * calls under each weight's own). */
static void matmul_group(const strata_engine *e, const weight *const *w, float *const *y,
                         int n_w, const float *x, int n, int glu)
{
    cpu_mm mm[3];
    for (int i = 0; i < n_w; i++) {
        if (e->p.matmul_tap)
            e->p.matmul_tap(e->p.matmul_tap_user, w[i]->name, w[i]->n_mat > 1 ? 0 : -1,
                            (int)w[i]->n_mat, x, n, w[i]->cols);
        mm[i] = (cpu_mm){.type = w[i]->type, .w = w[i]->data, .rows = w[i]->rows, .y = y[i]};
    }
    const int64_t t = PROF_T0();
    if (glu)
        cpu_matmul_fast_glu(&mm[0], &mm[1], w[0]->cols, x, n, glu == 2);
    else
        cpu_matmul_fast_multi(mm, n_w, w[0]->cols, x, n);
    if (cpu_prof_on) {
        cpu_prof.matmul_ns[w[0]->type] += cpu_prof_now() - t;
        for (int i = 0; i < n_w; i++)
            cpu_prof.matmul_calls[w[i]->type]++;
    }
}

static void add_bias(float *y, const float *b, int n_rows, int64_t dim)
{
    if (!b)
        return;
    for (int r = 0; r < n_rows; r++)
        cpu_add(y + (size_t)r * dim, b, dim);
}

/* Row r's RoPE table at pos for rp: made on the first layer that asks and
 * reused by the others while the position and rp stay the same (gemma3's
 * local layers have their own base and remake it). */
static const float *rope_table(cpu_scratch *s, const rope_params *rp, int r, int32_t pos)
{
    const rope_params *k = &s->rope_key;
    if (k->n_rot != rp->n_rot || k->freq_base != rp->freq_base ||
        k->freq_scale != rp->freq_scale || k->freq_factors != rp->freq_factors) {
        s->rope_key = *rp;
        for (int i = 0; i < s->rows; i++)
            s->rope_pos[i] = -1;
    }
    float *cs = s->rope_cs + (size_t)r * rp->n_rot;
    if (s->rope_pos[r] != pos) {
        cpu_rope_table(pos, rp, cs);
        s->rope_pos[r] = pos;
    }
    return cs;
}

/* Attention of the rows of one layer, one row per task: a row's result
 * depends on its query and the cache only, whichever thread runs it. */
typedef struct attn_rows_job {
    strata_engine *e;
    const stage *st;
    int il, lk, window, n, rot;
    const fwd_row *rows;
} attn_rows_job;

/* Task k takes row n - 1 - k: the longest rows first, so the pool's last
 * tasks are the shortest. */
static void attn_rows_task(void *ctx, int64_t k)
{
    const attn_rows_job *j = ctx;
    const model_hparams *hp = &j->e->m->hp;
    cpu_scratch *s = &j->e->cpu;
    const int r = j->n - 1 - (int)k;
    const int64_t dq = (int64_t)hp->n_head * hp->head_dim;
    kv_view kv = kv_pool_view(j->st->kv, j->lk, j->rows[r].seq->kv[j->st->index].pages);
    /* A windowed layer's query at p sees keys p - window < t <= p. */
    int32_t t0 = j->window ? j->rows[r].pos + 1 - j->window : 0;
    cpu_attention_fast_window(s->q + r * dq, hp->n_head, &kv, t0, j->rows[r].pos + 1,
                              hp->attn_scale, s->att + r * dq);
    if (j->rot) /* back from the rotated basis: att = R^T sum_i p_i (R v_i) */
        cpu_kv_unrotate(s->att + r * dq, hp->n_head, hp->head_dim);
}

/* Attention block of one layer for n rows (x updated in place). */
static void attention_block(strata_engine *e, const stage *st, int il, const fwd_row *rows, int n)
{
    const model *m = e->m;
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[il];
    cpu_scratch *s = &e->cpu;
    int64_t D = hp->n_embd, dq = (int64_t)hp->n_head * hp->head_dim;
    int64_t dkv = (int64_t)hp->n_head_kv * hp->head_dim;
    rope_params rp = {hp->n_rot, hp->rope_neox, hp->rope_base, hp->rope_scale, m->rope_freqs};
    int window = model_layer_window(hp, il);
    if (window) { /* gemma3's local layers: their own base, never scaled */
        rp.freq_base = hp->rope_base_swa;
        rp.freq_scale = 1.0f;
    }

    int64_t t = PROF_T0();
    for (int r = 0; r < n; r++)
        cpu_rmsnorm(s->x + r * D, L->attn_norm, D, hp->eps, s->xb + r * D);
    PROF_ADD(op_ns[PROF_NORM], t);
    {
        const weight *w[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {s->q, s->k, s->v};
        matmul_group(e, w, y, 3, s->xb, n, 0);
    }
    if (trace_on()) {
        trace_vec("attn_norm", il, s->xb, D);
        trace_vec("q", il, s->q, dq);
        trace_vec("k", il, s->k, dkv);
        trace_vec("v", il, s->v, dkv);
    }
    t = PROF_T0();
    add_bias(s->q, L->bq, n, dq);
    add_bias(s->k, L->bk, n, dkv);
    add_bias(s->v, L->bv, n, dkv);
    int lk = il - st->l0; /* layer index within the stage's KV pool */
    int rot = engine_kv_rotated(e->p.kv_type);
    int sim = e->p.kv_type == STRATA_KV_F16 && kv_sim_flags(); /* measurement only */
    PROF_ADD(op_ns[PROF_ELEM], t);
    for (int r = 0; r < n; r++) {
        float *q = s->q + r * dq, *k = s->k + r * dkv;
        t = PROF_T0();
        if (L->q_norm)
            cpu_rmsnorm_heads(q, L->q_norm, hp->n_head, hp->head_dim, hp->eps);
        if (L->k_norm)
            cpu_rmsnorm_heads(k, L->k_norm, hp->n_head_kv, hp->head_dim, hp->eps);
        PROF_ADD(op_ns[PROF_NORM], t);
        t = PROF_T0();
        const float *cs = rope_table(s, &rp, r, rows[r].pos);
        cpu_rope_apply(q, hp->n_head, hp->head_dim, &rp, cs);
        cpu_rope_apply(k, hp->n_head_kv, hp->head_dim, &rp, cs);
        if (rot) { /* k8v4r: q, k, v into the rotated basis (kernels/cpu/rotate.c) */
            cpu_kv_rotate(q, hp->n_head, hp->head_dim);
            cpu_kv_rotate(k, hp->n_head_kv, hp->head_dim);
            cpu_kv_rotate(s->v + r * dkv, hp->n_head_kv, hp->head_dim);
        }
        if (sim)
            kv_sim_store(q, hp->n_head, k, s->v + r * dkv, hp->n_head_kv, hp->head_dim, L->bk,
                         L->bv);
        PROF_ADD(op_ns[PROF_ROPE], t);
        t = PROF_T0();
        kv_view kv = kv_pool_view(st->kv, lk, rows[r].seq->kv[st->index].pages);
        kv.kshift = engine_kshift(e, il);
        cpu_kv_store(&kv, rows[r].pos, k, s->v + r * dkv);
        PROF_ADD(op_ns[PROF_KVSTORE], t);
    }
    /* Every row's K/V is stored first; a row at position p then reads
     * positions 0..p, which is the causal mask within a chunk. */
    attn_rows_job aj = {.e = e, .st = st, .il = il, .lk = lk, .window = window, .rows = rows,
                        .n = n, .rot = rot};
    t = PROF_T0();
    if (n > 1 && !sim) /* the rows over the pool (each row's heads then on its thread) */
        tp_parallel_for(n, attn_rows_task, &aj);
    else
        for (int r = 0; r < n; r++) {
            attn_rows_task(&aj, n - 1 - r);
            if (sim)
                kv_sim_output(s->att + r * dq, hp->n_head, hp->n_head_kv, hp->head_dim, L->bv);
        }
    PROF_ADD(op_ns[PROF_ATTN], t);
    if (trace_on()) {
        trace_vec("q_rope", il, s->q, dq);
        trace_vec("att", il, s->att, dq);
    }
    matmul(e, &L->wo, 0, s->att, n, s->xb);
    t = PROF_T0();
    for (int r = 0; r < n; r++) {
        if (L->post_attn_norm) /* gemma3: the block's output is normed before the add */
            cpu_rmsnorm(s->xb + r * D, L->post_attn_norm, D, hp->eps, s->xb + r * D);
        cpu_add(s->x + r * D, s->xb + r * D, D);
    }
    PROF_ADD(op_ns[PROF_ELEM], t);
}

/* Dense SwiGLU FFN on the normed rows in xb; result added to x. */
static void ffn_dense(strata_engine *e, const layer_weights *L, int n)
{
    cpu_scratch *s = &e->cpu;
    int64_t D = e->m->hp.n_embd;
    /* the GLU runs inside the products' tasks (profiled with them) */
    const weight *w[2] = {&L->gate, &L->up};
    float *y[2] = {s->hb, s->hb2};
    matmul_group(e, w, y, 2, s->xb, n, e->m->hp.ffn_gelu ? 2 : 1);
    matmul(e, &L->down, 0, s->hb, n, s->att); /* att is free here: n x D fits */
    int64_t t = PROF_T0();
    for (int r = 0; r < n; r++) {
        if (L->post_ffn_norm)
            cpu_rmsnorm(s->att + r * D, L->post_ffn_norm, D, e->m->hp.eps, s->att + r * D);
        cpu_add(s->x + r * D, s->att + r * D, D);
    }
    PROF_ADD(op_ns[PROF_ELEM], t);
}

/* MoE FFN (doc/formats.md §4.5): cpu_moe_route (softmax over all experts,
 * top-k, renormalise), then the weighted sum of the chosen experts' SwiGLU
 * outputs.  Per row. */
static void ffn_moe(strata_engine *e, const layer_weights *L, int n)
{
    cpu_scratch *s = &e->cpu;
    const model_hparams *hp = &e->m->hp;
    int64_t D = hp->n_embd, F = L->gate_exps.rows;
    int ne = hp->n_expert, k = hp->n_expert_used; /* k <= MOE_MAX_USED: model.c */
    int32_t sel[MOE_MAX_USED];
    float wsel[MOE_MAX_USED];
    for (int r = 0; r < n; r++) {
        const float *xr = s->xb + r * D;
        float *out = s->att + r * D;
        matmul(e, &L->router, 0, xr, 1, s->router);
        cpu_moe_route(s->router, 1, ne, k, sel, wsel);
        memset(out, 0, (size_t)D * sizeof *out);
        for (int j = 0; j < k; j++) {
            matmul(e, &L->gate_exps, sel[j], xr, 1, s->hb);
            matmul(e, &L->up_exps, sel[j], xr, 1, s->hb2);
            cpu_swiglu(s->hb, s->hb2, F, s->hb);
            matmul(e, &L->down_exps, sel[j], s->hb, 1, s->hb2);
            float wj = wsel[j];
            for (int64_t i = 0; i < D; i++)
                out[i] += wj * s->hb2[i];
        }
    }
    for (int r = 0; r < n; r++)
        cpu_add(s->x + r * D, s->att + r * D, D);
}

void stage_forward_cpu(strata_engine *e, const stage *st, const fwd_row *rows, int n)
{
    const model *m = e->m;
    int64_t D = m->hp.n_embd;
    cpu_scratch *s = &e->cpu;
    int64_t t = PROF_T0();
    if (st->index == 0)
        for (int r = 0; r < n; r++) {
            cpu_embed(m->tok_embd.type, m->tok_embd.data, D, rows[r].token, s->x + r * D);
            if (m->hp.embd_scale != 1.0f) /* gemma3: sqrt(n_embd), rounded to float */
                for (int64_t i = 0; i < D; i++)
                    s->x[r * D + i] *= m->hp.embd_scale;
        }
    PROF_ADD(op_ns[PROF_ELEM], t);
    if (trace_on() && st->index == 0)
        trace_vec("embed", -1, s->x, D);
    for (int il = st->l0; il < st->l1; il++) {
        const layer_weights *L = &m->layers[il];
        attention_block(e, st, il, rows, n);
        t = PROF_T0();
        for (int r = 0; r < n; r++)
            cpu_rmsnorm(s->x + r * D, L->ffn_norm, D, m->hp.eps, s->xb + r * D);
        PROF_ADD(op_ns[PROF_NORM], t);
        if (trace_on())
            trace_vec("h", il, s->x, D);
        if (m->hp.n_expert)
            ffn_moe(e, L, n);
        else
            ffn_dense(e, L, n);
        if (trace_on())
            trace_vec("out", il, s->x, D);
    }
}

/* The output norm and head for the rows that want logits. */
void head_cpu(strata_engine *e, const fwd_row *rows, int n, int decode, float *logits)
{
    const model *m = e->m;
    int64_t D = m->hp.n_embd, V = m->hp.n_vocab;
    cpu_scratch *s = &e->cpu;
    for (int r = 0; r < n; r++) {
        if (rows[r].logits < 0)
            continue;
        int64_t t = PROF_T0();
        cpu_rmsnorm(s->x + r * D, m->output_norm, D, m->hp.eps, s->xb);
        PROF_ADD(op_ns[PROF_NORM], t);
        t = PROF_T0();
        /* not matmul(): the head has its own line in the profile */
        if (e->p.matmul_tap)
            e->p.matmul_tap(e->p.matmul_tap_user, m->output.name, -1, 1, s->xb, 1,
                            m->output.cols);
        cpu_matmul_fast(m->output.type, m->output.data, m->output.rows, m->output.cols, s->xb, 1,
                        logits + (size_t)rows[r].logits * V);
        if (m->hp.final_softcap > 0.0f)
            cpu_softcap(logits + (size_t)rows[r].logits * V, V, m->hp.final_softcap);
        PROF_ADD(op_ns[PROF_HEAD], t);
        if (trace_on() && !decode)
            trace_vec("logits", r, logits + (size_t)rows[r].logits * V, V);
    }
}
