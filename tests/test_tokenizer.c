// Tokenizer: exact encodings against a hand-made rank file (worked out by hand below), the
// pre-tokeniser's splits, rank-file validation, special tokens, decode errors.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "test.h"

#define FIX "tests/fixtures/tokenizer/"

static ct_tokenizer *hand(void) {
    ct_tokenizer *t = ct_tokenizer_load(FIX "hand.tiktoken");
    if (!t) printf("  load failed: %s\n", ct_last_error());
    return t;
}

// Encodes s and checks the ids equal want[0..nwant).
static void check_encode(const ct_tokenizer *t, const char *s, long len, const int32_t *want, long nwant) {
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    long r = ct_tokenizer_encode(t, s, len, &ids, &n, &cap);
    int same = r == nwant && n == nwant;
    for (long i = 0; same && i < n; i++) same = ids[i] == want[i];
    char got[512] = "";
    for (long i = 0, o = 0; i < n && o < 480; i++) o += snprintf(got + o, sizeof got - (size_t)o, "%d ", ids[i]);
    CHECK(same, "encode(\"%s\"): got [%s] (%ld ids), want %ld ids", s, got, n, nwant);
    free(ids);
}
#define ENC(t, s, ...)                                                                           \
    do {                                                                                         \
        const int32_t want_[] = {__VA_ARGS__};                                                   \
        check_encode(t, s, (long)strlen(s), want_, (long)(sizeof want_ / sizeof want_[0]));       \
    } while (0)

// hand.tiktoken: rank b = byte b for b < 256, then 256 "th", 257 "the", 258 " t", 259 " the",
// 260 "er", 261 "in", 262 "ing", 263 "12", 264 "'s", 265 "ee".
static void test_hand_encodings(void) {
    ct_tokenizer *t = hand();
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    CHECK(ct_tokenizer_n_ranks(t) == 266, "n_ranks %ld", ct_tokenizer_n_ranks(t));
    // "the": one piece, itself a token (257).
    ENC(t, "the", 257);
    // " the": one piece (space + letters), itself a token (259).
    ENC(t, " the", 259);
    // "other": pairs ot -, th 256, he -, er 260. Lowest is th: o|th|e|r. Now pairs
    // "oth" -, "the" 257, "er" 260: the wins (257 < 260) and takes the e that "er" wanted:
    // o|the|r. "othe", "ther" are not tokens. -> o=111, 257, r=114.
    ENC(t, "other", 111, 257, 114);
    // "thing": th 256, hi -, in 261, ng -. th|i|n|g -> "thi" -, in 261 -> th|in|g ->
    // "thin" -, "ing" 262 -> th|ing. -> 256, 262.
    ENC(t, "thing", 256, 262);
    // " bathe": one piece; " b" -, ba -, at -, th 256, he - -> ' '|b|a|th|e -> "ath" -,
    // "the" 257 -> ' '|b|a|the. -> 32, 98, 97, 257.
    ENC(t, " bathe", 32, 98, 97, 257);
    // "12345": numbers go in groups of 3: "123", "45". "123": 12 263, 23 - -> 12|3 -> "123" -.
    // "45": no merges. -> 263, 51, 52, 53.
    ENC(t, "12345", 263, 51, 52, 53);
    // "it's": pieces "it" (letters), "'s" (contraction, a token: 264). -> 105, 116, 264.
    ENC(t, "it's", 105, 116, 264);
    // " the the": pieces " the", " the". -> 259, 259.
    ENC(t, " the the", 259, 259);
    // "eee": ee 265 twice (a tie): the leftmost merges first -> ee|e; "eee" is not a token.
    ENC(t, "eee", 265, 101);
    // "a  b": pieces "a", " " (\s+(?!\S) stops before the space that leads " b"), " b".
    // -> 97, 32, 32, 98.
    ENC(t, "a  b", 97, 32, 32, 98);
    // " tin": one piece; " t" 258, ti -, in 261: lowest is " t" -> ' t'|i|n -> " ti" -,
    // in 261 -> ' t'|in -> " tin" -. -> 258, 261.
    ENC(t, " tin", 258, 261);
    // Special-token text is ordinary text, never bos: pieces "<|", "begin", "_of", "_text", "|>";
    // only "begin" has a merge (in 261): b|e|g|in.
    ENC(t, "<|begin_of_text|>", '<', '|', 'b', 'e', 'g', 261, '_', 'o', 'f', '_', 't', 'e', 'x', 't', '|', '>');
    // Invalid UTF-8 and NUL encode as their bytes: "th\xff" -> pieces "th", "\xff".
    const int32_t want[] = {256, 255, 0, 257};
    check_encode(t, "th\xff\0the", 7, want, 4);
    ct_tokenizer_free(t);
}

