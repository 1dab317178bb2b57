// Megatron-LM indexed dataset reader (megatron/core/datasets/indexed_dataset.py): a pair of
// files PREFIX.idx and PREFIX.bin. The index, all little-endian:
//   offset  0  char[9]   "MMIDIDX\0\0"
//           9  u64       version, 1
//          17  u8        dtype code of the .bin's tokens: 1 uint8, 2 int8, 3 int16, 4 int32,
//                        5 int64, 6 float64, 7 float32, 8 uint16 (the float ones are refused)
//          18  u64       S, the number of sequences
//          26  u64       D, the number of document-index entries (documents + 1)
//          34  i32[S]    each sequence's length in tokens
//              i64[S]    each sequence's byte offset in the .bin
//              i64[D]    document i is sequences [doc[i], doc[i+1]); doc[0] = 0, doc[D-1] = S
//              (i8[S]    a multimodal dataset's sequence modes, ignored)
// The .bin is the tokens, nothing else. The data is already tokenised: each id is checked
// against the tokenizer's vocabulary and handed out as it is. The index is read through small
// windows and the tokens one document at a time, so memory is bounded by the largest document.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_check.h"
#include "data/corpus_internal.h"

#define MG_HEADER 34
#define MG_WINDOW 4096  // index entries read at a time

typedef struct {
    uint64_t first, n;  // entries [first, first + n) are in buf
    uint8_t *buf;
} mg_window;

typedef struct {
    int idx_fd, bin_fd;
    char *bin_path;
    uint64_t idx_size, bin_size;
    int item;                // bytes per token
    int code;                // dtype code
    uint64_t n_seq, n_doc;   // sequences; documents (index entries - 1)
    uint64_t at[3];          // offsets of the sizes, pointers and document index
    mg_window win[3];
    uint64_t doc;            // next document
    uint64_t prev_end;       // doc[doc]: where the next document's sequences begin
    int32_t *ids;
    size_t ids_cap;
    uint8_t *raw;
} mg_state;

static const int mg_item[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};

// Entry i of array a (0 sizes: i32, 1 pointers: i64, 2 document index: i64).
static ct_status entry(ct_corpus *c, int a, uint64_t i, int64_t *out) {
    mg_state *s = c->state;
    mg_window *w = &s->win[a];
    uint64_t count = a == 2 ? s->n_doc + 1 : s->n_seq;
    int es = a == 0 ? 4 : 8;
    if (i < w->first || i >= w->first + w->n) {
        w->first = i;
        w->n = count - i < MG_WINDOW ? count - i : MG_WINDOW;
        if (!w->buf) w->buf = ct_xmalloc(MG_WINDOW * 8);
        if (ct_file_pread(s->idx_fd, c->path, w->buf, (size_t)w->n * (size_t)es, s->at[a] + i * (uint64_t)es)) {
            w->n = 0;
            return CT_ERR;
        }
    }
    const uint8_t *p = w->buf + (i - w->first) * (uint64_t)es;
    uint64_t v = 0;
    for (int k = 0; k < es; k++) v |= (uint64_t)p[k] << (8 * k);
    *out = es == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
    return CT_OK;
}

static int64_t token(const uint8_t *p, int code) {
    switch (code) {
    case 1: return p[0];
    case 2: return (int8_t)p[0];
    case 3: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case 8: return (uint16_t)(p[0] | p[1] << 8);
    case 4: return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    default: {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++) v |= (uint64_t)p[k] << (8 * k);
        return (int64_t)v;
    }
    }
}

#define MG_CHUNK (1u << 20)  // bytes of tokens read at a time

