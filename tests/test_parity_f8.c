// 8-bit linear layers in training (float8 tensorwise / rowwise, MXFP8, on top of bf16), against
// the one-process run of the same recipe (tests/parity.h).
//
// What must hold, and what cannot: the scales are dynamic -- computed from the tensor each
// matmul sees -- so they depend on which tokens a rank holds. A pipeline stage sees the same
// micro-batch the one-process run does, so pp 2 computes what it computes. A data-parallel rank
// sees fewer tokens: its activation amax (tensorwise), its weight-gradient column scales
// (rowwise) and its 32-token blocks (MXFP8) are its own, as on TorchTitan, so an FSDP run is
// another quantisation of the same model: checked to stay as close to the reference as the
// narrow error model allows (fsdp_close), not to follow it.
//
// Tensor parallel splits the weights (and the row-parallel inputs), not the tokens: its 8-bit
// matmuls MAX-reduce over tp every amax that spans a split dimension (model/linear.h), so tp 2
// (with and without sequence parallel, with async comm) computes what the one-process run
// computes, its fp32 sums associated differently, and FSDP 2 x tp 2 what FSDP 2 on two ranks
// computes. The runs still decorrelate: a last-bit fp32 difference moves a value across an e4m3
// or e5m2 rounding boundary now and then (with probability about 2^-24 / 2^-3 per narrowing,
// 1e5-1e6 narrowings a step), one element jumps by a whole 8-bit spacing, and the steps after
// feed that into new narrowings; when, and which element, depends on the machine's fp32 blocking.
// So these layouts are held to the harness's narrow bounds (tests/error_model.h), which scale
// with the reference's distance from the same model in bf16, not to equality for some number of
// steps. What must be exact is checked where it is deterministic: shard_vs_whole shows on one
// 8-bit linear that with the reduction every piece is the whole layer's up to fp32 order, and
// that without it a shard's scales are its own and the results move by quantisation error. An
// MXFP8 layout whose shards would split a 32-block is refused with one line.
//
// Also: each recipe differs from bf16 (the quantisation happens) but stays close; the filter
// leaves the layers it names in bf16; an output projection in 8 bits is refused with one line.
#include "parity.h"
#include "parallel/tensor_parallel.h"

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

// FSDP quantises with each rank's own scales: another 8-bit run of the same model, so about as far
// from the bf16 run as the reference is, and by the triangle inequality within the harness's
// narrow loss bounds of the reference (tests/error_model.h).
static void fsdp_close(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", world_size());
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH / world_size());
    parity_result r;
    train(&c, NULL, &r);
    for (int s = 0; s < STEPS; s++) {
        double tol = parity_step_bound(0);
        CHECK(fabs(r.loss[s] - parity_ref.loss[s]) <= tol * parity_ref.loss[s],
              "%s fsdp%d step %d loss %.9g vs %.9g (bound %.3g)", recipe_name, world_size(), s + 1, r.loss[s],
              parity_ref.loss[s], tol);
    }
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

// ---- tensor parallel

// Trains tp 2 over all ranks (FSDP over the rest) and compares it with parity_ref.
static void tp_run(int shard, bool sp, bool async, const char *what) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", shard);
    parity_set_int(&c, "parallelism.compute_parallel_degree", 2);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH / shard);
    parity_set(&c, "sequence_parallel.enable", sp ? "true" : "false");
    parity_set(&c, "parallelism.enable_async_comm", async ? "true" : "false");
    parity_result r;
    parity_train(&c, NULL, &r);
    parity_compare(&r, what);
    free(r.params);
}
static void tp_case(bool sp, bool async) {
    char what[64];
    snprintf(what, sizeof what, "%s tp2%s%s", recipe_name, sp ? "+sp" : "", async ? "+async" : "");
    tp_run(1, sp, async, what);
}
static void tp2(void) { tp_case(false, false); }
static void tp2_sequence_parallel(void) { tp_case(true, false); }
static void tp2_async(void) { tp_case(true, true); }