typedef struct {
    char pieces[32][64];
    int n;
} split_list;

static int collect(void *ctx, const char *piece, long len) {
    split_list *l = ctx;
    if (l->n < 32 && len < 64) {
        memcpy(l->pieces[l->n], piece, (size_t)len);
        l->pieces[l->n][len] = 0;
    }
    l->n++;
    return 0;
}

// Splits s and compares with the NULL-terminated list of expected pieces.
static void check_split(const ct_tokenizer *t, const char *s, long len, const char *const *want) {
    split_list l = {.n = 0};
    CHECK(ct_tokenizer_pretokenize(t, s, len, collect, &l) == CT_OK, "pretokenize failed: %s", ct_last_error());
    int nw = 0;
    while (want[nw]) nw++;
    int same = l.n == nw;
    for (int i = 0; same && i < nw; i++) same = !strcmp(l.pieces[i], want[i]);
    char got[1024] = "";
    for (int i = 0, o = 0; i < l.n && i < 32 && o < 1000; i++) o += snprintf(got + o, sizeof got - (size_t)o, "[%s]", l.pieces[i]);
    CHECK(same, "split of \"%s\": got %s (%d pieces, want %d)", s, got, l.n, nw);
}
#define SPLIT(t, s, ...)                                                  \
    do {                                                                  \
        const char *const want_[] = {__VA_ARGS__, NULL};                  \
        check_split(t, s, (long)strlen(s), want_);                        \
    } while (0)

static void test_pretokenize(void) {
    ct_tokenizer *t = hand();
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    // Contractions (case-insensitive) split from the word before them.
    SPLIT(t, "I'm don't you'LL", "I", "'m", " don", "'t", " you", "'LL");
    // Numbers in groups of at most 3 digits; a space before a letter joins the word.
    SPLIT(t, "1234567 abc", "123", "456", "7", " abc");
    // Unicode letters are letters (\p{L}), with the leading space.
    SPLIT(t, "héllo wörld", "héllo", " wörld");
    // Unicode digits (Arabic-Indic) are \p{N}.
    SPLIT(t, "٣٤٥٦", "٣٤٥", "٦");
    // A run of spaces gives all but the last one, which leads the next word.
    SPLIT(t, "a   b", "a", "  ", " b");
    // Newlines: \s*[\r\n]+ takes the blank run up to and including the last newline.
    SPLIT(t, "a\n\nb", "a", "\n\n", "b");
    SPLIT(t, "x  \n  y", "x", "  \n", " ", " y");
    // Punctuation runs, with an optional leading space and trailing newlines.
    SPLIT(t, "hello!!! world?\n", "hello", "!!!", " world", "?\n");
    // Tabs: one tab stays alone, the other leads the word (the [^\r\n\p{L}\p{N}]? prefix).
    SPLIT(t, "\t\tfoo", "\t", "\tfoo");
    // Trailing spaces at the end of the text: \s+(?!\S) takes them all.
    SPLIT(t, "a  ", "a", "  ");
    // \s is Unicode White_Space, as tiktoken's and tokenizers' regex engines read it: NEL (U+0085)
    // is a space, so the run keeps all but the last, which leads the word; U+180E (a format
    // character, which PCRE2's own \s would take) is not, so the two form a punctuation run.
    SPLIT(t, "a\xc2\x85\xc2\x85" "b", "a", "\xc2\x85", "\xc2\x85" "b");
    SPLIT(t, "a\xe1\xa0\x8e\xe1\xa0\x8e" "b", "a", "\xe1\xa0\x8e\xe1\xa0\x8e", "b");
    // Invalid UTF-8 bytes are pieces of their own; the valid spans around them split normally.
    SPLIT(t, "ab\xff" "cd", "ab", "\xff", "cd");
    SPLIT(t, "\xe2\x82" " ok", "\xe2", "\x82", " ok");  // a truncated 3-byte sequence
    ct_tokenizer_free(t);
}

