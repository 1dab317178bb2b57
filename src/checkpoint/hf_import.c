// HF directory -> ctitan model file, streamed (hf.h): parameters in registry order, each read
// through ct_hf_read_range (q/k rows back to the interleaved layout) in pieces of CT_HF_PIECE.
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint/hf_internal.h"

// The metadata ct_model_save writes, key for key and in its order, so that a model that went
// to HF and back is the same file byte for byte (tests/test_hf_convert.sh holds this).
static void model_metadata(ct_st_writer *w, const ct_llama_config *m) {
    char buf[64];
    ct_st_writer_metadata(w, "format", CT_MODEL_FORMAT);
    ct_st_writer_metadata(w, "flavor", m->flavor);
    const char *keys[] = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_hidden"};
    const int values[] = {m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->vocab_size, m->ffn_hidden};
    for (int i = 0; i < 6; i++) {
        snprintf(buf, sizeof buf, "%d", values[i]);
        ct_st_writer_metadata(w, keys[i], buf);
    }
    snprintf(buf, sizeof buf, "%.17g", m->norm_eps);
    ct_st_writer_metadata(w, "norm_eps", buf);
    snprintf(buf, sizeof buf, "%.17g", m->rope_theta);
    ct_st_writer_metadata(w, "rope_theta", buf);
    ct_st_writer_metadata(w, "rope_scaling", m->rope_scaling ? "1" : "0");
    snprintf(buf, sizeof buf, "%d", m->max_seq_len);
    ct_st_writer_metadata(w, "max_seq_len", buf);
}

static ct_status write_model(const char *model_file, const ct_hf_dir *f, const ct_param_table *t,
                             const ct_llama_config *m, ct_dtype dtype) {
    ct_st_writer *w = ct_st_writer_new();
    model_metadata(w, m);
    ct_status st = CT_OK;
    for (int i = 0; i < t->count && st == CT_OK; i++) {
        const ct_param *p = &t->params[i];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        st = ct_st_writer_add(w, p->name, dtype, p->ndim, shape, CT_F32, NULL);
    }
    if (st == CT_OK) st = ct_st_writer_begin(w, model_file);
    float *buf = ct_xmalloc(CT_HF_PIECE * sizeof(float));  // one piece: the conversion's memory
    for (int i = 0; i < t->count && st == CT_OK; i++) {
        const ct_param *p = &t->params[i];
        for (long e = 0; e < p->numel && st == CT_OK; e += CT_HF_PIECE) {
            long k = p->numel - e < CT_HF_PIECE ? p->numel - e : CT_HF_PIECE;
            ct_hf_read_range(f, p, e, k, buf);
            st = ct_st_writer_append(w, buf, k);
            ct_hf_release(f, p, e, k);  // read: memory stays a piece, not the model
        }
    }
    free(buf);
    if (st == CT_OK) st = ct_st_writer_finish(w);
    ct_st_writer_free(w);  // removes model_file.tmp after a failure
    return st;
}

ct_status ct_hf_import(const char *dir, const char *model_file, ct_dtype dtype) {
    if (dtype != CT_F32 && dtype != CT_BF16 && dtype != CT_HF_DTYPE_SOURCE)
        return ct_set_error("%s: model files are F32 or BF16, not %s", model_file, ct_st_dtype_name(dtype));
    ct_llama_config m;
    if (ct_hf_load_config(dir, &m)) return CT_ERR;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    ct_hf_dir *f = ct_hf_open(dir, &t);
    ct_status st = CT_ERR;
    if (f) st = write_model(model_file, f, &t, &m, dtype == CT_HF_DTYPE_SOURCE ? ct_hf_source_dtype(f) : dtype);
    ct_hf_close(f);
    ct_param_table_free(&t);
    return st;
}
