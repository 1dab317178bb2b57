// Shared by the corpus readers (corpus*.c): the reader table, the byte stream that undoes gzip /
// zstd, and the line reader the text formats sit on. Not for use outside src/data/corpus*.c.
#ifndef CT_CORPUS_INTERNAL_H
#define CT_CORPUS_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/corpus.h"

// ---- byte stream: a file read front to back, decompressed when it is gzip or zstd ----------
typedef struct ct_cstream ct_cstream;
// Takes fd (closed by ct_cstream_close, also when opening fails).
ct_cstream *ct_cstream_open(int fd, const char *path, ct_corpus_codec codec);
// Up to n bytes into buf: the count, 0 at the end, -1 on corrupt or truncated compressed data
// (error: "path: gzip data ... at compressed byte N: why").
long ct_cstream_read(ct_cstream *s, char *buf, size_t n);
uint64_t ct_cstream_in_pos(const ct_cstream *s);  // bytes of the file consumed
void ct_cstream_close(ct_cstream *s);

// ---- lines of a stream ----------------------------------------------------------------------
typedef struct {
    ct_cstream *s;
    const char *path;
    ct_corpus_codec codec;
    char *buf;
    size_t cap, start, end;  // buffered bytes buf[start, end)
    uint64_t buf_off;        // stream offset of buf[0]
    uint64_t line_no;        // lines returned so far
    bool eof;
} ct_lines;
void ct_lines_init(ct_lines *l, ct_cstream *s, const char *path, ct_corpus_codec codec);
// 1: *line (len bytes, its '\n' not counted; *nl says whether it had one) starting at stream
// offset *off, checked to be UTF-8 without NUL; 0: end; -1: error (bad bytes name their offset,
// a line over CT_CORPUS_DOC_MAX its start). The line stays valid until the next call.
int ct_lines_next(ct_lines *l, const char **line, size_t *len, bool *nl, uint64_t *off);
// As ct_lines_next, but the line stays unread: the next call returns it again.
int ct_lines_peek(ct_lines *l, const char **line, size_t *len, bool *nl, uint64_t *off);
void ct_lines_free(ct_lines *l);
// "byte N" for a plain file, "byte N of the decompressed data" for gzip / zstd, into buf.
const char *ct_lines_where(const ct_lines *l, uint64_t off, char *buf, size_t cap);

// ---- the reader table -------------------------------------------------------------------------
typedef struct {
    int (*next)(ct_corpus *c, ct_corpus_doc *doc);  // as ct_corpus_next, blanks included
    uint64_t (*position)(const ct_corpus *c);
    void (*close)(ct_corpus *c);                    // frees c->state
} ct_corpus_ops;

struct ct_corpus {
    char *path;
    ct_corpus_format format;
    ct_corpus_codec codec;
    char text_field[256];
    uint32_t vocab_size;
    const ct_corpus_ops *ops;
    void *state;
    bool failed;
};

// Each reader's open: fills c->ops and c->state, or CT_ERR (one line naming c->path) with
// nothing left open. The text formats take over the line reader (and free it on failure).
ct_status ct_corpus_text_open(ct_corpus *c, ct_lines *l);
ct_status ct_corpus_jsonl_open(ct_corpus *c, ct_lines *l);
ct_status ct_corpus_parquet_open(ct_corpus *c, int fd, uint64_t size);  // takes fd
ct_status ct_corpus_megatron_open(ct_corpus *c, const char *idx_path, const char *bin_path);

bool ct_corpus_is_blank(const char *s, size_t n);
#endif