static void test_decode(void) {
    ct_tokenizer *t = hand();
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    const int32_t ids[] = {266, 259, 111, 257, 114, 0, 267};
    long len = -1;
    char *s = ct_tokenizer_decode(t, ids, 7, &len);
    const char want[] = "<|begin_of_text|> theother\0<|end_of_text|>";
    CHECK(s && len == (long)sizeof want - 1 && !memcmp(s, want, sizeof want - 1), "decode gave %ld bytes", len);
    free(s);
    const int32_t bad[] = {1, 268};
    CHECK(!ct_tokenizer_decode(t, bad, 2, &len), "id 268 should be out of range");
    CHECK(strstr(ct_last_error(), "268") != NULL, "error: %s", ct_last_error());
    const int32_t neg[] = {-1};
    CHECK(!ct_tokenizer_decode(t, neg, 1, &len), "id -1 should be out of range");
    ct_tokenizer_free(t);
}

static void test_specials(void) {
    ct_tokenizer *t = hand();
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    // Ids right after the last rank (265): like Llama 3's 128000 ranks -> 128000, 128001.
    CHECK(ct_tokenizer_bos(t) == 266 && ct_tokenizer_eos(t) == 267, "bos %d eos %d", ct_tokenizer_bos(t),
          ct_tokenizer_eos(t));
    CHECK(ct_tokenizer_vocab_size(t) == 268, "vocab %ld", ct_tokenizer_vocab_size(t));
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    CHECK(ct_tokenizer_encode_doc(t, "the", 3, 1, 1, &ids, &n, &cap) == 3, "n %ld", n);
    CHECK(n == 3 && ids[0] == 266 && ids[1] == 257 && ids[2] == 267, "doc ids");
    // Appending keeps what was there.
    CHECK(ct_tokenizer_encode_doc(t, " the", 4, 0, 1, &ids, &n, &cap) == 5, "n %ld", n);
    CHECK(n == 5 && ids[3] == 259 && ids[4] == 267, "appended ids");
    free(ids);
    ct_tokenizer_free(t);

    // A "#special" line takes id 257; bos defaults to 256 (after the ranks), eos skips the taken 257.
    t = ct_tokenizer_load(FIX "special.tiktoken");
    CHECK(t != NULL, "load: %s", ct_last_error());
    if (t) {
        CHECK(ct_tokenizer_bos(t) == 256 && ct_tokenizer_eos(t) == 258, "bos %d eos %d", ct_tokenizer_bos(t),
              ct_tokenizer_eos(t));
        CHECK(ct_tokenizer_vocab_size(t) == 259, "vocab %ld", ct_tokenizer_vocab_size(t));
        long len;
        const char *s = ct_tokenizer_token(t, 257, &len);
        CHECK(s && len == 10 && !memcmp(s, "<|eot_id|>", 10), "special 257");
        ct_tokenizer_free(t);
    }
}

// Llama 3's layout: 128000 ranks, so <|begin_of_text|> = 128000 and <|end_of_text|> = 128001.
static void test_llama3_layout(void) {
    char path[] = "/tmp/ct_tok_l3_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        CHECK(0, "cannot create temp file");
        return;
    }
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    long rank = 0;
    for (int b = 0; b < 256; b++, rank++)  // one byte: 2 chars + "=="
        fprintf(f, "%c%c== %ld\n", b64[b >> 2], b64[(b & 3) << 4], rank);
    // Distinct 3-byte strings (4 base64 chars, no padding) for the other 127744 ranks.
    for (long k = 0; rank < 128000; k++, rank++)
        fprintf(f, "%c%c%c%c %ld\n", b64[k >> 18 & 63], b64[k >> 12 & 63], b64[k >> 6 & 63], b64[k & 63], rank);
    fclose(f);
    ct_tokenizer *t = ct_tokenizer_load(path);
    CHECK(t != NULL, "load: %s", ct_last_error());
    if (t) {
        CHECK(ct_tokenizer_n_ranks(t) == 128000, "ranks %ld", ct_tokenizer_n_ranks(t));
        CHECK(ct_tokenizer_bos(t) == 128000, "bos %d", ct_tokenizer_bos(t));
        CHECK(ct_tokenizer_eos(t) == 128001, "eos %d", ct_tokenizer_eos(t));
        CHECK(ct_tokenizer_vocab_size(t) == 128002, "vocab %ld", ct_tokenizer_vocab_size(t));
        ct_tokenizer_free(t);
    }
    unlink(path);
}

