// Apache Parquet corpus reader: the files pyarrow and Hugging Face `datasets` write.
//
// A Parquet file is "PAR1", column chunks, the footer (FileMetaData in Thrift's compact protocol,
// parquet_thrift.h), the footer's length (u32 LE) and "PAR1". The footer's schema is a tree
// flattened depth first; the column read is the top-level field named by --text-field, which
// must be a flat BYTE_ARRAY annotated as a string (STRING logical type or UTF8 converted type;
// pyarrow's string and large_string both store so), REQUIRED or OPTIONAL. Each row group holds
// one chunk of it: an optional dictionary page, then data pages (v1: levels and values
// compressed together, each level run prefixed by its length; v2: levels uncompressed in front,
// values compressed after). Definition levels (0 = null, for an OPTIONAL column) use the RLE /
// bit-packed hybrid; values are PLAIN (u32 length + bytes) or dictionary indices (a bit-width
// byte, then the hybrid) into the dictionary page's PLAIN values. Pages are compressed with
// UNCOMPRESSED, SNAPPY (libsnappy), GZIP (zlib) or ZSTD (libzstd). A page's CRC-32, when the
// writer stored one, is checked.
//
// One page is held at a time (and the chunk's dictionary), so memory is bounded by the largest
// page. Everything else -- nested or non-string columns, other codecs (LZO, BROTLI, LZ4), other
// encodings (DELTA_*, BYTE_STREAM_SPLIT), encrypted files, column data in other files, nulls --
// is refused in one line naming the file, the row group and column, and what is unsupported.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include "core/file_check.h"
#include "data/corpus_internal.h"
#include "data/parquet_thrift.h"

enum { PQ_BYTE_ARRAY = 6 };
enum { PQ_REQUIRED = 0, PQ_OPTIONAL = 1, PQ_REPEATED = 2 };
enum { PQ_UNCOMPRESSED = 0, PQ_SNAPPY = 1, PQ_GZIP = 2, PQ_ZSTD = 6 };
enum { PQ_PLAIN = 0, PQ_PLAIN_DICTIONARY = 2, PQ_RLE = 3, PQ_RLE_DICTIONARY = 8 };
enum { PQ_DATA_PAGE = 0, PQ_INDEX_PAGE = 1, PQ_DICTIONARY_PAGE = 2, PQ_DATA_PAGE_V2 = 3 };

