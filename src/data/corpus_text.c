// Plain-text corpus reader. A file in fortune format (some line is exactly "%") holds one
// document per fortune: the text between separator lines, its last newline included. Any other
// file is one document. Lines come from a stream (corpus_stream.c), already checked to be UTF-8
// without NUL, so a binary file is refused at its first bad byte and never tokenised. One
// document is held at a time (a plain file is one document: up to CT_CORPUS_DOC_MAX bytes).
// The documents are those ct_data_for_each_document finds in the same text (data/prepare.h).
#include <stdlib.h>
#include <string.h>

#include "data/corpus_internal.h"

typedef struct {
    ct_lines lines;
    char *doc;
    size_t len, cap;
    uint64_t doc_at;   // stream offset of the document's first byte
    bool started;      // doc holds the start of a document (a line was read since the last emit)
    bool emitted;      // doc was handed out: clear it on the next call
    bool done;
} text_state;

static int append(ct_corpus *c, text_state *s, const char *p, size_t n) {
    if (n == 0) return 0;
    if (s->len + n > CT_CORPUS_DOC_MAX) {
        char where[96];
        ct_set_error("%s: %s: a document of more than %llu bytes starts here; split it (a line holding only %% "
                     "separates documents)",
                     c->path, ct_lines_where(&s->lines, s->doc_at, where, sizeof where), (unsigned long long)CT_CORPUS_DOC_MAX);
        return -1;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n) cap *= 2;
        s->doc = realloc(s->doc, cap);
        if (!s->doc) ct_fatal("data prepare", "out of memory");
        s->cap = cap;
    }
    memcpy(s->doc + s->len, p, n);
    s->len += n;
    return 0;
}

static int text_next(ct_corpus *c, ct_corpus_doc *doc) {
    text_state *s = c->state;
    if (s->emitted) {
        s->len = 0;
        s->started = false;
        s->emitted = false;
    }
    while (!s->done) {
        const char *line;
        size_t n;
        bool nl;
        uint64_t off;
        int rc = ct_lines_next(&s->lines, &line, &n, &nl, &off);
        if (rc < 0) return -1;
        if (rc == 0) {
            s->done = true;
            if (!s->started) return 0;
        } else if (n == 1 && line[0] == '%') {
            if (!s->started) {  // an empty document (before the first separator, or between two)
                s->doc_at = off + 2;
                continue;
            }
        } else {
            if (!s->started) s->doc_at = off;
            s->started = true;
            if (append(c, s, line, n) || (nl && append(c, s, "\n", 1))) return -1;
            continue;
        }
        s->emitted = true;
        *doc = (ct_corpus_doc){.text = s->doc ? s->doc : "", .len = s->len, .where = s->doc_at};
        return 1;
    }
    return 0;
}

static uint64_t text_position(const ct_corpus *c) {
    const text_state *s = c->state;
    return ct_cstream_in_pos(s->lines.s);
}

static void text_close(ct_corpus *c) {
    text_state *s = c->state;
    if (!s) return;
    ct_lines_free(&s->lines);
    free(s->doc);
    free(s);
    c->state = NULL;
}

static const ct_corpus_ops text_ops = {text_next, text_position, text_close};

ct_status ct_corpus_text_open(ct_corpus *c, ct_lines *l) {
    text_state *s = ct_xcalloc(1, sizeof *s);
    s->lines = *l;
    c->state = s;
    c->ops = &text_ops;
    return CT_OK;
}