// Each bad file fails with "path:LINE: ..." naming the offending line.
static void check_bad(const char *path, const char *want_prefix, const char *want_word) {
    ct_tokenizer *t = ct_tokenizer_load(path);
    CHECK(t == NULL, "%s loaded", path);
    ct_tokenizer_free(t);
    const char *e = ct_last_error();
    CHECK(!strncmp(e, want_prefix, strlen(want_prefix)) && strstr(e, want_word), "%s: error '%s'", path, e);
}

static void test_bad_files(void) {
    check_bad(FIX "bad_base64.tiktoken", FIX "bad_base64.tiktoken:3: ", "base64");
    check_bad(FIX "dup_rank.tiktoken", FIX "dup_rank.tiktoken:4: ", "duplicate rank 1");
    check_bad(FIX "gap.tiktoken", FIX "gap.tiktoken:3: ", "rank 2 is missing");
    check_bad(FIX "no_such_file.tiktoken", FIX "no_such_file.tiktoken: ", "cannot open");

    // Written here: a rank that is not a number, a missing single byte, duplicate bytes.
    char path[] = "/tmp/ct_tok_bad_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        CHECK(0, "cannot create temp file");
        return;
    }
    fprintf(f, "YQ== 0\nYg== x1\n");
    fclose(f);
    char want[128];
    snprintf(want, sizeof want, "%s:2: ", path);
    check_bad(path, want, "bad rank");

    f = fopen(path, "w");
    for (int b = 0; b < 255; b++) {  // bytes 0..254 only
        char s[8];
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        snprintf(s, sizeof s, "%c%c==", b64[b >> 2], b64[(b & 3) << 4]);
        fprintf(f, "%s %d\n", s, b);
    }
    fprintf(f, "YQ== 255\n");  // "a" again, on line 256; it duplicates rank 97 (line 98)
    fclose(f);
    snprintf(want, sizeof want, "%s:256: ", path);
    check_bad(path, want, "duplicate those of rank 97 (line 98)");

    // A special token whose text holds a NUL byte (found by tests/fuzz/fuzz_tokenizer): it was
    // accepted whole but saved cut at the NUL, so the saved file named another token.
    static const char nul_special[] = "# specials\n#special <|x|>\0y 300\n";
    f = fopen(path, "w");
    fwrite(nul_special, 1, sizeof nul_special - 1, f);
    fclose(f);
    snprintf(want, sizeof want, "%s:2: ", path);
    check_bad(path, want, "NUL byte");
    unlink(path);
}

// Long runs: one piece of millions of bytes must neither hit PCRE2's default match limit
// (10M steps; a run of N spaces costs about N) nor take quadratic time in the merge.
static void test_long_runs(void) {
    ct_tokenizer *t = hand();
    if (!t) {
        CHECK(0, "no tokenizer");
        return;
    }
    long n = 10500000;
    char *s = malloc((size_t)n);
    const char fills[] = {' ', 'e', '\n'};
    int32_t *ids = NULL;
    long cap = 0;
    for (int k = 0; k < 3; k++) {
        n = k == 0 ? 10500000 : 1000000;  // only the space run needs to pass the 10M limit
        memset(s, fills[k], (size_t)n);
        s[n - 1] = 'x';
        long m = 0, dl = 0;
        long r = ct_tokenizer_encode(t, s, n, &ids, &m, &cap);
        CHECK(r > 0, "fill %d: encode failed: %s", k, ct_last_error());
        // 'e' run, one piece with the x: "ee" (265) pairs up from the left; n - 1 = 999999 e's ->
        // 499999 "ee" + one 'e', and "ex" is not a token -> + 'x'.
        if (k == 1) CHECK(m == 499999 + 2 && ids[0] == 265 && ids[m - 2] == 'e' && ids[m - 1] == 'x', "ee run: %ld ids", m);
        char *d = r > 0 ? ct_tokenizer_decode(t, ids, m, &dl) : NULL;
        CHECK(d && dl == n && !memcmp(d, s, (size_t)n), "fill %d: round trip", k);
        free(d);
    }
    free(ids);
    free(s);
    ct_tokenizer_free(t);
}

int main(void) {
    CT_RUN(test_hand_encodings);
    CT_RUN(test_pretokenize);
    CT_RUN(test_decode);
    CT_RUN(test_specials);
    CT_RUN(test_llama3_layout);
    CT_RUN(test_bad_files);
    CT_RUN(test_long_runs);
    CT_TEST_EXIT();
}