static const char *type_name(int t) {
    static const char *n[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : "an unknown type";
}
static const char *codec_name(int c) {
    static const char *n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return c >= 0 && c < 8 ? n[c] : "an unknown codec";
}
static const char *encoding_name(int e) {
    static const char *n[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED", "DELTA_BINARY_PACKED",
                              "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? n[e] : "an unknown encoding";
}

// ---- the RLE / bit-packed hybrid ---------------------------------------------------------------
// Runs of (varint header): header & 1 == 0: RLE, header >> 1 repeats of one value stored in
// ceil(bw / 8) bytes LE; header & 1 == 1: (header >> 1) groups of 8 values, bw bits each, packed
// from the least significant bit. Read lazily, one value per call.
typedef struct {
    const uint8_t *p, *end;
    int bw;
    uint64_t left;           // values left in the current run
    bool packed;
    uint32_t value;          // RLE run's value
    const uint8_t *bits;     // bit-packed run's bytes
    uint64_t bits_len, bit_i;
} rle_it;

static void rle_init(rle_it *r, const uint8_t *p, const uint8_t *end, int bw) {
    *r = (rle_it){.p = p, .end = end, .bw = bw};
}

// 0 with *out, or -1 (runs out of data, or a bad header).
static int rle_next(rle_it *r, uint32_t *out) {
    while (r->left == 0) {
        uint64_t h = 0;
        int shift = 0;
        for (;; shift += 7) {
            if (r->p >= r->end || shift > 56) return -1;
            uint8_t b = *r->p++;
            h |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) break;
        }
        if (h & 1) {
            uint64_t groups = h >> 1;
            if (groups > (1ull << 40)) return -1;
            uint64_t bytes = groups * (uint64_t)r->bw, have = (uint64_t)(r->end - r->p);
            r->bits = r->p;
            r->bits_len = bytes < have ? bytes : have;  // the last run may be cut at the page's end
            r->p += r->bits_len;
            r->packed = true;
            r->bit_i = 0;
            r->left = groups * 8;
        } else {
            int nb = (r->bw + 7) / 8;
            if (r->end - r->p < nb) return -1;
            uint32_t v = 0;
            for (int i = 0; i < nb; i++) v |= (uint32_t)r->p[i] << (8 * i);
            r->p += nb;
            r->packed = false;
            r->value = v;
            r->left = h >> 1;
        }
    }
    r->left--;
    if (!r->packed) return *out = r->value, 0;
    uint64_t bit = r->bit_i++ * (uint64_t)r->bw;
    if (r->bw == 0) return *out = 0, 0;
    if (bit + (uint64_t)r->bw > r->bits_len * 8) return -1;
    uint64_t w = 0;
    uint64_t first = bit / 8, last = (bit + (uint64_t)r->bw - 1) / 8;
    for (uint64_t i = first; i <= last; i++) w |= (uint64_t)r->bits[i] << (8 * (i - first));
    w >>= bit % 8;
    *out = (uint32_t)(r->bw == 32 ? w : w & ((1ull << r->bw) - 1));
    return 0;
}

// ---- the reader's state ----------------------------------------------------------------------

typedef struct {
    int64_t num_rows, num_values;
    int codec;
    uint64_t start, end;  // the chunk's bytes in the file
} pq_chunk;

typedef struct {
    int fd;
    uint64_t size;
    int max_def;             // 1 for an OPTIONAL column (levels present), else 0
    pq_chunk *groups;
    int n_groups;
    // where the reading is
    int g;                   // row group
    bool in_chunk;
    int64_t row_base;        // rows of the groups before g
    int64_t chunk_values;    // values of group g handed out (or counted in pages read)
    uint64_t pos;            // next page header
    uint64_t page_at;        // the current page's header (for messages)
    // the chunk's dictionary
    bool have_dict;
    uint8_t *dict;           // PLAIN values as stored (length prefixes included)
    size_t dict_cap;
    uint32_t *dict_off;      // (n_dict,) offset of each value's bytes in dict; dict_len[i] after
    uint32_t *dict_len;
    uint32_t n_dict;
    // the current data page
    uint8_t *comp, *page;    // compressed bytes as read; decompressed
    size_t comp_cap, page_cap;
    int64_t page_left;       // values of the page not yet handed out
    bool has_def;
    rle_it def;
    bool dict_encoded;
    rle_it idx;
    const uint8_t *vp, *vend;  // PLAIN values
} pq_state;

static int fail_at(ct_corpus *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_at(ct_corpus *c, const char *fmt, ...) {
    pq_state *s = c->state;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ct_set_error("%s: row group %d, column \"%s\", page at byte %llu: %s", c->path, s->g, c->text_field,
                 (unsigned long long)s->page_at, msg);
    return -1;
}

static void grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    *buf = realloc(*buf, n);
    if (!*buf) ct_fatal("data prepare", "out of memory");
    *cap = n;
}

// ---- the footer ------------------------------------------------------------------------------

typedef struct {
    int type, rep, n_children, converted, logical;  // -1 / 0 when absent
    const uint8_t *name;
    uint64_t name_len;
} pq_schema;

static bool name_is(const pq_schema *e, const char *s) { return e->name_len == strlen(s) && !memcmp(e->name, s, e->name_len); }

static void read_schema_element(ct_thrift *t, pq_schema *e) {
    *e = (pq_schema){.type = -1, .rep = -1, .n_children = 0, .converted = -1};
    if (!ct_thrift_enter(t)) return;
    int last = 0, id, ft;
    while (ct_thrift_field(t, &last, &id, &ft)) {
        if (id == 1) e->type = (int)ct_thrift_int(t, ft);
        else if (id == 3) e->rep = (int)ct_thrift_int(t, ft);
        else if (id == 4) ct_thrift_binary(t, ft, &e->name, &e->name_len);
        else if (id == 5) e->n_children = (int)ct_thrift_int(t, ft);
        else if (id == 6) e->converted = (int)ct_thrift_int(t, ft);
        else if (id == 10 && ft == CT_TT_STRUCT) {  // LogicalType, a union: the field set names the type
            if (!ct_thrift_enter(t)) return;
            int l2 = 0, id2, ft2;
            while (ct_thrift_field(t, &l2, &id2, &ft2)) {
                e->logical = id2;
                ct_thrift_skip(t, ft2, false);
            }
            ct_thrift_leave(t);
        } else
            ct_thrift_skip(t, ft, false);
    }
    ct_thrift_leave(t);
}

// Finds the top-level column named c->text_field: its leaf index (chunks are stored in leaf
// order) and its max definition level, or an error saying what it is instead.
static ct_status resolve_column(ct_corpus *c, const pq_schema *sc, int n, int *leaf_out) {
    pq_state *s = c->state;
    if (n < 1 || sc[0].n_children < 0) return ct_set_error("%s: the footer's schema is empty or malformed", c->path);
    int *stack = ct_xmalloc(sizeof(int) * (size_t)n), depth = 0, leaf = 0, found = -1, found_leaf = -1;
    stack[depth++] = sc[0].n_children;
    char names[512] = "";
    size_t nl = 0;
    for (int i = 1; i < n; i++) {
        while (depth > 0 && stack[depth - 1] == 0) depth--;
        if (depth == 0 || sc[i].n_children < 0) {
            free(stack);
            return ct_set_error("%s: the footer's schema is malformed (element %d: the counts of children do not add up)",
                                c->path, i);
        }
        stack[depth - 1]--;
        bool top = depth == 1;
        if (top && nl < sizeof names - 80)
            nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s\"%.*s\"", nl ? ", " : "",
                                   (int)(sc[i].name_len > 64 ? 64 : sc[i].name_len), (const char *)sc[i].name);
        if (top && found < 0 && name_is(&sc[i], c->text_field)) found = i, found_leaf = leaf;
        if (sc[i].n_children > 0) stack[depth++] = sc[i].n_children;
        else leaf++;
    }
    while (depth > 0 && stack[depth - 1] == 0) depth--;
    free(stack);
    if (depth != 0)
        return ct_set_error("%s: the footer's schema is malformed (fewer elements than its counts of children)", c->path);
    if (found < 0)
        return ct_set_error("%s: no top-level column \"%s\" (the columns: %s); name the text column with --text-field",
                            c->path, c->text_field, nl ? names : "none");
    const pq_schema *e = &sc[found];
    if (e->n_children > 0)
        return ct_set_error("%s: column \"%s\" is nested (a group of %d field%s: a struct, list or map); only a flat "
                            "string column is read",
                            c->path, c->text_field, e->n_children, e->n_children == 1 ? "" : "s");
    if (e->rep == PQ_REPEATED)
        return ct_set_error("%s: column \"%s\" is repeated (a list of values); only a flat string column is read", c->path,
                            c->text_field);
    if (e->type != PQ_BYTE_ARRAY)
        return ct_set_error("%s: column \"%s\" holds %s values, not strings; name the text column with --text-field",
                            c->path, c->text_field, type_name(e->type));
    if (e->logical != 1 && e->converted != 0)
        return ct_set_error("%s: column \"%s\" is binary (BYTE_ARRAY without the STRING annotation), not text; write it "
                            "as a string column",
                            c->path, c->text_field);
    s->max_def = e->rep == PQ_OPTIONAL ? 1 : 0;
    *leaf_out = found_leaf;
    return CT_OK;
}

