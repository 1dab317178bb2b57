// safetensors writer and reader (format in safetensors.h). The header is parsed by ctitan's JSON
// reader (core/json.h), whose exact int64 integers carry shapes and data offsets; what a header
// may hold beyond that (fractions, true/false/null) is accepted where the format ignores it.
#include "checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/fs.h"
#include "core/strbuf.h"
#include "core/json.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

// The reference implementation refuses headers over 100 MB; so do we (a bigger "length" is
// far more likely a corrupt file than a real header).
#define CT_ST_MAX_HEADER (100u * 1000u * 1000u)

// The format's names for our dtypes (NULL: not a safetensors type).
static const char *const st_names[CT_NDTYPES] = {
    [CT_F32] = "F32",   [CT_BF16] = "BF16",        [CT_F16] = "F16",
    [CT_F64] = "F64",   [CT_I64] = "I64",          [CT_I32] = "I32",
    [CT_I16] = "I16",   [CT_I8] = "I8",            [CT_U8] = "U8",
    [CT_BOOL] = "BOOL", [CT_F8_E4M3] = "F8_E4M3", [CT_F8_E5M2] = "F8_E5M2", [CT_E8M0] = "F8_E8M0",
};

const char *ct_st_dtype_name(ct_dtype d) { return (unsigned)d < CT_NDTYPES && st_names[d] ? st_names[d] : "?"; }

static int dtype_from_name(const char *s) {
    for (int i = 0; i < CT_NDTYPES; i++)
        if (st_names[i] && !strcmp(s, st_names[i])) return i;
    return -1;
}

// ---- number formats -------------------------------------------------------------------------


// ---- the header's text (core/strbuf.h)

static void sb_printf(ct_strbuf *b, const char *fmt, long long v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, fmt, v);
    ct_sb_putn(b, tmp, (size_t)k);
}
static void sb_json_string(ct_strbuf *b, const char *s) {
    ct_sb_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ct_sb_putn(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            ct_sb_puts(b, e);
        } else {
            ct_sb_putn(b, (const char *)&c, 1);
        }
    }
    ct_sb_puts(b, "\"");
}

// ---- writer ---------------------------------------------------------------------------------

typedef struct {
    char *name;
    ct_dtype file_dtype, data_dtype;
    int ndim;
    int64_t shape[CT_ST_MAX_DIMS];
    int64_t numel;
    const void *data;
} st_entry;

struct ct_st_writer {
    st_entry *e;
    int n, cap;
    char **meta;  // (2 * n_meta,) key, value, key, value...
    int n_meta;
    // Streaming (ct_st_writer_begin .. finish): the file being written (out.f open while
    // streaming), the tensor being appended and how many of its elements have come.
    ct_fs_atomic out;
    int cur;
    int64_t cur_done;
};

ct_st_writer *ct_st_writer_new(void) { return ct_xcalloc(1, sizeof(ct_st_writer)); }

void ct_st_writer_free(ct_st_writer *w) {
    if (!w) return;
    ct_fs_atomic_abort(&w->out);  // a stream never finished: leave no half-written file behind
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    free(w->e);
    free(w->meta);
    free(w);
}

void ct_st_writer_metadata(ct_st_writer *w, const char *key, const char *value) {
    w->meta = realloc(w->meta, sizeof(char *) * 2 * (size_t)(w->n_meta + 1));
    if (!w->meta) ct_fatal("safetensors", "out of memory");
    w->meta[2 * w->n_meta] = ct_xstrdup(key);
    w->meta[2 * w->n_meta + 1] = ct_xstrdup(value);
    w->n_meta++;
}

ct_status ct_st_writer_add(ct_st_writer *w, const char *name, ct_dtype file_dtype, int ndim, const int64_t *shape,
                           ct_dtype data_dtype, const void *data) {
    if (w->out.f) return ct_set_error("safetensors: %s: added after the header was written", name);
    if ((unsigned)file_dtype >= CT_NDTYPES || (unsigned)data_dtype >= CT_NDTYPES)
        return ct_set_error("safetensors: %s: bad dtype", name);
    if (file_dtype != data_dtype && !(file_dtype == CT_BF16 && data_dtype == CT_F32))
        return ct_set_error("safetensors: %s: cannot store %s data as %s", name, ct_st_dtype_name(data_dtype),
                            ct_st_dtype_name(file_dtype));
    if (ndim < 0 || ndim > CT_ST_MAX_DIMS) return ct_set_error("safetensors: %s: %d dimensions", name, ndim);
    if (!strcmp(name, "__metadata__") || !name[0]) return ct_set_error("safetensors: bad tensor name '%s'", name);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name)) return ct_set_error("safetensors: duplicate tensor name %s", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->e = realloc(w->e, sizeof(st_entry) * (size_t)w->cap);
        if (!w->e) ct_fatal("safetensors", "out of memory");
    }
    st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return ct_set_error("safetensors: %s: negative dimension", name);
        e->shape[i] = shape[i];
        e->numel *= shape[i];
    }
    e->name = ct_xstrdup(name);
    e->file_dtype = file_dtype;
    e->data_dtype = data_dtype;
    e->ndim = ndim;
    e->data = data;
    w->n++;
    return CT_OK;
}

