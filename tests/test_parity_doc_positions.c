// RoPE positions that restart at each document (model.rope_positions document, with
// block_causal) in the whole model: shards whose tokenizer record names an EOS, documents of 1-8
// tokens packed into 16-token sequences. Every layout follows the single-process run within the
// fp32 bounds of tests/parity.h: cp 2 (all-gather and ring, head-tail and contiguous: the
// positions of each rank's chunks are the ones of the whole sequence's documents), tp 2 (+
// sequence parallel), pp 2. Under block_causal, document positions are sequence positions up to
// rounding (RoPE is relative), and differ in the bits; on data with no EOS they are the
// sequence's, bit for bit; document positions under causal attention are refused in one line
// naming both settings.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard.h"
#include "parity.h"

enum { VOCAB = 128, BOS = 1, EOS = 2, NTOK = 8192 };

static const char *data_dir, *plain_dir;  // with EOS; without any

// A folder with train and val shards recording a tokenizer (bos 1, eos 2). eos_p: the chance
// that a document ends after each token (0: no EOS at all).
static int write_data(const char *dir, double eos_p, uint64_t seed) {
    ct_shard_tok rec = {.present = 1, .bos = BOS, .eos = EOS};
    for (int i = 0; i < CT_SHARD_TOK_HASH_BYTES; i++) rec.hash[i] = (uint8_t)(0x30 + i);
    const char *splits[2] = {"train", "val"};
    int32_t *tok = malloc(sizeof(int32_t) * NTOK);
    for (int s = 0; s < 2; s++) {
        for (long i = 0; i < NTOK; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(seed >> 11) / 9007199254740992.0;
            tok[i] = eos_p > 0 && u < eos_p ? EOS : 3 + (int32_t)((seed >> 33) % (VOCAB - 3));
        }
        char path[512];
        snprintf(path, sizeof path, "%s/data_%s_000000.bin", dir, splits[s]);
        ct_shard_writer *w = ct_shard_writer_open(path, VOCAB);
        if (!w) return 1;
        ct_shard_writer_set_tokenizer(w, &rec);
        if (ct_shard_writer_append(w, tok, NTOK) || ct_shard_writer_close(w)) return 1;
    }
    free(tok);
    return 0;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", dir, e->d_name), unlink(path);
    closedir(d);
    rmdir(dir);
}

static void dp_run(parity_layout l, const char *rotate, const char *balance, const char *what) {
    ct_config saved = parity_base;
    if (rotate) parity_set(&parity_base, "parallelism.context_parallel_rotate_method", rotate);
    if (balance) parity_set(&parity_base, "parallelism.context_parallel_load_balancer", balance);
    parity_run(l, what);
    parity_base = saved;
}

static void cp2_every_method(void) {
    const char *rotates[] = {"allgather", "ring"}, *balances[] = {"headtail", "none"};
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++) {
            char what[80];
            snprintf(what, sizeof what, "document positions cp2 %s %s", rotates[r], balances[b]);
            dp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .cp = 2}, rotates[r], balances[b],
                   what);
        }
}

static void tp2(void) {
    dp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true}, NULL, NULL,
           "document positions tp2+sp");
}

static void pp2(void) {
    dp_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"}, NULL, NULL,
           "document positions pp2 1f1b");
}

// RoPE is relative: a query and a key are rotated by angles whose difference is their distance,
// whatever position their document starts at, and under block_causal no pair from different
// documents meets. So document positions compute the sequence positions' function up to
// rounding: the two single-process runs follow each other within tests/parity.h's fp32 bounds
// (a sequence rotated by another row's positions, or a chunk's restarted at its own start, breaks
// the distances and fails here) -- yet not bit for bit (the setting did something: the angles
// come from other rows of the tables).
static void document_is_sequence_up_to_rounding(void) {
    ct_config c = parity_base;
    parity_set(&c, "model.rope_positions", "sequence");
    parity_result r;
    parity_train_alone(c, &r);
    parity_compare(&r, "sequence vs document positions");
    CHECK(memcmp(r.params, parity_ref.params, sizeof(float) * (size_t)r.total) != 0,
          "sequence and document positions give the same bits: the positions did not restart");
    free(r.params);
}