// One ColumnChunk's ColumnMetaData into *k; its bytes must lie before `limit` (the footer). Returns false (error set) on what cannot be read.
static bool read_column_meta(ct_corpus *c, ct_thrift *t, int g, uint64_t limit, pq_chunk *k, bool *seen_path) {
    if (!ct_thrift_enter(t)) return false;
    int last = 0, id, ft, type = -1;
    int64_t comp = -1, data_off = -1, dict_off = -1;
    k->codec = -1;
    k->num_values = -1;
    while (ct_thrift_field(t, &last, &id, &ft)) {
        if (id == 1) type = (int)ct_thrift_int(t, ft);
        else if (id == 3) {
            int elem;
            uint64_t n;
            if (!ct_thrift_list(t, ft, &elem, &n)) break;
            const uint8_t *p = NULL;
            uint64_t len = 0;
            for (uint64_t i = 0; i < n; i++) ct_thrift_binary(t, elem, &p, &len);
            *seen_path = !t->err && n == 1 && len == strlen(c->text_field) && !memcmp(p, c->text_field, len);
        } else if (id == 4) k->codec = (int)ct_thrift_int(t, ft);
        else if (id == 5) k->num_values = ct_thrift_int(t, ft);
        else if (id == 7) comp = ct_thrift_int(t, ft);
        else if (id == 9) data_off = ct_thrift_int(t, ft);
        else if (id == 11) dict_off = ct_thrift_int(t, ft);
        else ct_thrift_skip(t, ft, false);
    }
    ct_thrift_leave(t);
    if (t->err) return false;
    const char *f = c->text_field;
    if (type != PQ_BYTE_ARRAY || !*seen_path)
        return ct_set_error("%s: row group %d, column \"%s\": its chunk's metadata does not match the schema (type %s)",
                            c->path, g, f, type_name(type)), false;
    if (k->codec != PQ_UNCOMPRESSED && k->codec != PQ_SNAPPY && k->codec != PQ_GZIP && k->codec != PQ_ZSTD)
        return ct_set_error("%s: row group %d, column \"%s\": compression %s is not supported (UNCOMPRESSED, SNAPPY, "
                            "GZIP and ZSTD are); rewrite the file with one of those",
                            c->path, g, f, codec_name(k->codec)), false;
    uint64_t start = (uint64_t)(dict_off > 0 && dict_off < data_off ? dict_off : data_off);
    if (k->num_values < 0 || comp < 0 || data_off < 4 || start < 4 || start + (uint64_t)comp > limit)
        return ct_set_error("%s: row group %d, column \"%s\": the chunk's offsets or sizes lie outside the file "
                            "(truncated or corrupt)",
                            c->path, g, f), false;
    k->start = start;
    k->end = start + (uint64_t)comp;
    return true;
}

