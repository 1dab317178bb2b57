// Reading an HF directory's tensors in ctitan's layout (hf.h): one safetensors file or the
// shards of an index, every file memory-mapped, each parameter bound to its tensor at open.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hf_internal.h"
#include "core/file_check.h"
#include "core/json.h"

enum { HF_NAME = CT_PARAM_NAME + 32 };  // room for an HF name ("model." + a longer suffix)

struct ct_hf_dir {
    ct_st_file **files;          // (n_files) mapped safetensors files
    char **file_names;           // (n_files) as the index names them (or "model.safetensors")
    int n_files;
    const ct_param_table *table;
    char source[1100];           // DIR/model.safetensors or DIR/model.safetensors.index.json
    int *first;                  // (table->count + 1) each parameter's first piece below; the
                                 // pieces of parameter i are [first[i], first[i + 1]) (hf.h)
    const ct_st_tensor **src;    // (pieces) the tensor each piece reads
    int *src_file;               // (pieces) the file it is in
    long head_dim;
    const char *model_type;      // config.json's, for messages
};

void ct_hf_close(ct_hf_dir *f) {
    if (!f) return;
    for (int i = 0; i < f->n_files; i++) {
        ct_st_close(f->files[i]);
        free(f->file_names[i]);
    }
    free(f->files);
    free(f->file_names);
    free(f->first);
    free(f->src);
    free(f->src_file);
    free(f);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Index of file `name` in f, opening it on first use; -1 + error.
static int use_file(ct_hf_dir *f, const char *dir, const char *name) {
    for (int i = 0; i < f->n_files; i++)
        if (!strcmp(f->file_names[i], name)) return i;
    if (strchr(name, '/') || !strcmp(name, "..")) {
        ct_set_error_at(CT_E_DATA, dir, "%s: shard name '%s' is not a file in the directory", dir, name);
        return -1;
    }
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        ct_set_error_at(CT_E_DATA, dir, "%s: shard name '%.60s...' too long", dir, name);
        return -1;
    }
    ct_st_file *st = ct_st_open(path);
    if (!st) return -1;
    f->files = realloc(f->files, sizeof *f->files * (size_t)(f->n_files + 1));
    f->file_names = realloc(f->file_names, sizeof *f->file_names * (size_t)(f->n_files + 1));
    if (!f->files || !f->file_names) ct_fatal("hf", "out of memory");
    f->files[f->n_files] = st;
    f->file_names[f->n_files] = ct_xstrdup(name);
    return f->n_files++;
}

// The tensors the directory holds, as (name, file index) pairs in *names / *where.
typedef struct {
    char **names;
    int *where;
    int n;
} listing;

static void listing_add(listing *l, const char *name, int file) {
    l->names = realloc(l->names, sizeof *l->names * (size_t)(l->n + 1));
    l->where = realloc(l->where, sizeof *l->where * (size_t)(l->n + 1));
    if (!l->names || !l->where) ct_fatal("hf", "out of memory");
    l->names[l->n] = ct_xstrdup(name);
    l->where[l->n++] = file;
}

static void listing_free(listing *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->where);
}

// model.safetensors, or else the index's weight_map (every shard it names opened, every tensor
// it names checked to be in its shard).
static ct_status list_tensors(ct_hf_dir *f, const char *dir, listing *l) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(f->source, sizeof f->source, "%s", path);
    if (file_exists(path)) {
        int k = use_file(f, dir, "model.safetensors");
        if (k < 0) return CT_ERR;
        for (int i = 0; i < ct_st_num_tensors(f->files[k]); i++) listing_add(l, ct_st_tensor_at(f->files[k], i)->name, k);
        return CT_OK;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!file_exists(path))
        return ct_set_error_at(CT_E_DATA, dir, "%s: no model.safetensors or model.safetensors.index.json", dir);
    snprintf(f->source, sizeof f->source, "%s", path);
    ct_json *idx = ct_json_read_file(path, "safetensors index", CT_FILE_JSON_INDEX_MAX);
    if (!idx) return CT_ERR;
    const ct_json *map = ct_json_get(idx, "weight_map");
    ct_status st = CT_OK;
    if (!map || map->type != CT_JSON_OBJECT)
        st = ct_set_error_at(CT_E_DATA, path, "%s: no \"weight_map\" object", path);
    for (int i = 0; st == CT_OK && i < map->n; i++) {
        const ct_json *v = &map->items[i];
        if (v->type != CT_JSON_STRING) {
            st = ct_set_error_at(CT_E_DATA, path, "%s: weight_map entry of %s is not a file name", path, map->keys[i]);
            break;
        }
        int k = use_file(f, dir, v->string);
        if (k < 0) st = CT_ERR;
        else if (!ct_st_find(f->files[k], map->keys[i]))
            st = ct_set_error_at(CT_E_DATA, dir, "%s/%s: no tensor %s (the index puts it there)", dir, v->string,
                                 map->keys[i]);
        else listing_add(l, map->keys[i], k);
    }
    ct_json_free(idx);
    return st;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

