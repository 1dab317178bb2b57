#include "checkpoint/model_file.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/dcp.h"

struct ct_model_file {
    ct_st_file *st;
    const ct_param_table *table;
};

ct_status ct_model_dtype_parse(const char *s, ct_dtype *out) {
    if (!strcmp(s, "fp32")) *out = CT_F32;
    else if (!strcmp(s, "bf16")) *out = CT_BF16;
    else return ct_set_error("model dtype: expected fp32 or bf16, got '%s'", s);
    return CT_OK;
}

// ------------------------------------------------------------------ save

ct_status ct_model_save(const char *path, const ct_param_table *t, const ct_model_config *m, const float *full,
                        ct_dtype dtype) {
    return ct_model_save_tok(path, t, m, full, dtype, NULL);
}

void ct_model_write_metadata(ct_st_writer *w, const ct_model_config *m, const ct_model_tok *tok) {
    char buf[64];
    ct_st_writer_metadata(w, "format", CT_MODEL_FORMAT);
    // Llama 3 is the format's default family: its files carry no record, so they read the same
    // in every build.
    if (m->family && strcmp(m->family->name, "llama3")) ct_st_writer_metadata(w, "family", m->family->name);
    ct_st_writer_metadata(w, "flavor", m->flavor);
#define META_INT(key, v)                            \
    snprintf(buf, sizeof buf, "%d", (int)(v));      \
    ct_st_writer_metadata(w, key, buf)
#define META_DBL(key, v)                            \
    snprintf(buf, sizeof buf, "%.17g", (double)(v)); \
    ct_st_writer_metadata(w, key, buf)
    META_INT("dim", m->dim);
    META_INT("n_layers", m->n_layers);
    META_INT("n_heads", m->n_heads);
    META_INT("n_kv_heads", m->n_kv_heads);
    META_INT("vocab_size", m->vocab_size);
    META_INT("ffn_hidden", m->ffn_hidden);
    if (m->n_experts > 0) {  // a mixture-of-experts family (absent: dense)
        META_INT("n_experts", m->n_experts);
        META_INT("moe_top_k", m->moe_top_k);
        // The router, where it differs from softmax with renormalised weights and no bias
        if (m->moe_sigmoid) ct_st_writer_metadata(w, "moe_score_func", "sigmoid");
        if (!m->moe_route_norm) {
            META_INT("moe_route_norm", 0);
        }
        if (m->moe_bias_rate > 0) {  // the bias tensors are in the file
            META_DBL("moe_load_balance_coeff", m->moe_bias_rate);
        }
        // DeepSeek's structure (absent: none): shared experts, dense first blocks and their width
        if (m->n_shared_experts > 0) {
            META_INT("moe_shared_experts", m->n_shared_experts);
        }
        if (m->n_dense_layers > 0) {
            META_INT("moe_dense_layers", m->n_dense_layers);
            META_INT("moe_dense_ffn_hidden", m->dense_ffn_hidden);
        }
    }
    if (m->qk_norm) {  // per-head q/k norms (absent: none)
        META_INT("qk_norm", 1);
    }
    META_DBL("norm_eps", m->norm_eps);
    META_DBL("rope_theta", m->rope_theta);
    META_INT("rope_scaling", m->rope_scaling ? 1 : 0);
    META_INT("max_seq_len", m->max_seq_len);
    ct_st_writer_metadata(w, "attn_mask_type", m->block_causal ? "block_causal" : "causal");
    ct_st_writer_metadata(w, "rope_positions", m->document_positions ? "document" : "sequence");
    if (tok && tok->present) {
        ct_st_writer_metadata(w, "tokenizer", tok->hash);
        META_INT("tokenizer_bos", tok->bos);
        META_INT("tokenizer_eos", tok->eos);
    }
#undef META_INT
#undef META_DBL
}

