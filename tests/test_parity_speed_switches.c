// The three speed switches together against the plain one-process run (tests/parity.h):
// every activation checkpointing mode (none, full, selective per op, every 2nd block, elementwise) x
// --compile.enable (fused kernels) x --parallelism.enable_async_comm, in one process and under
// FSDP 2 x tp 2 (with sequence parallel, where the fused QKV path differs). None of them may
// change what is computed beyond fp32 summation order: the harness's fp32 bounds
// (tests/error_model.h).
#include "parity.h"

static const char *ac[][3] = {
    {"no-ac", "none", "op"}, {"full", "full", "op"}, {"op", "selective", "op"}, {"every-2", "selective", "2"},
    {"elementwise", "selective", "elementwise"}};
enum { NAC = sizeof ac / sizeof ac[0] };

static ct_config switched(ct_config c, int a, bool compile, bool async) {
    parity_set(&c, "activation_checkpoint.mode", ac[a][1]);
    parity_set(&c, "activation_checkpoint.selective_ac_option", ac[a][2]);
    parity_set(&c, "compile.enable", compile ? "true" : "false");
    parity_set(&c, "parallelism.enable_async_comm", async ? "true" : "false");
    return c;
}

static void name(char *what, size_t n, int a, bool compile, bool async, const char *layout) {
    snprintf(what, n, "%s%s%s, %s", ac[a][0], compile ? "+compile" : "", async ? "+async" : "", layout);
}

static void one_process(void) {
    for (int a = 0; a < NAC; a++)
        for (int compile = 0; compile < 2; compile++) {
            parity_result r;
            parity_train_alone(switched(parity_base, a, compile, false), &r);  // async: nothing to overlap alone
            char what[96];
            name(what, sizeof what, a, compile, false, "one process");
            parity_compare(&r, what);
            free(r.params);
        }
}

static void tp2_fsdp2(void) {
    for (int a = 0; a < NAC; a++)
        for (int compile = 0; compile < 2; compile++)
            for (int async = 0; async < 2; async++) {
                ct_config saved = parity_base;
                parity_base = switched(parity_base, a, compile, async);
                char what[96];
                name(what, sizeof what, a, compile, async, "tp2+sp x fsdp2");
                parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true},
                           what);
                name(what, sizeof what, a, compile, async, "tp2 x fsdp2");
                parity_run((parity_layout){.shard = 2, .replicate = 1, .tp = 2, .accum = 1}, what);
                parity_base = saved;
            }
}

static void cases(int n) {
    if (n == 2) CT_MPI_RUN(one_process);
    if (n == 4) CT_MPI_RUN(tp2_fsdp2);
}

int main(int argc, char **argv) {
    static const char *dims[][2] = {{"model.dim", "32"},       {"model.n_layers", "4"},     {"model.n_heads", "8"},
                                    {"model.n_kv_heads", "4"}, {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "72"}};
    return parity_main(argc, argv, dims, sizeof dims / sizeof dims[0], cases);
}
