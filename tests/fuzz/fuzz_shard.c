// Fuzz target: token shards (data/shard.c), both formats (ctitan's CTTOKENS and llm.c's): the
// open that validates a shard once (header, size, every id) and the reads the loader makes.
// The input's first byte picks the vocabulary limit the caller passes (0: none, as `data info`;
// else a small one, as a run with a model's vocabulary); the rest is the file.
//
// Properties beyond "no crash, no leak, no UB": an accepted shard holds exactly n_tokens ids at
// the header's width after the header, each id below the header's vocabulary, the caller's
// limit and 2^31; single-token and bulk reads agree; and rewriting the ids with the writer gives
// a shard that opens with the same ids and the same recorded tokenizer.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const uint32_t limits[4] = {0, 300, 65536, 100000};
    uint32_t limit = limits[data[0] & 3];
    char path[1024];
    ct_fuzz_write("train_000.bin", data + 1, size - 1, path, sizeof path);
    ct_shard s;
    if (ct_shard_open(&s, path, limit) != CT_OK) return 0;
    ct_fuzz_check(s.token_width == 2 || s.token_width == 4, "width %d", s.token_width);
    ct_fuzz_check(s.data_offset + s.n_tokens * (uint64_t)s.token_width == size - 1,
                  "%llu tokens of %d bytes after %llu header bytes, file of %zu", (unsigned long long)s.n_tokens,
                  s.token_width, (unsigned long long)s.data_offset, size - 1);
    int32_t *ids = malloc(sizeof(int32_t) * (s.n_tokens ? s.n_tokens : 1));
    ct_shard_copy(&s, 0, s.n_tokens, ids);
    for (uint64_t i = 0; i < s.n_tokens; i++) {
        uint32_t one = ct_shard_token(&s, i);
        ct_fuzz_check((int32_t)one == ids[i], "token %llu: %u alone, %d in bulk", (unsigned long long)i, one, ids[i]);
        ct_fuzz_check(ids[i] >= 0 && (uint32_t)ids[i] < s.vocab_size && (!limit || (uint32_t)ids[i] < limit),
                      "token %llu = %d, vocabulary %u, limit %u", (unsigned long long)i, ids[i], s.vocab_size, limit);
    }
    if (s.n_tokens > 2) {  // a window in the middle, as the loader reads one sequence
        int32_t mid[2];
        ct_shard_copy(&s, 1, 2, mid);
        ct_fuzz_check(mid[0] == ids[1] && mid[1] == ids[2], "a window read differs");
    }
    uint32_t vocab = s.vocab_size;
    uint64_t n = s.n_tokens;
    ct_shard_tok tok = s.tok;
    ct_shard_close(&s);

    char again[1024];
    snprintf(again, sizeof again, "%s/rewritten.bin", ct_fuzz_tmpdir());
    if (n > 0) {
        ct_shard_writer *w = ct_shard_writer_open(again, vocab);
        ct_fuzz_check(w != NULL, "rewrite: %s", ct_last_error());
        ct_shard_writer_set_tokenizer(w, &tok);
        ct_fuzz_check(ct_shard_writer_append(w, ids, n) == CT_OK && ct_shard_writer_close(w) == CT_OK, "rewrite: %s",
                      ct_last_error());
        ct_shard s2;
        ct_fuzz_check(ct_shard_open(&s2, again, limit) == CT_OK, "the rewritten shard does not open: %s",
                      ct_last_error());
        ct_fuzz_check(s2.n_tokens == n, "rewritten: %llu tokens, was %llu", (unsigned long long)s2.n_tokens,
                      (unsigned long long)n);
        ct_fuzz_check(s2.tok.present == tok.present && (!tok.present || (s2.tok.bos == tok.bos && s2.tok.eos == tok.eos &&
                                                                       !memcmp(s2.tok.hash, tok.hash, sizeof tok.hash))),
                      "the recorded tokenizer changed in the rewrite");
        int32_t *ids2 = malloc(sizeof(int32_t) * n);
        ct_shard_copy(&s2, 0, n, ids2);
        ct_fuzz_check(!memcmp(ids, ids2, sizeof(int32_t) * n), "rewritten ids differ");
        free(ids2);
        ct_shard_close(&s2);
    }
    free(ids);
    return 0;
}