// RowGroup list: for each group, the chunk of leaf `leaf` (of n_leaves).
static ct_status read_row_groups(ct_corpus *c, ct_thrift *t, int type, int leaf, uint64_t limit) {
    pq_state *s = c->state;
    int elem;
    uint64_t n;
    if (!ct_thrift_list(t, type, &elem, &n) || elem != CT_TT_STRUCT) goto bad;
    s->groups = ct_xcalloc(n ? n : 1, sizeof *s->groups);
    for (uint64_t g = 0; g < n; g++) {
        pq_chunk *k = &s->groups[g];
        bool have_chunk = false, seen_path = false;
        k->num_rows = -1;
        if (!ct_thrift_enter(t)) goto bad;
        int last = 0, id, ft;
        while (ct_thrift_field(t, &last, &id, &ft)) {
            if (id == 3) k->num_rows = ct_thrift_int(t, ft);
            else if (id != 1) ct_thrift_skip(t, ft, false);
            else {  // columns: list<ColumnChunk>
                int ce;
                uint64_t nc;
                if (!ct_thrift_list(t, ft, &ce, &nc) || ce != CT_TT_STRUCT) goto bad;
                for (uint64_t i = 0; i < nc && !t->err; i++) {
                    if ((int)i != leaf) {
                        ct_thrift_skip(t, ce, true);
                        continue;
                    }
                    have_chunk = true;
                    if (!ct_thrift_enter(t)) goto bad;
                    int l2 = 0, id2, ft2;
                    bool meta = false;
                    while (ct_thrift_field(t, &l2, &id2, &ft2)) {
                        if (id2 == 1)
                            return ct_set_error("%s: row group %llu, column \"%s\": its data is in another file "
                                                "(ColumnChunk.file_path); only self-contained files are read",
                                                c->path, (unsigned long long)g, c->text_field);
                        if (id2 == 8 || id2 == 9)
                            return ct_set_error("%s: row group %llu, column \"%s\" is encrypted; encrypted Parquet is not "
                                                "supported",
                                                c->path, (unsigned long long)g, c->text_field);
                        if (id2 == 3 && ft2 == CT_TT_STRUCT) {
                            meta = true;
                            if (!read_column_meta(c, t, (int)g, limit, k, &seen_path)) {
                                if (t->err) goto bad;
                                return CT_ERR;
                            }
                        } else
                            ct_thrift_skip(t, ft2, false);
                    }
                    ct_thrift_leave(t);
                    if (!t->err && !meta)
                        return ct_set_error("%s: row group %llu, column \"%s\": the chunk has no metadata", c->path,
                                            (unsigned long long)g, c->text_field);
                }
            }
        }
        ct_thrift_leave(t);
        if (t->err) goto bad;
        if (!have_chunk || k->num_rows < 0)
            return ct_set_error("%s: row group %llu lacks column \"%s\" or its row count (the footer is malformed)", c->path,
                                (unsigned long long)g, c->text_field);
        if (k->num_values != k->num_rows)
            return ct_set_error("%s: row group %llu, column \"%s\": %lld values for %lld rows (a flat column has one per "
                                "row)",
                                c->path, (unsigned long long)g, c->text_field, (long long)k->num_values,
                                (long long)k->num_rows);
        s->n_groups = (int)g + 1;
    }
    return CT_OK;
bad:
    return ct_set_error("%s: the footer (FileMetaData) is corrupt: %s", c->path, t->err ? t->err : "unexpected types");
}