// FSDP 2 x tp 2 on 4 ranks against FSDP 2 on ranks {0, 1} and {2, 3}: a data-parallel rank's
// scales are its own tokens' (see the top), so the reference for the tp split is the same FSDP
// layout without it; the bounds still scale with the one-process reference's distance from bf16
// (the same recipe and model, so the same size of 8-bit noise).
static void fsdp2_tp2(void) {
    ct_group world, half;
    ct_comm_group_world(&world, 30);
    ct_comm_group_split(&world, world.rank / 2, world.rank % 2, "half", &half);
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", 2);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH / 2);
    parity_result fsdp2, one = parity_ref;
    parity_train(&c, &half, &fsdp2);
    ct_comm_group_free(&half);
    ct_comm_group_free(&world);
    char what[64];
    snprintf(what, sizeof what, "%s fsdp2 x tp2 vs fsdp2", recipe_name);
    parity_ref = fsdp2;
    tp_run(2, true, false, what);
    parity_ref = one;
    free(fsdp2.params);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(void) {  // (-1, 1), xorshift64*
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2 - 1);
}

// dst (rows, w) = columns [c0, c0 + w) of src (rows, cols).
static void columns(float *dst, const float *src, long rows, long cols, long c0, long w) {
    for (long r = 0; r < rows; r++) memcpy(dst + r * w, src + r * cols + c0, (size_t)w * sizeof(float));
}

