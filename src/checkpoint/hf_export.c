// ctitan model -> HF directory, streamed (hf.h): the tensors go out in registry order, each in
// pieces of at most CT_HF_PIECE elements, q/k rows permuted to HF's half-split layout on the way.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/hf_internal.h"
#include "core/fs.h"

// Where the tensors come from: a model file's mapping, or a flat block in memory.
typedef struct {
    const ct_st_file *file;   // NULL: read from block
    const float *block;
    const ct_param *cur;      // the parameter cur_t belongs to (one lookup per tensor, not per piece)
    const ct_st_tensor *cur_t;
} source;

// Elements [begin, begin + n) of p in ctitan's layout, as fp32.
static void source_read(source *s, const ct_param *p, long begin, long n, float *dst) {
    if (!s->file) {
        memcpy(dst, s->block + p->offset + begin, (size_t)n * sizeof(float));
        return;
    }
    if (s->cur != p) {
        s->cur = p;
        s->cur_t = ct_st_find(s->file, p->name);
    }
    // ct_model_open checked every tensor's presence, shape and dtype.
    if (!s->cur_t || ct_st_read_f32_range(s->cur_t, begin, n, dst)) ct_fatal("hf", "%s: %s", p->name, ct_last_error());
}

// Elements [begin, begin + n) of p are written: their mapped pages can go, so that memory stays
// a piece, not the model.
static void source_done(source *s, const ct_param *p, long head_dim, long begin, long n) {
    if (!s->file || s->cur != p || !s->cur_t) return;
    ct_hf_widen_to_heads(p, head_dim, &begin, &n);
    ct_st_release(s->file, s->cur_t, begin, n);
}

// Appends parameter p in HF's layout. buf holds at least max(CT_HF_PIECE, one row) floats.
static ct_status put_tensor(ct_st_writer *w, const ct_param *p, long head_dim, source *src, float *buf) {
    if (!ct_hf_rope_permuted(p->name)) {
        for (long e = 0; e < p->numel; e += CT_HF_PIECE) {
            long k = p->numel - e < CT_HF_PIECE ? p->numel - e : CT_HF_PIECE;
            source_read(src, p, e, k, buf);
            if (ct_st_writer_append(w, buf, k)) return CT_ERR;
            source_done(src, p, head_dim, e, k);
        }
        return CT_OK;
    }
    // HF row r holds ctitan row ct_hf_row_to_ct(r): gather whole rows, as many as a piece holds.
    const long rows = p->shape[0], C = p->shape[1];
    const long per_piece = CT_HF_PIECE / C > 0 ? CT_HF_PIECE / C : 1;
    for (long r0 = 0; r0 < rows; r0 += per_piece) {
        long nr = rows - r0 < per_piece ? rows - r0 : per_piece;
        for (long r = 0; r < nr; r++) source_read(src, p, ct_hf_row_to_ct(r0 + r, head_dim) * C, C, buf + r * C);
        if (ct_st_writer_append(w, buf, nr * C)) return CT_ERR;
        source_done(src, p, head_dim, r0 * C, nr * C);
    }
    return CT_OK;
}

