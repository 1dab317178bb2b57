// Fuzz target: `ctitan data prepare` (data/prepare.c): a corpus file split into documents
// (fortune format or one document per file), encoded with a real BPE tokenizer and written as
// shards through the staging folder and the swap. The tokenizer is a rank file ctitan trained,
// committed as the tokenizer target's seed (tests/fuzz/corpus/tokenizer/seed-trained), or
// $CT_FUZZ_TOKENIZER. The input's first byte picks the options (validation fraction, tokens per
// shard, so several shards and both splits are exercised); the rest is the corpus file. Inputs
// are kept small (16 KiB): each one is a whole prepare.
//
// Properties beyond "no crash, no leak, no UB": a file that is not UTF-8 (or holds a NUL) is
// refused naming the byte; otherwise prepare succeeds exactly when the corpus has a non-blank
// document; the documents it counts are the ones ct_data_for_each_document finds;
// the shards it reports are on disk, open, and hold the tokens it reports; nothing is left in
// the output folder but shards (no staging folder).
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "fuzz_util.h"

#ifndef CT_FUZZ_TOKENIZER
#define CT_FUZZ_TOKENIZER "tests/fuzz/corpus/tokenizer/seed-trained"
#endif

static int count_doc(const char *doc, size_t len, void *ctx) {
    (void)doc;
    (void)len;
    ++*(uint64_t *)ctx;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    static const double fractions[4] = {0, 0.05, 0.25, 0.5};
    double val_fraction = fractions[data[0] & 3];
    uint64_t shard_tokens = (data[0] >> 2) ? (uint64_t)(data[0] >> 2) * 4 : 0;  // 0: the default (100M)
    const char *tokenizer = getenv("CT_FUZZ_TOKENIZER");
    if (!tokenizer || !*tokenizer) tokenizer = CT_FUZZ_TOKENIZER;

    char in[1024], out[1024];
    ct_fuzz_write("corpus.txt", data + 1, size - 1, in, sizeof in);
    snprintf(out, sizeof out, "%s/out", ct_fuzz_tmpdir());
    ct_fuzz_rmtree(out);
    const char *inputs[1] = {in};
    ct_data_prepare_opts o = {.inputs = inputs, .n_inputs = 1, .tokenizer_path = tokenizer, .out_dir = out,
                              .val_fraction = val_fraction, .shard_tokens = shard_tokens, .progress = 0};
    ct_data_prepare_result r;
    ct_status st = ct_data_prepare(&o, &r);

    // The file is read as text (its name says so) unless it starts with a known magic; text that
    // is not UTF-8, or holds a NUL, is refused at its first bad byte.
    const uint8_t *t = data + 1;
    size_t n = size - 1, bad;
    bool magic = (n >= 2 && t[0] == 0x1f && t[1] == 0x8b) || (n >= 4 && !memcmp(t, "\x28\xb5\x2f\xfd", 4)) ||
                 (n >= 4 && !memcmp(t, "PAR1", 4)) || (n >= 9 && !memcmp(t, "MMIDIDX\0\0", 9));
    if (magic) return 0;  // another reader's input (their own targets check those)
    if (!ct_utf8_check((const char *)t, n, &bad)) {
        ct_fuzz_check(st != CT_OK && strstr(ct_last_error(), "byte ") && !strchr(ct_last_error(), '\n'),
                      "a bad byte at %zu: %s", bad, st == CT_OK ? "accepted" : ct_last_error());
        return 0;
    }
    uint64_t docs = 0;
    ct_data_for_each_document((const char *)data + 1, size - 1, count_doc, &docs);
    if (st != CT_OK) {
        // The tokenizer must load for the check to mean anything: a missing one fails every input.
        ct_fuzz_check(docs == 0, "%llu documents, but prepare failed: %s", (unsigned long long)docs, ct_last_error());
        return 0;
    }
    ct_fuzz_check(docs > 0, "prepare succeeded on a corpus with no document");
    ct_fuzz_check(r.docs[0] + r.docs[1] == docs, "prepare counted %llu + %llu documents, the splitter %llu",
                  (unsigned long long)r.docs[0], (unsigned long long)r.docs[1], (unsigned long long)docs);
    int files = 0;
    for (int k = 0; k < 2; k++) {
        uint64_t tokens = 0;
        for (int i = 0; i < r.shards[k]; i++) {
            char path[1200];
            snprintf(path, sizeof path, "%s/%s_%03d.bin", out, k ? "val" : "train", i);
            ct_shard s;
            ct_fuzz_check(ct_shard_open(&s, path, 0) == CT_OK, "reported shard does not open: %s", ct_last_error());
            ct_fuzz_check(s.n_tokens > 0 && (!shard_tokens || s.n_tokens <= shard_tokens), "%s: %llu tokens", path,
                          (unsigned long long)s.n_tokens);
            tokens += s.n_tokens;
            ct_shard_close(&s);
            files++;
        }
        ct_fuzz_check(tokens == r.tokens[k], "%s shards hold %llu tokens, prepare reported %llu", k ? "val" : "train",
                      (unsigned long long)tokens, (unsigned long long)r.tokens[k]);
        ct_fuzz_check(r.tokens[k] >= r.docs[k], "fewer tokens than documents (each ends with <|end_of_text|>)");
    }
    DIR *d = opendir(out);
    ct_fuzz_check(d != NULL, "no output folder");
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) entries++;
    closedir(d);
    // A link per shard, .current, and the folder of shards it names (data/shard.h).
    ct_fuzz_check(entries == files + 2, "%d entries in the output folder, %d shards", entries, files);
    return 0;
}