// Writes n elements of e's data dtype as its file dtype (the pair was checked by ct_st_writer_add).
static int write_elems(FILE *f, const st_entry *e, const void *data, int64_t n) {
    const size_t bytes = (size_t)n * (size_t)ct_dtype_size(e->file_dtype);
    if (e->file_dtype == e->data_dtype) return fwrite(data, 1, bytes, f) == bytes;
    uint16_t buf[8192];  // F32 -> BF16 in pieces
    const float *x = data;
    for (int64_t i = 0; i < n; i += 8192) {
        int64_t k = n - i < 8192 ? n - i : 8192;
        for (int64_t j = 0; j < k; j++) buf[j] = ct_f32_to_bf16(x[i + j]);
        if (fwrite(buf, 2, (size_t)k, f) != (size_t)k) return 0;
    }
    return 1;
}

static int write_entry(FILE *f, const st_entry *e) { return write_elems(f, e, e->data, e->numel); }

// The header of the declared entries, offsets in declaration order, padded so the data section
// starts 8-byte aligned. The caller frees h->s.
static void build_header(const ct_st_writer *w, ct_strbuf *h_out) {
    ct_strbuf h = {0};
    ct_sb_puts(&h, "{");
    if (w->n_meta > 0) {
        ct_sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i) ct_sb_puts(&h, ",");
            sb_json_string(&h, w->meta[2 * i]);
            ct_sb_puts(&h, ":");
            sb_json_string(&h, w->meta[2 * i + 1]);
        }
        ct_sb_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const st_entry *e = &w->e[i];
        if (i || w->n_meta > 0) ct_sb_puts(&h, ",");
        sb_json_string(&h, e->name);
        ct_sb_puts(&h, ":{\"dtype\":\"");
        ct_sb_puts(&h, ct_st_dtype_name(e->file_dtype));
        ct_sb_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) sb_printf(&h, d ? ",%lld" : "%lld", (long long)e->shape[d]);
        uint64_t bytes = (uint64_t)e->numel * (uint64_t)ct_dtype_size(e->file_dtype);
        sb_printf(&h, "],\"data_offsets\":[%lld,", (long long)off);
        sb_printf(&h, "%lld]}", (long long)(off + bytes));
        off += bytes;
    }
    ct_sb_puts(&h, "}");
    while ((8 + h.n) % 8) ct_sb_puts(&h, " ");  // data section 8-byte aligned
    *h_out = h;
}

// Opens the atomic write of path into out and writes the length and the header.
static ct_status begin_file(const ct_st_writer *w, const char *path, ct_fs_atomic *out) {
    FILE *f = ct_fs_atomic_open(out, path, "safetensors file", 0);
    if (!f) return CT_ERR;
    ct_strbuf h;
    build_header(w, &h);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(h.s, 1, h.n, f) == h.n;
    free(h.s);
    if (!ok) {
        int err = errno;
        ct_fs_atomic_abort(out);
        return ct_set_error_at(CT_E_IO, path, "%s: write failed: %s", path, strerror(err));
    }
    return CT_OK;
}

ct_status ct_st_writer_write(ct_st_writer *w, const char *path) {
    if (w->out.f) return ct_set_error_at(CT_E_INTERNAL, path, "%s: this writer is streaming to %s", path, w->out.path);
    for (int i = 0; i < w->n; i++)
        if (!w->e[i].data && w->e[i].numel > 0)
            return ct_set_error_at(CT_E_INTERNAL, path, "%s: tensor %s was declared without data (a streaming entry)", path,
                                   w->e[i].name);
    ct_fs_atomic out;
    if (begin_file(w, path, &out)) return CT_ERR;
    int ok = 1;
    for (int i = 0; ok && i < w->n; i++) ok = write_entry(out.f, &w->e[i]);
    if (!ok) {
        int err = errno;
        ct_fs_atomic_abort(&out);
        return ct_set_error_at(CT_E_IO, path, "%s: write failed: %s", path, strerror(err));
    }
    return ct_fs_atomic_commit(&out);
}