static ct_status read_footer(ct_corpus *c) {
    pq_state *s = c->state;
    uint8_t tail[8], head[4];
    if (s->size < 12) return ct_set_error("%s: %llu bytes, too short for Parquet (PAR1, data, footer, PAR1)", c->path, (unsigned long long)s->size);
    if (ct_file_pread(s->fd, c->path, head, 4, 0) || ct_file_pread(s->fd, c->path, tail, 8, s->size - 8)) return CT_ERR;
    if (!memcmp(tail + 4, "PARE", 4))
        return ct_set_error("%s: an encrypted Parquet file (footer magic PARE); encrypted files are not supported", c->path);
    if (memcmp(tail + 4, "PAR1", 4))
        return ct_set_error("%s: byte %llu: no PAR1 at the end, so the footer is missing (a truncated Parquet file?)",
                            c->path, (unsigned long long)(s->size - 4));
    uint32_t flen = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 | (uint32_t)tail[3] << 24;
    if ((uint64_t)flen > s->size - 12 || flen > CT_CORPUS_DOC_MAX)
        return ct_set_error("%s: byte %llu: a footer length of %u bytes, more than the file holds (truncated or corrupt)",
                            c->path, (unsigned long long)(s->size - 8), flen);
    uint64_t foot_at = s->size - 8 - flen;
    uint8_t *foot = ct_xmalloc(flen ? flen : 1);
    if (ct_file_pread(s->fd, c->path, foot, flen, foot_at)) {
        free(foot);
        return CT_ERR;
    }
    ct_thrift t;
    ct_thrift_init(&t, foot, flen);
    pq_schema *sc = NULL;
    int n_schema = 0, leaf = -1, rg_type = 0;
    const uint8_t *rg_at = NULL;
    bool encrypted = false;
    ct_status st = CT_OK;
    if (ct_thrift_enter(&t)) {
        int last = 0, id, ft;
        while (ct_thrift_field(&t, &last, &id, &ft)) {
            if (id == 2 && !sc) {
                int elem;
                uint64_t n;
                if (!ct_thrift_list(&t, ft, &elem, &n) || elem != CT_TT_STRUCT || n > 1000000) {
                    if (!t.err) t.err = "a schema that is not a list of elements";
                    break;
                }
                sc = ct_xcalloc(n ? n : 1, sizeof *sc);
                n_schema = (int)n;
                for (uint64_t i = 0; i < n && !t.err; i++) read_schema_element(&t, &sc[i]);
            } else if (id == 4 && !rg_at) {  // row groups: read once the schema has said which leaf
                rg_at = t.p;
                rg_type = ft;
                ct_thrift_skip(&t, ft, false);
            } else if (id == 8) {
                encrypted = true;
                ct_thrift_skip(&t, ft, false);
            } else
                ct_thrift_skip(&t, ft, false);
        }
        ct_thrift_leave(&t);
    }
    if (t.err) st = ct_set_error("%s: byte %llu: the footer (FileMetaData) is corrupt: %s", c->path,
                                 (unsigned long long)(foot_at + ct_thrift_offset(&t)), t.err);
    else if (encrypted)
        st = ct_set_error("%s: an encrypted Parquet file (encryption_algorithm in its footer); encrypted files are not "
                          "supported",
                          c->path);
    else if (!sc || !rg_at)
        st = ct_set_error("%s: the footer (FileMetaData) lacks its %s", c->path, !sc ? "schema" : "row groups");
    if (st == CT_OK) st = resolve_column(c, sc, n_schema, &leaf);
    if (st == CT_OK) {
        ct_thrift r;
        ct_thrift_init(&r, rg_at, (size_t)(foot + flen - rg_at));
        st = read_row_groups(c, &r, rg_type, leaf, foot_at);
    }
    free(sc);
    free(foot);
    return st;
}

// ---- pages -------------------------------------------------------------------------------------

typedef struct {
    int type;
    int64_t usize, csize;
    bool has_crc;
    uint32_t crc;
    bool has_data, has_dict, has_v2;
    int64_t num_values, num_nulls;
    int encoding, def_encoding;
    int64_t def_len, rep_len;
    bool is_compressed;
} pq_page;

static void read_page_header(ct_thrift *t, pq_page *h) {
    *h = (pq_page){.type = -1, .usize = -1, .csize = -1, .encoding = -1, .def_encoding = -1, .is_compressed = true};
    if (!ct_thrift_enter(t)) return;
    int last = 0, id, ft;
    while (ct_thrift_field(t, &last, &id, &ft)) {
        if (id == 1) h->type = (int)ct_thrift_int(t, ft);
        else if (id == 2) h->usize = ct_thrift_int(t, ft);
        else if (id == 3) h->csize = ct_thrift_int(t, ft);
        else if (id == 4) h->has_crc = true, h->crc = (uint32_t)ct_thrift_int(t, ft);
        else if ((id == 5 || id == 7 || id == 8) && ft == CT_TT_STRUCT) {
            if (!ct_thrift_enter(t)) return;
            if (id == 5) h->has_data = true;
            if (id == 7) h->has_dict = true;
            if (id == 8) h->has_v2 = true;
            int l2 = 0, id2, ft2;
            while (ct_thrift_field(t, &l2, &id2, &ft2)) {
                if (id2 == 1) h->num_values = ct_thrift_int(t, ft2);
                else if (id == 5 && id2 == 2) h->encoding = (int)ct_thrift_int(t, ft2);
                else if (id == 5 && id2 == 3) h->def_encoding = (int)ct_thrift_int(t, ft2);
                else if (id == 7 && id2 == 2) h->encoding = (int)ct_thrift_int(t, ft2);
                else if (id == 8 && id2 == 2) h->num_nulls = ct_thrift_int(t, ft2);
                else if (id == 8 && id2 == 4) h->encoding = (int)ct_thrift_int(t, ft2);
                else if (id == 8 && id2 == 5) h->def_len = ct_thrift_int(t, ft2);
                else if (id == 8 && id2 == 6) h->rep_len = ct_thrift_int(t, ft2);
                else if (id == 8 && id2 == 7) h->is_compressed = ct_thrift_bool(t, ft2, false);
                else ct_thrift_skip(t, ft2, false);
            }
            ct_thrift_leave(t);
        } else
            ct_thrift_skip(t, ft, false);
    }
    ct_thrift_leave(t);
}

