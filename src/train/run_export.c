#include "train/run_export.h"

#include <stdio.h>
#include <unistd.h>

#include "checkpoint/hf.h"
#include "checkpoint/model_file.h"
#include "train/hf_vocab.h"

ct_status ct_run_export_model(ct_group *world, const float *full, const ct_param_table *global,
                              const ct_model_config *model, const ct_shard_tok *tok, ct_dtype dtype, const char *path) {
    int32_t ok = 1;
    ct_model_tok mtok = {.present = tok->present, .bos = tok->bos, .eos = tok->eos};
    for (int i = 0; i < CT_SHARD_TOK_HASH_BYTES; i++) snprintf(mtok.hash + 2 * i, 3, "%02x", tok->hash[i]);
    if (world->rank == 0) ok = ct_model_save_tok(path, global, model, full, dtype, &mtok) == CT_OK;
    // Every rank returns rank 0's outcome, so the job ends the same way everywhere.
    ct_comm_broadcast(world, &ok, 1, CT_I32, 0);
    if (ok) return CT_OK;
    return world->rank == 0 ? CT_ERR : ct_set_error("rank 0 could not write %s", path);
}

ct_status ct_run_export_hf(ct_group *world, const ct_config *cfg, int vocab_size, const char *model_path) {
    char dir[CT_STR + 8];
    snprintf(dir, sizeof dir, "%s/hf", cfg->dump_folder);
    ct_status st = CT_OK;
    if (world->rank == 0) {
        ct_dtype dtype = cfg->ckpt_export_dtype == CT_CFG_BF16 ? CT_BF16 : CT_F32;
        // With the run's tokenizer when it has one, so AutoTokenizer loads beside the model.
        ct_hf_vocab_view vv = {0};
        bool with_tok = cfg->tokenizer_path[0] && access(cfg->tokenizer_path, R_OK) == 0;
        if (st == CT_OK && with_tok) st = ct_hf_vocab_load(&vv, cfg->tokenizer_path, vocab_size);
        if (st == CT_OK) st = ct_hf_export(model_path, dir, with_tok ? &vv.v : NULL, dtype);
        ct_hf_vocab_free(&vv);
        if (st == CT_OK) printf("model saved as a Hugging Face folder %s%s\n", dir, with_tok ? " (with its tokenizer)" : "");
    }
    return ct_comm_agree(world, st);
}
