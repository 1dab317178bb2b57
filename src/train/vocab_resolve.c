#include "train/vocab_resolve.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/model.h"

ct_status ct_vocab_resolve(ct_config *c, int rank, ct_shard_tok *data_tok) {
    bool synthetic = !strcmp(c->dataset, "synthetic");
    if (ct_loader_check_source(c->dataset)) return CT_ERR;
    long tok_ids = 0;
    ct_shard_tok tok_rec = {0};
    if (c->tokenizer_path[0]) {
        if (access(c->tokenizer_path, R_OK) == 0) {
            ct_tokenizer *tok = ct_tokenizer_load(c->tokenizer_path);
            if (!tok) return ct_set_error("model.tokenizer_path: %s", ct_last_error());
            tok_ids = ct_tokenizer_vocab_size(tok);
            tok_rec = (ct_shard_tok){.present = 1, .bos = ct_tokenizer_bos(tok), .eos = ct_tokenizer_eos(tok)};
            ct_status hs = ct_tokenizer_hash(tok, tok_rec.hash);
            ct_tokenizer_free(tok);
            if (hs != CT_OK) return CT_ERR;
        } else if (!synthetic) {  // synthetic ids need no tokenizer
            return ct_set_error("model.tokenizer_path %s: %s (the tokenizer training.dataset was made with; \"\" for "
                                "none)",
                                c->tokenizer_path, strerror(errno));
        }
    }
    uint32_t shard_vocab = synthetic ? 0 : ct_loader_peek_vocab(c->dataset, "train");
    // The tokenizer and the data agree: the shards record the tokenizer they were made with.
    if (!synthetic) {
        ct_shard_tok data = ct_loader_peek_tokenizer(c->dataset, "train");
        if (tok_rec.present && data.present && !ct_shard_tok_same(&tok_rec, &data)) {
            char a[160], b[160];
            ct_shard_tok_describe(&tok_rec, a, sizeof a);
            ct_shard_tok_describe(&data, b, sizeof b);
            return ct_set_error("model.tokenizer_path %s (%s, %ld ids) is not the tokenizer training.dataset %s was "
                                "made with (%s, vocab %u): give that tokenizer, or prepare the data again with this one",
                                c->tokenizer_path, a, tok_ids, c->dataset, b, shard_vocab);
        }
        if (tok_rec.present && !data.present && rank == 0)
            fprintf(stderr, "note: training.dataset %s records no tokenizer (shards from before shard version 2, or "
                            "llm.c's): model.tokenizer_path %s cannot be checked against it\n",
                    c->dataset, c->tokenizer_path);
        *data_tok = data.present ? data : tok_rec;
    }
    if (c->vocab_size == 0) c->vocab_size = tok_ids ? (int)tok_ids : (int)shard_vocab;  // 0: the flavor's
    ct_model_config m;
    if (ct_model_config_from(&m, c)) return CT_ERR;
    if (tok_ids > m.vocab_size)
        return ct_set_error("model.tokenizer_path %s has %ld ids, more than the model's vocabulary of %d: set "
                            "model.vocab_size %ld (or 0 to take the tokenizer's)",
                            c->tokenizer_path, tok_ids, m.vocab_size, tok_ids);
    if (shard_vocab > (uint32_t)m.vocab_size)
        return ct_set_error("training.dataset %s was made with a vocabulary of %u ids, more than the model's %d: set "
                            "model.vocab_size %u (or 0 to take the shards')",
                            c->dataset, shard_vocab, m.vocab_size, shard_vocab);
    // The held-out split of a single shard file is that file: validation would score training data.
    struct stat sb;
    if (c->val_enable && !c->val_dataset[0] && !synthetic && stat(c->dataset, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ct_set_error("validation.enable: training.dataset %s is one shard file, so validation would read the "
                            "training data; give validation.dataset, or a folder with train_*.bin and val_*.bin",
                            c->dataset);
    return CT_OK;
}