// max |a - b| / max |b| over n.
static double rel_err(const float *a, const float *b, long n) {
    double e = 0, m = 0;
    for (long i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    return e / m;
}

// One 8-bit linear (N, IC) -> (N, OC) split over the two ranks as tp splits it, against the whole
// layer computed on each rank. Four pieces: the row-parallel forward (IC split; partial outputs
// summed over tp), the column-parallel forward (OC split; this rank's output columns), the
// column-parallel input gradient (OC split; summed), the row-parallel weight gradient (this
// rank's columns). With the tp hook's amax reduction every piece is the whole layer's up to fp32
// order; with the split flags off (each shard its own scales) the pieces whose recipe reduces --
// tensorwise all four, rowwise the row-parallel forward and the column-parallel input gradient
// -- move by quantisation error, so the reduction is what makes tp follow the one-process run.
// MXFP8 with 32-aligned shards needs none. The data make one shard's amaxes 2^12 times the
// other's (inputs larger on IC half 0, weights on IC half 1 and OC half 1, output gradients on OC
// half 0), with both halves contributing alike to each product: rowwise scales are powers of two,
// so a shard's own scale changes its casts only where the whole row's scale pushes the small
// shard's values into e4m3's subnormal range -- which such a ratio does.
static void shard_vs_whole(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_f8_recipe recipe = !strcmp(recipe_name, "mxfp8")            ? CT_F8_RECIPE_MXFP8
                          : !strcmp(recipe_name, "float8 rowwise") ? CT_F8_RECIPE_ROWWISE
                                                                   : CT_F8_RECIPE_TENSORWISE;
    ct_group world;
    ct_comm_group_world(&world, 30);
    ct_tp tp = {.k = k, .group = &world};
    ct_stage_ops ops = ct_stage_ops_local(k);
    ct_tp_apply(&tp, &ops);
    enum { N = 16, IC = 64, OC = 64, ICl = IC / 2, OCl = OC / 2 };
    int r = world.rank;
    static float x[N * IC], w[OC * IC], dy[N * OC];
    const float F = 4096;
    for (long n = 0; n < N; n++)
        for (long i = 0; i < IC; i++) x[n * IC + i] = uniform() * (i < ICl ? F : 1);
    for (long o = 0; o < OC; o++)
        for (long i = 0; i < IC; i++) w[o * IC + i] = uniform() * (i < ICl ? 1 : F) * (o < OCl ? 1 : F);
    for (long n = 0; n < N; n++)
        for (long o = 0; o < OC; o++) dy[n * OC + o] = uniform() * (o < OCl ? F : 1);
    // the whole layer
    long sf = k->f8_scratch_floats(N, IC, OC), sb = k->f8_backward_scratch_floats(N, IC, OC);
    float *scratch = malloc((size_t)(sf > sb ? sf : sb) * sizeof(float));
    static float out[N * OC], dx[N * IC], dw[OC * IC];
    memset(dw, 0, sizeof dw);
    k->linear_forward_f8(out, x, CT_F32, w, N, IC, OC, recipe, NULL, scratch);
    k->linear_backward_f8(dx, dw, dy, x, CT_F32, w, N, IC, OC, recipe, NULL, scratch);
    // this rank's shards
    static float x_r[N * ICl], w_row[OC * ICl], w_col[OCl * IC], dy_r[N * OCl];
    columns(x_r, x, N, IC, r * ICl, ICl);
    columns(w_row, w, OC, IC, r * ICl, ICl);
    memcpy(w_col, w + r * OCl * IC, sizeof w_col);
    columns(dy_r, dy, N, OC, r * OCl, OCl);
    static float want_out_col[N * OCl], want_dw_row[OC * ICl];
    columns(want_out_col, out, N, OC, r * OCl, OCl);
    columns(want_dw_row, dw, OC, IC, r * ICl, ICl);
    const ct_f8_split row = {.ic_split = true, .amax_max = ops.tp.amax_max, .ctx = ops.tp.ctx};
    const ct_f8_split col = {.oc_split = true, .amax_max = ops.tp.amax_max, .ctx = ops.tp.ctx};
    const char *piece[4] = {"row-parallel forward", "column-parallel forward", "column-parallel input gradient",
                            "row-parallel weight gradient"};
    bool reduces[4] = {recipe == CT_F8_RECIPE_TENSORWISE || recipe == CT_F8_RECIPE_ROWWISE,
                       recipe == CT_F8_RECIPE_TENSORWISE,
                       recipe == CT_F8_RECIPE_TENSORWISE || recipe == CT_F8_RECIPE_ROWWISE,
                       recipe == CT_F8_RECIPE_TENSORWISE};
    for (int with = 1; with >= 0; with--) {
        static float o_row[N * OC], o_col[N * OCl], dx_col[N * IC], dw_r[OC * ICl];
        memset(dw_r, 0, sizeof dw_r);
        k->linear_forward_f8(o_row, x_r, CT_F32, w_row, N, ICl, OC, recipe, with ? &row : NULL, scratch);
        ct_comm_all_reduce(&world, o_row, o_row, N * OC, CT_F32, CT_COMM_SUM);
        k->linear_forward_f8(o_col, x, CT_F32, w_col, N, IC, OCl, recipe, with ? &col : NULL, scratch);
        k->linear_backward_f8(dx_col, NULL, dy_r, x, CT_F32, w_col, N, IC, OCl, recipe, with ? &col : NULL, scratch);
        ct_comm_all_reduce(&world, dx_col, dx_col, N * IC, CT_F32, CT_COMM_SUM);
        k->linear_backward_f8(NULL, dw_r, dy, x_r, CT_F32, w_row, N, ICl, OC, recipe, with ? &row : NULL, scratch);
        double err[4] = {rel_err(o_row, out, N * OC), rel_err(o_col, want_out_col, N * OCl),
                         rel_err(dx_col, dx, N * IC), rel_err(dw_r, want_dw_row, OC * ICl)};
        // the worst rank (the rank holding a tensor's amax computes its own piece right anyway)
        ct_comm_all_reduce(&world, err, err, 4, CT_F64, CT_COMM_MAX);
        if (getenv("VERBOSE") && world.rank == 0)
            printf("    %s %s the reduction: %.3g %.3g %.3g %.3g\n", recipe_name, with ? "with" : "without", err[0],
                   err[1], err[2], err[3]);
        for (int p = 0; p < 4; p++) {
            if (with || !reduces[p])
                CHECK(err[p] <= ct_em_fp32_stat(), "%s %s %s the amax reduction: %.3g from the whole layer", recipe_name, piece[p],
                      with ? "with" : "without", err[p]);
            else
                CHECK(err[p] > 1e-3, "%s %s without the amax reduction: only %.3g from the whole layer (the shards' "
                      "scales should differ)", recipe_name, piece[p], err[p]);
        }
    }
    free(scratch);
    ct_comm_group_free(&world);
}

// The tp hook's MAX over amaxes: element-wise, NaN winning from either rank, +inf kept.
static void amax_max_nan_wins(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_group world;
    ct_comm_group_world(&world, 30);
    ct_tp tp = {.k = k, .group = &world};
    ct_stage_ops ops = ct_stage_ops_local(k);
    ct_tp_apply(&tp, &ops);
    float a[4] = {world.rank ? 2.0f : NAN, world.rank ? NAN : 1.0f, world.rank ? 3.0f : INFINITY,
                  world.rank ? 0.5f : 0.25f};
    ops.tp.amax_max(ops.tp.ctx, a, 4);
    CHECK(isnan(a[0]) && isnan(a[1]) && a[2] == INFINITY && a[3] == 0.5f, "%g %g %g %g", a[0], a[1], a[2], a[3]);
    ct_comm_group_free(&world);
}

// An MXFP8 layout whose shard of a split contraction dimension is not a whole number of 32-blocks
// (FFN hidden 96 over tp 2: 48 per rank) is refused before any work, naming the numbers; float8
// takes the same layout (its scales are reduced, not blocked).
static void mxfp8_blocks_across_shards_refused(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.compute_parallel_degree", 2);
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    parity_set(&c, "model.ffn_hidden_dim", "96");
    static ct_trainer t;
    if (!strcmp(recipe_name, "mxfp8")) {
        CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "MXFP8 with 48 FFN columns per rank accepted");
        const char *want = "quantization.mxfp8.enable with parallelism.compute_parallel_degree 2: FFN hidden size 96 "
                           "/ 2 = 48 per rank is not a multiple of the 32-element MXFP8 block (a block would straddle "
                           "two tensor-parallel ranks)";
        CHECK(!strcmp(ct_last_error(), want), "message: %s", ct_last_error());
        CHECK(!strchr(ct_last_error(), '\n'), "more than one line");
    } else {
        CHECK(ct_trainer_init(&t, &c, NULL) == CT_OK, "%s", ct_last_error());
    }
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

// The trainer hands every 8-bit block linear its tp split: the amax reductions one tp 2 step makes
// on the tp group are exactly those its linears' kernels ask for. The parity bounds cannot see a
// reduction left out (another choice of scales is 8-bit noise of the reference's own size:
// tests/error_model.h), and shard_vs_whole checks the kernels alone, so this counts them: how
// many amax_max calls one row-parallel and one column-parallel linear make, forward and
// backward (a counting hook on the kernels), times the block linears of the model (wqkv and w13
// column-parallel, wo and w2 row-parallel, per layer), against the tp group's all-reduces in one
// step beyond those of the same step without the 8-bit casts.
static long amax_calls;
static void count_amax(void *ctx, float *amax, long n) { amax_calls++; }

static long long tp_all_reduces_one_step(bool eight_bit) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    parity_set_int(&c, "parallelism.compute_parallel_degree", 2);
    parity_set_int(&c, "micro_batch_size", GLOBAL_BATCH);
    if (!eight_bit) {
        parity_set(&c, "quantization.float8.enable", "false");
        parity_set(&c, "quantization.mxfp8.enable", "false");
    }
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) ct_fatal("test", "%s", ct_last_error());
    ct_group *tp = &t.mesh.dim[CT_MESH_TP];
    ct_comm_stats_reset(tp);
    ct_trainer_step(&t);
    long long calls = tp->stats[CT_COMM_ALL_REDUCE].calls;
    ct_trainer_free(&t);
    return calls;
}