// n compressed bytes -> exactly want bytes in out, with the chunk's codec.
static int decompress(ct_corpus *c, int codec, const uint8_t *in, size_t n, uint8_t *out, size_t want) {
    switch (codec) {
    case PQ_UNCOMPRESSED:
        if (n != want) return fail_at(c, "an uncompressed page of %zu bytes whose header says %zu", n, want);
        memcpy(out, in, n);
        return 0;
    case PQ_SNAPPY: {
        size_t len;
        if (snappy_uncompressed_length((const char *)in, n, &len) != SNAPPY_OK || len != want ||
            snappy_uncompress((const char *)in, n, (char *)out, &len) != SNAPPY_OK || len != want)
            return fail_at(c, "corrupt SNAPPY data (or not the %zu bytes the header says)", want);
        return 0;
    }
    case PQ_GZIP: {
        z_stream z = {0};
        if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) return fail_at(c, "cannot start the gzip decoder");
        z.next_in = (Bytef *)in;
        z.avail_in = (uInt)n;
        z.next_out = out;
        z.avail_out = (uInt)want;
        int rc = inflate(&z, Z_FINISH);
        size_t got = want - z.avail_out;
        inflateEnd(&z);
        if (rc != Z_STREAM_END || got != want)
            return fail_at(c, "corrupt GZIP data (or not the %zu bytes the header says)", want);
        return 0;
    }
    case PQ_ZSTD: {
        size_t rc = ZSTD_decompress(out, want, in, n);
        if (ZSTD_isError(rc) || rc != want)
            return fail_at(c, "corrupt ZSTD data (%s)", ZSTD_isError(rc) ? ZSTD_getErrorName(rc) : "not the size the header says");
        return 0;
    }
    default: return fail_at(c, "compression %s is not supported", codec_name(codec));
    }
}

// The dictionary page: decompressed into s->dict and kept for the rest of the chunk.
static int load_dictionary(ct_corpus *c, const pq_page *h, int codec, const uint8_t *in, size_t cs) {
    pq_state *s = c->state;
    if (!h->has_dict) return fail_at(c, "a dictionary page without its header");
    if (s->have_dict) return fail_at(c, "a second dictionary page in one column chunk");
    if (s->chunk_values > 0) return fail_at(c, "a dictionary page after data pages");
    if (h->encoding != PQ_PLAIN && h->encoding != PQ_PLAIN_DICTIONARY)
        return fail_at(c, "a dictionary page in %s encoding (PLAIN expected)", encoding_name(h->encoding));
    if (h->num_values < 0 || h->num_values > h->usize / 4)
        return fail_at(c, "a dictionary of %lld values cannot fit its %lld bytes", (long long)h->num_values, (long long)h->usize);
    size_t us = (size_t)h->usize;
    grow(&s->dict, &s->dict_cap, us + 1);
    if (decompress(c, codec, in, cs, s->dict, us)) return -1;
    uint32_t n = (uint32_t)h->num_values;
    s->dict_off = realloc(s->dict_off, sizeof(uint32_t) * (n ? n : 1));
    s->dict_len = realloc(s->dict_len, sizeof(uint32_t) * (n ? n : 1));
    if (!s->dict_off || !s->dict_len) ct_fatal("data prepare", "out of memory");
    uint64_t p = 0, end = us;
    for (uint32_t i = 0; i < n; i++) {
        if (end - p < 4) return fail_at(c, "dictionary value %u of %u runs past the page", i, n);
        uint32_t len = (uint32_t)s->dict[p] | (uint32_t)s->dict[p + 1] << 8 | (uint32_t)s->dict[p + 2] << 16 |
                       (uint32_t)s->dict[p + 3] << 24;
        p += 4;
        if (len > end - p) return fail_at(c, "dictionary value %u of %u runs past the page", i, n);
        s->dict_off[i] = (uint32_t)p;
        s->dict_len[i] = len;
        p += len;
    }
    s->n_dict = n;
    s->have_dict = true;
    return 0;
}

