// The tokenizer as Hugging Face files (checkpoint/hf_tokenizer.h), read back by this test:
// tokenizer.json's vocab spells every token in GPT-2's byte-to-unicode alphabet (this test's
// own copy of the map) with its rank as id; every merge joins two tokens into a third, in rank
// order; a BPE that follows the merges as `tokenizers` does (ignore_merges: a piece that is a
// whole token is that token; else merge the adjacent pair listed first) encodes texts -- ASCII,
// accents, emoji, digits, newlines, runs of spaces -- exactly as ctitan's tokenizer does; the
// special tokens, the pattern, tokenizer_config.json and the copied rank file are as given; and
// a vocabulary without all 256 bytes is refused.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hf_tokenizer.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "test.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[8][160];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *texts[] = {
    "The quick brown fox jumps over the lazy dog. The dog didn't care; it's a lazy dog.\n",
    "Training a tokenizer: the most frequent pairs merge first, then the next, and so on.\n\n",
    "Numbers 12345 and 2024-12-01, prices $3.50, and    runs   of spaces.\t Tabs too.\n",
    "Caf\xc3\xa9 cr\xc3\xa8" "me br\xc3\xbbl\xc3\xa9" "e, na\xc3\xafve \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e and "
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x9a\x80!\n",
    "We'll see, they've said; I'm sure you're right, she'd agree.\r\nEnd of text.",
};
enum { N_TEXTS = sizeof texts / sizeof texts[0] };

// ---- byte-level alphabet (GPT-2's bytes_to_unicode), spelled as UTF-8 ---------------------------

static int printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

// Decodes a byte-level spelling back to bytes (out has room for strlen(s)); -1 on a bad char.
static long unspell(const char *s, unsigned char *out) {
    unsigned cp_of[256], next = 256;
    for (int b = 0; b < 256; b++) cp_of[b] = printable(b) ? (unsigned)b : next++;
    long n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned cp;
        if (*p < 0x80) cp = *p++;
        else if ((*p & 0xe0) == 0xc0 && p[1]) cp = ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu), p += 2;
        else return -1;
        int b = -1;
        for (int k = 0; k < 256 && b < 0; k++)
            if (cp_of[k] == cp) b = k;
        if (b < 0) return -1;
        out[n++] = (unsigned char)b;
    }
    return n;
}

// ---- the vocabulary as cli/cmd_convert.c builds it -----------------------------------------------

typedef struct {
    const char **token, *special[8];
    long *len;
    int32_t special_id[8];
    ct_hf_vocab v;
} view;

static void view_build(view *w, const ct_tokenizer *tok, const char *rank_file) {
    long n = ct_tokenizer_n_ranks(tok);
    w->token = calloc((size_t)n, sizeof *w->token);
    w->len = calloc((size_t)n, sizeof *w->len);
    for (int32_t id = 0; id < n; id++) w->token[id] = ct_tokenizer_token(tok, id, &w->len[id]);
    int ns = 0;
    for (int32_t id = (int32_t)n; id < ct_tokenizer_vocab_size(tok) && ns < 8; id++) {
        long len;
        const char *s = ct_tokenizer_token(tok, id, &len);
        if (s) w->special[ns] = s, w->special_id[ns++] = id;
    }
    w->v = (ct_hf_vocab){.n_tokens = n, .token = w->token, .token_len = w->len, .n_special = ns,
                         .special = w->special, .special_id = w->special_id, .bos = ct_tokenizer_bos(tok),
                         .eos = ct_tokenizer_eos(tok), .pattern = CT_TOKENIZER_PATTERN, .rank_file = rank_file};
}

// ---- a BPE driven by tokenizer.json's vocab and merges ------------------------------------------

typedef struct {
    const ct_tokenizer *tok;
    long n;              // tokens
    int32_t *prio;       // (n * n) merge priority of (left, right), -1 when no merge
    int32_t *joined;     // (n * n) the token a merge makes
    int32_t *ids;        // output
    long n_ids;
} hf_bpe;

static int32_t token_of(const ct_tokenizer *tok, long n, const unsigned char *s, long len) {
    for (int32_t id = 0; id < n; id++) {
        long l;
        const char *t = ct_tokenizer_token(tok, id, &l);
        if (l == len && !memcmp(t, s, (size_t)len)) return id;
    }
    return -1;
}