ct_status ct_model_save_tok(const char *path, const ct_param_table *t, const ct_model_config *m, const float *full,
                            ct_dtype dtype, const ct_model_tok *tok) {
    if (dtype != CT_F32 && dtype != CT_BF16)
        return ct_set_error_at(CT_E_DATA, path, "%s: model files are F32 or BF16, not %s", path,
                               ct_st_dtype_name(dtype));
    ct_st_writer *w = ct_st_writer_new();
    ct_model_write_metadata(w, m, tok);
    ct_status st = CT_OK;
    for (int i = 0; i < t->count && st == CT_OK; i++) {
        const ct_param *p = &t->params[i];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        st = ct_st_writer_add(w, p->name, dtype, p->ndim, shape, CT_F32, full + p->offset);
    }
    if (st == CT_OK) st = ct_st_writer_write(w, path);
    ct_st_writer_free(w);
    return st;
}

// ------------------------------------------------------------------ config

static ct_status meta_str(const ct_st_file *f, const char *path, const char *key, const char **out) {
    *out = ct_st_metadata(f, key);
    if (!*out)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata has no '%s' (not a ctitan model file?)", path, key);
    return CT_OK;
}

static ct_status meta_int(const ct_st_file *f, const char *path, const char *key, int *out) {
    const char *s;
    if (meta_str(f, path, key, &s)) return CT_ERR;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata '%s' = '%s' is not an integer", path, key, s);
    *out = (int)v;
    return CT_OK;
}

static ct_status meta_double(const ct_st_file *f, const char *path, const char *key, double *out) {
    const char *s;
    if (meta_str(f, path, key, &s)) return CT_ERR;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata '%s' = '%s' is not a number", path, key, s);
    *out = v;
    return CT_OK;
}

// Hard limits on the metadata, far above any real Llama (405B: dim 16384, 126 layers, FFN
// 53248, vocabulary 128256; 3.1's context 131072), so that no single count in a file can size
// an allocation: a 272-byte file once claimed 2 million layers and got a 3.3 GB registry.
#define CT_MODEL_MAX_DIM (1 << 20)
#define CT_MODEL_MAX_LAYERS (1 << 14)
#define CT_MODEL_MAX_FFN (1 << 22)
#define CT_MODEL_MAX_VOCAB (1 << 24)
#define CT_MODEL_MAX_SEQ_LEN (1 << 20)

// The counts against the hard limits, then against what the file holds: the registry these
// dimensions build must have as many tensors as the file and no more elements than the file's
// tensors hold (each is checked by shape at open; this bounds what is allocated before that).
static ct_status check_counts(const ct_st_file *f, const char *path, const ct_model_config *m) {
#define AT_MOST(field, limit)                                                                                       \
    if (m->field > (limit))                                                                                         \
    return ct_set_error_at(CT_E_DATA, path, "%s: metadata '" #field "' = %d is above the limit %d", path, m->field, \
                           (limit))
    AT_MOST(dim, CT_MODEL_MAX_DIM);
    AT_MOST(n_layers, CT_MODEL_MAX_LAYERS);
    AT_MOST(ffn_hidden, CT_MODEL_MAX_FFN);
    AT_MOST(vocab_size, CT_MODEL_MAX_VOCAB);
    AT_MOST(max_seq_len, CT_MODEL_MAX_SEQ_LEN);
#undef AT_MOST
    int n_tensors;
    long need;
    if (ct_param_count(m, &n_tensors, &need) != CT_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ct_last_error());
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata %s", path, why);
    }
    if (n_tensors != ct_st_num_tensors(f))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata 'n_layers' = %d means %d tensors, but the file holds %d",
                               path, m->n_layers, n_tensors, ct_st_num_tensors(f));
    // Tensors do not overlap in the data section (checked at open), so this sum is at most the
    // file's size.
    long held = 0;
    for (int i = 0; i < ct_st_num_tensors(f); i++) held += (long)ct_st_tensor_at(f, i)->numel;
    if (need > held)
        return ct_set_error_at(
            CT_E_DATA, path,
            "%s: metadata dim %d, n_layers %d, n_heads %d, n_kv_heads %d, ffn_hidden %d, vocab_size %d "
            "need %ld parameters, but the file's tensors hold %ld elements",
            path, m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->ffn_hidden, m->vocab_size, need, held);
    return CT_OK;
}

