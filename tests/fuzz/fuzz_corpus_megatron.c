// Fuzz target: the Megatron-LM indexed dataset reader (data/corpus_megatron.c). The input is
// [u8 options][u16 LE index length L][L bytes: PREFIX.idx][the rest: PREFIX.bin]; the options'
// low two bits pick the vocabulary the ids are checked against (none, 300, 65536, 2^31 - 1) and
// bit 2 whether the pair is opened by its .idx or its .bin.
//
// Properties beyond "no crash, no leak, no UB": every id handed out is >= 0 and below the
// vocabulary; no more documents come out than the index declares; a refusal is one line naming the .idx or the .bin; a refused reader stays refused.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3 || size > 1 << 20) return 0;
    static const uint32_t vocabs[4] = {0, 300, 65536, 2147483647u};
    uint32_t vocab = vocabs[data[0] & 3];
    size_t L = (size_t)data[1] | (size_t)data[2] << 8;
    if (L > size - 3) L = size - 3;
    char idx[1024], bin[1024];
    ct_fuzz_write("corpus.idx", data + 3, L, idx, sizeof idx);
    ct_fuzz_write("corpus.bin", data + 3 + L, size - 3 - L, bin, sizeof bin);
    uint64_t declared = 0;
    if (L >= 34) {
        for (int k = 0; k < 8; k++) declared |= (uint64_t)data[3 + 26 + k] << (8 * k);
        declared = declared ? declared - 1 : 0;
    }
    ct_corpus_opts opts = {.vocab_size = vocab};
    ct_corpus *c = ct_corpus_open(data[0] & 4 ? bin : idx, &opts);
    if (!c) {
        const char *e = ct_last_error();
        ct_fuzz_check(!strchr(e, '\n') && (strstr(e, idx) || strstr(e, bin)), "message: %s", e);
        return 0;
    }
    ct_fuzz_check(ct_corpus_format_of(c) == CT_CORPUS_MEGATRON, "a pair read as %s", ct_corpus_format_name(ct_corpus_format_of(c)));
    ct_corpus_doc doc;
    int rc;
    uint64_t docs = 0;
    while ((rc = ct_corpus_next(c, &doc)) == 1) {
        ct_fuzz_check(doc.ids && !doc.text && doc.n_ids > 0 && doc.n_ids <= CT_CORPUS_DOC_MAX / 4, "not a token document");
        for (size_t i = 0; i < doc.n_ids; i++)
            ct_fuzz_check(doc.ids[i] >= 0 && (!vocab || (uint32_t)doc.ids[i] < vocab), "id %d, vocabulary %u", doc.ids[i], vocab);
        docs++;
    }
    ct_fuzz_check(docs <= declared, "%llu documents, the index declares %llu", (unsigned long long)docs,
                  (unsigned long long)declared);
    if (rc < 0) {
        const char *e = ct_last_error();
        ct_fuzz_check(!strchr(e, '\n') && (strstr(e, idx) || strstr(e, bin)), "message: %s", e);
        ct_fuzz_check(ct_corpus_next(c, &doc) == -1, "a refused reader read on");
    }
    ct_corpus_close(c);
    return 0;
}