static int bpe_piece(void *ctx, const char *piece, long len) {
    hf_bpe *b = ctx;
    int32_t whole = token_of(b->tok, b->n, (const unsigned char *)piece, len);
    if (whole >= 0) {  // ignore_merges
        b->ids[b->n_ids++] = whole;
        return 0;
    }
    int32_t parts[512];
    long np = 0;
    for (long i = 0; i < len; i++) parts[np++] = token_of(b->tok, b->n, (const unsigned char *)piece + i, 1);
    for (;;) {
        long best = -1;
        for (long i = 0; i + 1 < np; i++) {
            int32_t p = b->prio[parts[i] * b->n + parts[i + 1]];
            if (p >= 0 && (best < 0 || p < b->prio[parts[best] * b->n + parts[best + 1]])) best = i;
        }
        if (best < 0) break;
        parts[best] = b->joined[parts[best] * b->n + parts[best + 1]];
        memmove(parts + best + 1, parts + best + 2, sizeof(int32_t) * (size_t)(np - best - 2));
        np--;
    }
    memcpy(b->ids + b->n_ids, parts, sizeof(int32_t) * (size_t)np);
    b->n_ids += np;
    return 0;
}

// ---- the test ---------------------------------------------------------------------------------

static void test_tokenizer_files(void) {
    long lens[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) lens[i] = (long)strlen(texts[i]);
    ct_tokenizer *trained = ct_tokenizer_train_texts(texts, lens, N_TEXTS, 420);
    CHECK(trained != NULL, "%s", ct_last_error());
    if (!trained) return;
    const char *rank_file = tmp_path("tok.tiktoken");
    CHECK(ct_tokenizer_save(trained, rank_file) == CT_OK, "%s", ct_last_error());
    ct_tokenizer_free(trained);
    ct_tokenizer *tok = ct_tokenizer_load(rank_file);
    const long n = ct_tokenizer_n_ranks(tok);
    view w;
    view_build(&w, tok, rank_file);
    const char *dir = tmp_path("");
    CHECK(ct_hf_write_tokenizer(dir, &w.v) == CT_OK, "%s", ct_last_error());

    ct_json *j = ct_json_read_file(tmp_path("tokenizer.json"), "tokenizer.json", 1u << 30);
    CHECK(j != NULL, "%s", ct_last_error());
    if (!j) return;
    const ct_json *model = ct_json_get(j, "model"), *vocab = ct_json_get(model, "vocab"),
                  *merges = ct_json_get(model, "merges"), *type = ct_json_get(model, "type"),
                  *ignore = ct_json_get(model, "ignore_merges");
    CHECK(type && !strcmp(type->string, "BPE") && ignore && ignore->boolean, "model type / ignore_merges");
    CHECK(vocab && vocab->type == CT_JSON_OBJECT && vocab->n == n, "vocab has %d entries, want %ld", vocab ? vocab->n : -1, n);
    unsigned char bytes[256];
    for (int i = 0; vocab && i < vocab->n; i++) {
        long len = unspell(vocab->keys[i], bytes), tl;
        int32_t id = (int32_t)vocab->items[i].number;
        const char *t = ct_tokenizer_token(tok, id, &tl);
        CHECK(len >= 0 && t && len == tl && !memcmp(bytes, t, (size_t)len), "vocab entry %d (%s)", i, vocab->keys[i]);
    }
    // Merges: "a b" with a, b and a+b tokens; listed in the rank order of a+b.
    hf_bpe b = {.tok = tok, .n = n};
    b.prio = malloc(sizeof(int32_t) * (size_t)(n * n));
    b.joined = malloc(sizeof(int32_t) * (size_t)(n * n));
    memset(b.prio, 0xff, sizeof(int32_t) * (size_t)(n * n));
    CHECK(merges && merges->type == CT_JSON_ARRAY && merges->n >= n - 256, "merges: %d for %ld tokens",
          merges ? merges->n : -1, n);
    int32_t last_rank = -1;
    for (int i = 0; merges && i < merges->n; i++) {
        const char *s = merges->items[i].string, *sp = strchr(s, ' ');
        CHECK(sp && !strchr(sp + 1, ' '), "merge %d '%s' is not 'a b'", i, s);
        if (!sp) break;
        char left[256];
        snprintf(left, sizeof left, "%.*s", (int)(sp - s), s);
        unsigned char lb[256], rb[256], both[512];
        long ll = unspell(left, lb), rl = unspell(sp + 1, rb);
        memcpy(both, lb, (size_t)ll);
        memcpy(both + ll, rb, (size_t)rl);
        int32_t a = token_of(tok, n, lb, ll), c = token_of(tok, n, rb, rl), ab = token_of(tok, n, both, ll + rl);
        CHECK(a >= 0 && c >= 0 && ab >= 0 && ab >= last_rank, "merge %d '%s': %d %d -> %d after %d", i, s, a, c, ab,
              last_rank);
        if (a < 0 || c < 0 || ab < 0) break;
        last_rank = ab;
        if (b.prio[a * n + c] < 0) b.prio[a * n + c] = i, b.joined[a * n + c] = ab;
    }
    // The merges encode as ctitan encodes.
    const char *more[] = {"An unseen sentence, with words like tokenization and 98765.", "  \n\n  x  ",
                          "\xf0\x9f\x98\x80 caf\xc3\xa9?"};
    for (int i = 0; i < N_TEXTS + 3; i++) {
        const char *text = i < N_TEXTS ? texts[i] : more[i - N_TEXTS];
        int32_t *ids = NULL;
        long count = 0, cap = 0;
        ct_tokenizer_encode(tok, text, (long)strlen(text), &ids, &count, &cap);
        int32_t mine[1024];
        b.ids = mine;
        b.n_ids = 0;
        ct_tokenizer_pretokenize(tok, text, (long)strlen(text), bpe_piece, &b);
        CHECK(b.n_ids == count && !memcmp(mine, ids, sizeof(int32_t) * (size_t)count), "text %d: %ld ids vs %ld", i,
              b.n_ids, count);
        free(ids);
    }
    free(b.prio);
    free(b.joined);

    const ct_json *added = ct_json_get(j, "added_tokens");
    CHECK(added && added->n == 2, "added tokens");
    for (int i = 0; added && i < added->n; i++) {
        const ct_json *id = ct_json_get(&added->items[i], "id"), *content = ct_json_get(&added->items[i], "content"),
                      *special = ct_json_get(&added->items[i], "special");
        long len;
        const char *t = ct_tokenizer_token(tok, (int32_t)id->number, &len);
        CHECK(t && !strcmp(content->string, t) && special->boolean && id->number >= n, "added token %d", i);
    }
    const ct_json *pre = ct_json_get(j, "pre_tokenizer"), *seq = ct_json_get(pre, "pretokenizers");
    const ct_json *regex = seq && seq->n > 0 ? ct_json_get(ct_json_get(&seq->items[0], "pattern"), "Regex") : NULL;
    CHECK(regex && !strcmp(regex->string, CT_TOKENIZER_PATTERN), "pattern");
    ct_json_free(j);

    j = ct_json_read_file(tmp_path("tokenizer_config.json"), "tokenizer_config.json", 1u << 20);
    const ct_json *cls = ct_json_get(j, "tokenizer_class"), *bos = ct_json_get(j, "bos_token"),
                  *eos = ct_json_get(j, "eos_token");
    CHECK(cls && !strcmp(cls->string, "PreTrainedTokenizerFast") && bos && !strcmp(bos->string, CT_TOKENIZER_BOS_TEXT) &&
              eos && !strcmp(eos->string, CT_TOKENIZER_EOS_TEXT),
          "tokenizer_config.json");
    ct_json_free(j);
    ct_tokenizer *copy = ct_tokenizer_load(tmp_path("original/tokenizer.model"));
    CHECK(copy && ct_tokenizer_vocab_size(copy) == ct_tokenizer_vocab_size(tok), "original/tokenizer.model");
    ct_tokenizer_free(copy);

    // Byte-level BPE needs every byte: replace byte 'A' (rank 65) by a two-byte token.
    const char *saved = w.token[65];
    long saved_len = w.len[65];
    w.token[65] = "AB";
    w.len[65] = 2;
    CHECK(ct_hf_write_tokenizer(tmp_path("bad"), &w.v) == CT_ERR && strstr(ct_last_error(), "byte 0x41"), "%s",
          ct_last_error());
    w.token[65] = saved;
    w.len[65] = saved_len;
    free(w.token);
    free(w.len);
    ct_tokenizer_free(tok);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_hf_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) ct_fatal("test", "mkdtemp failed");
    CT_RUN(test_tokenizer_files);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    CT_TEST_EXIT();
}
