/* kv_sim.h: simulated KV formats over the f16 cache, for measurements only
 * (engine/kv_sim.c says which; STRATA_KV_SIM selects them). */
#ifndef STRATA_KV_SIM_H
#define STRATA_KV_SIM_H

/* The STRATA_KV_SIM bits (read once); 0 when unset. */
int kv_sim_flags(void);
/* Before storing one row's k, v: rotate and quantize-decode as selected
 * (q is rotated with k so the scores keep their meaning). */
void kv_sim_store(float *q, int n_head, float *k, float *v, int n_kv_head, int hd,
                  const float *bk, const float *bv);
/* After attention: rotate the output back when v was rotated. */
void kv_sim_output(float *att, int n_head, int n_kv_head, int hd, const float *bv);

#endif