static void tp_amax_reductions_wired(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    ct_f8_recipe recipe = !strcmp(recipe_name, "mxfp8")            ? CT_F8_RECIPE_MXFP8
                          : !strcmp(recipe_name, "float8 rowwise") ? CT_F8_RECIPE_ROWWISE
                                                                   : CT_F8_RECIPE_TENSORWISE;
    enum { N = 16, IC = 64, OC = 64 };
    static float x[N * IC], w[OC * IC], dy[N * OC], out[N * OC], dx[N * IC], dw[OC * IC];
    for (long i = 0; i < N * IC; i++) x[i] = uniform();
    for (long i = 0; i < OC * IC; i++) w[i] = uniform();
    for (long i = 0; i < N * OC; i++) dy[i] = uniform();
    long sf = k->f8_scratch_floats(N, IC, OC), sb = k->f8_backward_scratch_floats(N, IC, OC);
    float *scratch = malloc((size_t)(sf > sb ? sf : sb) * sizeof(float));
    long per_layer = 0;
    for (int row = 0; row < 2; row++) {
        const ct_f8_split sp = {.ic_split = row, .oc_split = !row, .amax_max = count_amax};
        amax_calls = 0;
        k->linear_forward_f8(out, x, CT_F32, w, N, IC, OC, recipe, &sp, scratch);
        k->linear_backward_f8(dx, dw, dy, x, CT_F32, w, N, IC, OC, recipe, &sp, scratch);
        per_layer += 2 * amax_calls;  // two linears of each kind per layer
    }
    free(scratch);
    long long want = per_layer * parity_base.n_layers;
    long long got = tp_all_reduces_one_step(true) - tp_all_reduces_one_step(false);
    CHECK(got == want, "%s tp2: one step made %lld amax reductions on the tp group, its 8-bit linears ask for %lld",
          recipe_name, got, want);
    CHECK(recipe == CT_F8_RECIPE_MXFP8 || want > 0, "%s: the kernels asked for no amax reduction", recipe_name);
}

