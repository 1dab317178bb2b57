// JSON Lines corpus reader: one JSON object per line, the document in its string field
// `text_field` ("text" unless --text-field names another). Lines holding only whitespace are
// passed over; every other line must be an object whose field is present and a string, else the
// file is refused naming the line (and, for a missing field, the keys the record has). Lines are
// checked to be UTF-8 without NUL before they are parsed (corpus_stream.c), and JSON cannot
// smuggle a NUL in (core/json refuses \u0000), so what is handed out is text.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/corpus_internal.h"

typedef struct {
    ct_lines lines;
    ct_json *rec;  // the record whose string was handed out last
} jsonl_state;

static const char *kind(const ct_json *j) {
    switch (j->type) {
    case CT_JSON_NULL: return "null";
    case CT_JSON_BOOL: return "a boolean";
    case CT_JSON_NUMBER: return "a number";
    case CT_JSON_STRING: return "a string";
    case CT_JSON_ARRAY: return "an array";
    default: return "an object";
    }
}

static int jsonl_next(ct_corpus *c, ct_corpus_doc *doc) {
    jsonl_state *s = c->state;
    ct_json_free(s->rec);
    s->rec = NULL;
    for (;;) {
        const char *line;
        size_t n;
        bool nl;
        uint64_t off;
        int rc = ct_lines_next(&s->lines, &line, &n, &nl, &off);
        if (rc <= 0) return rc;
        if (ct_corpus_is_blank(line, n)) continue;
        unsigned long long no = (unsigned long long)s->lines.line_no;
        char what[600];
        snprintf(what, sizeof what, "%s: line %llu", c->path, no);
        ct_json *j = ct_json_parse(line, n, what);
        if (!j) {
            ct_set_error("%s (JSON Lines: one object per line)", ct_last_error());
            return -1;
        }
        s->rec = j;
        if (j->type != CT_JSON_OBJECT)
            return ct_set_error("%s: line %llu: %s, not a JSON object (JSON Lines: one object per line)", c->path, no,
                                kind(j)),
                   -1;
        const ct_json *v = ct_json_get(j, c->text_field);
        if (!v) {
            char keys[300] = "";
            size_t k = 0;
            for (int i = 0; i < j->n && k < sizeof keys - 80; i++)
                k += (size_t)snprintf(keys + k, sizeof keys - k, "%s\"%.40s\"", i ? ", " : "", j->keys[i]);
            if (j->n > 0 && k >= sizeof keys - 80) snprintf(keys + k, sizeof keys - k, ", ...");
            return ct_set_error("%s: line %llu: no \"%s\" field (the record has %s); name the text field with "
                                "--text-field",
                                c->path, no, c->text_field, j->n ? keys : "no fields"),
                   -1;
        }
        if (v->type != CT_JSON_STRING)
            return ct_set_error("%s: line %llu: field \"%s\" is %s, not a string", c->path, no, c->text_field, kind(v)), -1;
        *doc = (ct_corpus_doc){.text = v->string, .len = strlen(v->string), .where = no};
        return 1;
    }
}

static uint64_t jsonl_position(const ct_corpus *c) {
    const jsonl_state *s = c->state;
    return ct_cstream_in_pos(s->lines.s);
}

static void jsonl_close(ct_corpus *c) {
    jsonl_state *s = c->state;
    if (!s) return;
    ct_json_free(s->rec);
    ct_lines_free(&s->lines);
    free(s);
    c->state = NULL;
}

static const ct_corpus_ops jsonl_ops = {jsonl_next, jsonl_position, jsonl_close};

ct_status ct_corpus_jsonl_open(ct_corpus *c, ct_lines *l) {
    jsonl_state *s = ct_xcalloc(1, sizeof *s);
    s->lines = *l;
    c->state = s;
    c->ops = &jsonl_ops;
    return CT_OK;
}
