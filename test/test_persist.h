/* test_persist.h: what the saved-conversation suites share (test_persist.c,
 * test_persist_file.c): the small generated llama they save, an engine on
 * it, random token ids, a path in a directory, a cache with no engine. */
#ifndef STRATA_TEST_PERSIST_H
#define STRATA_TEST_PERSIST_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/convcache.h"
#include "engine/strata.h"
#include "testutil.h"

#define N_VOCAB 400

static inline const char *model_a(void)
{
    static const char *path;
    if (!path)
        path = test_tiny_llama("park-llama", N_VOCAB, 7);
    return path;
}

static inline strata_engine *open_engine(const char *model, const char *split, int kv_type)
{
    strata_params p = test_params(model, STRATA_BACKEND_CPU);
    p.kv_type = kv_type;
    p.n_ctx = 2048;
    p.n_slots = 2;
    p.n_chunk = 64;
    p.n_threads = 1;
    p.layer_split = split;
    return test_open(&p);
}

static inline int32_t *random_tokens(int n, uint64_t seed)
{
    int32_t *t = malloc(sizeof *t * (size_t)n);
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(test_rand_u64(&seed) % N_VOCAB);
    return t;
}

static inline char *path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static inline convcache *plain_cache(int n_stages)
{
    convcache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_stages = n_stages;
    cfg.max_bytes = (size_t)256 << 20;
    cfg.max_images = 16;
    strata_error err = {0};
    convcache *c = convcache_new(&cfg, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    return c;
}

#endif