// ---- streaming writer -------------------------------------------------------------------------

// Moves past tensors that are complete (including empty ones) to the next that needs data.
static void stream_skip_full(ct_st_writer *w) {
    while (w->cur < w->n && w->cur_done == w->e[w->cur].numel) {
        w->cur++;
        w->cur_done = 0;
    }
}

ct_status ct_st_writer_begin(ct_st_writer *w, const char *path) {
    if (w->out.f) return ct_set_error_at(CT_E_INTERNAL, path, "%s: this writer is already streaming to %s", path, w->out.path);
    if (begin_file(w, path, &w->out)) return CT_ERR;
    w->cur = 0;
    w->cur_done = 0;
    stream_skip_full(w);
    return CT_OK;
}

ct_status ct_st_writer_append(ct_st_writer *w, const void *data, int64_t n) {
    if (!w->out.f) return ct_set_error("safetensors: append without ct_st_writer_begin");
    while (n > 0) {
        if (w->cur >= w->n)
            return ct_set_error_at(CT_E_INTERNAL, w->out.path, "%s: %lld elements appended past the last declared tensor",
                                   w->out.path, (long long)n);
        const st_entry *e = &w->e[w->cur];
        int64_t k = e->numel - w->cur_done < n ? e->numel - w->cur_done : n;
        if (!write_elems(w->out.f, e, data, k))
            return ct_set_error_at(CT_E_IO, w->out.path, "%s: write failed: %s", w->out.path, strerror(errno));
        data = (const char *)data + (size_t)k * ct_dtype_size(e->data_dtype);
        n -= k;
        w->cur_done += k;
        stream_skip_full(w);
    }
    return CT_OK;
}

ct_status ct_st_writer_finish(ct_st_writer *w) {
    if (!w->out.f) return ct_set_error("safetensors: finish without ct_st_writer_begin");
    if (w->cur < w->n) {
        ct_fs_atomic_abort(&w->out);
        return ct_set_error_at(CT_E_INTERNAL, w->out.path, "%s: stream ended with tensor %s at %lld of %lld elements", w->out.path,
                            w->e[w->cur].name, (long long)w->cur_done, (long long)w->e[w->cur].numel);
    }
    return ct_fs_atomic_commit(&w->out);
}

// ---- reader ---------------------------------------------------------------------------------

struct ct_st_file {
    char path[512];
    void *map;
    size_t size;
    ct_st_tensor *t;  // (n,)
    int n;
    char **meta;      // (2 * n_meta,)
    int n_meta;
};

void ct_st_close(ct_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    for (int i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->t);
    free(f->meta);
    free(f);
}

static ct_st_file *open_fail(ct_st_file *f, ct_json *root) {
    ct_json_free(root);
    ct_st_close(f);
    return NULL;
}

static int cmp_begin(const void *a, const void *b) {
    const ct_st_tensor *x = *(ct_st_tensor *const *)a, *y = *(ct_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static bool offset_ok(const ct_json *n) { return n->type == CT_JSON_NUMBER && n->is_int && n->integer >= 0; }

// Fills one tensor from its header entry {"dtype", "shape", "data_offsets"}.
static ct_status tensor_from_json(const char *path, const char *name, const ct_json *v, uint64_t data_bytes, ct_st_tensor *t) {
    if (v->type != CT_JSON_OBJECT)
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: header entry is not an object", path, name);
    const ct_json *dt = NULL, *sh = NULL, *of = NULL;
    for (int i = 0; i < v->n; i++) {
        if (!strcmp(v->keys[i], "dtype")) dt = &v->items[i];
        else if (!strcmp(v->keys[i], "shape")) sh = &v->items[i];
        else if (!strcmp(v->keys[i], "data_offsets")) of = &v->items[i];
    }
    if (!dt || dt->type != CT_JSON_STRING)
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: missing or bad \"dtype\"", path, name);
    int d = dtype_from_name(dt->string);
    if (d < 0) return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: unknown dtype \"%s\"", path, name, dt->string);
    t->dtype = (ct_dtype)d;
    if (!sh || sh->type != CT_JSON_ARRAY || sh->n > CT_ST_MAX_DIMS)
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: missing or bad \"shape\"", path, name);
    t->ndim = sh->n;
    t->numel = 1;
    for (int i = 0; i < sh->n; i++) {
        const ct_json *k = &sh->items[i];
        if (k->type != CT_JSON_NUMBER || !k->is_int || k->integer < 0)
            return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: bad dimension in shape", path, name);
        t->shape[i] = k->integer;
        // Checked products: a wrapped count (2^62 F32 elements = 2^64 bytes = 0) would match
        // empty data offsets.
        if (__builtin_mul_overflow(t->numel, k->integer, &t->numel))
            return ct_set_error_at(CT_E_DATA, path,
                                   "%s: tensor %s: shape too large for the file (element count overflows)", path, name);
    }
    if (!of || of->type != CT_JSON_ARRAY || of->n != 2 || !offset_ok(&of->items[0]) || !offset_ok(&of->items[1]))
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: missing or bad \"data_offsets\"", path, name);
    t->begin = (uint64_t)of->items[0].integer;
    t->end = (uint64_t)of->items[1].integer;
    if (t->begin > t->end || t->end > data_bytes)
        return ct_set_error_at(
            CT_E_DATA, path, "%s: tensor %s: data offsets [%llu, %llu] out of range (data section is %llu bytes)", path,
            name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_bytes);
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)t->numel, (uint64_t)ct_dtype_size(t->dtype), &want))
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: shape too large for the file (byte count overflows)",
                               path, name);
    if (t->end - t->begin != want)
        return ct_set_error_at(CT_E_DATA, path, "%s: tensor %s: %llu bytes in data offsets, but shape x %s needs %llu",
                               path, name, (unsigned long long)(t->end - t->begin), ct_st_dtype_name(t->dtype),
                               (unsigned long long)want);
    return CT_OK;
}

