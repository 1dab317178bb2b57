// The planner's memory model (plan/memory_model.h) against the trainer's own accounting.
//
// MPI cases (1, 2 and 4 ranks): for each of 33 layouts of a tiny model, build the trainer in-process,
// run one step, and compare what the memory tracker saw -- the peak of each category
// (core/memory.h) from just before ct_trainer_init to the end of the step -- with the model's
// prediction for this rank's pipeline rank. The tracker's figure comes from the real allocations,
// not from the model, so the comparison can fail. Parameters, gradients, optimizer state,
// activations and communication must agree to the byte; "other" may exceed the prediction by
// what the bf16 GEMM library asks for at its first call (the model does not count it).
//
// Pure cases: parameters, gradients and optimizer bytes of the 8B and 70B flavors at
// dp_shard 8, against numbers computed here from the published dimensions.
#include <errno.h>
#include <math.h>

#include "core/config.h"
#include "core/memory.h"
#include "mpi_test.h"
#include "plan/memory_model.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *key, const char *value) {
    if (ct_config_set(c, key, value)) ct_fatal("test", "%s", ct_last_error());
}

// The tiny model: 4 blocks, dim 32, 4 heads over 2 kv heads, vocab 64, seq 16.
static ct_config tiny(void) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {
        {"model.dim", "32"},          {"model.n_layers", "4"},        {"model.n_heads", "4"},
        {"model.n_kv_heads", "2"},    {"model.vocab_size", "64"},     {"model.ffn_hidden_dim", "64"},
        {"training.seq_len", "16"},   {"training.steps", "2"},        {"training.dataset", "synthetic"},
        {"metrics.peak_tflops", "1"}, {"training.seed", "3"},         {"micro_batch_size", "4"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(&c, kv[i][0], kv[i][1]);
    return c;
}

// One layout: settings over tiny(), as "key=value" strings.
typedef struct {
    const char *name;
    int np;                 // world size it runs at
    const char *kv[8];
} layout;

static const layout layouts[] = {
    // one rank: checkpointing, precision, compile, accumulation
    {"single_fp32", 1, {NULL}},
    {"ac_op", 1, {"activation_checkpoint.mode=selective", "activation_checkpoint.selective_ac_option=op"}},
    {"ac_every2", 1, {"activation_checkpoint.mode=selective", "activation_checkpoint.selective_ac_option=2"}},
    {"ac_full", 1, {"activation_checkpoint.mode=full"}},
    {"bf16", 1, {"mixed_precision=bf16"}},
    {"float8_tensorwise", 1, {"quantization.float8.enable=true", "quantization.filter_fqns=output"}},
    {"float8_rowwise_bf16", 1, {"quantization.float8.enable=true", "quantization.float8.recipe=rowwise",
                                "quantization.filter_fqns=output", "mixed_precision=bf16"}},
    {"mxfp8", 1, {"quantization.mxfp8.enable=true", "quantization.filter_fqns=output"}},
    {"compile", 1, {"compile.enable=true"}},
    {"accum2", 1, {"gradient_accumulation_steps=2", "micro_batch_size=2"}},
    {"validation_loader", 1, {"validation.enable=true", "validation.steps=1"}},
    // two ranks
    {"fsdp", 2, {"parallelism.data_shard_degree=2"}},
    {"fsdp_async_bf16", 2, {"parallelism.data_shard_degree=2", "parallelism.enable_async_comm=true",
                            "mixed_precision=bf16", "mixed_precision_reduce=bf16"}},
    {"fsdp_never", 2, {"parallelism.data_shard_degree=2", "parallelism.fsdp_reshard_after_forward=never"}},
    // async checkpoint staging; job.dump_folder is the parent's temporary folder (nothing is saved)
    {"fsdp_async_checkpoint", 2, {"parallelism.data_shard_degree=2", "checkpoint.enable=true",
                                  "checkpoint.async_mode=async", "job.dump_folder=$TMP"}},
    {"fsdp_always_ac_full", 2, {"parallelism.data_shard_degree=2", "parallelism.fsdp_reshard_after_forward=always",
                                "activation_checkpoint.mode=full"}},
    {"cp_ring_no_balancer", 2, {"parallelism.data_shard_degree=1", "parallelism.context_extension_degree=2",
                                "parallelism.context_parallel_rotate_method=ring",
                                "parallelism.context_parallel_load_balancer=none"}},
    {"ddp", 2, {"parallelism.data_shard_degree=1", "parallelism.data_replicate_degree=2"}},
    {"tp_sp", 2, {"parallelism.data_shard_degree=1", "parallelism.compute_parallel_degree=2",
                  "sequence_parallel.enable=true"}},
    {"tp_no_loss_parallel", 2, {"parallelism.data_shard_degree=1", "parallelism.compute_parallel_degree=2",
                                "parallelism.disable_loss_parallel=true"}},
    {"pp_1f1b", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2", "pipeline_schedule=1f1b",
                    "parallelism.pipeline_microbatch_size=1"}},
    {"pp_gpipe", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2", "pipeline_schedule=gpipe",
                     "parallelism.pipeline_microbatch_size=1"}},
    {"pp_interleaved_1f1b", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2",
                                "pipeline_schedule=interleaved_1f1b", "parallelism.pipeline_microbatch_size=1"}},
    {"pp_zb_h1", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2", "pipeline_schedule=zb_h1",
                     "parallelism.pipeline_microbatch_size=1"}},
    {"pp_looped_bfs_mb2", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2",
                              "pipeline_schedule=looped_bfs", "parallelism.pipeline_microbatch_size=2"}},
    {"pp_zbv", 2, {"parallelism.data_shard_degree=1", "parallelism.pipeline_degree=2", "pipeline_schedule=zbv",
                   "parallelism.pipeline_microbatch_size=1"}},
    {"cp_allgather", 2, {"parallelism.data_shard_degree=1", "parallelism.context_extension_degree=2",
                         "parallelism.context_parallel_rotate_method=allgather"}},
    {"cp_ring_fsdp", 2, {"parallelism.data_shard_degree=1", "parallelism.context_extension_degree=2",
                         "parallelism.context_parallel_rotate_method=ring"}},
    // four ranks
    {"hsdp_2x2", 4, {"parallelism.data_shard_degree=2", "parallelism.data_replicate_degree=2",
                     "mixed_precision_reduce=bf16"}},
    {"fsdp4_async", 4, {"parallelism.data_shard_degree=4", "parallelism.enable_async_comm=true",
                        "micro_batch_size=1"}},
    {"pp2_fsdp2_1f1b", 4, {"parallelism.data_shard_degree=2", "parallelism.pipeline_degree=2",
                           "pipeline_schedule=1f1b", "parallelism.pipeline_microbatch_size=1"}},
    {"pp2_fsdp2_interleaved_zb_async", 4, {"parallelism.data_shard_degree=2", "parallelism.pipeline_degree=2",
                                           "pipeline_schedule=interleaved_zb", "parallelism.pipeline_stages_per_rank=2",
                                           "parallelism.pipeline_microbatch_size=1",
                                           "parallelism.enable_async_comm=true"}},
    {"tp2_cp2_ring", 4, {"parallelism.data_shard_degree=1", "parallelism.compute_parallel_degree=2",
                         "parallelism.context_extension_degree=2", "parallelism.context_parallel_rotate_method=ring",
                         "sequence_parallel.enable=true"}},
};