// Binds piece k of parameter i to its tensor and checks shape and dtype. `name` is the HF name
// to read.
static ct_status bind(ct_hf_dir *f, const char *dir, const listing *l, int i, int k, const char *name) {
    const ct_param *p = &f->table->params[i];
    int pieces = f->first[i + 1] - f->first[i];
    int64_t want[2] = {p->global_shape[0] / pieces, p->global_shape[1]};
    char ws[64], gs[128];
    format_shape(ws, sizeof ws, p->ndim, want);
    int at = -1;
    for (int k = 0; k < l->n && at < 0; k++)
        if (!strcmp(l->names[k], name)) at = k;
    if (at < 0)
        return ct_set_error_at(CT_E_DATA, f->source, "%s: missing tensor %s (expected shape %s)", f->source, name, ws);
    const ct_st_tensor *x = ct_st_find(f->files[l->where[at]], name);
    int same = x->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = x->shape[d] == want[d];
    if (!same) {
        format_shape(gs, sizeof gs, x->ndim, x->shape);
        return ct_set_error_at(CT_E_DATA, dir, "%s/%s: tensor %s has shape %s, expected %s", dir,
                               f->file_names[l->where[at]], name, gs, ws);
    }
    if (x->dtype != CT_F32 && x->dtype != CT_BF16 && x->dtype != CT_F16)
        return ct_set_error_at(CT_E_DATA, dir, "%s/%s: tensor %s is %s; expected F32, BF16 or F16", dir,
                               f->file_names[l->where[at]], name, ct_st_dtype_name(x->dtype));
    f->src[f->first[i] + k] = x;
    f->src_file[f->first[i] + k] = l->where[at];
    return CT_OK;
}

// Every tensor of the directory must be one the model reads (or a RoPE buffer HF recomputes).
static ct_status check_unexpected(const ct_hf_dir *f, const char *dir, const listing *l, char (*hf_names)[HF_NAME],
                                  int n_names) {
    static const char buffer_suffix[] = "rotary_emb.inv_freq";
    const size_t bn = sizeof buffer_suffix - 1;
    for (int k = 0; k < l->n; k++) {
        const char *s = l->names[k];
        size_t n = strlen(s);
        if (n >= bn && !strcmp(s + n - bn, buffer_suffix)) continue;
        int known = 0;
        for (int i = 0; i < n_names && !known; i++) known = !strcmp(hf_names[i], s);
        if (!known)
            return ct_set_error_at(CT_E_DATA, dir, "%s/%s: unexpected tensor %s (not a parameter of this %s model)",
                                   dir, f->file_names[l->where[k]], s, f->model_type);
    }
    return CT_OK;
}

