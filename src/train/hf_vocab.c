#include "train/hf_vocab.h"

#include <stdlib.h>
#include <string.h>

void ct_hf_vocab_free(ct_hf_vocab_view *vv) {
    free(vv->token);
    free(vv->len);
    free(vv->special);
    free(vv->special_id);
    if (vv->tok) ct_tokenizer_free(vv->tok);
    memset(vv, 0, sizeof *vv);
}

ct_status ct_hf_vocab_load(ct_hf_vocab_view *vv, const char *path, int model_vocab) {
    memset(vv, 0, sizeof *vv);
    if (!(vv->tok = ct_tokenizer_load(path))) return CT_ERR;
    const long n = ct_tokenizer_n_ranks(vv->tok), total = ct_tokenizer_vocab_size(vv->tok);
    if (total > model_vocab)
        return ct_set_error("%s: the tokenizer has %ld ids, more than the model's vocabulary of %d", path, total,
                            model_vocab);
    vv->token = ct_xcalloc((size_t)n, sizeof *vv->token);
    vv->len = ct_xcalloc((size_t)n, sizeof *vv->len);
    vv->special = ct_xcalloc((size_t)(total - n) + 1, sizeof *vv->special);
    vv->special_id = ct_xcalloc((size_t)(total - n) + 1, sizeof *vv->special_id);
    for (int32_t id = 0; id < n; id++) vv->token[id] = ct_tokenizer_token(vv->tok, id, &vv->len[id]);
    int ns = 0;
    for (int32_t id = (int32_t)n; id < total; id++) {
        long len;
        const char *s = ct_tokenizer_token(vv->tok, id, &len);
        if (!s) continue;  // a gap between special ids
        vv->special[ns] = s;  // special texts are NUL-terminated (tokenizer_load keeps them as strings)
        vv->special_id[ns++] = id;
    }
    vv->v = (ct_hf_vocab){
        .n_tokens = n,
        .token = vv->token,
        .token_len = vv->len,
        .n_special = ns,
        .special = vv->special,
        .special_id = vv->special_id,
        .bos = ct_tokenizer_bos(vv->tok),
        .eos = ct_tokenizer_eos(vv->tok),
        .pattern = CT_TOKENIZER_PATTERN,
        .rank_file = ct_tokenizer_is_json(vv->tok) ? NULL : path,
        .tokenizer_json = ct_tokenizer_json_path(vv->tok),
        .tokenizer_config = ct_tokenizer_config_path(vv->tok),
    };
    return CT_OK;
}
