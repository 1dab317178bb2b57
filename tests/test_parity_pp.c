// Parity of pipeline execution with the single-process run (tests/parity.h): every schedule at
// pipeline degree 2 and 4 (the looped ones with 2 stages per rank), a pipeline micro-batch
// smaller than the loader's, a hand-written CSV schedule, pp 2 x FSDP 2, pp 2 x tp 2 (+ sequence
// parallel), and pp 2 x tp 2 x FSDP 2 on 8 ranks. Splits and micro-batch counts a schedule
// cannot run are refused before any work with one line.
#include <unistd.h>

#include "parity.h"

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

static const struct {
    const char *name;
    int vpp;
} schedules[] = {
    {"gpipe", 1}, {"1f1b", 1}, {"interleaved_1f1b", 2}, {"looped_bfs", 2}, {"zb_h1", 1}, {"interleaved_zb", 2},
    {"zbv", 2},
};

// Every schedule over the whole world as the pipeline: 8 micro-batches of one sequence (a
// multiple of 2 and 4, as the interleaved schedules need).
static void every_schedule(void) {
    int pp = world_size();
    for (size_t i = 0; i < sizeof schedules / sizeof schedules[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "pp%d %s (%d stages per rank)", pp, schedules[i].name, schedules[i].vpp);
        parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 8, .pp = pp,
                                   .vpp = schedules[i].vpp, .schedule = schedules[i].name},
                   what);
    }
}

// A looped schedule left at the default of one stage per rank runs with two.
static void looped_default_stages(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule = "interleaved_1f1b"},
               "pp2 interleaved_1f1b, stages per rank left at 1");
}

// The loader's micro-batch of 4 sequences cut into pipeline micro-batches of 1: 8 in all.
static void pipeline_microbatches(void) {
    ct_config saved = parity_base;
    parity_set(&parity_base, "parallelism.pipeline_microbatch_size", "1");
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"},
               "pp2 1f1b, pipeline micro-batches of 1 sequence");
    parity_base = saved;
}

// A schedule written by hand (GPipe-like forwards, then backwards in order), run from a file.
static void hand_written_csv(void) {
    // One file, made by rank 0 and named to all: every rank must run the same configuration.
    char path[] = "/tmp/ct_pp_schedule_XXXXXX";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int fd = rank == 0 ? mkstemp(path) : -1;
    MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(rank != 0 || fd >= 0, "mkstemp");
    const char *csv = "# stage 0 on rank 0, stage 1 on rank 1; 4 micro-batches\n"
                      "0F0,0SEND_F0,0F1,0SEND_F1,0F2,0SEND_F2,0F3,0SEND_F3,"
                      "0RECV_B0,0B0,0RECV_B1,0B1,0RECV_B2,0B2,0RECV_B3,0B3,REDUCE_GRADS,RESHARD\n"
                      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,"
                      "1RECV_F2,1F2,1B2,1SEND_B2,1RECV_F3,1F3,1B3,1SEND_B3,REDUCE_GRADS,RESHARD\n";
    if (rank == 0 && (long)write(fd, csv, strlen(csv)) != (long)strlen(csv)) CHECK(0, "write %s", path);
    if (rank == 0) close(fd);
    MPI_Barrier(MPI_COMM_WORLD);  // written before anyone reads it
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .schedule_file = path},
               "pp2 hand-written CSV");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) unlink(path);
}

static void pp2_fsdp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"},
               "pp2 x fsdp2 1f1b");
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 4, .pp = 2, .vpp = 2,
                               .schedule = "interleaved_1f1b"},
               "pp2 x fsdp2 interleaved");
}

// tp + sp over pipeline stages.
static void pp2_tp2(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 4, .pp = 2, .schedule = "zb_h1",
                               .sequence_parallel = true},
               "pp2 x tp2+sp zb_h1");
}

static void pp2_tp2_fsdp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 2, .pp = 2, .vpp = 2,
                               .schedule = "interleaved_1f1b", .sequence_parallel = true},
               "pp2 x tp2+sp x fsdp2 interleaved");
}

// Refused before any work, with one line that names the setting to change and what would work.
static void refusals(void) {
    static const struct {
        const char *key, *value, *want;
    } cases[] = {
        {"parallelism.pipeline_stages_per_rank", "8",
         "parallelism.pipeline_degree 2 x parallelism.pipeline_stages_per_rank 8 = 16 stages, more than the model's 8 "
         "blocks: lower parallelism.pipeline_stages_per_rank"},
        {"parallelism.pipeline_stages_per_rank", "2",
         "pipeline_schedule 1f1b runs one stage per rank, not 2: set parallelism.pipeline_stages_per_rank 1"},
        {"parallelism.pipeline_split_points", "layers.0", "leaves stage 0 without blocks"},
        {"parallelism.pipeline_layers_per_stage", "3", "parallelism.pipeline_layers_per_stage: 3 x 2 stages = 6 blocks"},
        {"gradient_accumulation_steps", "3",
         "needs a multiple of parallelism.pipeline_degree 2 micro-batches per step, and this run has 3 "
         "(gradient_accumulation_steps 3 x micro_batch_size 1 / 1 sequences per pipeline micro-batch): set "
         "gradient_accumulation_steps 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_config c = parity_base;
        parity_set_int(&c, "parallelism.pipeline_degree", 2);
        parity_set_int(&c, "parallelism.data_shard_degree", 1);
        parity_set_int(&c, "micro_batch_size", 1);
        if (strstr(cases[i].want, "multiple")) {
            parity_set(&c, "pipeline_schedule", "interleaved_1f1b");
            parity_set_int(&c, "parallelism.pipeline_stages_per_rank", 2);
        }
        parity_set(&c, cases[i].key, cases[i].value);
        static ct_trainer t;
        CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "%s = %s accepted", cases[i].key, cases[i].value);
        CHECK(strstr(ct_last_error(), cases[i].want) != NULL && !strchr(ct_last_error(), '\n'), "%s: got '%s'",
              cases[i].key, ct_last_error());
    }
}

static void cases(int n) {
    if (n <= 4) CT_MPI_RUN(every_schedule);
    if (n == 2) CT_MPI_RUN(pipeline_microbatches);
    if (n == 2) CT_MPI_RUN(looped_default_stages);
    if (n == 2) CT_MPI_RUN(hand_written_csv);
    if (n == 2) CT_MPI_RUN(refusals);
    if (n == 4) CT_MPI_RUN(pp2_fsdp2);
    if (n == 4) CT_MPI_RUN(pp2_tp2);
    if (n == 8) CT_MPI_RUN(pp2_tp2_fsdp2);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.dim", "32"},       {"model.n_layers", "8"},     {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"}, {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "64"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
