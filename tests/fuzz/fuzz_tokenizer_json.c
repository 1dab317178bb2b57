// Fuzz target: the tokenizer.json reader (data/tokenizer_json.c), then both encoders and the
// decoder on the tokenizer it accepted. The input is written as <tmp>/tokenizer.json (no
// tokenizer_config.json beside it) and the folder is loaded, as `--tokenizer DIR` does.
//
// Properties beyond "no crash, no leak, no UB": an accepted file has every byte as a token, so
// any text encodes (both encoders), every id inside the vocabulary and decoding; and its hash is
// a function of the file (loading it twice gives the same).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fuzz_util.h"

static void encode_all(const ct_tokenizer *tok, const char *text, long len, int specials) {
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    long got = specials ? ct_tokenizer_encode_special(tok, text, len, &ids, &n, &cap)
                        : ct_tokenizer_encode(tok, text, len, &ids, &n, &cap);
    ct_fuzz_check(got >= 0, "encode failed: %s", ct_last_error());
    for (long i = 0; i < n; i++)
        ct_fuzz_check(ids[i] >= 0 && ids[i] < ct_tokenizer_vocab_size(tok), "id %d of %ld", ids[i],
                      ct_tokenizer_vocab_size(tok));
    long out_len = -1;
    char *back = ct_tokenizer_decode(tok, ids, n, &out_len);
    ct_fuzz_check(back != NULL, "decode failed: %s", ct_last_error());
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[1024];
    ct_fuzz_write("tokenizer.json", data, size, path, sizeof path);
    ct_tokenizer *tok = ct_tokenizer_load(path);
    if (!tok) return 0;
    ct_fuzz_check(ct_tokenizer_is_json(tok) && ct_tokenizer_vocab_size(tok) >= 256, "vocabulary %ld",
                  ct_tokenizer_vocab_size(tok));
    static const char sample[] = "Hello, world! It's 2024: naïve café — 日本語 \r\n\t  123456 <|endoftext|> [A][B]\xff\xfe";
    for (int sp = 0; sp < 2; sp++) {
        encode_all(tok, sample, (long)sizeof sample - 1, sp);
        encode_all(tok, (const char *)data, size < 256 ? (long)size : 256, sp);
    }
    char h1[33], h2[33];
    ct_fuzz_check(ct_tokenizer_hash_hex(tok, h1) == CT_OK, "hash: %s", ct_last_error());
    ct_tokenizer *again = ct_tokenizer_load(path);
    ct_fuzz_check(again && ct_tokenizer_hash_hex(again, h2) == CT_OK && !strcmp(h1, h2), "the hash changed on reload");
    ct_tokenizer_free(again);
    ct_tokenizer_free(tok);
    return 0;
}
