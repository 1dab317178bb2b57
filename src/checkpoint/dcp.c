#include "checkpoint/dcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/safetensors.h"
#include "core/file_check.h"
#include "core/fs.h"
#include "core/mathutil.h"
#include "core/toml.h"

static const char *const kind_suffix[CT_DCP_NKINDS] = {"", ".exp_avg", ".exp_avg_sq"};
const char *ct_dcp_kind_suffix(ct_dcp_kind k) { return kind_suffix[k]; }

#define DESC_KEY_PREFIX "desc:"

// ---- files on disk ---------------------------------------------------------------------------

ct_status ct_dcp_file_checksum(const char *path, bool sync, ct_dcp_file *out) {
    // Read to its end, so only a regular file: a FIFO or a link to /dev/zero in a step folder
    // would otherwise block the read or never end it.
    int fd;
    uint64_t size;
    if (ct_file_open_regular(path, "checkpoint file", 0, &fd, &size) != CT_OK) return CT_ERR;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return ct_set_error_at(CT_E_MEMORY, path, "%s: out of memory for a read buffer", path);
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    uint64_t bytes = 0;
    ct_status st = CT_OK;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            st = ct_set_error_at(CT_E_IO, path, "%s: read: %s", path, strerror(errno));
            break;
        }
        if (n == 0) break;
        crc = crc32(crc, buf, (uInt)n);
        bytes += (uint64_t)n;
    }
    if (st == CT_OK && sync && fsync(fd)) st = ct_set_error_at(CT_E_IO, path, "%s: fsync: %s", path, strerror(errno));
    free(buf);
    close(fd);
    if (st == CT_OK) {
        out->bytes = bytes;
        out->crc32 = (uint32_t)crc;
    }
    return st;
}

static void format_desc(char *buf, size_t n, const ct_shard_desc *d) {
    snprintf(buf, n, "%ld %ld %d %ld %ld %ld %ld", d->global_shape[0], d->global_shape[1], d->tp_dim, d->tp_start,
             d->tp_count, d->flat_begin, d->flat_count);
}

static bool parse_desc(const char *s, ct_shard_desc *d) {
    memset(d, 0, sizeof *d);
    int used = 0;
    if (sscanf(s, "%ld %ld %d %ld %ld %ld %ld%n", &d->global_shape[0], &d->global_shape[1], &d->tp_dim, &d->tp_start,
               &d->tp_count, &d->flat_begin, &d->flat_count, &used) != 7 ||
        s[used])
        return false;
    return ct_shard_desc_valid(d);
}

ct_status ct_dcp_write_pieces(const char *path, const ct_dcp_piece *pieces, int n, bool with_optimizer,
                              ct_dcp_file *out) {
    ct_st_writer *w = ct_st_writer_new();
    ct_st_writer_metadata(w, "format", CT_DCP_FORMAT);
    ct_status st = CT_OK;
    for (int i = 0; i < n && st == CT_OK; i++) {
        const ct_dcp_piece *p = &pieces[i];
        char key[CT_DCP_NAME + 16], desc[160];
        snprintf(key, sizeof key, DESC_KEY_PREFIX "%s", p->name);
        format_desc(desc, sizeof desc, &p->desc);
        ct_st_writer_metadata(w, key, desc);
        int64_t shape[1] = {p->desc.flat_count};  // (flat_count) the piece's elements in local order
        for (int k = 0; k < (with_optimizer ? CT_DCP_NKINDS : 1) && st == CT_OK; k++) {
            char name[CT_DCP_NAME + 16];
            snprintf(name, sizeof name, "%s%s", p->name, kind_suffix[k]);
            st = ct_st_writer_add(w, name, CT_F32, 1, shape, CT_F32, p->data[k]);
        }
    }
    if (st == CT_OK) st = ct_st_writer_write(w, path);
    ct_st_writer_free(w);
    if (st == CT_OK) st = ct_dcp_file_checksum(path, true, out);
    return st;
}