// A mixture-of-experts file's router (absent records: softmax, renormalised, no bias).
static ct_status read_router(const ct_st_file *f, const char *path, ct_model_config *m) {
    const char *score = ct_st_metadata(f, "moe_score_func");
    if (score && strcmp(score, "softmax") && strcmp(score, "sigmoid"))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata 'moe_score_func' = '%.40s', expected softmax or sigmoid",
                               path, score);
    m->moe_sigmoid = score && !strcmp(score, "sigmoid");
    m->moe_route_norm = 1;
    if (ct_st_metadata(f, "moe_route_norm") && meta_int(f, path, "moe_route_norm", &m->moe_route_norm)) return CT_ERR;
    if (ct_st_metadata(f, "moe_load_balance_coeff") &&
        meta_double(f, path, "moe_load_balance_coeff", &m->moe_bias_rate))
        return CT_ERR;
    if ((m->moe_route_norm != 0 && m->moe_route_norm != 1) || !(m->moe_bias_rate >= 0))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata moe_route_norm %d, moe_load_balance_coeff %g: expected 0 "
                               "or 1, and >= 0", path, m->moe_route_norm, m->moe_bias_rate);
    if ((ct_st_metadata(f, "moe_shared_experts") && meta_int(f, path, "moe_shared_experts", &m->n_shared_experts)) ||
        (ct_st_metadata(f, "moe_dense_layers") &&
         (meta_int(f, path, "moe_dense_layers", &m->n_dense_layers) ||
          meta_int(f, path, "moe_dense_ffn_hidden", &m->dense_ffn_hidden))))
        return CT_ERR;
    if (m->n_shared_experts < 0 || m->n_dense_layers < 0 || m->n_dense_layers > m->n_layers ||
        (m->n_dense_layers > 0 && m->dense_ffn_hidden <= 0))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata moe_shared_experts %d, moe_dense_layers %d of width %d: "
                               "expected counts >= 0, at most n_layers %d dense, of a positive width", path,
                               m->n_shared_experts, m->n_dense_layers, m->dense_ffn_hidden, m->n_layers);
    return CT_OK;
}

static ct_status config_from_file(const ct_st_file *f, const char *path, ct_model_config *m) {
    memset(m, 0, sizeof *m);
    const char *format, *flavor;
    if (meta_str(f, path, "format", &format)) return CT_ERR;
    if (strcmp(format, CT_MODEL_FORMAT))
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata format '%s', expected '%s'", path, format,
                               CT_MODEL_FORMAT);
    // The model family (files without the record hold Llama 3, the first family ctitan wrote).
    const char *family = ct_st_metadata(f, "family");
    m->family = ct_model_family_find(family ? family : "llama3");
    if (!m->family)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata 'family' = '%.40s' is not a model family this build knows",
                               path, family);
    if (meta_str(f, path, "flavor", &flavor)) return CT_ERR;
    snprintf(m->flavor, sizeof m->flavor, "%s", flavor);
    if (meta_int(f, path, "dim", &m->dim) || meta_int(f, path, "n_layers", &m->n_layers) ||
        meta_int(f, path, "n_heads", &m->n_heads) || meta_int(f, path, "n_kv_heads", &m->n_kv_heads) ||
        meta_int(f, path, "vocab_size", &m->vocab_size) || meta_int(f, path, "ffn_hidden", &m->ffn_hidden) ||
        meta_double(f, path, "norm_eps", &m->norm_eps) || meta_double(f, path, "rope_theta", &m->rope_theta) ||
        meta_int(f, path, "rope_scaling", &m->rope_scaling))
        return CT_ERR;
    if (ct_st_metadata(f, "max_seq_len") && meta_int(f, path, "max_seq_len", &m->max_seq_len)) return CT_ERR;
    if (ct_st_metadata(f, "n_experts") &&
        (meta_int(f, path, "n_experts", &m->n_experts) || meta_int(f, path, "moe_top_k", &m->moe_top_k)))
        return CT_ERR;
    if (m->n_experts < 0 || m->moe_top_k < 0 || m->moe_top_k > m->n_experts || (m->n_experts > 0) != (m->moe_top_k > 0))
        return ct_set_error("%s: metadata n_experts %d, moe_top_k %d: expected 1 <= moe_top_k <= n_experts", path,
                            m->n_experts, m->moe_top_k);
    if (ct_st_metadata(f, "qk_norm") && meta_int(f, path, "qk_norm", &m->qk_norm)) return CT_ERR;
    if (m->qk_norm != 0 && m->qk_norm != 1)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata qk_norm %d, expected 0 or 1", path, m->qk_norm);
    if (m->n_experts > 0 && read_router(f, path, m)) return CT_ERR;
    if ((m->n_experts > 0) != !strcmp(m->family->name, "llama3_moe"))
        return ct_set_error("%s: metadata n_experts %d does not fit a %s model", path, m->n_experts, m->family->name);
    // The mask and positions the model was trained with (absent in older files: causal, sequence).
    const char *mask = ct_st_metadata(f, "attn_mask_type"), *rpos = ct_st_metadata(f, "rope_positions");
    if (mask && strcmp(mask, "causal") && strcmp(mask, "block_causal"))
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: metadata 'attn_mask_type' = '%.40s', expected causal or block_causal", path, mask);
    if (rpos && strcmp(rpos, "sequence") && strcmp(rpos, "document"))
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: metadata 'rope_positions' = '%.40s', expected sequence or document", path, rpos);
    m->block_causal = mask && !strcmp(mask, "block_causal");
    m->document_positions = rpos && !strcmp(rpos, "document");
    if (m->document_positions && !m->block_causal)
        return ct_set_error_at(CT_E_DATA, path,
                               "%s: metadata 'rope_positions' document needs 'attn_mask_type' block_causal", path);