static int mg_next(ct_corpus *c, ct_corpus_doc *doc) {
    mg_state *s = c->state;
    if (s->doc >= s->n_doc) return 0;
    uint64_t d = s->doc;
    int64_t a = (int64_t)s->prev_end, b;
    if (entry(c, 2, d + 1, &b)) return -1;
    if (b < a || (uint64_t)b > s->n_seq)
        return ct_set_error("%s: document %llu: its sequences [%lld, %lld) are out of order or past the %llu sequences "
                            "(a corrupt document index)",
                            c->path, (unsigned long long)d, (long long)a, (long long)b, (unsigned long long)s->n_seq),
               -1;
    // Every sequence of the document: its length, and its bytes inside the .bin.
    uint64_t total = 0;
    for (int64_t q = a; q < b; q++) {
        int64_t len, ptr;
        if (entry(c, 0, (uint64_t)q, &len) || entry(c, 1, (uint64_t)q, &ptr)) return -1;
        if (len < 0 || ptr < 0 || (uint64_t)ptr > s->bin_size || (uint64_t)len > (s->bin_size - (uint64_t)ptr) / (uint64_t)s->item)
            return ct_set_error("%s: document %llu, sequence %lld: %lld tokens at byte %lld lie outside %s (%llu bytes); "
                                "the pair does not match, or one is truncated",
                                c->path, (unsigned long long)d, (long long)q, (long long)len, (long long)ptr, s->bin_path,
                                (unsigned long long)s->bin_size),
                   -1;
        total += (uint64_t)len;
        if (total > CT_CORPUS_DOC_MAX / sizeof(int32_t))
            return ct_set_error("%s: document %llu holds more than %llu tokens; not read", c->path, (unsigned long long)d,
                                (unsigned long long)(CT_CORPUS_DOC_MAX / sizeof(int32_t))),
                   -1;
    }
    if (total > s->ids_cap) {
        s->ids_cap = total;
        s->ids = realloc(s->ids, sizeof(int32_t) * total);
        if (!s->ids) ct_fatal("data prepare", "out of memory");
    }
    uint64_t n = 0;
    for (int64_t q = a; q < b; q++) {
        int64_t len, ptr;
        if (entry(c, 0, (uint64_t)q, &len) || entry(c, 1, (uint64_t)q, &ptr)) return -1;
        for (uint64_t done = 0; done < (uint64_t)len;) {
            uint64_t k = (uint64_t)len - done, max = MG_CHUNK / (uint64_t)s->item;
            if (k > max) k = max;
            if (ct_file_pread(s->bin_fd, s->bin_path, s->raw, (size_t)(k * (uint64_t)s->item), (uint64_t)ptr + done * (uint64_t)s->item))
                return -1;
            for (uint64_t i = 0; i < k; i++) {
                int64_t id = token(s->raw + i * (uint64_t)s->item, s->code);
                if (id < 0 || id > INT32_MAX || (c->vocab_size && (uint64_t)id >= c->vocab_size))
                    return ct_set_error("%s: document %llu, sequence %lld, token %llu: id %lld is outside the tokenizer's "
                                        "vocabulary (%u ids); prepare this dataset with the tokenizer it was made with",
                                        c->path, (unsigned long long)d, (long long)q, (unsigned long long)(done + i),
                                        (long long)id, c->vocab_size),
                           -1;
                s->ids[n++] = (int32_t)id;
            }
            done += k;
        }
    }
    s->prev_end = (uint64_t)b;
    s->doc++;
    static const int32_t none[1];
    *doc = (ct_corpus_doc){.ids = s->ids ? s->ids : none, .n_ids = (size_t)n, .where = d};
    return 1;
}

static uint64_t mg_position(const ct_corpus *c) {
    const mg_state *s = c->state;
    // Progress by documents, scaled to the pair's size.
    return s->n_doc ? (uint64_t)((double)s->doc / (double)s->n_doc * (double)(s->idx_size + s->bin_size)) : 0;
}

static void mg_close(ct_corpus *c) {
    mg_state *s = c->state;
    if (!s) return;
    if (s->idx_fd >= 0) close(s->idx_fd);
    if (s->bin_fd >= 0) close(s->bin_fd);
    for (int a = 0; a < 3; a++) free(s->win[a].buf);
    free(s->bin_path);
    free(s->ids);
    free(s->raw);
    free(s);
    c->state = NULL;
}