ct_hf_dir *ct_hf_open(const char *dir, const ct_param_table *t) {
    ct_model_config m;
    int tied;
    if (ct_hf_config_read(dir, &m, &tied)) return NULL;
    ct_hf_dir *f = ct_xcalloc(1, sizeof *f);
    f->table = t;
    f->head_dim = m.head_dim;
    f->model_type = m.family->hf_model_type;
    f->first = ct_xcalloc((size_t)t->count + 1, sizeof *f->first);
    for (int i = 0; i < t->count; i++) f->first[i + 1] = f->first[i] + ct_hf_pieces(&m, t->params[i].name);
    const int n_pieces = f->first[t->count];
    f->src = ct_xcalloc((size_t)n_pieces, sizeof *f->src);
    f->src_file = ct_xcalloc((size_t)n_pieces, sizeof *f->src_file);
    listing l = {0};
    ct_status st = list_tensors(f, dir, &l);
    char (*hf_names)[HF_NAME] = ct_xcalloc((size_t)n_pieces, HF_NAME);  // (pieces) each piece's HF name
    for (int i = 0; st == CT_OK && i < t->count; i++)
        for (int k = f->first[i]; st == CT_OK && k < f->first[i + 1]; k++)
            st = ct_hf_piece_name(t->params[i].name, k - f->first[i], hf_names[k], HF_NAME);
    int emb = -1;  // tied embeddings: the output projection reads the embedding (HF stores no lm_head)
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->params[i].name, "tok_embeddings.weight")) emb = i;
    for (int i = 0; st == CT_OK && i < t->count; i++) {
        int from = tied && emb >= 0 && !strcmp(t->params[i].name, "output.weight") ? emb : i;
        for (int k = 0; st == CT_OK && k < f->first[i + 1] - f->first[i]; k++)
            st = bind(f, dir, &l, i, k, hf_names[f->first[from] + k]);
    }
    if (st == CT_OK) st = check_unexpected(f, dir, &l, hf_names, n_pieces);
    free(hf_names);
    listing_free(&l);
    if (st != CT_OK) {
        ct_hf_close(f);
        return NULL;
    }
    return f;
}

ct_dtype ct_hf_source_dtype(const ct_hf_dir *f) {
    for (int k = 0; k < f->first[f->table->count]; k++)
        if (f->src[k]->dtype != CT_BF16) return CT_F32;
    return CT_BF16;
}

// p's index in the table the directory was opened with (p is normally an entry of it; otherwise
// it is found by name).
static long param_index(const ct_hf_dir *f, const ct_param *p) {
    long i = p - f->table->params;
    if (i >= 0 && i < f->table->count) return i;
    const ct_param *q = ct_param_find(f->table, p->name);
    if (!q) ct_fatal("hf", "parameter %s is not in the table this directory was opened with", p->name);
    return q - f->table->params;
}

void ct_hf_read_range(const ct_hf_dir *f, const ct_param *p, long begin, long n, float *dst) {
    long i = param_index(f, p);
    const long numel = p->global_shape[0] * p->global_shape[1];
    const long per_piece = numel / (f->first[i + 1] - f->first[i]);  // equally many in each piece
    if (begin < 0 || n < 0 || begin + n > numel)
        ct_fatal("hf", "read of %s [%ld, %ld) outside its %ld elements", p->name, begin, begin + n, numel);
    ct_status st = CT_OK;
    if (!ct_hf_rope_permuted(p->name)) {
        // Piece by piece: element e is element e % per_piece of piece e / per_piece.
        for (long e = begin; e < begin + n && st == CT_OK;) {
            long k = e / per_piece, off = e % per_piece, m = per_piece - off < begin + n - e ? per_piece - off : begin + n - e;
            st = ct_st_read_f32_range(f->src[f->first[i] + k], off, m, dst + (e - begin));
            e += m;
        }
    } else {
        // Row by row: ctitan row r is HF row ct_hf_row_of_ct(r); columns stay (one piece).
        const ct_st_tensor *x = f->src[f->first[i]];
        const long C = p->global_shape[1];
        for (long e = begin; e < begin + n && st == CT_OK;) {
            long row = e / C, col = e % C, k = C - col < begin + n - e ? C - col : begin + n - e;
            st = ct_st_read_f32_range(x, ct_hf_row_of_ct(row, f->head_dim) * C + col, k, dst + (e - begin));
            e += k;
        }
    }
    if (st != CT_OK) ct_fatal("hf", "%s", ct_last_error());  // dtype and range were checked at open
}

void ct_hf_release(const ct_hf_dir *f, const ct_param *p, long begin, long n) {
    long i = p - f->table->params;
    if (i < 0 || i >= f->table->count) return;
    ct_hf_widen_to_heads(p, f->head_dim, &begin, &n);
    const long per_piece = p->global_shape[0] * p->global_shape[1] / (f->first[i + 1] - f->first[i]);
    for (long e = begin; e < begin + n;) {
        long k = e / per_piece, off = e % per_piece, m = per_piece - off < begin + n - e ? per_piece - off : begin + n - e;
        ct_st_release(f->files[f->src_file[f->first[i] + k]], f->src[f->first[i] + k], off, m);
        e += m;
    }
}