#define POSITIVE(field) \
    if (m->field <= 0)  \
    return ct_set_error_at(CT_E_DATA, path, "%s: metadata '" #field "' = %d must be positive", path, m->field)
    POSITIVE(dim);
    POSITIVE(n_layers);
    POSITIVE(n_heads);
    POSITIVE(n_kv_heads);
    POSITIVE(vocab_size);
    POSITIVE(ffn_hidden);
#undef POSITIVE
    if (m->dim % m->n_heads)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata n_heads %d does not divide dim %d", path, m->n_heads,
                               m->dim);
    if (m->n_heads % m->n_kv_heads)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata n_kv_heads %d does not divide n_heads %d", path,
                               m->n_kv_heads, m->n_heads);
    m->head_dim = m->dim / m->n_heads;
    if (m->head_dim % 2)
        return ct_set_error_at(CT_E_DATA, path, "%s: head dim %d must be even for RoPE", path, m->head_dim);
    if (m->norm_eps <= 0 || m->rope_theta <= 0)
        return ct_set_error_at(CT_E_DATA, path, "%s: metadata norm_eps and rope_theta must be positive", path);
    if (m->max_seq_len < 0) m->max_seq_len = 0;
    return check_counts(f, path, m);
}

ct_status ct_model_read_tok(const char *path, ct_model_tok *tok) {
    memset(tok, 0, sizeof *tok);
    tok->bos = tok->eos = -1;
    if (ct_model_is_step_folder(path)) return CT_OK;  // a checkpoint records no tokenizer
    ct_st_file *f = ct_st_open(path);
    if (!f) return CT_ERR;
    const char *h = ct_st_metadata(f, "tokenizer");
    ct_status st = CT_OK;
    if (h) {
        int hex = strlen(h) == 32;
        for (int i = 0; hex && i < 32; i++) hex = (h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f');
        if (!hex)
            st = ct_set_error_at(CT_E_DATA, path, "%s: metadata 'tokenizer' = '%.40s' is not 32 hex digits", path, h);
        if (st == CT_OK && (meta_int(f, path, "tokenizer_bos", &tok->bos) || meta_int(f, path, "tokenizer_eos", &tok->eos)))
            st = CT_ERR;
        if (st == CT_OK) {
            memcpy(tok->hash, h, 33);
            tok->present = 1;
        }
    }
    ct_st_close(f);
    return st;
}

ct_status ct_model_load_config(const char *path, ct_model_config *m) {
    ct_st_file *f = ct_st_open(path);
    if (!f) return CT_ERR;
    ct_status st = config_from_file(f, path, m);
    ct_st_close(f);
    return st;
}

ct_status ct_model_config_match(const ct_model_config *file, const ct_model_config *run) {
    if (file->family != run->family)
        return ct_set_error("model file holds a %s model, this run's model.name is %s",
                            file->family ? file->family->name : "?", run->family ? run->family->name : "?");
#define SAME_INT(field)                                                                                   \
    if (file->field != run->field)                                                                        \
        return ct_set_error("model file " #field " %d does not match this run's %d", file->field, run->field)
    SAME_INT(dim);
    SAME_INT(n_layers);
    SAME_INT(n_heads);
    SAME_INT(n_kv_heads);
    SAME_INT(vocab_size);
    SAME_INT(ffn_hidden);
    SAME_INT(n_experts);
    SAME_INT(moe_top_k);
    SAME_INT(qk_norm);
    SAME_INT(moe_sigmoid);
    SAME_INT(moe_route_norm);
    SAME_INT(n_shared_experts);
    SAME_INT(n_dense_layers);
    if (file->n_dense_layers > 0) SAME_INT(dense_ffn_hidden);
#undef SAME_INT
    if ((file->moe_bias_rate > 0) != (run->moe_bias_rate > 0))
        return ct_set_error("model file %s choosing biases (model.moe.load_balance_coeff), this run %s",
                            file->moe_bias_rate > 0 ? "holds" : "has no", run->moe_bias_rate > 0 ? "has them" : "not");
    if ((file->rope_scaling != 0) != (run->rope_scaling != 0))
        return ct_set_error("model file rope_scaling %d does not match this run's %d", file->rope_scaling != 0,
                            run->rope_scaling != 0);
    // The metadata carries %.17g, so a value written by a run reads back exactly.
    if (file->norm_eps != run->norm_eps)
        return ct_set_error("model file norm_eps %g does not match this run's %g", file->norm_eps, run->norm_eps);
    if (file->rope_theta != run->rope_theta)
        return ct_set_error("model file rope_theta %g does not match this run's %g", file->rope_theta,
                            run->rope_theta);
    return CT_OK;
}

// ------------------------------------------------------------------ tensors

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

// Every tensor the registry expects, with its shape and a convertible dtype, and no other.
static ct_status validate(const ct_st_file *f, const char *path, const ct_param_table *t) {
    char want[64], got[128];
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        format_shape(want, sizeof want, p->ndim, shape);
        const ct_st_tensor *x = ct_st_find(f, p->name);
        if (!x)
            return ct_set_error_at(CT_E_DATA, path, "%s: missing tensor %s (expected shape %s)", path, p->name, want);
        bool same = x->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = x->shape[d] == shape[d];
        if (!same) {
            format_shape(got, sizeof got, x->ndim, x->shape);
            return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s has shape %s, expected %s", path, p->name, got,
                                   want);
        }
        if (x->dtype != CT_F32 && x->dtype != CT_BF16 && x->dtype != CT_F16)
            return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s is %s; expected F32, BF16 or F16", path, p->name,
                                ct_st_dtype_name(x->dtype));
    }
    for (int i = 0; i < ct_st_num_tensors(f); i++) {
        const ct_st_tensor *x = ct_st_tensor_at(f, i);
        if (!ct_param_find(t, x->name))
            return ct_set_error_at(CT_E_DATA, path, "%s: unexpected tensor %s (not a parameter of this model)", path,
                                   x->name);
    }
    return CT_OK;
}