ct_status ct_dcp_verify_file(const char *dir, const ct_dcp_file *f) {
    char path[CT_DCP_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    ct_dcp_file got;
    if (ct_dcp_file_checksum(path, false, &got)) return CT_ERR;
    if (got.bytes != f->bytes)
        return ct_set_error_at(CT_E_DATA, path, "%s: %llu bytes, the manifest says %llu", path,
                               (unsigned long long)got.bytes, (unsigned long long)f->bytes);
    if (got.crc32 != f->crc32)
        return ct_set_error_at(CT_E_DATA, path, "%s: CRC-32 %08x, the manifest says %08x (the file is corrupt)", path,
                               got.crc32, f->crc32);
    return CT_OK;
}

// ---- the manifest --------------------------------------------------------------------------

// A TOML basic string: quotes, backslashes and control characters escaped.
static void put_string(FILE *f, const char *key, const char *s) {
    fprintf(f, "%s = \"", key);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fprintf(f, "\"\n");
}

ct_status ct_dcp_write_manifest(const char *dir, const ct_dcp_manifest *m) {
    char path[CT_DCP_PATH];
    snprintf(path, sizeof path, "%s/manifest.toml", dir);
    ct_fs_atomic manifest;
    FILE *f = ct_fs_atomic_open(&manifest, path, "checkpoint manifest", CT_FS_SYNC_FOLDER);
    if (!f) return CT_ERR;
    fprintf(f, "# ctitan distributed checkpoint: written last, after every file below is on disk\n");
    put_string(f, "format", CT_DCP_FORMAT);
    fprintf(f, "version = %d\nstep = %d\noptimizer_step = %ld\nmodel_only = %s\nworld_size = %d\n", CT_DCP_VERSION,
            m->step, m->optimizer_step, m->model_only ? "true" : "false", m->world_size);
    put_string(f, "layout", m->layout);
    fprintf(f, "seed = %lld\n", m->seed);
    fprintf(f, "\n[data]  # windows of seq_len + 1 tokens consumed by all data-parallel ranks together\n");
    fprintf(f, "epoch = %llu\nposition = %llu\nseq_len = %d\n", (unsigned long long)m->data_epoch,
            (unsigned long long)m->data_position, m->seq_len);
    const ct_model_config *c = &m->model;
    fprintf(f, "\n[model]\n");
    put_string(f, "flavor", c->flavor);
    fprintf(f,
            "dim = %d\nn_layers = %d\nn_heads = %d\nn_kv_heads = %d\nffn_hidden = %d\nvocab_size = %d\n"
            "norm_eps = %.17g\nrope_theta = %.17g\nrope_scaling = %d\nmax_seq_len = %d\n",
            c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn_hidden, c->vocab_size, c->norm_eps, c->rope_theta,
            c->rope_scaling, c->max_seq_len);
    put_string(f, "attn_mask_type", c->block_causal ? "block_causal" : "causal");
    put_string(f, "rope_positions", c->document_positions ? "document" : "sequence");
    // Llama 3, the default family, is written as nothing (manifests read the same in every build).
    if (c->family && strcmp(c->family->name, "llama3")) put_string(f, "family", c->family->name);
    if (c->n_experts > 0)
        fprintf(f, "n_experts = %d\nmoe_top_k = %d\nmoe_sigmoid = %d\nmoe_route_norm = %d\nmoe_load_balance_coeff = %.17g\n",
                c->n_experts, c->moe_top_k, c->moe_sigmoid, c->moe_route_norm, c->moe_bias_rate);
    if (c->qk_norm) fprintf(f, "qk_norm = 1\n");  // absent: no per-head q/k norms
    for (int i = 0; i < m->n_files; i++) {
        fprintf(f, "\n[[file]]\n");
        put_string(f, "name", m->files[i].name);
        fprintf(f, "bytes = %llu\ncrc32 = %u\n", (unsigned long long)m->files[i].bytes, m->files[i].crc32);
    }
    return ct_fs_atomic_commit(&manifest);
}

static ct_status get_int(const ct_toml_value *t, const char *path, const char *file, long long lo, long long hi,
                         long long *out) {
    const ct_toml_value *v = ct_toml_get_path(t, path);
    if (!v || v->type != CT_TOML_INT)
        return ct_set_error_at(CT_E_DATA, file, "%s: '%s' missing or not an integer", file, path);
    if (v->i < lo || v->i > hi)
        return ct_set_error_at(CT_E_DATA, file, "%s: '%s' = %lld out of range [%lld, %lld]", file, path, v->i, lo, hi);
    *out = v->i;
    return CT_OK;
}

static ct_status get_double(const ct_toml_value *t, const char *path, const char *file, double *out) {
    const ct_toml_value *v = ct_toml_get_path(t, path);
    if (v && v->type == CT_TOML_INT) {
        *out = (double)v->i;
        return CT_OK;
    }
    if (!v || v->type != CT_TOML_FLOAT)
        return ct_set_error_at(CT_E_DATA, file, "%s: '%s' missing or not a number", file, path);
    *out = v->f;
    return CT_OK;
}

static ct_status get_string(const ct_toml_value *t, const char *path, const char *file, char *out, size_t n) {
    const ct_toml_value *v = ct_toml_get_path(t, path);
    if (!v || v->type != CT_TOML_STRING)
        return ct_set_error_at(CT_E_DATA, file, "%s: '%s' missing or not a string", file, path);
    if (strlen(v->s) >= n) return ct_set_error_at(CT_E_DATA, file, "%s: '%s' is too long", file, path);
    snprintf(out, n, "%s", v->s);
    return CT_OK;
}

static ct_status manifest_from_toml(const ct_toml_value *t, const char *file, ct_dcp_manifest *m) {
    char format[64];
    if (get_string(t, "format", file, format, sizeof format)) return CT_ERR;
    if (strcmp(format, CT_DCP_FORMAT))
        return ct_set_error_at(CT_E_DATA, file, "%s: format '%s', expected '%s'", file, format, CT_DCP_FORMAT);
    long long v;
    if (get_int(t, "version", file, CT_DCP_VERSION, CT_DCP_VERSION, &v)) return CT_ERR;
    const ct_toml_value *mo = ct_toml_get(t, "model_only");
    if (!mo || mo->type != CT_TOML_BOOL)
        return ct_set_error_at(CT_E_DATA, file, "%s: 'model_only' missing or not a boolean", file);
    m->model_only = mo->b;
    const long long int_max = 0x7fffffff;
#define INT_FIELD(path, lo, hi, dst)                          \
    do {                                                      \
        if (get_int(t, path, file, lo, hi, &v)) return CT_ERR; \
        dst = v;                                              \
    } while (0)
    INT_FIELD("step", 0, int_max, m->step);
    INT_FIELD("optimizer_step", 0, int_max, m->optimizer_step);
    INT_FIELD("world_size", 1, 1 << 24, m->world_size);
    INT_FIELD("seed", -0x7fffffffffffffffLL, 0x7fffffffffffffffLL, m->seed);
    INT_FIELD("data.epoch", 0, 0x7fffffffffffffffLL, m->data_epoch);
    INT_FIELD("data.position", 0, 0x7fffffffffffffffLL, m->data_position);
    INT_FIELD("data.seq_len", 1, int_max, m->seq_len);
    ct_model_config *c = &m->model;
    INT_FIELD("model.dim", 1, int_max, c->dim);
    INT_FIELD("model.n_layers", 1, 1 << 16, c->n_layers);
    INT_FIELD("model.n_heads", 1, int_max, c->n_heads);
    INT_FIELD("model.n_kv_heads", 1, int_max, c->n_kv_heads);
    INT_FIELD("model.ffn_hidden", 1, int_max, c->ffn_hidden);
    INT_FIELD("model.vocab_size", 1, int_max, c->vocab_size);
    INT_FIELD("model.rope_scaling", 0, 1, c->rope_scaling);
    INT_FIELD("model.max_seq_len", 0, int_max, c->max_seq_len);
    if (get_string(t, "layout", file, m->layout, sizeof m->layout) ||
        get_string(t, "model.flavor", file, c->flavor, sizeof c->flavor) ||
        get_double(t, "model.norm_eps", file, &c->norm_eps) || get_double(t, "model.rope_theta", file, &c->rope_theta))
        return CT_ERR;
    if (c->dim % c->n_heads)
        return ct_set_error_at(CT_E_DATA, file, "%s: model.n_heads %d does not divide dim %d", file, c->n_heads,
                               c->dim);
    char family[32] = "llama3";
    if (ct_toml_get_path(t, "model.family") && get_string(t, "model.family", file, family, sizeof family)) return CT_ERR;
    c->family = ct_model_family_find(family);
    if (!c->family)
        return ct_set_error_at(CT_E_DATA, file, "%s: model.family '%s' is not a model family this build knows", file,
                               family);
    if (ct_toml_get_path(t, "model.n_experts")) {
        INT_FIELD("model.n_experts", 1, 1 << 20, c->n_experts);
        INT_FIELD("model.moe_top_k", 1, c->n_experts, c->moe_top_k);
        c->moe_route_norm = 1;  // the router (absent in older manifests: softmax, renormalised, no bias)
        if (ct_toml_get_path(t, "model.moe_sigmoid")) INT_FIELD("model.moe_sigmoid", 0, 1, c->moe_sigmoid);
        if (ct_toml_get_path(t, "model.moe_route_norm")) INT_FIELD("model.moe_route_norm", 0, 1, c->moe_route_norm);
        if (ct_toml_get_path(t, "model.moe_load_balance_coeff") &&
            get_double(t, "model.moe_load_balance_coeff", file, &c->moe_bias_rate))
            return CT_ERR;
    }
    if (ct_toml_get_path(t, "model.qk_norm")) INT_FIELD("model.qk_norm", 0, 1, c->qk_norm);
#undef INT_FIELD
    // The mask and positions trained with (absent in older manifests: causal, sequence).
    char mask[16] = "causal", rpos[16] = "sequence";
    if (ct_toml_get_path(t, "model.attn_mask_type") &&
        get_string(t, "model.attn_mask_type", file, mask, sizeof mask))
        return CT_ERR;
    if (ct_toml_get_path(t, "model.rope_positions") &&
        get_string(t, "model.rope_positions", file, rpos, sizeof rpos))
        return CT_ERR;
    bool mask_ok = !strcmp(mask, "causal") || !strcmp(mask, "block_causal");
    bool rpos_ok = !strcmp(rpos, "sequence") || !strcmp(rpos, "document");
    if (!mask_ok || !rpos_ok)
        return ct_set_error_at(
            CT_E_DATA, file,
            "%s: model.attn_mask_type '%s' / model.rope_positions '%s': expected causal|block_causal "
            "/ sequence|document",
            file, mask, rpos);
    c->block_causal = !strcmp(mask, "block_causal");
    c->document_positions = !strcmp(rpos, "document");
    c->head_dim = c->dim / c->n_heads;

    const ct_toml_value *files = ct_toml_get(t, "file");
    if (!files || files->type != CT_TOML_ARRAY || files->n < 1)
        return ct_set_error_at(CT_E_DATA, file, "%s: no [[file]] entries", file);
    m->n_files = files->n;
    m->files = calloc((size_t)files->n, sizeof *m->files);
    if (!m->files) return ct_set_error_at(CT_E_MEMORY, file, "%s: out of memory for %d file entries", file, files->n);
    for (int i = 0; i < files->n; i++) {
        const ct_toml_value *e = files->items[i];
        ct_dcp_file *fe = &m->files[i];
        if (e->type != CT_TOML_TABLE)
            return ct_set_error_at(CT_E_DATA, file, "%s: [[file]] %d is not a table", file, i + 1);
        if (get_string(e, "name", file, fe->name, sizeof fe->name)) return CT_ERR;
        // A name is a plain file inside the step folder, never a path out of it.
        if (!fe->name[0] || strchr(fe->name, '/') || !strcmp(fe->name, ".") || !strcmp(fe->name, ".."))
            return ct_set_error_at(CT_E_DATA, file, "%s: file name '%s' is not a plain file name", file, fe->name);
        if (get_int(e, "bytes", file, 0, 0x7fffffffffffffffLL, &v)) return CT_ERR;
        fe->bytes = (uint64_t)v;
        if (get_int(e, "crc32", file, 0, 0xffffffffLL, &v)) return CT_ERR;
        fe->crc32 = (uint32_t)v;
    }
    return CT_OK;
}

ct_status ct_dcp_read_manifest(const char *dir, ct_dcp_manifest *m) {
    memset(m, 0, sizeof *m);
    char path[CT_DCP_PATH];
    snprintf(path, sizeof path, "%s/manifest.toml", dir);
    ct_toml_value *t = ct_toml_parse_file(path);
    if (!t) return CT_ERR;
    ct_status st = manifest_from_toml(t, path, m);
    ct_toml_free(t);
    if (st) ct_dcp_manifest_free(m);
    return st;
}

void ct_dcp_manifest_free(ct_dcp_manifest *m) {
    free(m->files);
    m->files = NULL;
    m->n_files = 0;
}

// ---- reading --------------------------------------------------------------------------------

typedef struct {
    const char *name;                  // points into the file's tensor table
    ct_shard_desc desc;
    const float *data[CT_DCP_NKINDS];  // inside the mapping; NULL when the kind is absent
} piece_ref;

struct ct_dcp_reader {
    ct_st_file **files;  // (n_files)
    int n_files;
    piece_ref *pieces;   // (n_pieces) sorted by name
    int n_pieces;
};

static int cmp_piece(const void *a, const void *b) {
    return strcmp(((const piece_ref *)a)->name, ((const piece_ref *)b)->name);
}

// Indexes the pieces of one rank file: every "desc:NAME" metadata entry and its tensors.
static ct_status index_file(ct_dcp_reader *r, const ct_st_file *f, const char *path) {
    const char *format = ct_st_metadata(f, "format");
    if (!format || strcmp(format, CT_DCP_FORMAT))
        return ct_set_error_at(CT_E_DATA, path, "%s: not a ctitan checkpoint file (metadata format '%s')", path,
                               format ? format : "");
    for (int i = 0; i < ct_st_num_metadata(f); i++) {
        const char *key = ct_st_metadata_key(f, i);
        if (strncmp(key, DESC_KEY_PREFIX, strlen(DESC_KEY_PREFIX))) continue;
        const char *name = key + strlen(DESC_KEY_PREFIX);
        piece_ref p = {0};
        if (!parse_desc(ct_st_metadata(f, key), &p.desc))
            return ct_set_error_at(CT_E_DATA, path, "%s: bad shard descriptor for %s: '%s'", path, name,
                                   ct_st_metadata(f, key));
        for (int k = 0; k < CT_DCP_NKINDS; k++) {
            char tname[CT_DCP_NAME + 16];
            snprintf(tname, sizeof tname, "%s%s", name, kind_suffix[k]);
            const ct_st_tensor *t = ct_st_find(f, tname);
            if (!t) {
                if (k == CT_DCP_PARAM) return ct_set_error_at(CT_E_DATA, path, "%s: no tensor %s", path, tname);
                continue;
            }
            if (t->dtype != CT_F32 || t->ndim != 1 || t->numel != p.desc.flat_count)
                return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s is not F32 [%ld]", path, tname,
                                       p.desc.flat_count);
            if (k == CT_DCP_PARAM) p.name = t->name;
            p.data[k] = t->data;
        }
        r->pieces[r->n_pieces++] = p;
    }
    return CT_OK;
}

