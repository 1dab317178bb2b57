// Document-causal attention (model.attn_mask_type block_causal) in the whole model: shards whose
// tokenizer record names an EOS, with documents of 1-8 tokens packed into 16-token sequences.
// Every layout follows the single-process block_causal run within the fp32 bounds of
// tests/parity.h: cp 2 (all-gather and ring, head-tail and contiguous), tp 2 (+ sequence
// parallel), pp 2, and on 4 ranks cp 2 x tp 2 and pp 2 x cp 2. The mask matters (the run differs
// from causal on the same data); on data with no EOS block_causal is causal, bit for bit; a run
// whose data records no EOS id refuses block_causal in one line naming the setting.
#include "doc_parity.h"

static void cp2_every_method(void) { doc_cp2_every_method("block_causal"); }
static void tp2(void) { doc_tp2("block_causal"); }
static void pp2(void) { doc_pp2("block_causal"); }

static void cp2_tp2(void) {
    doc_run((parity_layout){.shard = 1, .replicate = 1, .tp = 2, .accum = 1, .cp = 2}, "ring", "headtail",
           "block_causal cp2 x tp2 ring");
}

static void pp2_cp2(void) {
    doc_run((parity_layout){.shard = 1, .replicate = 1, .tp = 1, .accum = 2, .cp = 2, .pp = 2, .schedule = "1f1b"},
           "allgather", "headtail", "block_causal pp2 x cp2 allgather");
}

// The documents change the numbers: the causal run on the same data differs.
static void mask_matters(void) {
    ct_config c = parity_base;
    parity_set(&c, "model.attn_mask_type", "causal");
    parity_result r;
    parity_train_alone(c, &r);
    CHECK(fabs(r.loss[STEPS - 1] - parity_ref.loss[STEPS - 1]) > 1e-4 * fabs(parity_ref.loss[STEPS - 1]),
          "causal and block_causal end at the same loss %.9g", r.loss[STEPS - 1]);
    free(r.params);
}

// Data without any EOS: block_causal is causal, the same bits.
static void no_eos_is_causal(void) {
    parity_result r[2];
    for (int w = 0; w < 2; w++) {
        ct_config c = parity_base;
        parity_set(&c, "training.dataset", plain_dir);
        parity_set(&c, "model.attn_mask_type", w ? "block_causal" : "causal");
        parity_train_alone(c, &r[w]);
    }
    for (int s = 0; s < STEPS; s++)
        CHECK(r[0].loss[s] == r[1].loss[s], "step %d: causal %.9g, block_causal %.9g without EOS", s + 1, r[0].loss[s],
              r[1].loss[s]);
    CHECK(r[0].total == r[1].total && !memcmp(r[0].params, r[1].params, sizeof(float) * (size_t)r[0].total),
          "parameters differ without EOS");
    free(r[0].params), free(r[1].params);
}

// Synthetic data records no tokenizer: no EOS id to find documents by.
static void refuses_without_eos(void) {
    ct_config c = parity_base;
    parity_set(&c, "training.dataset", "synthetic");
    parity_set_int(&c, "parallelism.data_shard_degree", -1);
    static ct_trainer t;
    CHECK(ct_trainer_init(&t, &c, NULL) == CT_ERR, "block_causal on synthetic data accepted");
    const char *e = ct_last_error();
    CHECK(strstr(e, "model.attn_mask_type") && strstr(e, "EOS") && !strchr(e, '\n'), "message: %s", e);
}

static void cases(int n) {
    if (n == 2) {
        CT_MPI_RUN(cp2_every_method);
        CT_MPI_RUN(tp2);
        CT_MPI_RUN(pp2);
        CT_MPI_RUN(mask_matters);
        CT_MPI_RUN(no_eos_is_causal);
        CT_MPI_RUN(refuses_without_eos);
    }
    if (n == 4) {
        CT_MPI_RUN(cp2_tp2);
        CT_MPI_RUN(pp2_cp2);
    }
}

int main(int argc, char **argv) {
    static const int nps[2] = {2, 4};
    return doc_parity_main(argc, argv, "block_causal", nps, 2, NULL, cases);
}