static const ct_corpus_ops mg_ops = {mg_next, mg_position, mg_close};

static ct_status read_index_header(ct_corpus *c) {
    mg_state *s = c->state;
    uint8_t h[MG_HEADER];
    if (s->idx_size < MG_HEADER)
        return ct_set_error("%s: %llu bytes, shorter than a Megatron index header (34 bytes)", c->path,
                            (unsigned long long)s->idx_size);
    if (ct_file_pread(s->idx_fd, c->path, h, MG_HEADER, 0)) return CT_ERR;
    if (memcmp(h, "MMIDIDX\0\0", 9)) return ct_set_error("%s: byte 0: not a Megatron index (no MMIDIDX magic)", c->path);
    uint64_t v[3];
    const uint8_t *f[3] = {h + 9, h + 18, h + 26};
    for (int i = 0; i < 3; i++) {
        v[i] = 0;
        for (int k = 0; k < 8; k++) v[i] |= (uint64_t)f[i][k] << (8 * k);
    }
    if (v[0] != 1) return ct_set_error("%s: byte 9: index version %llu (only 1 is known)", c->path, (unsigned long long)v[0]);
    s->code = h[17];
    if (s->code == 6 || s->code == 7)
        return ct_set_error("%s: byte 17: dtype code %d (%s): token ids must be integers", c->path, s->code,
                            s->code == 6 ? "float64" : "float32");
    if (s->code < 1 || s->code > 8) return ct_set_error("%s: byte 17: unknown dtype code %d", c->path, s->code);
    s->item = mg_item[s->code];
    uint64_t S = v[1], D = v[2];
    // Sizes: 34 + 12 S + 8 D, or with a mode byte per sequence (multimodal) 13 S.
    uint64_t room = s->idx_size - MG_HEADER;
    if (D < 1 || S > room / 12 || D > room / 8 || 12 * S + 8 * D > room ||
        (room - 12 * S - 8 * D != 0 && room - 12 * S - 8 * D != S))
        return ct_set_error("%s: %llu sequences and %llu document-index entries do not fit its %llu bytes (truncated or "
                            "corrupt)",
                            c->path, (unsigned long long)S, (unsigned long long)D, (unsigned long long)s->idx_size);
    s->n_seq = S;
    s->n_doc = D - 1;
    s->at[0] = MG_HEADER;
    s->at[1] = MG_HEADER + 4 * S;
    s->at[2] = MG_HEADER + 12 * S;
    int64_t first, last;
    if (entry(c, 2, 0, &first) || entry(c, 2, D - 1, &last)) return CT_ERR;
    if (first != 0 || (uint64_t)last != S)
        return ct_set_error("%s: the document index runs from %lld to %lld, not from 0 to the %llu sequences (corrupt)",
                            c->path, (long long)first, (long long)last, (unsigned long long)S);
    return CT_OK;
}

ct_status ct_corpus_megatron_open(ct_corpus *c, const char *idx_path, const char *bin_path) {
    mg_state *s = ct_xcalloc(1, sizeof *s);
    s->idx_fd = s->bin_fd = -1;
    s->bin_path = ct_xstrdup(bin_path);
    c->state = s;
    c->ops = &mg_ops;
    free(c->path);
    c->path = ct_xstrdup(idx_path);  // messages about the index name it; about tokens, the .bin
    ct_status st = ct_file_open_regular(idx_path, "Megatron index", 0, &s->idx_fd, &s->idx_size);
    if (st == CT_OK) st = ct_file_open_regular(bin_path, "Megatron data file", 0, &s->bin_fd, &s->bin_size);
    if (st == CT_OK) st = read_index_header(c);
    if (st == CT_OK) s->raw = ct_xmalloc(MG_CHUNK);
    if (st != CT_OK) mg_close(c);
    return st;
}
