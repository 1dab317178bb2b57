// Fuzz target: the tiktoken rank-file loader (data/tokenizer_load.c), then the encoder and
// decoder on the vocabulary it accepted. The input is written to a file and loaded as one.
//
// Properties beyond "no crash, no leak, no UB": with any accepted rank file,
// decode(encode(x)) == x for a fixed text and for the input's own first bytes (every byte has a
// rank, so every string encodes); and the file ct_tokenizer_save writes loads back to the same
// vocabulary and special ids.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"

static void round_trip(const ct_tokenizer *tok, const char *text, long len) {
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    long got = ct_tokenizer_encode_doc(tok, text, len, 1, 1, &ids, &n, &cap);
    ct_fuzz_check(got >= 2, "encode failed: %s", ct_last_error());
    ct_fuzz_check(ids[0] == ct_tokenizer_bos(tok) && ids[got - 1] == ct_tokenizer_eos(tok), "bos/eos not around");
    long out_len = -1;
    // Without the specials, the ids decode to the text exactly.
    char *back = ct_tokenizer_decode(tok, ids + 1, got - 2, &out_len);
    ct_fuzz_check(back != NULL, "decode failed: %s", ct_last_error());
    ct_fuzz_check(out_len == len && !memcmp(back, text, (size_t)len), "decode(encode(x)) != x (%ld vs %ld bytes)",
                  out_len, len);
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[1024];
    ct_fuzz_write("rank.tiktoken", data, size, path, sizeof path);
    ct_tokenizer *tok = ct_tokenizer_load(path);
    if (!tok) return 0;
    if (ct_tokenizer_is_json(tok)) {  // a JSON object: tokenizer.json's reader (fuzz_tokenizer_json)
        ct_tokenizer_free(tok);
        return 0;
    }
    long vocab = ct_tokenizer_vocab_size(tok), ranks = ct_tokenizer_n_ranks(tok);
    ct_fuzz_check(ranks >= 256 && vocab >= ranks + 2, "%ld ranks, vocabulary %ld", ranks, vocab);
    int32_t bos = ct_tokenizer_bos(tok), eos = ct_tokenizer_eos(tok);
    ct_fuzz_check(bos >= ranks && bos < vocab && eos >= ranks && eos < vocab && bos != eos, "bos %d eos %d of %ld",
                  bos, eos, vocab);

    static const char sample[] = "Hello, world! It's 2024: naïve café — 日本語 \r\n\t  123456 tokens.\xff\xfe";
    round_trip(tok, sample, (long)sizeof sample - 1);
    round_trip(tok, (const char *)data, size < 256 ? (long)size : 256);

    char again[1024];
    snprintf(again, sizeof again, "%s/saved.tiktoken", ct_fuzz_tmpdir());
    ct_fuzz_check(ct_tokenizer_save(tok, again) == CT_OK, "save: %s", ct_last_error());
    ct_tokenizer *tok2 = ct_tokenizer_load(again);
    ct_fuzz_check(tok2 != NULL, "the saved file does not load: %s", ct_last_error());
    ct_fuzz_check(ct_tokenizer_vocab_size(tok2) == vocab && ct_tokenizer_n_ranks(tok2) == ranks &&
                      ct_tokenizer_bos(tok2) == bos && ct_tokenizer_eos(tok2) == eos,
                  "reloaded: vocabulary %ld ranks %ld bos %d eos %d, was %ld %ld %d %d", ct_tokenizer_vocab_size(tok2),
                  ct_tokenizer_n_ranks(tok2), ct_tokenizer_bos(tok2), ct_tokenizer_eos(tok2), vocab, ranks, bos, eos);
    // Ids between the ranks and a special placed further up ("#special X 514") name nothing in
    // either: the same holes before and after.
    for (int32_t id = 0; id < vocab; id++) {
        long l1 = 0, l2 = 0;
        const char *a = ct_tokenizer_token(tok, id, &l1), *b = ct_tokenizer_token(tok2, id, &l2);
        ct_fuzz_check(!a == !b && l1 == l2 && (!a || !memcmp(a, b, (size_t)l1)), "id %d differs after save and load",
                      id);
    }
    ct_tokenizer_free(tok2);
    ct_tokenizer_free(tok);
    return 0;
}