ct_dcp_reader *ct_dcp_open(const char *dir, const ct_dcp_manifest *m) {
    ct_dcp_reader *r = calloc(1, sizeof *r);
    if (!r) return ct_set_error("out of memory"), NULL;
    r->files = calloc((size_t)m->n_files, sizeof *r->files);
    int cap = 0;
    for (int i = 0; i < m->n_files && r->files; i++) {
        if (strncmp(m->files[i].name, "rank-", 5)) continue;  // config.toml
        char path[CT_DCP_PATH];
        snprintf(path, sizeof path, "%s/%s", dir, m->files[i].name);
        ct_st_file *f = ct_st_open(path);
        if (!f) {
            ct_dcp_close(r);
            return NULL;
        }
        r->files[r->n_files++] = f;
        cap += ct_st_num_metadata(f);
    }
    r->pieces = calloc((size_t)(cap ? cap : 1), sizeof *r->pieces);
    if (!r->files || !r->pieces) {
        ct_dcp_close(r);
        return ct_set_error_at(CT_E_MEMORY, dir, "%s: out of memory indexing the checkpoint", dir), NULL;
    }
    for (int i = 0, fi = 0; i < m->n_files; i++) {
        if (strncmp(m->files[i].name, "rank-", 5)) continue;
        char path[CT_DCP_PATH];
        snprintf(path, sizeof path, "%s/%s", dir, m->files[i].name);
        if (index_file(r, r->files[fi++], path)) {
            ct_dcp_close(r);
            return NULL;
        }
    }
    qsort(r->pieces, (size_t)r->n_pieces, sizeof *r->pieces, cmp_piece);
    return r;
}