static const layout *current;

// Builds the layout's trainer, runs one step, and checks every category on this rank.
static void check_layout(void) {
    const layout *L = current;
    ct_config c = tiny();
    for (int i = 0; i < 8 && L->kv[i]; i++) {
        char key[128];
        const char *eq = strchr(L->kv[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - L->kv[i]), L->kv[i]);
        const char *tmp = getenv("CT_TEST_PLAN_MEMORY_DIR");
        set(&c, key, strcmp(eq + 1, "$TMP") ? eq + 1 : tmp ? tmp : "/tmp");
    }
    size_t base[CT_MEM_NCATEGORIES];
    // On the run's device: what the memory model predicts (on the cpu the host, staging included).
    const ct_kernels *kern = ct_kernels_get(c.train_device);
    ct_device dev = ct_kernels_device(kern);
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) base[k] = ct_mem_current_on(dev, (ct_mem_category)k);
    ct_mem_reset_peaks();
    static ct_trainer t;
    if (ct_trainer_init(&t, &c, NULL)) {
        CHECK(0, "%s: trainer init: %s", L->name, ct_last_error());
        return;
    }
    ct_trainer_step(&t);
    double measured[CT_MEM_NCATEGORIES];
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++)
        measured[k] = (double)ct_mem_peak_on(dev, (ct_mem_category)k) - (double)base[k];
    // The prediction for this rank's pipeline rank, from the trainer's effective configuration
    // (the vocabulary resolved as start-up resolved it).
    ct_plan_memory want, worst;
    int pp_rank = t.mesh.coord[CT_MESH_PP];
    ct_status st = ct_plan_memory_pp_rank(&t.model, &t.cfg, t.world.size, pp_rank, &want);
    ct_status st2 = ct_plan_memory_rank(&t.model, &t.cfg, t.world.size, &worst);
    int world = t.world.size;
    ct_trainer_free(&t);
    CHECK(st == CT_OK && st2 == CT_OK, "%s: memory model: %s", L->name, ct_last_error());
    if (st || st2) return;
    // Largest relative difference per category over every rank, for the summary line.
    double rel[CT_MEM_NCATEGORIES], total_measured = 0;
    for (int k = 0; k < CT_MEM_NCATEGORIES; k++) {
        double d = measured[k] - want.bytes[k];
        rel[k] = measured[k] > 0 ? fabs(d) / measured[k] : fabs(d);
        total_measured += measured[k];
        if (k == CT_MEM_OTHER) {
            // bf16 GEMM scratch (oneDNN's scratchpad, at the first call) is the one thing not counted.
            CHECK(d >= 0 && (d == 0 || !strcmp(c.mixed_precision, "bf16")),
                  "%s rank %d: %s measured %.0f, predicted %.0f bytes", L->name, t.world.rank,
                  ct_mem_category_name((ct_mem_category)k), measured[k], want.bytes[k]);
        } else {
            CHECK(d == 0, "%s rank %d: %s measured %.0f, predicted %.0f bytes", L->name, t.world.rank,
                  ct_mem_category_name((ct_mem_category)k), measured[k], want.bytes[k]);
        }
    }
    double total_rel = fabs(total_measured - want.total) / total_measured;
    MPI_Allreduce(MPI_IN_PLACE, rel, CT_MEM_NCATEGORIES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &total_rel, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // The worst pipeline rank's total is the largest measured total.
    double worst_measured = total_measured;
    MPI_Allreduce(MPI_IN_PLACE, &worst_measured, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double other_slack = worst_measured - worst.total;
    CHECK(other_slack >= 0 && other_slack <= 0.10 * worst_measured, "%s: worst rank measured %.0f, predicted %.0f",
          L->name, worst_measured, worst.total);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("  %-32s np %d: predicted %8.1f KiB on pp rank %d; max |error| params %.2g grads %.2g optim %.2g "
               "act %.2g comm %.2g other %.2g total %.2g\n",
               L->name, world, worst.total / 1024, worst.worst_pp_rank, rel[0], rel[1], rel[2], rel[3], rel[4],
               rel[5], total_rel);
}

// ------------------------------------------------------------------ pure: 8B and 70B

// Llama 3 8B: dim 4096, 32 layers, 32 heads of 128, 8 kv heads, FFN 14336, vocab 128256.
//   embedding  128256 x 4096                                   = 525,336,576
//   block      wq 4096^2 = 16,777,216; wk, wv 1024 x 4096 = 4,194,304 each; wo 16,777,216;
//              w1, w3, w2 14336 x 4096 = 58,720,256 each; two norms 2 x 4096
//              = 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000
//   head       norm 4096 + output 525,336,576                  = 525,340,672
//   total      525,336,576 + 32 x 218,112,000 + 525,340,672     = 8,030,261,248
// Every group divides by 8, so at dp_shard 8 a rank holds 8,030,261,248 / 8 = 1,003,782,656
// fp32 elements. Data sharding (fp32, blocking, reshard default) adds two gather slots and one
// whole-gradient buffer of the largest group (the head, 525,340,672):
//   params  (1,003,782,656 + 2 x 525,340,672) x 4 = 2,054,464,000 x 4 = 8,217,856,000 bytes
//   grads   (1,003,782,656 + 525,340,672) x 4     = 6,116,493,312 bytes
//   optim   AdamW m and v: 2 x 1,003,782,656 x 4   = 8,030,261,248 bytes
// Llama 3 70B: dim 8192, 80 layers, 64 heads of 128, 8 kv heads, FFN 28672, vocab 128256.
//   embedding  128256 x 8192 = 1,050,673,152
//   block      wq, wo 8192^2 = 67,108,864 each; wk, wv 1024 x 8192 = 8,388,608 each;
//              w1, w3, w2 28672 x 8192 = 234,881,024 each; norms 2 x 8192
//              = 134,217,728 + 16,777,216 + 704,643,072 + 16,384 = 855,654,400
//   head       8192 + 1,050,673,152 = 1,050,681,344
//   total      1,050,673,152 + 80 x 855,654,400 + 1,050,681,344 = 70,553,706,496; / 8 = 8,819,213,312
//   params  (8,819,213,312 + 2 x 1,050,681,344) x 4 = 10,920,576,000 x 4 = 43,682,304,000 bytes
//   grads   (8,819,213,312 + 1,050,681,344) x 4     = 39,479,578,624 bytes
//   optim   2 x 8,819,213,312 x 4                    = 70,553,706,496 bytes
static void flavor_case(const char *flavor, double params, double grads, double optim) {
    ct_config c;
    ct_config_defaults(&c);
    set(&c, "model.flavor", flavor);
    set(&c, "parallelism.data_shard_degree", "8");
    set(&c, "training.dataset", "synthetic");
    set(&c, "training.seq_len", "2048");
    set(&c, "micro_batch_size", "1");
    ct_model_config m;
    if (ct_model_config_from(&m, &c)) {
        CHECK(0, "%s: %s", flavor, ct_last_error());
        return;
    }
    ct_plan_memory p;
    if (ct_plan_memory_rank(&m, &c, 8, &p)) {
        CHECK(0, "%s: %s", flavor, ct_last_error());
        return;
    }
    CHECK(p.bytes[CT_MEM_PARAMS] == params, "%s params %.0f, expected %.0f", flavor, p.bytes[CT_MEM_PARAMS], params);
    CHECK(p.bytes[CT_MEM_GRADS] == grads, "%s grads %.0f, expected %.0f", flavor, p.bytes[CT_MEM_GRADS], grads);
    CHECK(p.bytes[CT_MEM_OPTIM] == optim, "%s optim %.0f, expected %.0f", flavor, p.bytes[CT_MEM_OPTIM], optim);
    printf("  %s at dp_shard 8: %.2f GiB per rank (params %.2f, grads %.2f, optim %.2f, activations %.2f, comm %.2f)\n",
           flavor, p.total / 1073741824.0, p.bytes[CT_MEM_PARAMS] / 1073741824.0, p.bytes[CT_MEM_GRADS] / 1073741824.0,
           p.bytes[CT_MEM_OPTIM] / 1073741824.0, p.bytes[CT_MEM_ACTIVATIONS] / 1073741824.0,
           p.bytes[CT_MEM_COMM] / 1073741824.0);
}

static void flavor_8b(void) { flavor_case("8B", 8217856000.0, 6116493312.0, 8030261248.0); }
static void flavor_70b(void) { flavor_case("70B", 43682304000.0, 39479578624.0, 70553706496.0); }

// A layout that cannot be built is refused with one line, as the trainer refuses it.
static void refuses_bad_layout(void) {
    ct_config c = tiny();
    set(&c, "parallelism.data_shard_degree", "3");
    ct_model_config m;
    ct_model_config_from(&m, &c);
    ct_plan_memory p;
    CHECK(ct_plan_memory_rank(&m, &c, 4, &p) == CT_ERR, "dp_shard 3 on 4 ranks was accepted");
    CHECK(strstr(ct_last_error(), "world") != NULL, "message: %s", ct_last_error());
}

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(flavor_8b);
        CT_RUN(flavor_70b);
        CT_RUN(refuses_bad_layout);
        setenv("OMP_NUM_THREADS", "1", 1);  // ranks share this machine's cores
        char dir[] = "/tmp/ct_test_plan_memory.XXXXXX";
        if (!mkdtemp(dir)) ct_fatal("test", "mkdtemp: %s", strerror(errno));
        setenv("CT_TEST_PLAN_MEMORY_DIR", dir, 1);  // the children's job.dump_folder
        int rc = 0;
        rc |= ct_mpi_test_spawn(argv[0], 1, 120, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 2, 120, NULL);
        rc |= ct_mpi_test_spawn(argv[0], 4, 120, NULL);
        char cmd[96];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
        return (rc || ct_test_failures) ? 1 : 0;
    }
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        if (layouts[i].np != n) continue;
        current = &layouts[i];
        ct_test_case_failed = 0;
        check_layout();
        int any, rank;
        MPI_Allreduce(&ct_test_case_failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) printf("%s plan_memory_%s_np%d\n", any ? "FAIL" : "PASS", layouts[i].name, n);
        fflush(stdout);
        ct_test_failures += any;
    }
    ct_comm_finalize();
    CT_TEST_EXIT();
}
