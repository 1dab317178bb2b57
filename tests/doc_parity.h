// The rig of the document-aware parity tests (tests/test_parity_block_causal.c,
// tests/test_parity_doc_positions.c, both on tests/parity.h): shards whose tokenizer record names
// an EOS, documents of 1-8 tokens packed into 16-token sequences, a folder of the same shards
// without any EOS, the tiny model, and one layout's run against the reference.
#ifndef CT_TEST_DOC_PARITY_H
#define CT_TEST_DOC_PARITY_H
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

// Layout l (with a cp rotate method and load balancer when not NULL) against the reference.
static void doc_run(parity_layout l, const char *rotate, const char *balance, const char *what) {
    ct_config saved = parity_base;
    if (rotate) parity_set(&parity_base, "parallelism.context_parallel_rotate_method", rotate);
    if (balance) parity_set(&parity_base, "parallelism.context_parallel_load_balancer", balance);
    parity_run(l, what);
    parity_base = saved;
}

// The 2-rank layouts every such test runs: cp 2 by every method, tp 2 + sp, pp 2.
static void doc_cp2_every_method(const char *label) {
    const char *rotates[] = {"allgather", "ring"}, *balances[] = {"headtail", "none"};
    for (int r = 0; r < 2; r++)
        for (int b = 0; b < 2; b++) {
            char what[80];
            snprintf(what, sizeof what, "%s cp2 %s %s", label, rotates[r], balances[b]);
            doc_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 1, .cp = 2}, rotates[r], balances[b],
                    what);
        }
}
static void doc_tp2(const char *label) {
    char what[80];
    snprintf(what, sizeof what, "%s tp2+sp", label);
    doc_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .sequence_parallel = true}, NULL, NULL,
            what);
}
static void doc_pp2(const char *label) {
    char what[80];
    snprintf(what, sizeof what, "%s pp2 1f1b", label);
    doc_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 2, .pp = 2, .schedule = "1f1b"}, NULL, NULL,
            what);
}

// The program: the parent writes both folders under a fresh /tmp folder named from `name` and
// runs itself under mpirun at each of nps; a child sets up the tiny block_causal model on the
// folder with EOS, lets `setup` add its settings, makes the reference and runs `cases`.
static int doc_parity_main(int argc, char **argv, const char *name, const int *nps, int n_nps, void (*setup)(void),
                           void (*cases)(int)) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        setenv("OMP_NUM_THREADS", "1", 1);
        char root[256], with[600], without[600];
        snprintf(root, sizeof root, "/tmp/ctitan_%s_XXXXXX", name);
        if (!mkdtemp(root)) return 1;
        snprintf(with, sizeof with, "%s/docs", root);
        snprintf(without, sizeof without, "%s/plain", root);
        if (mkdir(with, 0700) || mkdir(without, 0700) || write_data(with, 0.2, 7) || write_data(without, 0, 9)) {
            fprintf(stderr, "cannot write the test data under %s: %s\n", root, ct_last_error());
            return 1;
        }
        int rc = 0;
        for (int i = 0; i < n_nps; i++) rc |= ct_mpi_test_spawn(argv[0], nps[i], 300, root);
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
    if (setup) setup();
    parity_reference(&world);
    cases(world.size);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
#endif