ct_st_file *ct_st_open(const char *path) {
    ct_st_file *f = ct_xcalloc(1, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd;
    uint64_t size;
    // (a FIFO is refused without blocking; core/file_check.h)
    if (ct_file_open_regular(path, "model file", 0, &fd, &size) != CT_OK) return open_fail(f, NULL);
    f->size = (size_t)size;
    if (f->size < 8) {
        close(fd);
        ct_set_error_at(CT_E_DATA, path, "%s: truncated file: %zu bytes, less than the 8-byte header length", path,
                        f->size);
        return open_fail(f, NULL);
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        ct_set_error_at(CT_E_IO, path, "%s: mmap failed: %s", path, strerror(errno));
        return open_fail(f, NULL);
    }
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > CT_ST_MAX_HEADER || hlen > f->size - 8) {
        // A header that starts as one ('{' after the length) with a length the file cannot hold
        // is a cut file; anything else was never a safetensors file -- a tokenizer, a text or
        // TOML file given as --model reads its first 8 characters as a huge length.
        if (hlen <= CT_ST_MAX_HEADER && f->size > 8 && p[8] == '{')
            ct_set_error_at(CT_E_DATA, path,
                            "%s: truncated safetensors file: header length %llu, but only %zu bytes follow it", path,
                            (unsigned long long)hlen, f->size - 8);
        else
            ct_set_error_at(CT_E_DATA, path,
                            "%s: not a safetensors model file (its first 8 bytes, read as a header length, give %llu; "
                            "a tokenizer or text file?)",
                            path, (unsigned long long)hlen);
        return open_fail(f, NULL);
    }
    const uint64_t data_bytes = f->size - 8 - hlen;
    const unsigned char *data = p + 8 + hlen;

    ct_json *root = ct_json_parse((const char *)p + 8, (size_t)hlen, path);
    if (!root) return open_fail(f, NULL);  // "path: bad JSON at byte N: why"
    if (root->type != CT_JSON_OBJECT) {
        ct_set_error_at(CT_E_DATA, path, "%s: bad JSON: header is not an object", path);
        return open_fail(f, root);
    }
    f->t = ct_xcalloc((size_t)root->n + 1, sizeof(ct_st_tensor));
    for (int i = 0; i < root->n; i++) {
        const char *key = root->keys[i];
        const ct_json *v = &root->items[i];
        for (int j = 0; j < i; j++)
            if (!strcmp(root->keys[j], key)) {
                ct_set_error_at(CT_E_DATA, path, "%s: duplicate key \"%s\" in header", path, key);
                return open_fail(f, root);
            }
        if (!strcmp(key, "__metadata__")) {
            if (v->type != CT_JSON_OBJECT) {
                ct_set_error_at(CT_E_DATA, path, "%s: __metadata__ is not an object", path);
                return open_fail(f, root);
            }
            f->meta = ct_xcalloc(2 * (size_t)v->n + 1, sizeof(char *));
            for (int m = 0; m < v->n; m++) {
                if (v->items[m].type != CT_JSON_STRING) {
                    ct_set_error_at(CT_E_DATA, path, "%s: __metadata__ value of \"%s\" is not a string", path,
                                    v->keys[m]);
                    return open_fail(f, root);
                }
                f->meta[2 * m] = ct_xstrdup(v->keys[m]);
                f->meta[2 * m + 1] = ct_xstrdup(v->items[m].string);
                f->n_meta = m + 1;
            }
            continue;
        }
        ct_st_tensor *t = &f->t[f->n];
        if (tensor_from_json(path, key, v, data_bytes, t) != CT_OK) return open_fail(f, root);
        t->name = ct_xstrdup(key);
        t->data = data + t->begin;
        f->n++;
    }
    ct_json_free(root);
    // Overlap: sorted by begin, each tensor must end before the next begins.
    if (f->n > 1) {
        ct_st_tensor **order = ct_xmalloc(sizeof(ct_st_tensor *) * (size_t)f->n);
        for (int i = 0; i < f->n; i++) order[i] = &f->t[i];
        qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
        const ct_st_tensor *last = NULL;  // the non-empty tensor reaching furthest so far
        for (int i = 0; i < f->n; i++) {
            if (order[i]->end == order[i]->begin) continue;  // empty tensors occupy no bytes
            if (last && order[i]->begin < last->end) {
                ct_set_error_at(CT_E_DATA, path, "%s: tensors %s and %s overlap in the data section", path, last->name,
                                order[i]->name);
                free(order);
                return open_fail(f, NULL);
            }
            last = order[i];
        }
        free(order);
    }
    return f;
}

