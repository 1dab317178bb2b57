// Parity of compute (tensor) parallelism with the single-process run (tests/parity.h): tp 2
// and 4, each with and without sequence parallel and with and without loss parallel; tp 2 with
// gradient accumulation; tp 2 × FSDP 2; tp 2 × FSDP 2 × replicate 2. The model has fewer kv
// heads than heads (8 / 4), so grouped-query attention is split too. A tp degree that does not
// divide the kv heads is refused with one line.
#include "parity.h"

static int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

#define TP_CASE(name, sp, no_lp)                                                                      \
    static void name(void) {                                                                          \
        int n = world_size();                                                                         \
        char what[64];                                                                                \
        snprintf(what, sizeof what, "tp%d%s%s", n, sp ? "+sp" : "", no_lp ? "+gathered-logits" : ""); \
        parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = n, .accum = 1, .sequence_parallel = sp, \
                                   .disable_loss_parallel = no_lp},                                   \
                   what);                                                                             \
    }
TP_CASE(tp, false, false)
TP_CASE(tp_sequence_parallel, true, false)
TP_CASE(tp_gathered_logits, false, true)
TP_CASE(tp_sequence_parallel_gathered_logits, true, true)

static void tp2_accumulation(void) {
    parity_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 2, .sequence_parallel = true},
               "tp2+accum");
}
static void tp2_fsdp2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true},
               "tp2 x fsdp2");
}
static void tp2_fsdp2_replicate2(void) {
    parity_run((parity_layout){.shard = 2, .replicate = 2, .tp = 2, .accum = 1}, "tp2 x fsdp2 x replicate2");
}

// tp 4 over 2 kv heads cannot split them: refused before any work, naming both numbers.
static void tp_not_dividing_kv_heads(void) {
    ct_config c = parity_base;
    parity_set(&c, "model.n_kv_heads", "2");
    parity_set_int(&c, "parallelism.compute_parallel_degree", 4);
    parity_set_int(&c, "parallelism.data_shard_degree", 1);
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "tp 4 over 2 kv heads accepted");
    CHECK(!strcmp(ct_last_error(), "parallelism.compute_parallel_degree 4 does not divide model.n_kv_heads 2"),
          "message: %s", ct_last_error());
}

static void cases(int n) {
    if (n <= 4) {
        CT_MPI_RUN(tp);
        CT_MPI_RUN(tp_sequence_parallel);
        CT_MPI_RUN(tp_gathered_logits);
        CT_MPI_RUN(tp_sequence_parallel_gathered_logits);
    }
    if (n == 2) CT_MPI_RUN(tp2_accumulation);
    if (n == 4) CT_MPI_RUN(tp2_fsdp2);
    if (n == 4) CT_MPI_RUN(tp_not_dividing_kv_heads);
    if (n == 8) CT_MPI_RUN(tp2_fsdp2_replicate2);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.dim", "32"},        {"model.n_layers", "2"},     {"model.n_heads", "8"},
                                    {"model.n_kv_heads", "4"},  {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "72"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
