// tokenizer.json: exact ids on hand-made files (each worked out below from the BPE rules), both
// merge forms, ignore_merges, added tokens, NFC, ByteLevel's prefix space and regex,
// tokenizer_config.json's bos / eos, every refusal (one line naming the file and the field), and
// the tokenizer hash: a rank file and the same vocabulary as a tokenizer.json hash equal and
// encode alike; any change to what decides the ids changes the hash.
//
// Fixtures (tests/fixtures/tokenizer/):
//   hand_json/tokenizer.json       ids 0..255 the bytes (byte-level spelling), then
//                                  256 th, 257 the, 258 ab, 259 bc, 260 abc, 261 " t", 262 " the",
//                                  263 er, 264 12, 265 ee; merges, in this order ("a b" strings):
//                                  e r, t h, th e, " " t, " " the, a b, b c, a bc, 1 2, e e
//                                  (so merge order is not id order); ignore_merges false; added
//                                  tokens 266 <|endoftext|>, 267 [A], 268 [A][B] (special), 269
//                                  <think> (not special); Llama 3's Split pattern, then ByteLevel.
//                                  tokenizer_config.json: bos {"content": "<|endoftext|>"}, eos
//                                  "<|endoftext|>".
//   hand_pairs.tokenizer.json      the same with [a, b] pair merges and ignore_merges true.
//   hand_ranks_json/               hand.tiktoken as a tokenizer.json: its ranks as ids, the merges
//                                  its ranks imply (every split of each token into two tokens, by
//                                  token rank), ignore_merges true, specials 266/267.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/hf_tokenizer.h"
#include "core/sha256.h"
#include "data/tokenizer.h"
#include "test.h"

#define FIX "tests/fixtures/tokenizer/"

static char tmp_dir[] = "/tmp/ct_tokjson_XXXXXX";

static ct_tokenizer *load(const char *path) {
    ct_tokenizer *t = ct_tokenizer_load(path);
    if (!t) printf("  load %s failed: %s\n", path, ct_last_error());
    return t;
}

// Encodes s (specials: 1 = as tokenizers finds them, 0 = the ordinary encoder) and checks the ids.
static void check_ids(const ct_tokenizer *t, int specials, const char *s, long len, const int32_t *want, long nwant) {
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    long r = specials ? ct_tokenizer_encode_special(t, s, len, &ids, &n, &cap) : ct_tokenizer_encode(t, s, len, &ids, &n, &cap);
    int same = r == nwant && n == nwant;
    for (long i = 0; same && i < n; i++) same = ids[i] == want[i];
    char got[512] = "";
    for (long i = 0, o = 0; i < n && o < 480; i++) o += snprintf(got + o, sizeof got - (size_t)o, "%d ", ids[i]);
    CHECK(same, "%s(\"%s\"): got [%s] (%ld ids, r %ld: %s), want %ld ids", specials ? "encode_special" : "encode", s,
          got, n, r, r < 0 ? ct_last_error() : "", nwant);
    free(ids);
}
#define IDS(t, sp, s, ...)                                                                    \
    do {                                                                                      \
        const int32_t want_[] = {__VA_ARGS__};                                                \
        check_ids(t, sp, s, (long)strlen(s), want_, (long)(sizeof want_ / sizeof want_[0]));  \
    } while (0)