ct_model_file *ct_model_open(const char *path, const ct_param_table *t) {
    ct_st_file *st = ct_st_open(path);
    if (!st) return NULL;
    if (validate(st, path, t)) {
        ct_st_close(st);
        return NULL;
    }
    ct_model_file *f = ct_xcalloc(1, sizeof *f);
    f->st = st;
    f->table = t;
    return f;
}

void ct_model_close(ct_model_file *f) {
    if (!f) return;
    ct_st_close(f->st);
    free(f);
}

void ct_model_read_range(const ct_model_file *f, const ct_param *p, long begin, long n, float *dst) {
    const ct_st_tensor *x = ct_st_find(f->st, p->name);  // present: checked at open
    if (begin < 0 || n < 0 || begin + n > x->numel)
        ct_fatal("model_file", "read of %s [%ld, %ld) outside its %lld elements", p->name, begin, begin + n,
                 (long long)x->numel);
    const unsigned char *src = x->data;  // the data section is only byte-aligned per tensor
    switch (x->dtype) {
    case CT_F32: memcpy(dst, src + 4 * begin, (size_t)n * sizeof(float)); break;
    case CT_BF16:
        for (long i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, src + 2 * (begin + i), 2);
            dst[i] = ct_bf16_to_f32(b);
        }
        break;
    default:  // F16 (validated at open)
        for (long i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * (begin + i), 2);
            dst[i] = ct_f16_to_f32(h);
        }
        break;
    }
}

