// HF directory -> ctitan model file, streamed (hf.h): parameters in registry order, each read
// through ct_hf_read_range (q/k rows back to the interleaved layout) in pieces of CT_HF_PIECE.
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint/hf_internal.h"
#include "checkpoint/model_file.h"

static ct_status write_model(const char *model_file, const ct_hf_dir *f, const ct_param_table *t,
                             const ct_model_config *m, ct_dtype dtype) {
    ct_st_writer *w = ct_st_writer_new();
    ct_model_write_metadata(w, m, NULL);  // the same keys as ct_model_save: a round trip is the same file
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
    ct_model_config m;
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