void ct_dcp_close(ct_dcp_reader *r) {
    if (!r) return;
    for (int i = 0; i < r->n_files; i++) ct_st_close(r->files[i]);
    free(r->files);
    free(r->pieces);
    free(r);
}

// The global ranges [lo, hi) copied into one request, to check that they cover it exactly.
typedef struct {
    long (*iv)[2];
    long n, cap;
    bool oom;
} copied_ranges;

static void note_range(copied_ranges *c, long lo, long hi) {
    if (c->n == c->cap) {
        long cap = c->cap ? 2 * c->cap : 64;
        long(*iv)[2] = realloc(c->iv, (size_t)cap * sizeof *iv);
        if (!iv) {
            c->oom = true;
            return;
        }
        c->iv = iv;
        c->cap = cap;
    }
    c->iv[c->n][0] = lo;
    c->iv[c->n][1] = hi;
    c->n++;
}

// Copies the elements `want` and piece p have in common. Both run lists ascend in global index
// (a flat range of a row-major slice maps monotonically into the global tensor), so one merge
// pass finds every overlap; each one copied is noted in `ranges`.
static void copy_overlap(const ct_shard_desc *want, float *dst, const ct_shard_desc *have, const float *src,
                         copied_ranges *ranges) {
    ct_shard_iter iw = CT_SHARD_ITER_INIT, ih = CT_SHARD_ITER_INIT;
    ct_shard_run rw, rh;
    bool w = ct_shard_next_run(want, &iw, &rw), h = ct_shard_next_run(have, &ih, &rh);
    while (w && h) {
        long lo = ct_max_l(rw.global, rh.global), hi = ct_min_l(rw.global + rw.len, rh.global + rh.len);
        if (lo < hi) {
            memcpy(dst + rw.local + (lo - rw.global), src + rh.local + (lo - rh.global), (size_t)(hi - lo) * sizeof *dst);
            note_range(ranges, lo, hi);
        }
        if (rw.global + rw.len <= rh.global + rh.len)
            w = ct_shard_next_run(want, &iw, &rw);
        else
            h = ct_shard_next_run(have, &ih, &rh);
    }
}