// What both hand files give. Pieces by Llama 3's pattern; "Ġ" is the space's byte-level spelling.
static void check_common(const ct_tokenizer *t) {
    // "the": t h e; listed pairs: (t,h) rank 1 -> th e; (th,e) rank 2 -> the.
    IDS(t, 1, "the", 257);
    // "ther": (e,r) is rank 0, before (t,h) rank 1: t h er -> th er; (th,er) is no merge (and "the"
    // never forms: its e went into er). Merge order, not id order (er is 263, th 256).
    IDS(t, 1, "ther", 256, 263);
    // " the" (one piece: space + letters): Ġ t h e; (t,h) rank 1 first -> Ġ th e, then (th,e) rank 2
    // -> Ġ the, then (Ġ,the) rank 4 -> Ġthe. "Ġt" (rank 3) never forms: its t went first.
    IDS(t, 1, " the", 262);
    // "bc": (b,c) rank 6.
    IDS(t, 1, "bc", 259);
    // "xabc" (not a token): (a,b) rank 5 before (b,c) rank 6 -> x ab c; (x,ab), (ab,c) are not
    // listed, so "abc" (listed only as a + bc) is not reached.
    IDS(t, 1, "xabc", 'x', 258, 'c');
    // "12345": pieces "123", "45" (digits in threes); (1,2) rank 8 -> 12 3; 4 5.
    IDS(t, 1, "12345", 264, '3', '4', '5');
    // "eee": (e,e) at positions 0 and 1, same rank: the leftmost merges -> ee e.
    IDS(t, 1, "eee", 265, 'e');
    // " the  the\n": pieces " the", " " (\s+(?!\S) keeps the space that leads " the"), " the", "\n".
    IDS(t, 1, " the  the\n", 262, ' ', 262, '\n');
    // "é" is C3 A9: no merges, one id per byte.
    IDS(t, 1, "\xc3\xa9", 0xc3, 0xa9);
    // Added tokens are found before pre-tokenisation: "a", <|endoftext|> 266, "b".
    IDS(t, 1, "a<|endoftext|>b", 'a', 266, 'b');
    // Leftmost, then longest: [A][B] (268) at 0 beats [A] (267) at 0; then [A] at 6.
    IDS(t, 1, "[A][B][A]", 268, 267);
    // The ordinary encoder leaves special tokens as text: pieces "a", "<|", "endoftext", "|>", "b";
    // none of their pairs is listed.
    IDS(t, 0, "a<|endoftext|>b", 'a', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>', 'b');
    // ... and [A][B][A] splits as "[A", "][", "B", "][", "A", "]".
    IDS(t, 0, "[A][B][A]", '[', 'A', ']', '[', 'B', ']', '[', 'A', ']');
    // <think> is not special: both encoders find it.
    IDS(t, 0, "<think>x", 269, 'x');
    IDS(t, 1, "<think>x", 269, 'x');
}

static void test_hand_string_merges(void) {
    ct_tokenizer *t = load(FIX "hand_json");  // the folder: its tokenizer.json
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    CHECK(ct_tokenizer_is_json(t), "not read as a tokenizer.json");
    CHECK(ct_tokenizer_vocab_size(t) == 270 && ct_tokenizer_n_ranks(t) == 266, "vocab %ld, model.vocab %ld",
          ct_tokenizer_vocab_size(t), ct_tokenizer_n_ranks(t));
    check_common(t);
    // ignore_merges false: "abc" is a token, but only a + bc makes it, and (a,b) goes first -> ab c.
    IDS(t, 1, "abc", 258, 'c');
    // tokenizer_config.json: bos as an AddedToken object, eos as a string; add_bos_token false.
    CHECK(ct_tokenizer_bos(t) == 266 && ct_tokenizer_eos(t) == 266 && !ct_tokenizer_add_bos(t), "bos %d eos %d",
          ct_tokenizer_bos(t), ct_tokenizer_eos(t));
    // Decoding: byte-level spellings back to bytes, added tokens to their text.
    const int32_t ids[] = {262, ' ', 266, 260, 0xc3, 0xa9};
    long len;
    char *s = ct_tokenizer_decode(t, ids, 6, &len);
    CHECK(s && len == 23 && !memcmp(s, " the <|endoftext|>abc\xc3\xa9", 23), "decode: '%s' (%ld)", s ? s : "", len);
    free(s);
    ct_tokenizer_free(t);
}

static void test_hand_pair_merges(void) {
    ct_tokenizer *t = load(FIX "hand_pairs.tokenizer.json");
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    check_common(t);
    // ignore_merges true: a piece that is a whole token is that token.
    IDS(t, 1, "abc", 260);
    // No tokenizer_config.json beside this file: no bos / eos, and a document form is refused.
    CHECK(ct_tokenizer_bos(t) == -1 && ct_tokenizer_eos(t) == -1, "bos %d eos %d", ct_tokenizer_bos(t), ct_tokenizer_eos(t));
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    CHECK(ct_tokenizer_encode_doc(t, "x", 1, 0, 1, &ids, &n, &cap) < 0 && strstr(ct_last_error(), "eos_token"), "%s",
          ct_last_error());
    free(ids);
    ct_tokenizer_free(t);
}

// ---- variants of the hand file, written to the temporary folder ----------------------------------

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

// The hand file with `from` replaced by `to` (once; the text must be there), written as
// tmp/NAME/tokenizer.json, plus tokenizer_config.json when config is given. Returns the folder.
static const char *variant(const char *name, const char *from, const char *to, const char *config) {
    static char dir[512];
    char *s = slurp(FIX "hand_json/tokenizer.json");
    char *at = s && from ? strstr(s, from) : NULL;
    if (!s || (from && !at)) {
        printf("  variant %s: '%s' not in the hand file\n", name, from ? from : "");
        free(s);
        return NULL;
    }
    snprintf(dir, sizeof dir, "%s/%s", tmp_dir, name);
    mkdir(dir, 0755);
    char path[640];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (at) {
        fwrite(s, 1, (size_t)(at - s), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    } else {
        fputs(s, f);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    if (config) {
        f = fopen(path, "wb");
        fputs(config, f);
        fclose(f);
    }
    free(s);
    return dir;
}

static void test_nfc(void) {
    const char *dir = variant("nfc", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", NULL);
    ct_tokenizer *t = dir ? load(dir) : NULL;
    ct_tokenizer *plain = load(FIX "hand_json");
    if (!t || !plain) {
        ct_tokenizer_free(t), ct_tokenizer_free(plain);
        {
        CHECK(0, "no tokenizer");
        return;
    }
    }
    // "e" + U+0301 (combining acute, CC 81). NFC composes it to "é" (C3 A9): one piece, its 2 bytes.
    IDS(t, 1, "e\xcc\x81", 0xc3, 0xa9);
    // Without a normalizer: "e" (a letter), then U+0301 (a mark, not a letter: the punctuation
    // alternative takes it) -> e, CC, 81.
    IDS(plain, 1, "e\xcc\x81", 'e', 0xcc, 0x81);
    ct_tokenizer_free(t), ct_tokenizer_free(plain);
}

static void test_byte_level_regex_and_prefix(void) {
    // GPT-2 style: ByteLevel alone, with its own regex and a prefix space.
    char *s = slurp(FIX "hand_json/tokenizer.json");
    char *a = s ? strstr(s, "\"pre_tokenizer\": {") : NULL, *b = a ? strstr(a, "\"post_processor\"") : NULL;
    if (!a || !b) {
        free(s);
        {
        CHECK(0, "no pre_tokenizer in the hand file");
        return;
    }
    }
    char old[4096];
    snprintf(old, sizeof old, "%.*s", (int)(b - a), a);
    free(s);
    const char *dir = variant("gpt2", old,
                              "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": "
                              "true, \"use_regex\": true},\n ",
                              NULL);
    ct_tokenizer *t = dir ? load(dir) : NULL;
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    // "the" gets a space in front (it does not start with one): " the" -> 262 as above.
    IDS(t, 1, "the", 262);
    // GPT-2's pattern keeps digits together (" ?\p{N}+"): " 12345" -> Ġ 1 2 3 4 5 -> (1,2) -> Ġ 12 3 4 5.
    IDS(t, 1, "12345", ' ', 264, '3', '4', '5');
    // Each stretch of text between added tokens gets its prefix: " a", <|endoftext|>, " b".
    IDS(t, 1, "a<|endoftext|>b", ' ', 'a', 266, ' ', 'b');
    ct_tokenizer_free(t);
}

static void test_config_forms(void) {
    // add_bos_token true with a bos_token: kept.
    const char *dir = variant("cfg_ok", NULL, NULL, "{\"bos_token\": \"[A]\", \"eos_token\": {\"content\": \"<think>\"}, "
                                                    "\"add_bos_token\": true}");
    ct_tokenizer *t = dir ? load(dir) : NULL;
    CHECK(t && ct_tokenizer_bos(t) == 267 && ct_tokenizer_eos(t) == 269 && ct_tokenizer_add_bos(t), "bos/eos/add_bos");
    ct_tokenizer_free(t);
    // A bos / eos that is a model.vocab token (not an added one) names its vocab id.
    dir = variant("cfg_vocab", NULL, NULL, "{\"eos_token\": \"the\", \"bos_token\": null}");
    t = dir ? load(dir) : NULL;
    CHECK(t && ct_tokenizer_eos(t) == 257 && ct_tokenizer_bos(t) == -1, "eos from model.vocab");
    ct_tokenizer_free(t);
}

// ---- refusals ------------------------------------------------------------------------------------

// Loading dir fails with one line that names `file` (the folder's tokenizer.json unless given) and
// holds `word`.
static void refused(const char *dir, const char *file, const char *word) {
    if (!dir) {
        CHECK(0, "no variant for '%s'", word);
        return;
    }
    char path[640];
    snprintf(path, sizeof path, "%s/%s", dir, file ? file : "tokenizer.json");
    ct_tokenizer *t = ct_tokenizer_load(dir);
    CHECK(!t, "%s loaded (want '%s')", dir, word);
    ct_tokenizer_free(t);
    const char *e = ct_last_error();
    CHECK(!strncmp(e, path, strlen(path)) && strstr(e, word) && !strchr(e, '\n'), "error '%s' (want %s ... %s)", e, path,
          word);
}

static void test_refusals(void) {
    refused(variant("wordpiece", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", NULL), NULL,
            "model.type is \"WordPiece\": ctitan reads byte-level BPE tokenizers only");
    refused(variant("unigram", "\"type\": \"BPE\"", "\"type\": \"Unigram\"", NULL), NULL, "model.type is \"Unigram\"");
    refused(variant("no_merges", "\"merges\": [", "\"merges_gone\": [", NULL), NULL, "model.merges is absent");
    refused(variant("bad_json", "\"vocab\": {", "\"vocab\": {,", NULL), NULL, "bad JSON at byte");
    refused(variant("metaspace", "\"type\": \"Sequence\"", "\"type\": \"Metaspace\"", NULL), NULL,
            "pre_tokenizer.type is \"Metaspace\"");
    refused(variant("digits", "\"type\": \"Split\"", "\"type\": \"Digits\"", NULL), NULL,
            "pre_tokenizer.pretokenizers[0].type \"Digits\" is not supported");
    refused(variant("no_pre", "\"pre_tokenizer\": {", "\"pre_tokenizer_gone\": {", NULL), NULL, "pre_tokenizer is absent");
    refused(variant("removed", "\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"", NULL), NULL,
            "pre_tokenizer.pretokenizers[0].behavior is \"Removed\"");
    refused(variant("bad_regex", "\"Regex\": \"", "\"Regex\": \"(", NULL), NULL, "pre_tokenizer.pretokenizers[0].pattern");
    refused(variant("lowercase", "\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}", NULL), NULL,
            "normalizer.type is \"Lowercase\"");
    refused(variant("decoder", "\"decoder\": {\n  \"type\": \"ByteLevel\"", "\"decoder\": {\n  \"type\": \"Metaspace\"", NULL),
            NULL, "decoder.type is \"Metaspace\"");
    refused(variant("dropout", "\"dropout\": null", "\"dropout\": 0.1", NULL), NULL, "model.dropout is set");
    refused(variant("suffix", "\"end_of_word_suffix\": null", "\"end_of_word_suffix\": \"</w>\"", NULL), NULL,
            "model.end_of_word_suffix is set");
    // A merge whose result is not a token; one whose part is not.
    refused(variant("merge_result", "\"a bc\"", "\"ab bc\"", NULL), NULL, "model.merges[7] joins \"ab\" and \"bc\"");
    refused(variant("merge_part", "\"a bc\"", "\"a zz\"", NULL), NULL, "model.merges[7]: \"zz\" is not in model.vocab");
    refused(variant("merge_form", "\"a bc\"", "[\"a\", \"bc\"]", NULL), NULL, "model.merges[7] is an array");
    refused(variant("merge_spaces", "\"a bc\"", "\"a b c\"", NULL), NULL, "model.merges[7] \"a b c\" is not two tokens");
    // The byte 'z' (0x7a) is spelled "z": renaming its entry leaves the vocabulary without it.
    refused(variant("no_byte", "\"z\": 122", "\"zz\": 122", NULL), NULL, "model.vocab has no token for the byte 0x7a");
    refused(variant("dup_id", "\"z\": 122", "\"z\": 121", NULL), NULL, "both have id 121");
    refused(variant("id_range", "\"z\": 122", "\"z\": 1000", NULL), NULL, "model.vocab[\"z\"] is not an id in [0, 266)");
    // Added tokens: an id tokenizers would not give, an option ctitan does not read, a repeat.
    refused(variant("added_id", "\"id\": 267", "\"id\": 300", NULL), NULL,
            "added_tokens[1] (\"[A]\") has id 300, but tokenizers gives it 267");
    refused(variant("lstrip", "\"lstrip\": false", "\"lstrip\": true", NULL), NULL,
            "added_tokens[0] (\"<|endoftext|>\"): lstrip true is not supported");
    refused(variant("added_twice", "\"content\": \"[A]\"", "\"content\": \"<|endoftext|>\"", NULL), NULL,
            "\"<|endoftext|>\" is already added_tokens[0]");
    refused(variant("version", "\"version\": \"1.0\"", "\"version\": \"2.0\"", NULL), NULL, "version is \"2.0\"");
    // tokenizer_config.json: a token that is not there, add_bos_token without a bos, bad JSON.
    refused(variant("cfg_eos", NULL, NULL, "{\"eos_token\": \"</s>\"}"), "tokenizer_config.json",
            "eos_token \"</s>\" is not a token of");
    refused(variant("cfg_bos", NULL, NULL, "{\"add_bos_token\": true}"), "tokenizer_config.json",
            "add_bos_token is true but bos_token names no token");
    refused(variant("cfg_json", NULL, NULL, "{\"eos_token\": }"), "tokenizer_config.json", "bad JSON at byte");
    // A folder without a tokenizer.json.
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", tmp_dir);
    mkdir(empty, 0755);
    ct_tokenizer *t = ct_tokenizer_load(empty);
    CHECK(!t && strstr(ct_last_error(), "a folder without a tokenizer.json"), "%s", ct_last_error());
    ct_tokenizer_free(t);
}

// ---- the hash ------------------------------------------------------------------------------------

static void hash_of(const ct_tokenizer *t, char hex[33]) {
    hex[0] = 0;
    if (t) CHECK(ct_tokenizer_hash_hex(t, hex) == CT_OK, "hash: %s", ct_last_error());
}

static void test_sha256(void) {
    // FIPS 180-4's examples.
    const char *msg[3] = {"abc", "", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"};
    const char *want[3] = {"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                           "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"};
    for (int k = 0; k < 3; k++) {
        ct_sha256 s;
        ct_sha256_init(&s);
        for (size_t i = 0; i < strlen(msg[k]); i++) ct_sha256_update(&s, msg[k] + i, 1);  // in pieces
        uint8_t d[32];
        ct_sha256_final(&s, d);
        char hex[65];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
        CHECK(!strcmp(hex, want[k]), "sha256(\"%s\") = %s", msg[k], hex);
    }
}

static void test_rank_file_equals_json(void) {
    ct_tokenizer *r = load(FIX "hand.tiktoken"), *j = load(FIX "hand_ranks_json");
    if (!r || !j) {
        ct_tokenizer_free(r), ct_tokenizer_free(j);
        {
        CHECK(0, "no tokenizer");
        return;
    }
    }
    char hr[33], hj[33];
    hash_of(r, hr), hash_of(j, hj);
    CHECK(hr[0] && !strcmp(hr, hj), "rank file %s, tokenizer.json %s", hr, hj);
    CHECK(ct_tokenizer_bos(r) == ct_tokenizer_bos(j) && ct_tokenizer_eos(r) == ct_tokenizer_eos(j), "bos/eos");
    // The same ids on a text that uses every merge, both encoders.
    static const char text[] = "the other thing's 12345 eee in the ringing, <|begin_of_text|> tin\n\n  thee\xff the";
    for (int sp = 0; sp < 2; sp++) {
        int32_t *a = NULL, *b = NULL;
        long na = 0, nb = 0, ca = 0, cb = 0, len = (long)sizeof text - 1;
        long ra = sp ? ct_tokenizer_encode_special(r, text, len, &a, &na, &ca) : ct_tokenizer_encode(r, text, len, &a, &na, &ca);
        long rb = sp ? ct_tokenizer_encode_special(j, text, len, &b, &nb, &cb) : ct_tokenizer_encode(j, text, len, &b, &nb, &cb);
        int same = ra > 0 && ra == rb;
        for (long i = 0; same && i < na; i++) same = a[i] == b[i];
        CHECK(same, "encoder %d: %ld vs %ld ids", sp, ra, rb);
        // With specials found, <|begin_of_text|> is one id (266); without, it is text.
        int has = 0;
        for (long i = 0; i < na; i++) has |= a[i] == 266;
        CHECK(has == sp, "encoder %d: <|begin_of_text|> as id: %d", sp, has);
        free(a), free(b);
    }
    ct_tokenizer_free(r), ct_tokenizer_free(j);
}

// What ctitan writes for a rank file (checkpoint/hf_tokenizer.c) reads back as the same tokenizer.
static void test_export_reads_back(void) {
    ct_tokenizer *r = load(FIX "special.tiktoken");  // a "#special" line: ids out of the usual order
    if (!r) {
        CHECK(0, "no tokenizer");
        return;
    }
    long n = ct_tokenizer_n_ranks(r), total = ct_tokenizer_vocab_size(r);
    const char **tok = calloc((size_t)n, sizeof *tok), *sp[8];
    long *len = calloc((size_t)n, sizeof *len);
    int32_t sid[8];
    int ns = 0;
    for (int32_t id = 0; id < n; id++) tok[id] = ct_tokenizer_token(r, id, &len[id]);
    for (int32_t id = (int32_t)n; id < total && ns < 8; id++) {
        long l;
        const char *s = ct_tokenizer_token(r, id, &l);
        if (s) sp[ns] = s, sid[ns++] = id;
    }
    // Specials in reverse id order: the writer must list them by id, as tokenizers numbers them.
    for (int i = 0; i < ns / 2; i++) {
        const char *ts = sp[i];
        int32_t ti = sid[i];
        sp[i] = sp[ns - 1 - i], sid[i] = sid[ns - 1 - i];
        sp[ns - 1 - i] = ts, sid[ns - 1 - i] = ti;
    }
    ct_hf_vocab v = {.n_tokens = n, .token = tok, .token_len = len, .n_special = ns, .special = sp, .special_id = sid,
                     .bos = ct_tokenizer_bos(r), .eos = ct_tokenizer_eos(r), .pattern = CT_TOKENIZER_PATTERN};
    char dir[600];
    snprintf(dir, sizeof dir, "%s/export", tmp_dir);
    mkdir(dir, 0755);
    CHECK(ct_hf_write_tokenizer(dir, &v) == CT_OK, "export: %s", ct_last_error());
    ct_tokenizer *j = load(dir);
    char hr[33], hj[33] = "";
    hash_of(r, hr);
    if (j) hash_of(j, hj);
    CHECK(j && !strcmp(hr, hj), "exported tokenizer.json hashes %s, the rank file %s", hj, hr);
    CHECK(j && ct_tokenizer_eos(j) == ct_tokenizer_eos(r) && ct_tokenizer_bos(j) == ct_tokenizer_bos(r), "bos/eos");
    ct_tokenizer_free(j), ct_tokenizer_free(r);
    free(tok), free(len);
}

// Whatever decides the ids is in the hash: each change below gives another.
static void test_hash_sees_changes(void) {
    struct {
        const char *name, *from, *to;
    } change[] = {
        {"h_order", "\"e r\",\n   \"t h\"", "\"t h\",\n   \"e r\""},               // merge order
        {"h_ignore", "\"ignore_merges\": false", "\"ignore_merges\": true"},     // ignore_merges
        {"h_nfc", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}"}, // normalizer
        {"h_pattern", "\\\\p{N}{1,3}", "\\\\p{N}{1,2}"},                           // the split pattern
        {"h_special", "\"special\": false", "\"special\": true"},                // <think> becomes special
        {"h_text", "\"content\": \"<think>\"", "\"content\": \"<thonk>\""},      // an added token's text
    };
    ct_tokenizer *base = load(FIX "hand_json");
    char hb[33];
    hash_of(base, hb);
    ct_tokenizer_free(base);
    for (size_t k = 0; k < sizeof change / sizeof change[0]; k++) {
        const char *dir = variant(change[k].name, change[k].from, change[k].to, NULL);
        ct_tokenizer *t = dir ? load(dir) : NULL;
        char h[33] = "";
        hash_of(t, h);
        CHECK(t && h[0] && strcmp(h, hb), "%s: hash %s unchanged", change[k].name, h);
        ct_tokenizer_free(t);
    }
    // And a tokenizer_config.json (bos / eos) does not change it: the shard records those apart.
    const char *dir = variant("h_cfg", NULL, NULL, "{\"eos_token\": \"[A]\"}");
    ct_tokenizer *t = dir ? load(dir) : NULL;
    char h[33] = "";
    hash_of(t, h);
    CHECK(!strcmp(h, hb), "bos/eos changed the hash");
    ct_tokenizer_free(t);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) return 1;
    CT_RUN(test_hand_string_merges);
    CT_RUN(test_hand_pair_merges);
    CT_RUN(test_nfc);
    CT_RUN(test_byte_level_regex_and_prefix);
    CT_RUN(test_config_forms);
    CT_RUN(test_refusals);
    CT_RUN(test_sha256);
    CT_RUN(test_rank_file_equals_json);
    CT_RUN(test_export_reads_back);
    CT_RUN(test_hash_sees_changes);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd)) printf("  could not remove %s\n", tmp_dir);
    CT_TEST_EXIT();
}
