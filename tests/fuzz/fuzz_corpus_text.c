// Fuzz target: the plain-text corpus reader (data/corpus_text.c) over the byte streams of
// data/corpus_stream.c. The input's first byte picks how the rest is stored: 0 as it is, 1 gzip
// (zlib), 2 zstd (libzstd), each compressed here, so the streams carry fuzzed text; raw inputs
// that start with a gzip or zstd magic reach the decoders with fuzzed compressed data (those
// that inflate past 64 KiB, the most a plain input holds, are passed over: read correctly, but
// slowly).
//
// Properties beyond "no crash, no leak, no UB": a file that is UTF-8 without NUL is read, in any
// of the three containers, as exactly the documents ct_data_for_each_document (data/prepare.h,
// the splitter over a whole buffer) finds in it, blank ones left out; any other is refused with
// one line naming the file and the byte offset; a refused reader stays refused.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "fuzz_pack.h"
#include "fuzz_util.h"

typedef struct {
    const char *d[4096];
    size_t l[4096];
    size_t n;
} doc_list;

static int collect(const char *doc, size_t len, void *ctx) {
    doc_list *dl = ctx;
    if (dl->n < 4096) dl->d[dl->n] = doc, dl->l[dl->n] = len;
    dl->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    int how = data[0] % 3;
    const uint8_t *text = data + 1;
    size_t n = size - 1;
    if (how == 0 && ct_fuzz_inflates_past(text, n, 65536)) return 0;
    char path[1024];
    if (how == 0) ct_fuzz_write("corpus.txt", text, n, path, sizeof path);
    else {
        size_t cn;
        uint8_t *c = ct_fuzz_pack(how, text, n, &cn);
        ct_fuzz_write(how == 1 ? "corpus.txt.gz" : "corpus.txt.zst", c, cn, path, sizeof path);
        free(c);
    }
    bool magic = how == 0 && ((n >= 2 && text[0] == 0x1f && text[1] == 0x8b) ||
                              (n >= 4 && !memcmp(text, "\x28\xb5\x2f\xfd", 4)) || (n >= 4 && !memcmp(text, "PAR1", 4)) ||
                              (n >= 9 && !memcmp(text, "MMIDIDX\0\0", 9)));
    size_t bad;
    bool utf8 = ct_utf8_check((const char *)text, n, &bad);
    doc_list want = {.n = 0};
    if (utf8) ct_data_for_each_document((const char *)text, n, collect, &want);

    ct_corpus *c = ct_corpus_open(path, NULL);
    if (!c) {
        ct_fuzz_check(magic || !utf8, "refused at open: %s", ct_last_error());
        ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path), "message: %s", ct_last_error());
        return 0;
    }
    ct_corpus_doc doc;
    size_t got = 0;
    int rc;
    while ((rc = ct_corpus_next(c, &doc)) == 1) {
        ct_fuzz_check(doc.text && ct_utf8_check(doc.text, doc.len, &bad), "a document that is not UTF-8 text");
        if (!magic && got < want.n && got < 4096)
            ct_fuzz_check(doc.len == want.l[got] && !memcmp(doc.text, want.d[got], doc.len),
                          "document %zu differs from the splitter's", got);
        got++;
    }
    if (rc < 0) {
        ct_fuzz_check(magic || !utf8, "a UTF-8 text refused: %s", ct_last_error());
        ct_fuzz_check(!strchr(ct_last_error(), '\n') && strstr(ct_last_error(), path) && strstr(ct_last_error(), "byte "),
                      "message: %s", ct_last_error());
        ct_fuzz_check(ct_corpus_next(c, &doc) == -1, "a refused reader read on");
    } else if (!magic) {
        ct_fuzz_check(utf8, "text with a bad byte at %zu accepted", bad);
        ct_fuzz_check(got == want.n, "%zu documents, the splitter finds %zu", got, want.n);
    }
    ct_corpus_close(c);
    return 0;
}