static int cmp_range(const void *a, const void *b) {
    long x = ((const long *)a)[0], y = ((const long *)b)[0];
    return (x > y) - (x < y);
}

// Whether the copied ranges cover want's elements exactly once. Each range lies inside one of
// want's runs (it was cut from one), so with the ranges sorted, one walk along want's runs finds
// the first element no range holds (*gap) and the first that two hold (*twice); -1: none.
static void check_cover(const ct_shard_desc *want, copied_ranges *c, long *gap, long *twice, long *copied) {
    *gap = *twice = -1;
    *copied = 0;
    if (c->n > 1) qsort(c->iv, (size_t)c->n, sizeof *c->iv, cmp_range);
    ct_shard_iter it = CT_SHARD_ITER_INIT;
    ct_shard_run run;
    long k = 0;
    while (ct_shard_next_run(want, &it, &run)) {
        long pos = run.global, end = run.global + run.len;  // [run.global, pos) is covered
        for (; k < c->n && c->iv[k][0] < end; k++) {
            long lo = c->iv[k][0], hi = c->iv[k][1];
            *copied += hi - lo;
            if (lo > pos && *gap < 0) *gap = pos;
            if (lo < pos && *twice < 0) *twice = lo;
            pos = ct_max_l(pos, hi);
        }
        if (pos < end && *gap < 0) *gap = pos;
    }
}