// Data without any EOS: one document per sequence, so its positions are the sequence's, same bits.
static void no_eos_is_sequence(void) {
    parity_result r[2];
    for (int w = 0; w < 2; w++) {
        ct_config c = parity_base;
        parity_set(&c, "training.dataset", plain_dir);
        parity_set(&c, "model.rope_positions", w ? "document" : "sequence");
        parity_train_alone(c, &r[w]);
    }
    for (int s = 0; s < STEPS; s++)
        CHECK(r[0].loss[s] == r[1].loss[s], "step %d: sequence %.9g, document %.9g without EOS", s + 1, r[0].loss[s],
              r[1].loss[s]);
    CHECK(r[0].total == r[1].total && !memcmp(r[0].params, r[1].params, sizeof(float) * (size_t)r[0].total),
          "parameters differ without EOS");
    free(r[0].params), free(r[1].params);
}

// Positions restarting where attention still crosses documents: refused, naming both settings.
static void refuses_under_causal(void) {
    ct_config c = parity_base;
    parity_set(&c, "model.attn_mask_type", "causal");
    CHECK(ct_config_validate(&c) == CT_ERR, "document positions under causal attention accepted");
    const char *e = ct_last_error();
    CHECK(strstr(e, "model.rope_positions") && strstr(e, "model.attn_mask_type") && !strchr(e, '\n'),
          "message: %s", e);
}

static void cases(int n) {
    if (n == 2) {
        CT_MPI_RUN(cp2_every_method);
        CT_MPI_RUN(tp2);
        CT_MPI_RUN(pp2);
        CT_MPI_RUN(document_is_sequence_up_to_rounding);
        CT_MPI_RUN(no_eos_is_sequence);
        CT_MPI_RUN(refuses_under_causal);
    }
}

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        setenv("OMP_NUM_THREADS", "1", 1);
        char root[] = "/tmp/ctitan_doc_positions_XXXXXX";
        if (!mkdtemp(root)) return 1;
        char with[600], without[600], arg[1300];
        snprintf(with, sizeof with, "%s/docs", root);
        snprintf(without, sizeof without, "%s/plain", root);
        if (mkdir(with, 0700) || mkdir(without, 0700) || write_data(with, 0.2, 7) || write_data(without, 0, 9)) {
            fprintf(stderr, "cannot write the test data under %s: %s\n", root, ct_last_error());
            return 1;
        }
        snprintf(arg, sizeof arg, "%s", root);
        int rc = ct_mpi_test_spawn(argv[0], 2, 300, arg);
        remove_dir(with), remove_dir(without), rmdir(root);
        return rc ? 1 : 0;
    }
    static char with[600], without[600];
    snprintf(with, sizeof with, "%s/docs", argv[argc - 1]);
    snprintf(without, sizeof without, "%s/plain", argv[argc - 1]);
    data_dir = with, plain_dir = without;
    if (ct_comm_init(&argc, &argv)) ct_fatal("test", "%s", ct_last_error());
    ct_group world;
    ct_comm_group_world(&world, 30);
    ct_config_defaults(&parity_base);
    static const char *dims[][2] = {{"model.dim", "32"},       {"model.n_layers", "2"},     {"model.n_heads", "4"},
                                    {"model.n_kv_heads", "2"}, {"model.vocab_size", "128"}, {"model.ffn_hidden_dim", "64"}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) parity_set(&parity_base, dims[i][0], dims[i][1]);
    parity_common(&parity_base);
    parity_set(&parity_base, "training.dataset", data_dir);
    parity_set(&parity_base, "model.attn_mask_type", "block_causal");
    parity_set(&parity_base, "model.rope_positions", "document");
    // Wrong positions must matter enough for the parity bounds to see them: a small RoPE base
    // turns every pair of the 8-wide heads within 16 positions, and a larger step grows the
    // attention scores away from 0 (where any rotation gives the same softmax) within 10 steps.
    parity_set(&parity_base, "model.rope_theta", "10");
    parity_set(&parity_base, "optimizer.lr", "1e-2");
    parity_reference(&world);
    cases(world.size);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