// Checkpointing per op recomputes k and w3's output; an 8-bit wqkv or w13 runs whole again there
// (its scales span the whole matrix), so the recompute is the forward's values and the run
// follows the recipe's reference, on one process and under tp 2 with sequence parallel.
static void checkpointing(void) {
    const char *options[] = {"op", "elementwise"};
    for (int o = 0; o < 2; o++) {
        ct_config c = parity_base;
        parity_set(&c, "activation_checkpoint.mode", "selective");
        parity_set(&c, "activation_checkpoint.selective_ac_option", options[o]);
        parity_result r;
        parity_train_alone(c, &r);
        char what[96];
        snprintf(what, sizeof what, "%s + checkpointing %s, one process", recipe_name, options[o]);
        parity_compare(&r, what);
        free(r.params);
    }
    ct_config saved = parity_base;
    parity_set(&parity_base, "activation_checkpoint.mode", "selective");
    parity_set(&parity_base, "activation_checkpoint.selective_ac_option", "op");
    char what[96];
    snprintf(what, sizeof what, "%s + checkpointing op, tp2+sp", recipe_name);
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true}, what);
    parity_base = saved;
}

static void recipe_cases(int n) {
    CT_MPI_RUN(fsdp_close);
    if (n == 2) {
        CT_MPI_RUN(pp2);
        CT_MPI_RUN(checkpointing);
        CT_MPI_RUN(differs_from_bf16_but_close);
        CT_MPI_RUN(shard_vs_whole);
        CT_MPI_RUN(tp_amax_reductions_wired);
        CT_MPI_RUN(tp2);
        CT_MPI_RUN(tp2_sequence_parallel);
        CT_MPI_RUN(tp2_async);
        CT_MPI_RUN(mxfp8_blocks_across_shards_refused);
    }
    if (n == 4) CT_MPI_RUN(fsdp2_tp2);
}

static void cases(int n) {
    if (n > 4) return;
    recipe_cases(n);
    if (n == 2) CT_MPI_RUN(filter);
    if (n == 2) CT_MPI_RUN(amax_max_nan_wins);
    switch_recipe("float8 rowwise", "quantization.float8.recipe", "rowwise");
    recipe_cases(n);
    switch_recipe("mxfp8", "quantization.mxfp8.enable", "true");
    recipe_cases(n);
}

int main(int argc, char **argv) {
    // Widths that leave MXFP8 whole 32-blocks and a tail-free reduction, also per rank under tp 2
    // (q 4 x 32 / 2, k and v 2 x 32 / 2, FFN 128 / 2: every shard a multiple of 32), with
    // grouped-query attention; 2 layers for pp 2.
    static const char *dims[][2] = {{"model.dim", "128"},
                                    {"model.n_layers", "2"},
                                    {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"},
                                    {"model.vocab_size", "128"},
                                    {"model.ffn_hidden_dim", "128"},
                                    {"mixed_precision", "bf16"},
                                    {"quantization.float8.enable", "true"},
                                    {"quantization.float8.recipe", "tensorwise"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
