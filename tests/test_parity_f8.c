// 8-bit linear layers in training (float8 tensorwise / rowwise, MXFP8, on top of bf16), against
// the one-process run of the same recipe (tests/parity.h).
//
// What must hold, and what cannot: the scales are dynamic -- computed from the tensor each
// matmul sees -- so they depend on which tokens a rank holds. A pipeline stage sees the same
// micro-batch the one-process run does, so pp 2 follows it within the harness's tolerances. A
// data-parallel rank sees fewer tokens: its activation amax (tensorwise), its weight-gradient
// column scales (rowwise) and its 32-token blocks (MXFP8) are its own, as on TorchTitan, so FSDP
// runs are checked to stay close (loss within 1%), not equal. Also: each recipe differs from
// bf16 (the quantisation happens) but stays close; the filter leaves the layers it names in
// bf16; an output projection in 8 bits and 8-bit matmuls under tensor parallel are refused with
// one line.
#include "parity.h"

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

static const char *recipe_name = "float8 tensorwise";

static void pp2(void) {
    char what[64];
    snprintf(what, sizeof what, "%s pp2", recipe_name);
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .pp = 2}, what);
}

// Trains c on all ranks and returns its per-step losses (no comparison).
static void train(const ct_config *c, ct_group *parent, parity_result *r) { parity_train(c, parent, r); }

static void fsdp_close(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", world_size());
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH / world_size());
    parity_result r;
    train(&c, NULL, &r);
    for (int s = 0; s < STEPS; s++)
        CHECK(fabs(r.loss[s] - parity_ref.loss[s]) <= 1e-2 * parity_ref.loss[s], "%s fsdp%d step %d loss %.9g vs %.9g",
              recipe_name, world_size(), s + 1, r.loss[s], parity_ref.loss[s]);
    CHECK(fabs(r.loss[STEPS - 1] - r.loss[0]) > 1e-3, "loss did not move");
    free(r.params);
}

// The same model in bf16 on one process: the 8-bit run must differ from it (the casts happen)
// and stay within 3% of its losses.
static void differs_from_bf16_but_close(void) {
    ct_config c = parity_base;
    parity_set(&c, "quantization.float8.enable", "false");
    parity_set(&c, "quantization.mxfp8.enable", "false");
    parity_result r;
    parity_train_alone(c, &r);
    double most = 0;
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(r.loss[s] - parity_ref.loss[s]) / r.loss[s];
        CHECK(rel <= 3e-2, "%s step %d: loss %.9g, bf16 %.9g", recipe_name, s + 1, parity_ref.loss[s], r.loss[s]);
        if (rel > most) most = rel;
    }
    CHECK(most > 1e-4, "%s: losses within %.3g of bf16's: no quantisation happened", recipe_name, most);
    free(r.params);
}

// A trainer on one process with these extra settings; returns its init status.
static ct_status init_alone(ct_trainer *t, const char *kv[][2], int n) {
    ct_group world, self;
    ct_comm_group_world(&world, 30);
    ct_comm_group_split(&world, world.rank, 0, "self", &self);
    ct_config c = parity_base;
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH);
    for (int i = 0; i < n; i++) parity_set(&c, kv[i][0], kv[i][1]);
    ct_status st = ct_trainer_init(t, &c, &self);
    ct_comm_group_free(&self);
    ct_comm_group_free(&world);
    return st;
}

static void filter(void) {
    static ct_trainer t;
    const char *layer0[][2] = {{"quantization.filter_fqns", "output, layers.0."}};
    CHECK(init_alone(&t, layer0, 1) == CT_OK, "%s", ct_last_error());
    CHECK(t.f8_layers[0] == 0 && t.f8_layers[1] == 0xF, "layers.0. filtered: masks %x %x", t.f8_layers[0],
          t.f8_layers[1]);
    ct_trainer_free(&t);
    // A part's name filters the fused matrix holding it (wk is in wqkv, w3 in w13).
    const char *parts[][2] = {{"quantization.filter_fqns", "output,attention.wk,feed_forward.w3"}};
    CHECK(init_alone(&t, parts, 1) == CT_OK, "%s", ct_last_error());
    unsigned want = 1u << CT_LINEAR_WO | 1u << CT_LINEAR_W2;
    CHECK(t.f8_layers[0] == want && t.f8_layers[1] == want, "parts: masks %x %x, want %x", t.f8_layers[0],
          t.f8_layers[1], want);
    ct_trainer_free(&t);
    const char *no_output[][2] = {{"quantization.filter_fqns", "layers.1"}};
    CHECK(init_alone(&t, no_output, 1) == CT_ERR, "8-bit output accepted");
    CHECK(!strcmp(ct_last_error(), "quantization.filter_fqns \"layers.1\": the output projection cannot run in 8 bits "
                                    "here; keep \"output\" in the filter"),
          "message: %s", ct_last_error());
    ct_trainer_free(&t);
}

static void tensor_parallel_refused(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.compute_parallel_degree", 2);
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "8-bit with tp 2 accepted");
    const char *want = !strcmp(recipe_name, "mxfp8")
                           ? "quantization.mxfp8.enable with parallelism.compute_parallel_degree 2 is not supported "
                             "yet: 8-bit scales would be computed per tensor-parallel shard"
                           : "quantization.float8.enable with parallelism.compute_parallel_degree 2 is not supported "
                             "yet: 8-bit scales would be computed per tensor-parallel shard";
    CHECK(!strcmp(ct_last_error(), want), "message: %s", ct_last_error());
    ct_trainer_free(&t);
}

// The recipes after the first: a new base and a new one-process reference.
static void switch_recipe(const char *name, const char *key, const char *value) {
    ct_group world;
    ct_comm_group_world(&world, 30);
    parity_set(&parity_base, "quantization.float8.enable", "false");
    parity_set(&parity_base, key, value);
    if (!strcmp(name, "float8 rowwise")) {
        parity_set(&parity_base, "quantization.float8.enable", "true");
        parity_set(&parity_base, "quantization.float8.recipe", "rowwise");
    }
    recipe_name = name;
    free(parity_ref.params);
    parity_reference(&world);
    ct_comm_group_free(&world);
}

static void recipe_cases(int n) {
    CT_MPI_RUN(fsdp_close);
    if (n == 2) {
        CT_MPI_RUN(pp2);
        CT_MPI_RUN(differs_from_bf16_but_close);
        CT_MPI_RUN(tensor_parallel_refused);
    }
}

static void cases(int n) {
    if (n > 4) return;
    recipe_cases(n);
    if (n == 2) CT_MPI_RUN(filter);
    switch_recipe("float8 rowwise", "quantization.float8.recipe", "rowwise");
    recipe_cases(n);
    switch_recipe("mxfp8", "quantization.mxfp8.enable", "true");
    recipe_cases(n);
}

int main(int argc, char **argv) {
    // Widths of 64 so MXFP8 has whole 32-blocks and a tail-free reduction; 2 layers for pp 2.
    static const char *dims[][2] = {{"model.dim", "64"},
                                    {"model.n_layers", "2"},
                                    {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"},
                                    {"model.vocab_size", "128"},
                                    {"model.ffn_hidden_dim", "96"},
                                    {"mixed_precision", "bf16"},
                                    {"quantization.float8.enable", "true"},
                                    {"quantization.float8.recipe", "tensorwise"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