ct_status ct_dcp_read(const ct_dcp_reader *r, const char *name, ct_dcp_kind kind, const ct_shard_desc *want,
                      float *dst) {
    // First piece of this name (the pieces are sorted by name).
    int lo = 0, hi = r->n_pieces;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(r->pieces[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    copied_ranges ranges = {0};
    for (int i = lo; i < r->n_pieces && !strcmp(r->pieces[i].name, name); i++) {
        const piece_ref *p = &r->pieces[i];
        if (p->desc.global_shape[0] != want->global_shape[0] || p->desc.global_shape[1] != want->global_shape[1]) {
            free(ranges.iv);
            return ct_set_error("checkpoint tensor %s is %ld x %ld, this run's is %ld x %ld", name,
                                p->desc.global_shape[0], p->desc.global_shape[1], want->global_shape[0],
                                want->global_shape[1]);
        }
        if (!p->data[kind]) {
            free(ranges.iv);
            return ct_set_error("checkpoint has no %s%s (a model-only checkpoint?)", name, kind_suffix[kind]);
        }
        copy_overlap(want, dst, &p->desc, p->data[kind], &ranges);
    }
    if (ranges.oom) {
        free(ranges.iv);
        return ct_set_error("out of memory checking which elements of %s%s the checkpoint holds", name, kind_suffix[kind]);
    }
    // Exactly once, not just as many as needed: pieces that overlap and leave a gap of the same
    // size would otherwise load with a hole.
    long gap, twice, copied;
    check_cover(want, &ranges, &gap, &twice, &copied);
    free(ranges.iv);
    long cols = want->global_shape[1] > 0 ? want->global_shape[1] : 1;
    if (gap >= 0)
        return ct_set_error("checkpoint holds %ld of the %ld elements of %s%s this rank needs: element %ld (row %ld, "
                            "column %ld) is in no saved piece%s (a rank file missing?)",
                            copied, want->flat_count, name, kind_suffix[kind], gap, gap / cols, gap % cols,
                            twice >= 0 ? ", and some elements are saved twice" : "");
    if (twice >= 0)
        return ct_set_error("checkpoint's saved pieces of %s%s overlap: they hold %ld elements for the %ld this rank "
                            "needs, element %ld (row %ld, column %ld) twice",
                            name, kind_suffix[kind], copied, want->flat_count, twice, twice / cols, twice % cols);
    return CT_OK;
}
