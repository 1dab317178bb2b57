// Fuzz target: the JSON Lines corpus reader (data/corpus_jsonl.c). The input's first byte picks
// the container (bit 0..1: plain, gzip, zstd, each compressed here) and the text field (bit 2:
// "text" or "t"); the rest is the file.
//
// Properties beyond "no crash, no leak, no UB": what is read is exactly, line by line, the field's
// string of each line that is not blank, for every line a JSON object holding that field as a
// string (ct_json_parse on the line, independently of the reader's loop); documents are UTF-8
// without NUL; a refusal is one line naming the file and the line (or byte), and it happens
// exactly when some line is not such an object.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/corpus.h"
#include "fuzz_pack.h"
#include "fuzz_util.h"

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    int how = data[0] & 3;
    if (how == 3) how = 0;
    const char *field = data[0] & 4 ? "t" : "text";
    const uint8_t *text = data + 1;
    size_t n = size - 1;
    char path[1024];
    if (how == 0) ct_fuzz_write("corpus.jsonl", text, n, path, sizeof path);
    else {
        size_t cn;
        uint8_t *c = ct_fuzz_pack(how, text, n, &cn);
        ct_fuzz_write(how == 1 ? "corpus.jsonl.gz" : "corpus.jsonl.zst", c, cn, path, sizeof path);
        free(c);
    }
    bool magic = how == 0 && ((n >= 2 && text[0] == 0x1f && text[1] == 0x8b) ||
                              (n >= 4 && !memcmp(text, "\x28\xb5\x2f\xfd", 4)) || (n >= 4 && !memcmp(text, "PAR1", 4)) ||
                              (n >= 9 && !memcmp(text, "MMIDIDX\0\0", 9)));
    ct_corpus_opts opts = {.text_field = field};
    ct_corpus *c = ct_corpus_open(path, &opts);
    if (!c) {
        ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path), "message: %s", ct_last_error());
        return 0;
    }
    // The expected documents, line by line.
    const char *p = (const char *)text, *end = p + n;
    size_t bad;
    bool all_good = ct_utf8_check(p, n, &bad);
    ct_corpus_doc doc;
    int rc = 1;
    while (!magic && all_good && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        const char *line = p;
        p += len + 1;
        if (blank(line, len)) continue;
        ct_json *j = ct_json_parse(line, len, "line");
        const ct_json *v = j && j->type == CT_JSON_OBJECT ? ct_json_get(j, field) : NULL;
        if (!v || v->type != CT_JSON_STRING) {
            all_good = false;
            ct_json_free(j);
            break;
        }
        if (!blank(v->string, strlen(v->string))) {
            rc = ct_corpus_next(c, &doc);
            ct_fuzz_check(rc == 1, "a good line refused: %s", rc < 0 ? ct_last_error() : "ended early");
            ct_fuzz_check(doc.len == strlen(v->string) && !memcmp(doc.text, v->string, doc.len), "a document differs");
            ct_fuzz_check(ct_utf8_check(doc.text, doc.len, &bad), "a document that is not UTF-8 text");
        }
        ct_json_free(j);
    }
    if (!magic && ct_utf8_check((const char *)text, n, &bad)) {
        // Past the good lines: the end, or (exactly when a bad line exists) a refusal.
        rc = ct_corpus_next(c, &doc);
        if (all_good) ct_fuzz_check(rc == 0, "more documents than lines, or a refusal: %s", rc < 0 ? ct_last_error() : "");
        else {
            ct_fuzz_check(rc == -1, "a bad line accepted");
            const char *e = ct_last_error();
            ct_fuzz_check(!strchr(e, '\n') && strstr(e, path) && strstr(e, "line "), "message: %s", e);
        }
    } else {
        // A bad byte somewhere (or a compressed-looking file): documents up to it, then a refusal.
        while ((rc = ct_corpus_next(c, &doc)) == 1)
            ct_fuzz_check(doc.text && ct_utf8_check(doc.text, doc.len, &bad), "a document that is not UTF-8 text");
        // (A bad line before the bad byte is refused first, naming its line.)
        if (!magic)
            ct_fuzz_check(rc == -1 && (strstr(ct_last_error(), "byte ") || strstr(ct_last_error(), "line ")),
                          "a bad byte accepted");
        if (rc < 0) ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path), "message: %s", ct_last_error());
    }
    ct_corpus_close(c);
    return 0;
}
