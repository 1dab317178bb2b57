// Parity of the data-parallel layouts with the single-process run (tests/parity.h): FSDP at 2,
// 4 and 8 ranks (8 pads every group: dim 36), DDP at 2 and 4, HSDP 2×2, FSDP with gradient
// accumulation. At 8 ranks the parameter, gradient and optimizer memory per rank is checked
// against 1/7 of the single-process figure.
#include "parity.h"

static void fsdp(void) { parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 1}, "fsdp"); }
static void ddp(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    parity_run((parity_layout){.shard = 1, .replicate = n, .tp = 1, .accum = 1}, "ddp");
}
static void hsdp_2x2(void) { parity_run((parity_layout){.shard = 2, .replicate = 2, .tp = 1, .accum = 1}, "hsdp"); }
static void fsdp_accumulation(void) {
    parity_run((parity_layout){.shard = -1, .replicate = 1, .tp = 1, .accum = 2}, "fsdp+accum");
}

static void fsdp_memory(void) {
    ct_config c = parity_base;
    parity_set_int(&c, "parallelism.data_shard_degree", 8);
    parity_set_int(&c, "micro_batch_size", 1);
    parity_result r;
    parity_train(&c, NULL, &r);
    double limit = parity_ref.state_bytes / 7.0 + r.buffer_bytes;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("  memory: params+grads+optim per rank %.1f KiB at N=8 vs %.1f KiB in one process "
               "(limit 1/7 + gather buffers %.1f KiB = %.1f KiB)\n",
               r.state_bytes / 1024.0, parity_ref.state_bytes / 1024.0, r.buffer_bytes / 1024.0, limit / 1024.0);
    CHECK(r.state_bytes - r.buffer_bytes <= parity_ref.state_bytes / 7.0, "sharded state %zu > 1/7 of %zu",
          r.state_bytes - r.buffer_bytes, parity_ref.state_bytes);
    free(r.params);
}

static void cases(int n) {
    CT_MPI_RUN(fsdp);
    if (n <= 4) CT_MPI_RUN(ddp);
    if (n == 4) CT_MPI_RUN(hsdp_2x2);
    if (n == 2) CT_MPI_RUN(fsdp_accumulation);
    if (n == 8) CT_MPI_RUN(fsdp_memory);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.dim", "36"},        {"model.n_layers", "2"},     {"model.n_heads", "6"},
                                    {"model.n_kv_heads", "3"},  {"model.vocab_size", "131"}, {"model.ffn_hidden_dim", "70"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