ct_status ct_model_load(const char *path, const ct_param_table *t, float *full) {
    ct_model_file *f = ct_model_open(path, t);
    if (!f) return CT_ERR;
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        ct_model_read_range(f, p, 0, p->numel, full + p->offset);
    }
    ct_model_close(f);
    return CT_OK;
}

bool ct_model_is_step_folder(const char *path) {
    char manifest[4096];
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
    snprintf(manifest, sizeof manifest, "%s/manifest.toml", path);
    return stat(manifest, &sb) == 0;
}

// A checkpoint's step folder: every tensor whole, gathered from the pieces of whatever layout
// saved it (dcp.h resharding), after every file's size and CRC-32 is checked.
static ct_status load_step_folder(const char *dir, ct_model_config *m, ct_param_table *t, float **full) {
    ct_dcp_manifest man;
    if (ct_dcp_read_manifest(dir, &man)) return CT_ERR;
    ct_status st = CT_OK;
    for (int i = 0; i < man.n_files && st == CT_OK; i++) st = ct_dcp_verify_file(dir, &man.files[i]);
    *m = man.model;
    if (m->max_seq_len <= 0) m->max_seq_len = man.seq_len;  // the length it was trained at
    ct_dcp_reader *r = st == CT_OK ? ct_dcp_open(dir, &man) : NULL;
    if (st == CT_OK && !r) st = CT_ERR;
    if (st == CT_OK) {
        ct_param_table_build(t, m);
        *full = malloc((size_t)t->total * sizeof(float));
        if (!*full) st = ct_set_error_at(CT_E_MEMORY, dir, "%s: out of memory for %ld parameters", dir, t->total);
        for (int i = 0; i < t->count && st == CT_OK; i++) {
            const ct_param *p = &t->params[i];
            ct_shard_desc whole = ct_shard_desc_make(p->global_shape[0], p->global_shape[1], -1, 0, 0);
            st = ct_dcp_read(r, p->name, CT_DCP_PARAM, &whole, *full + p->offset);
        }
        if (st) {
            char why[1024];
            snprintf(why, sizeof why, "%s", ct_last_error());
            // A reason about a file of the checkpoint names it already; any other gets the folder.
            bool names_a_file = !strncmp(ct_last_error_subject(), dir, strlen(dir));
            free(*full);
            *full = NULL;
            ct_param_table_free(t);
            st = names_a_file ? ct_set_error("%s", why) : ct_set_error("%s: %s", dir, why);
        }
    }
    if (r) ct_dcp_close(r);
    ct_dcp_manifest_free(&man);
    return st;
}

ct_status ct_model_load_all(const char *path, ct_model_config *m, ct_param_table *t, float **full) {
    *full = NULL;
    if (ct_model_is_step_folder(path)) return load_step_folder(path, m, t, full);
    if (ct_model_load_config(path, m)) return CT_ERR;
    ct_param_table_build(t, m);
    *full = malloc((size_t)t->total * sizeof(float));
    if (!*full) {
        long total = t->total;  // (the table is zeroed by the free)
        ct_param_table_free(t);
        return ct_set_error_at(CT_E_MEMORY, path, "%s: out of memory for %ld parameters", path, total);
    }
    if (ct_model_load(path, t, *full)) {
        free(*full);
        *full = NULL;
        ct_param_table_free(t);
        return CT_ERR;
    }
    return CT_OK;
}

ct_status ct_model_check_finite(const ct_param_table *t, const float *full) {
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        long bad = 0;
        for (long j = 0; j < p->numel; j++) bad += !isfinite(full[p->offset + j]);
        if (bad)
            return ct_set_error("tensor %s holds %ld non-finite value%s (NaN / Inf) of %ld: the weights of a diverged run",
                                p->name, bad, bad == 1 ? "" : "s", p->numel);
    }
    return CT_OK;
}
