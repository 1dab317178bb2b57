// Step time of a corpus of short documents under model.attn_mask_type causal and block_causal,
// side by side, in one process. The data: one shard recording a tokenizer whose EOS ends a
// document after each token with chance 1 / DOC (documents of DOC tokens on average), packed into
// sequences of T tokens. block_causal skips the key tiles of other documents, so its attention
// does about DOC / T of the causal work per tile row; the rest of the step is the same.
//   build/bench/bench_block_causal [T [DOC [steps]]]   (defaults 2048, 128, 6)
// Prints the median step time of each (the first step, which warms up, is left out) and their
// ratio.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "data/shard.h"
#include "train/trainer.h"

static void set(ct_config *c, const char *k, const char *v) {
    if (ct_config_set(c, k, v)) ct_fatal("bench", "%s", ct_last_error());
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long T = argc > 1 ? atol(argv[1]) : 2048, doc = argc > 2 ? atol(argv[2]) : 128;
    int steps = argc > 3 ? atoi(argv[3]) : 6;
    if (ct_comm_init(&argc, &argv)) ct_fatal("bench", "%s", ct_last_error());
    char dir[] = "/tmp/ctitan_bench_bc_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char path[256], run[256];
    snprintf(path, sizeof path, "%s/data_train_000000.bin", dir);
    const long n = (T + 1) * (steps + 2) * 4, V = 512;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t s = 12345;
    for (long i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (s >> 33) % (uint64_t)doc == 0 ? 2 : 3 + (int32_t)((s >> 13) % (uint64_t)(V - 3));
    }
    ct_shard_tok rec = {.present = 1, .bos = 1, .eos = 2};
    ct_shard_writer *w = ct_shard_writer_open(path, (uint32_t)V);
    ct_shard_writer_set_tokenizer(w, &rec);
    if (ct_shard_writer_append(w, tok, (uint64_t)n) || ct_shard_writer_close(w)) ct_fatal("bench", "%s", ct_last_error());
    free(tok);
    const char *masks[2] = {"causal", "block_causal"};
    double med[2];
    for (int m = 0; m < 2; m++) {
        ct_config c;
        ct_config_defaults(&c);
        char tv[32], sv[32];
        snprintf(tv, sizeof tv, "%ld", T);
        snprintf(sv, sizeof sv, "%d", steps);
        snprintf(run, sizeof run, "%s/run_%s", dir, masks[m]);
        const char *kv[][2] = {{"model.dim", "256"},        {"model.n_layers", "2"},      {"model.n_heads", "4"},
                               {"model.n_kv_heads", "2"},   {"model.vocab_size", "512"},  {"model.ffn_hidden_dim", "512"},
                               {"training.seq_len", tv},    {"training.steps", sv},       {"micro_batch_size", "2"},
                               {"training.dataset", dir},   {"job.dump_folder", run},     {"metrics.peak_tflops", "1"},
                               {"model.attn_mask_type", masks[m]}};
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) set(&c, kv[i][0], kv[i][1]);
        static ct_trainer t;
        if (ct_trainer_init(&t, &c, NULL)) ct_fatal("bench", "%s", ct_last_error());
        double dt[64];
        int k = 0;
        for (int i = 0; i < steps && k < 64; i++) {
            ct_trainer_step(&t);
            if (i > 0) dt[k++] = t.last.step_seconds;
        }
        ct_trainer_free(&t);
        qsort(dt, (size_t)k, sizeof dt[0], cmp_d);
        med[m] = dt[k / 2];
        printf("%-13s T %ld, documents of %ld tokens on average: median step %.1f ms (%d steps)\n", masks[m], T, doc,
               1e3 * med[m], k);
    }
    printf("block_causal / causal step time: %.3f\n", med[1] / med[0]);
    unlink(path);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) return 1;
    ct_comm_finalize();
    return 0;
}
