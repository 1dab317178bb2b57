// A tiny model and a few micro-batches for executor tests: the whole registry's parameters
// (moved off their initial values so gradients are not special) and gradients, weight views,
// and tokens with some targets ignored. The including test defines RIG_B, RIG_T (micro-batch
// shape) and RIG_MB (micro-batches) before including this file.
#ifndef CT_TEST_EXECUTOR_RIG_H
#define CT_TEST_EXECUTOR_RIG_H
#include <string.h>

#include "core/memory.h"
#include "core/rng.h"
#include "model/weights.h"
#include "model/runner.h"
#include "parallel/executor.h"

typedef struct {
    ct_model_config m;
    ct_param_table t;   // the global registry
    float *params;      // (t.total)
    float *grads;       // (t.total)
    ct_model_weights w, g;
    int32_t *in, *tg;   // (RIG_MB, RIG_B, RIG_T)
    ct_microbatch mbs[RIG_MB];
    long valid;         // targets that are not ignored, over every micro-batch
} rig;

// dim 32, 4 heads over 2 kv heads, FFN 40 (no tile divides it).
static inline ct_model_config rig_model(int n_layers, int vocab) {
    ct_model_config m = {0};
    strcpy(m.flavor, "test");
    m.dim = 32;
    m.n_layers = n_layers;
    m.n_heads = 4;
    m.n_kv_heads = 2;
    m.head_dim = 8;
    m.ffn_hidden = 40;
    m.vocab_size = vocab;
    m.norm_eps = 1e-5;
    m.rope_theta = 500000;
    m.rope_scaling = 1;
    m.max_seq_len = RIG_T;
    return m;
}

// ignore_every: target i is ignored when i % ignore_every == ignore_every / 2.
static inline void rig_init(rig *r, int n_layers, int vocab, int ignore_every) {
    r->m = rig_model(n_layers, vocab);
    ct_param_table_build(&r->t, &r->m);
    r->params = ct_mem_alloc(CT_MEM_PARAMS, r->t.total * sizeof(float));
    r->grads = ct_mem_alloc(CT_MEM_GRADS, r->t.total * sizeof(float));
    ct_param_init_all(&r->t, 5, r->params);
    ct_rng rng;
    ct_rng_seed(&rng, 11);
    for (long i = 0; i < r->t.total; i++) r->params[i] += 0.1f * ct_rng_next_normal(&rng);  // not at init
    ct_model_weights_init(&r->w, &r->t, &r->m, r->params);
    ct_model_weights_init(&r->g, &r->t, &r->m, r->grads);
    long n = (long)RIG_MB * RIG_B * RIG_T;
    r->in = ct_xmalloc(n * sizeof(int32_t));
    r->tg = ct_xmalloc(n * sizeof(int32_t));
    r->valid = 0;
    for (long i = 0; i < n; i++) {
        r->in[i] = (int32_t)(ct_rng_next(&rng) % r->m.vocab_size);
        r->tg[i] = i % ignore_every == ignore_every / 2 ? -1 : (int32_t)(ct_rng_next(&rng) % r->m.vocab_size);
        r->valid += r->tg[i] >= 0;
    }
    for (int mb = 0; mb < RIG_MB; mb++)
        r->mbs[mb] = (ct_microbatch){.inputs = r->in + mb * RIG_B * RIG_T, .targets = r->tg + mb * RIG_B * RIG_T};
}

static inline void rig_free(rig *r) {
    ct_model_weights_free(&r->w);
    ct_model_weights_free(&r->g);
    ct_mem_free(r->params);
    ct_mem_free(r->grads);
    ct_param_table_free(&r->t);
    free(r->in);
    free(r->tg);
}

// Elements whose bits differ (bitwise parity).
static inline long count_differing(const float *a, const float *b, long n) {
    long d = 0;
    for (long i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}
#endif
