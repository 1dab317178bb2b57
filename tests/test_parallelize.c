// ct_parallelize (parallel/parallelize.h) in sizing mode, on groups that are plain structs: where
// the stages go and which this rank builds, the lists it plans (data sharding's per-stage
// gathers, the forward-only list written out by hand), the gradient reducers, the caller's
// pipeline-list cache, refusals with one line, and ct_parallelized_free leaving nothing behind.
#include <string.h>

#include "core/error.h"
#include "model/params.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_schedules.h"
#include "test.h"

static void set(ct_config *c, const char *key, const char *value) {
    if (ct_config_set(c, key, value)) ct_fatal("test", "%s", ct_last_error());
}

// 4 blocks, dim 32, 4 heads over 2 kv heads, vocab 64, seq 16; 2 sequences a micro-batch, cut
// into pipeline micro-batches of 1.
static ct_config tiny(void) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {
        {"model.dim", "32"},        {"model.n_layers", "4"},       {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},  {"model.vocab_size", "64"},    {"model.ffn_hidden_dim", "64"},
        {"training.seq_len", "16"}, {"training.dataset", "synthetic"}, {"micro_batch_size", "2"},
        {"parallelism.pipeline_microbatch_size", "1"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(&c, kv[i][0], kv[i][1]);
    return c;
}

// One rank's set-up, sized.
typedef struct {
    ct_config cfg;
    ct_model_config model;
    ct_param_table table;
    ct_group g_fsdp, g_rep, g_cp, g_pp, g_tp;
    ct_tp tp;
    ct_mem_sizing sizing;
    ct_fsdp fsdp;
    ct_cp cp;
    ct_executor exec;
    ct_schedule train, eval;
    ct_parallelized par;
} rig;

// The precision build_with hands to ct_parallelize (fp32 unless a test says otherwise).
static ct_precision rig_prec;

// tiny() with the n_kv settings of kv (key, value pairs), as pp rank pp_rank of pp, data sharding
// over fsdp ranks.
static ct_status build_with(rig *r, const char *const *kv, int n_kv, int pp, int pp_rank, int fsdp,
                            ct_parallelize_cache *cache) {
    memset(r, 0, sizeof *r);
    r->cfg = tiny();
    for (int i = 0; i < n_kv; i++) set(&r->cfg, kv[2 * i], kv[2 * i + 1]);
    if (ct_model_config_from(&r->model, &r->cfg)) ct_fatal("test", "%s", ct_last_error());
    ct_param_table_build_tp(&r->table, &r->model, 0, 1);
    const ct_kernels *k = ct_kernels_get("cpu");
    r->g_fsdp = (ct_group){.name = "fsdp", .rank = 0, .size = fsdp};
    r->g_rep = (ct_group){.name = "dp_replicate", .rank = 0, .size = 1};
    r->g_cp = (ct_group){.name = "cp", .rank = 0, .size = 1};
    r->g_pp = (ct_group){.name = "pp", .rank = pp_rank, .size = pp};
    r->g_tp = (ct_group){.name = "tp", .rank = 0, .size = 1};
    r->tp = (ct_tp){.k = k, .group = &r->g_tp, .store = &r->fsdp.store};
    r->par = (ct_parallelized){.fsdp = &r->fsdp, .cp = &r->cp, .exec = &r->exec, .train_schedule = &r->train,
                               .eval_schedule = &r->eval};
    ct_parallelize_env env = {
        .cfg = &r->cfg, .k = k, .model = &r->model, .local_model = &r->model, .table = &r->table,
        .fsdp = &r->g_fsdp, .replicate = &r->g_rep, .cp = &r->g_cp, .pp = &r->g_pp, .tp = &r->tp,
        .prec = rig_prec, .seq_local = r->cfg.seq_len, .mb_seqs = 1, .sizing = &r->sizing, .cache = cache,
    };
    return ct_parallelize(&env, &r->par);
}

static void release(rig *r) {
    ct_parallelized_free(&r->par);
    ct_param_table_free(&r->table);
}

// Under bf16 the gather slots hold each group's bf16 copy, and fp32 only for what reads fp32:
// the norm weights (two per block, dim 32 each; the head's one), never the matrices, the
// embedding or the output projection. With 8-bit layers the blocks' matrices get fp32 too (the
// 8-bit layers quantise from fp32); the vocabulary matrices still not.
static void test_bf16_slots_hold_fp32_only_where_read(void) {
    rig r;
    rig_prec = (ct_precision){.compute = CT_BF16, .weights_bf16 = true};
    CHECK(build_with(&r, NULL, 0, 1, 0, 2, NULL) == CT_OK, "%s", ct_last_error());
    CHECK(r.fsdp.slot_numel == 2 * 32, "bf16: fp32 slot of %ld floats (want the block's two norms, 64)",
          r.fsdp.slot_numel);
    for (int i = 0; i < r.table.count; i++) {
        const ct_param *p = &r.table.params[i];
        CHECK((r.fsdp.f32_at[i] < 0) == p->read_bf16, "%s: fp32 place %ld", p->name, r.fsdp.f32_at[i]);
    }
    release(&r);
    rig_prec = (ct_precision){.compute = CT_BF16, .quantized = true};
    CHECK(build_with(&r, NULL, 0, 1, 0, 2, NULL) == CT_OK, "%s", ct_last_error());
    long block = r.table.group_offset[2] - r.table.group_offset[1];
    CHECK(r.fsdp.slot_numel == block, "bf16 + 8-bit: fp32 slot of %ld floats (want a whole block, %ld)",
          r.fsdp.slot_numel, block);
    CHECK(r.fsdp.f32_at[0] < 0, "the embedding got an fp32 copy under 8-bit layers");
    release(&r);
    rig_prec = ct_precision_fp32();
}

// What ct_parallelized_free must leave: nothing made, the caller's pieces zeroed.
static void check_freed(const rig *r) {
    CHECK(!r->par.stages && !r->par.stage_rank && !r->par.first_layer && r->par.n_stages == 0, "arrays left");
    CHECK(!r->exec.stage && r->exec.n_reducers == 0, "executor left");
    CHECK(!r->train.actions && !r->eval.actions, "schedules left");
    CHECK(!r->fsdp.store.shards && r->fsdp.local_numel == 0, "data sharding left");
}

// Interleaved 1F1B over pp 2 (2 stages per rank) on pp rank 1, data sharding over 2 ranks.
static void test_interleaved_placement(void) {
    rig r;
    const char *kv[] = {"pipeline_schedule", "interleaved_1f1b"};
    CHECK(build_with(&r, kv, 1, 2, 1, 2, NULL) == CT_OK, "%s", ct_last_error());
    int want_rank[4] = {0, 1, 0, 1}, want_first[5] = {0, 1, 2, 3, 4};
    CHECK(r.par.n_stages == 4 && r.par.n_mb == 2, "%d stages, %d micro-batches", r.par.n_stages, r.par.n_mb);
    for (int s = 0; s < 4 && r.par.n_stages == 4; s++) {
        CHECK(r.par.stage_rank[s] == want_rank[s], "stage %d on rank %d", s, r.par.stage_rank[s]);
        CHECK((r.par.stages[s].sizing != NULL) == (want_rank[s] == 1), "stage %d built: %d", s,
              r.par.stages[s].sizing != NULL);
    }
    for (int s = 0; s < 5 && r.par.n_stages == 4; s++)
        CHECK(r.par.first_layer[s] == want_first[s], "first_layer[%d] = %d", s, r.par.first_layer[s]);
    CHECK(r.exec.n_reducers == 2, "%d gradient reducers (want FSDP replicas and tp)", r.exec.n_reducers);
    // Data sharding over 2 ranks gathers this rank's stages once each: UNSHARD 1 and 3, nothing of 0, 2.
    int unshard[4] = {0};
    for (int i = 0; i < r.train.count; i++)
        if (r.train.actions[i].kind == CT_ACT_UNSHARD) unshard[r.train.actions[i].stage]++;
    CHECK(unshard[0] == 0 && unshard[1] == 1 && unshard[2] == 0 && unshard[3] == 1, "UNSHARD %d %d %d %d",
          unshard[0], unshard[1], unshard[2], unshard[3]);
    char buf[512];
    ct_schedule_format(&r.eval, buf, sizeof buf);
    const char *want = "1RECV_F0 1F0 1SEND_F0 3RECV_F0 3F0 1RECV_F1 1F1 1SEND_F1 3RECV_F1 3F1 RESHARD";
    CHECK(!strcmp(buf, want), "forward-only %s, want %s", buf, want);
    release(&r);
    check_freed(&r);
}

// With a cache, every pp rank's list is the one a run generates and checks, and the lists stay
// for the next call; freeing the cache empties it.
static void test_cache(void) {
    ct_parallelize_cache cache = {0};
    const char *kv[] = {"pipeline_schedule", "1f1b"};
    for (int me = 0; me < 2; me++) {
        rig a, b;
        CHECK(build_with(&a, kv, 1, 2, me, 1, &cache) == CT_OK, "cached: %s", ct_last_error());
        CHECK(build_with(&b, kv, 1, 2, me, 1, NULL) == CT_OK, "checked: %s", ct_last_error());
        char x[512], y[512];
        ct_schedule_format(&a.train, x, sizeof x);
        ct_schedule_format(&b.train, y, sizeof y);
        CHECK(!strcmp(x, y) && a.train.count > 0, "rank %d: cached %s, generated %s", me, x, y);
        CHECK(cache.lists && cache.pp == 2 && !strcmp(cache.name, "1f1b"), "cache holds %s over %d", cache.name,
              cache.pp);
        release(&a);
        release(&b);
    }
    ct_parallelize_cache_free(&cache);
    CHECK(!cache.lists && !cache.name[0], "cache not emptied");
}

// A weight pass after checkpointing's recompute is refused, naming the schedule; what was built
// by then is freed.
static void test_refuses_checkpointing_with_split_backward(void) {
    rig r;
    const char *kv[] = {"pipeline_schedule", "zbv", "activation_checkpoint.mode", "full"};
    CHECK(build_with(&r, kv, 2, 2, 0, 1, NULL) == CT_ERR, "zbv with full checkpointing was accepted");
    CHECK(strstr(ct_last_error(), "activation checkpointing") && strstr(ct_last_error(), "zbv"), "message: %s",
          ct_last_error());
    release(&r);
    check_freed(&r);
}

// Stages per rank without a pipeline: one line naming both settings.
static void test_refuses_stages_per_rank_without_pipeline(void) {
    rig r;
    const char *kv[] = {"parallelism.pipeline_stages_per_rank", "2"};
    CHECK(build_with(&r, kv, 1, 1, 0, 1, NULL) == CT_ERR, "2 stages per rank without a pipeline was accepted");
    CHECK(strstr(ct_last_error(), "parallelism.pipeline_stages_per_rank 2") &&
              strstr(ct_last_error(), "parallelism.pipeline_degree"),
          "message: %s", ct_last_error());
    release(&r);
    check_freed(&r);
}

int main(void) {
    rig_prec = ct_precision_fp32();
    CT_RUN(test_interleaved_placement);
    CT_RUN(test_cache);
    CT_RUN(test_bf16_slots_hold_fp32_only_where_read);
    CT_RUN(test_refuses_checkpointing_with_split_backward);
    CT_RUN(test_refuses_stages_per_rank_without_pipeline);
    CT_TEST_EXIT();
}