// Sets up value decoding for a data page whose values are vals[0, n).
static int start_values(ct_corpus *c, int encoding, const uint8_t *vals, size_t n) {
    pq_state *s = c->state;
    if (encoding == PQ_PLAIN) {
        s->dict_encoded = false;
        s->vp = vals;
        s->vend = vals + n;
        return 0;
    }
    if (encoding == PQ_PLAIN_DICTIONARY || encoding == PQ_RLE_DICTIONARY) {
        if (!s->have_dict) return fail_at(c, "a dictionary-encoded page but no dictionary page before it");
        if (n < 1 || vals[0] > 32) return fail_at(c, "a bad bit width for dictionary indices");
        s->dict_encoded = true;
        rle_init(&s->idx, vals + 1, vals + n, vals[0]);
        return 0;
    }
    return fail_at(c, "values in %s encoding are not supported (PLAIN and dictionary encodings are); rewrite the file "
                      "without it (pyarrow: column_encoding left unset)",
                   encoding_name(encoding));
}

// Reads the page header at s->pos and its body; sets the page up (a data page), loads it (a
// dictionary) or passes it by (an index page).
static int read_page(ct_corpus *c) {
    pq_state *s = c->state;
    const pq_chunk *k = &s->groups[s->g];
    s->page_at = s->pos;
    if (s->pos >= k->end)
        return fail_at(c, "the column chunk ends after %lld of its %lld values (truncated or corrupt)",
                       (long long)s->chunk_values, (long long)k->num_values);
    // The header: read a little, more if it is longer (statistics can make it so).
    uint64_t avail = k->end - s->pos;
    size_t want = avail < 256 ? (size_t)avail : 256;
    pq_page h;
    ct_thrift t;
    for (;;) {
        grow(&s->comp, &s->comp_cap, want);
        if (ct_file_pread(s->fd, c->path, s->comp, want, s->pos)) return -1;
        ct_thrift_init(&t, s->comp, want);
        read_page_header(&t, &h);
        if (!t.err) break;
        if (!t.truncated || want == avail) return fail_at(c, "a corrupt page header: %s", t.err);
        if (want >= (16u << 20)) return fail_at(c, "a page header over 16 MiB");
        want = avail < want * 4 ? (size_t)avail : want * 4;
    }
    uint64_t body = s->pos + ct_thrift_offset(&t);
    if (h.type < 0 || h.usize < 0 || h.csize < 0)
        return fail_at(c, "a page header without its type or sizes");
    if ((uint64_t)h.csize > k->end - body)
        return fail_at(c, "the page's %lld bytes run past the end of its column chunk (truncated or corrupt)", (long long)h.csize);
    if ((uint64_t)h.usize > CT_CORPUS_DOC_MAX || (uint64_t)h.csize > CT_CORPUS_DOC_MAX)
        return fail_at(c, "a page of %lld bytes, over the %llu-byte limit", (long long)(h.usize > h.csize ? h.usize : h.csize),
                       (unsigned long long)CT_CORPUS_DOC_MAX);
    s->pos = body + (uint64_t)h.csize;
    if (h.type == PQ_INDEX_PAGE) return 0;
    if (h.type != PQ_DATA_PAGE && h.type != PQ_DATA_PAGE_V2 && h.type != PQ_DICTIONARY_PAGE)
        return fail_at(c, "an unknown page type %d", h.type);
    size_t cs = (size_t)h.csize, us = (size_t)h.usize;
    grow(&s->comp, &s->comp_cap, cs + 1);
    if (ct_file_pread(s->fd, c->path, s->comp, cs, body)) return -1;
    if (h.has_crc && (uint32_t)crc32(0, s->comp, (uInt)cs) != h.crc)
        return fail_at(c, "the page's CRC-32 does not match its bytes (corrupt)");
    if (h.type == PQ_DICTIONARY_PAGE) return load_dictionary(c, &h, k->codec, s->comp, cs);
    if ((h.type == PQ_DATA_PAGE && !h.has_data) || (h.type == PQ_DATA_PAGE_V2 && !h.has_v2))
        return fail_at(c, "a data page without its header");
    if (h.num_values < 0 || h.num_values > k->num_values - s->chunk_values)
        return fail_at(c, "a page of %lld values where the chunk has %lld left", (long long)h.num_values,
                       (long long)(k->num_values - s->chunk_values));
    s->has_def = s->max_def > 0;
    if (h.type == PQ_DATA_PAGE) {
        grow(&s->page, &s->page_cap, us + 1);
        if (decompress(c, k->codec, s->comp, cs, s->page, us)) return -1;
        const uint8_t *p = s->page, *end = s->page + us;
        if (s->has_def) {
            if (h.def_encoding != PQ_RLE)
                return fail_at(c, "definition levels in %s encoding (only RLE is supported)", encoding_name(h.def_encoding));
            if (end - p < 4) return fail_at(c, "the page ends inside its definition levels");
            uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if (len > (uint64_t)(end - p - 4)) return fail_at(c, "definition levels longer than the page");
            rle_init(&s->def, p + 4, p + 4 + len, 1);
            p += 4 + len;
        }
        if (start_values(c, h.encoding, p, (size_t)(end - p))) return -1;
    } else {
        if (h.rep_len != 0) return fail_at(c, "repetition levels in a flat column's page");
        if (h.def_len < 0 || h.def_len > h.csize || h.def_len > h.usize) return fail_at(c, "definition levels longer than the page");
        if (!s->has_def && h.def_len) return fail_at(c, "definition levels in a REQUIRED column's page");
        if (s->has_def) rle_init(&s->def, s->comp, s->comp + h.def_len, 1);
        size_t vc = cs - (size_t)h.def_len, vu = us - (size_t)h.def_len;
        const uint8_t *vals = s->comp + h.def_len;
        if (h.is_compressed && k->codec != PQ_UNCOMPRESSED) {
            grow(&s->page, &s->page_cap, vu + 1);
            if (decompress(c, k->codec, vals, vc, s->page, vu)) return -1;
            vals = s->page;
        } else if (vc != vu)
            return fail_at(c, "uncompressed values of %zu bytes whose header says %zu", vc, vu);
        if (start_values(c, h.encoding, vals, vu)) return -1;
    }
    s->page_left = h.num_values;
    return 0;
}