static ct_status export_from(const char *dir, const ct_param_table *t, const ct_model_config *m, source *src,
                             ct_dtype dtype, const ct_hf_vocab *vocab) {
    if (m->n_experts > 0 && (m->moe_sigmoid || !m->moe_route_norm || m->moe_bias_rate > 0))
        return ct_set_error("%s: Qwen3-MoE routes by softmax with renormalised weights and no choosing bias; this model "
                            "has model.moe.score_func %s, route_norm %s, load_balance_coeff %g", dir,
                            m->moe_sigmoid ? "sigmoid" : "softmax", m->moe_route_norm ? "true" : "false",
                            m->moe_bias_rate);
    if (m->n_shared_experts > 0)
        return ct_set_error("%s: Qwen3-MoE has no shared experts; this model has %d (model.moe.num_shared_experts)", dir,
                            m->n_shared_experts);
    if (ct_hf_check_dir(dir)) return CT_ERR;
    if (t->tp_size > 1) return ct_set_error("%s: an HF export needs the whole model, not a tp slice", dir);
    if (ct_fs_make_dirs(dir)) return CT_ERR;
    ct_st_writer *w = ct_st_writer_new();
    ct_st_writer_metadata(w, "format", "pt");  // transformers refuses safetensors files without it
    char name[CT_PARAM_NAME + 32], path[1024];
    ct_status st = CT_OK;
    long widest = CT_HF_PIECE;
    for (int i = 0; i < t->count && st == CT_OK; i++) {
        const ct_param *p = &t->params[i];
        // An expert tensor goes out as its experts' tensors, each a run of its rows: declared in
        // row order, they take the parameter's elements in the order put_tensor appends them.
        const int pieces = ct_hf_pieces(m, p->name);
        int64_t shape[2] = {p->shape[0] / pieces, p->shape[1]};
        widest = p->shape[1] > widest ? p->shape[1] : widest;
        for (int k = 0; k < pieces && st == CT_OK; k++) {
            st = ct_hf_piece_name(p->name, k, name, sizeof name);
            if (st == CT_OK) st = ct_st_writer_add(w, name, dtype, p->ndim, shape, CT_F32, NULL);
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st == CT_OK) st = ct_st_writer_begin(w, path);
    float *buf = ct_xmalloc((size_t)widest * sizeof(float));  // one piece: the conversion's memory
    for (int i = 0; i < t->count && st == CT_OK; i++) st = put_tensor(w, &t->params[i], m->head_dim, src, buf);
    free(buf);
    if (st == CT_OK) st = ct_st_writer_finish(w);
    ct_st_writer_free(w);  // removes model.safetensors.tmp after a failure
    if (st == CT_OK) st = ct_hf_config_write(dir, m, dtype, vocab);
    if (st == CT_OK && vocab) st = ct_hf_write_tokenizer(dir, vocab);
    return st;
}

static ct_status check_dtype(ct_dtype dtype, const char *what) {
    if (dtype == CT_F32 || dtype == CT_BF16 || dtype == CT_HF_DTYPE_SOURCE) return CT_OK;
    return ct_set_error("%s: conversions write F32 or BF16, not %s", what, ct_st_dtype_name(dtype));
}

// CT_BF16 when every tensor of the file is BF16, else CT_F32.
static ct_status file_dtype(const char *path, ct_dtype *out) {
    ct_st_file *f = ct_st_open(path);
    if (!f) return CT_ERR;
    *out = ct_st_num_tensors(f) > 0 ? CT_BF16 : CT_F32;
    for (int i = 0; i < ct_st_num_tensors(f); i++)
        if (ct_st_tensor_at(f, i)->dtype != CT_BF16) *out = CT_F32;
    ct_st_close(f);
    return CT_OK;
}

ct_status ct_hf_export(const char *model_file, const char *dir, const ct_hf_vocab *vocab, ct_dtype dtype) {
    if (check_dtype(dtype, dir)) return CT_ERR;
    ct_model_config m;
    if (ct_model_load_config(model_file, &m)) return CT_ERR;
    if (!m.family->hf_model_type)
        return ct_set_error("%s: a %s model has no Hugging Face layout in ctitan yet (llama3 and llama3_moe do)", model_file,
                            m.family->name);
    if (dtype == CT_HF_DTYPE_SOURCE && file_dtype(model_file, &dtype)) return CT_ERR;
    ct_param_table t;
    ct_param_table_build(&t, &m);
    // ct_model_open validates the file against the registry (every tensor, its shape and dtype);
    // the tensors are then read from a mapping of our own, whose pages can be let go.
    ct_model_file *mf = ct_model_open(model_file, &t);
    ct_model_close(mf);
    ct_st_file *f = mf ? ct_st_open(model_file) : NULL;
    source src = {.file = f};
    ct_status st = f ? export_from(dir, &t, &m, &src, dtype, vocab) : CT_ERR;
    ct_st_close(f);
    ct_param_table_free(&t);
    return st;
}

ct_status ct_hf_save(const char *dir, const ct_param_table *t, const ct_model_config *m, const float *full,
                     ct_dtype dtype, const ct_hf_vocab *vocab) {
    if (check_dtype(dtype, dir)) return CT_ERR;
    if (!m->family->hf_model_type)
        return ct_set_error("%s: a %s model has no Hugging Face layout in ctitan yet (llama3 and llama3_moe do)", dir,
                            m->family->name);
    source src = {.block = full};
    return export_from(dir, t, m, &src, dtype == CT_HF_DTYPE_SOURCE ? CT_F32 : dtype, vocab);
}
