// Llama 3's block under bf16 mixed precision with and without the backend's bf16 elementwise
// kernels (kernels/backend.h rmsnorm_forward_bf16, swiglu_forward_bf16, swiglu_backward_bf16,
// qkv_rope_to_bf16): a table without them takes the path through fp32 work buffers -- the fp32
// kernels, then f32_to_bf16 / bf16_to_f32 (RoPE in place, then the narrowing) -- and both must
// give the same bits. In one
// process, for every checkpointing kind (none, elementwise, op, full), one training micro-batch
// of a two-block model (an FFN width that is no multiple of 16, so the kernels' vector tails
// run):
//   - the loss and every gradient element equal, bit for bit, between the two tables;
//   - the workspace carves the fp32 buffers the norms and SwiGLU read and write (w_norm, w_h13,
//     w_h) only for the table without the kernels;
//   - the bf16 loss differs from the fp32 one (the bf16 path is the one running).
#include <string.h>

#include "core/config.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/llama3/llama3.h"
#include "model/params.h"
#include "model/runner.h"
#include "model/weights.h"
#include "test.h"

enum { B = 2, T = 9 };

static ct_model_config tiny_model(void) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {{"model.name", "llama3"},      {"model.flavor", "debugmodel"}, {"model.dim", "32"},
                           {"model.n_layers", "2"},       {"model.n_heads", "4"},         {"model.n_kv_heads", "2"},
                           {"model.vocab_size", "37"},    {"model.ffn_hidden_dim", "43"}, {"training.seq_len", "16"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(ct_config_set(&c, kv[i][0], kv[i][1]) == CT_OK, "%s: %s", kv[i][0], ct_last_error());
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    return m;
}

typedef struct {
    double loss;
    float *grads;
    bool work_f32[3];  // w_norm, w_h13, w_h carved
} result;

// One micro-batch forward and backward on table k at precision `compute` under kind.
static result run(const ct_kernels *k, ct_dtype compute, ct_ac_kind kind) {
    ct_model_config m = tiny_model();
    ct_param_table t;
    ct_param_table_build(&t, &m);
    float *params = ct_mem_alloc(CT_MEM_PARAMS, t.total * sizeof(float));
    result r = {.grads = ct_mem_alloc(CT_MEM_GRADS, t.total * sizeof(float))};
    memset(r.grads, 0, t.total * sizeof(float));
    ct_param_init_all(&t, 5, params);
    ct_rng rng;
    ct_rng_seed(&rng, 3);
    for (long i = 0; i < t.total; i++) params[i] += 0.3f * ct_rng_next_normal(&rng);  // activations well spread
    ct_model_weights w, g;
    ct_model_weights_init(&w, &t, &m, params);
    ct_model_weights_init(&g, &t, &m, r.grads);
    // a bf16 head reads its weight's bf16 compute copy (FSDP's gathered one in training)
    uint16_t *out16 = NULL;
    if (compute == CT_BF16) {
        long nv = (long)m.vocab_size * m.dim;
        out16 = ct_mem_alloc(CT_MEM_PARAMS, nv * sizeof(uint16_t));
        k->f32_to_bf16(out16, w.output, nv);
        w.output16 = out16;
    }
    ct_model_acts a = {0};
    ct_stage_spec spec = {.k = k, .cfg = &m, .layer_begin = 0, .layer_end = m.n_layers, .has_embedding = true,
                          .has_head = true, .B = B, .T = T, .ops = ct_stage_ops_local(k), .ac = {kind, 1},
                          .prec = {.compute = compute}};
    ct_stage_init(&a.stage, &spec);
    ct_stage_plan_slots(&a.stage, 1, false);
    a.loss_sum = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OTHER, sizeof(double));
    int32_t in[B * T], tg[B * T];
    ct_rng_seed(&rng, 17);
    for (long i = 0; i < B * T; i++) {
        in[i] = (int32_t)(ct_rng_next(&rng) % m.vocab_size);
        tg[i] = (int32_t)(ct_rng_next(&rng) % m.vocab_size);
    }
    r.loss = ct_model_step(&a, &w, &g, in, tg, 1.0f / (B * T)) / (B * T);
    const ct_llama3_work *wk = a.stage.work;
    r.work_f32[0] = wk->w_norm != NULL, r.work_f32[1] = wk->w_h13 != NULL, r.work_f32[2] = wk->w_h != NULL;
    ct_model_acts_free(&a);
    ct_model_weights_free(&w);
    ct_model_weights_free(&g);
    ct_mem_free(params);
    if (out16) ct_mem_free(out16);
    ct_param_table_free(&t);
    return r;
}

static void with_and_without_kernels(void) {
    const ct_kernels *cpu = ct_kernels_get("cpu");
    CHECK(cpu->rmsnorm_forward_bf16 && cpu->swiglu_forward_bf16 && cpu->swiglu_backward_bf16 && cpu->qkv_rope_to_bf16,
          "the cpu table lacks a bf16 elementwise kernel");
    ct_kernels bare = *cpu;  // the fp32 path through work buffers
    bare.rmsnorm_forward_bf16 = NULL, bare.swiglu_forward_bf16 = NULL, bare.swiglu_backward_bf16 = NULL;
    bare.qkv_rope_to_bf16 = NULL;
    long n = 0;
    {
        ct_model_config m = tiny_model();
        ct_param_table t;
        ct_param_table_build(&t, &m);
        n = t.total;
        ct_param_table_free(&t);
    }
    result f32 = run(cpu, CT_F32, CT_AC_NONE);
    for (int kind = CT_AC_NONE; kind <= CT_AC_FULL; kind++) {
        const char *name = ct_ac_kind_name((ct_ac_kind)kind);
        result a = run(cpu, CT_BF16, (ct_ac_kind)kind), b = run(&bare, CT_BF16, (ct_ac_kind)kind);
        CHECK(memcmp(&a.loss, &b.loss, sizeof(double)) == 0, "%s: loss %.17g with the kernels, %.17g without", name,
              a.loss, b.loss);
        long differ = 0;
        for (long i = 0; i < n; i++) differ += memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0;
        CHECK(differ == 0, "%s: %ld of %ld gradient elements differ", name, differ, n);
        CHECK(!a.work_f32[0] && !a.work_f32[1] && !a.work_f32[2], "%s: fp32 work buffers carved with the kernels",
              name);
        CHECK(b.work_f32[0] && b.work_f32[1] && b.work_f32[2], "%s: fp32 work buffers missing without the kernels",
              name);
        CHECK(a.loss != f32.loss, "%s: the bf16 loss is the fp32 one (%.17g)", name, a.loss);
        printf("  %-12s loss %.9f (fp32 %.9f), %ld gradients equal\n", name, a.loss, f32.loss, n - differ);
        ct_mem_free(a.grads);
        ct_mem_free(b.grads);
    }
    ct_mem_free(f32.grads);
}

int main(void) {
    CT_RUN(with_and_without_kernels);
    CT_TEST_EXIT();
}