// ---- documents ----------------------------------------------------------------------------------

static int pq_next(ct_corpus *c, ct_corpus_doc *doc) {
    pq_state *s = c->state;
    for (;;) {
        if (s->page_left > 0) {
            int64_t row = s->row_base + s->chunk_values;
            uint32_t lvl = 1;
            if (s->has_def && rle_next(&s->def, &lvl))
                return fail_at(c, "row index %lld: the definition levels end early or are corrupt", (long long)row);
            if (lvl > 1) return fail_at(c, "row index %lld: definition level %u in a column whose maximum is 1", (long long)row, lvl);
            if (lvl == 0)
                return fail_at(c, "row index %lld: a null where a document's text should be; drop or fill the nulls first",
                               (long long)row);
            const uint8_t *v;
            uint32_t len;
            if (s->dict_encoded) {
                uint32_t i;
                if (rle_next(&s->idx, &i)) return fail_at(c, "row index %lld: the dictionary indices end early or are corrupt", (long long)row);
                if (i >= s->n_dict)
                    return fail_at(c, "row index %lld: dictionary index %u, past its %u values", (long long)row, i, s->n_dict);
                v = s->dict + s->dict_off[i];
                len = s->dict_len[i];
            } else {
                if (s->vend - s->vp < 4) return fail_at(c, "row index %lld: the values end early", (long long)row);
                len = (uint32_t)s->vp[0] | (uint32_t)s->vp[1] << 8 | (uint32_t)s->vp[2] << 16 | (uint32_t)s->vp[3] << 24;
                if (len > (uint64_t)(s->vend - s->vp - 4)) return fail_at(c, "row index %lld: a value runs past the page", (long long)row);
                v = s->vp + 4;
                s->vp += 4 + len;
            }
            size_t bad;
            if (!ct_utf8_check((const char *)v, len, &bad))
                return fail_at(c, "row index %lld, byte %zu of its text: %s", (long long)row, bad,
                               v[bad] ? "invalid UTF-8; the text must be UTF-8" : "a NUL byte, so this is not text");
            s->page_left--;
            s->chunk_values++;
            *doc = (ct_corpus_doc){.text = (const char *)v, .len = len, .where = (uint64_t)row};
            return 1;
        }
        if (s->in_chunk && s->chunk_values == s->groups[s->g].num_values) {
            s->row_base += s->groups[s->g].num_rows;
            s->g++;
            s->in_chunk = false;
        }
        if (!s->in_chunk) {
            if (s->g >= s->n_groups) return 0;
            s->in_chunk = true;
            s->chunk_values = 0;
            s->have_dict = false;
            s->pos = s->groups[s->g].start;
            continue;
        }
        if (read_page(c)) return -1;
    }
}

static uint64_t pq_position(const ct_corpus *c) {
    const pq_state *s = c->state;
    return s->pos;
}

static void pq_close(ct_corpus *c) {
    pq_state *s = c->state;
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s->groups);
    free(s->dict);
    free(s->dict_off);
    free(s->dict_len);
    free(s->comp);
    free(s->page);
    free(s);
    c->state = NULL;
}

static const ct_corpus_ops pq_ops = {pq_next, pq_position, pq_close};

ct_status ct_corpus_parquet_open(ct_corpus *c, int fd, uint64_t size) {
    pq_state *s = ct_xcalloc(1, sizeof *s);
    s->fd = fd;
    s->size = size;
    c->state = s;
    c->ops = &pq_ops;
    if (read_footer(c) != CT_OK) {
        pq_close(c);
        return CT_ERR;
    }
    return CT_OK;
}