int ct_st_num_tensors(const ct_st_file *f) { return f->n; }
const ct_st_tensor *ct_st_tensor_at(const ct_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const ct_st_tensor *ct_st_find(const ct_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

int ct_st_num_metadata(const ct_st_file *f) { return f->n_meta; }
const char *ct_st_metadata_key(const ct_st_file *f, int i) { return i >= 0 && i < f->n_meta ? f->meta[2 * i] : NULL; }
const char *ct_st_metadata(const ct_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

ct_status ct_st_read_f32(const ct_st_file *f, const char *name, float *out, int64_t numel) {
    const ct_st_tensor *t = ct_st_find(f, name);
    if (!t) return ct_set_error_at(CT_E_DATA, f->path, "%s: no tensor %s", f->path, name);
    if (t->numel != numel)
        return ct_set_error_at(CT_E_DATA, f->path, "%s: tensor %s has %lld elements, expected %lld", f->path, name,
                               (long long)t->numel, (long long)numel);
    if (t->dtype != CT_F32 && t->dtype != CT_BF16 && t->dtype != CT_F16)
        return ct_set_error_at(CT_E_DATA, f->path, "%s: tensor %s is %s; only F32, BF16 and F16 convert to fp32",
                               f->path, name, ct_st_dtype_name(t->dtype));
    return ct_st_read_f32_range(t, 0, numel, out);
}

ct_status ct_st_read_f32_range(const ct_st_tensor *t, int64_t begin, int64_t n, float *out) {
    if (begin < 0 || n < 0 || begin > t->numel - n)
        return ct_set_error("tensor %s: elements [%lld, %lld) outside its %lld", t->name, (long long)begin,
                            (long long)(begin + n), (long long)t->numel);
    const unsigned char *src = t->data;  // may be unaligned (offsets are only byte offsets)
    switch (t->dtype) {
        case CT_F32: memcpy(out, src + 4 * begin, sizeof(float) * (size_t)n); break;
        case CT_BF16:
            for (int64_t i = 0; i < n; i++) {
                uint16_t b;
                memcpy(&b, src + 2 * (begin + i), 2);
                out[i] = ct_bf16_to_f32(b);
            }
            break;
        case CT_F16:
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * (begin + i), 2);
                out[i] = ct_f16_to_f32(h);
            }
            break;
        default: return ct_set_error("tensor %s is %s; only F32, BF16 and F16 convert to fp32", t->name, ct_st_dtype_name(t->dtype));
    }
    return CT_OK;
}

void ct_st_release(const ct_st_file *f, const ct_st_tensor *t, int64_t begin, int64_t n) {
    if (begin < 0 || n <= 0 || begin > t->numel - n) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)f->map;
    const size_t es = ct_dtype_size(t->dtype);
    uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)begin * es) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + (uintptr_t)(begin + n) * es + page - 1) & ~(page - 1);
    if (hi > base + f->size) hi = (base + f->size + page - 1) & ~(page - 1);
    // The pages are clean (a read-only mapping): dropping one a neighbour still needs costs a refault.
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
