// Parity of context parallel with the single-process run (tests/parity.h): cp 2 and 4, each
// with both rotate methods (all-gather, ring) and both splits (head-tail, contiguous); cp 2 x
// FSDP 2; cp 2 x tp 2 (+ sequence parallel); pp 2 x cp 2 x tp 2 on 8 ranks; and the 4-D layout
// pp 2 x FSDP 2 x cp 2 x tp 2 on 16 ranks. A sequence length the split cannot cut is refused with
// one line.
#include "parity.h"

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

static void cp_run(parity_layout l, const char *rotate, const char *balance, const char *what) {
    ct_config saved = parity_base;
    parity_set(&parity_base, "parallelism.context_parallel_rotate_method", rotate);
    parity_set(&parity_base, "parallelism.context_parallel_load_balancer", balance);
    parity_run(l, what);
    parity_base = saved;
}

// The whole world as the cp group, every method and split.
static void every_method_and_split(void) {
    int cp = world_size();
    const char *rotates[] = {"allgather", "ring"}, *balances[] = {"headtail", "none"};
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++) {
            char what[64];
            snprintf(what, sizeof what, "cp%d %s %s", cp, rotates[r], balances[b]);
            cp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .cp = cp}, rotates[r],
                   balances[b], what);
        }
}

static void cp2_fsdp2(void) {
    cp_run((parity_layout){.shard = 2, .replicate = 1, .tp = 1, .accum = 1, .cp = 2}, "ring", "headtail",
           "cp2 x fsdp2 ring");
}

static void cp2_tp2(void) {
    cp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .cp = 2, .sequence_parallel = true},
           "allgather", "headtail", "cp2 x tp2+sp allgather");
}

// 8 ranks: pipeline 2 x cp 2 x tp 2 (1F1B, 2 micro-batches).
static void pp2_cp2_tp2(void) {
    cp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 2, .cp = 2, .pp = 2, .schedule = "1f1b"},
           "ring", "headtail", "pp2 x cp2 x tp2 ring");
}

// 16 ranks, the seed's 4-D layout: pipeline 2 x data sharding 2 x cp 2 x tp 2 (+ sequence
// parallel), ring attention, pipeline micro-batches of 2 sequences.
static void four_d(void) {
    ct_config saved = parity_base;
    parity_set(&parity_base, "parallelism.pipeline_microbatch_size", "2");
    cp_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .cp = 2, .pp = 2, .schedule = "1f1b",
                           .sequence_parallel = true},
           "ring", "headtail", "pp2 x fsdp2 x cp2 x tp2+sp ring");
    parity_base = saved;
}

static void refusals(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.context_extension_degree", 2);
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    parity_set_int(&c, "training.seq_len", 18);  // 18 tokens: not 4 equal head-tail chunks
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "seq_len 18 over cp 2 accepted");
    CHECK(strstr(ct_last_error(), "18") && !strchr(ct_last_error(), '\n'), "message: %s", ct_last_error());
}

static void cases(int n) {
    if (n <= 4) CT_MPI_RUN(every_method_and_split);
    if (n == 2) CT_MPI_RUN(refusals);
    if (n == 4) CT_MPI_RUN(cp2_fsdp2);
    if (n == 4) CT_MPI_RUN(cp2_tp2);
    if (n == 8) CT_MPI_RUN(pp2_cp2_tp2);
    if (n == 16) CT_MPI_RUN(four_d);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.dim", "32"},       {"model.n_layers", "2"},     {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"}, {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "64"}};
    parity_extra_ranks = 16;
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
