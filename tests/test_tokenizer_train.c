// Tokenizer training and encode/decode properties: a hand-worked tiny training run,
// determinism, round trips over random byte strings (invalid UTF-8, NULs, long runs) with a
// trained and a hand-made tokenizer, encode against a naive reference merge, and the two merge
// implementations (linear scan, heap) against each other.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "data/tokenizer_internal.h"
#include "test.h"

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {  // xorshift64*, local to the test
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

// A small English-like corpus from a fixed word list and a fixed seed.
static char *corpus(long *len) {
    static const char *words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "then",
                                  "there", "these", "other", "thing", "things", "thinking", "in", "into", "is",
                                  "it's", "don't", "héllo", "wörld", "42", "1234", "!", ",", ".", "\n", "  "};
    long cap = 20000, n = 0;
    char *s = malloc((size_t)cap);
    rng_state = 7;
    while (n < cap - 40) {
        const char *w = words[rnd() % (sizeof words / sizeof *words)];
        if (rnd() % 3) s[n++] = ' ';
        long l = (long)strlen(w);
        memcpy(s + n, w, (size_t)l);
        n += l;
    }
    *len = n;
    return s;
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static int token_is(const ct_tokenizer *t, int32_t id, const char *want) {
    long len;
    const char *s = ct_tokenizer_token(t, id, &len);
    return s && len == (long)strlen(want) && !memcmp(s, want, (size_t)len);
}

// "abab abab ab" -> pieces "abab", " abab", " ab" (once each).
// Pair counts: ab 2+2+1 = 5, ba 1+1 = 2, " a" 1+1 = 2 -> merge 1: (a, b) = rank 256 "ab".
// Words: [ab ab], [' ' ab ab], [' ' ab]. Pairs: (ab, ab) 1+1 = 2, (' ', ab) 1+1 = 2: a tie,
// broken by the lower left rank: ' ' = 32 < 256 -> merge 2: rank 257 " ab".
// Words: [ab ab], [" ab" ab], [" ab"]. Pairs: (256, 256) 1, (257, 256) 1: tie, 256 < 257 ->
// merge 3: rank 258 "abab". Then only (257, 256) = 1 is left -> merge 4: 259 " abab".
// After that no pairs remain.
static void test_train_by_hand(void) {
    const char *text = "abab abab ab";
    long len = (long)strlen(text);
    ct_tokenizer *t = ct_tokenizer_train_texts(&text, &len, 1, 261);  // 259 ranks + 2 specials
    CHECK(t != NULL, "train: %s", ct_last_error());
    if (!t) return;
    CHECK(ct_tokenizer_n_ranks(t) == 259, "ranks %ld", ct_tokenizer_n_ranks(t));
    CHECK(token_is(t, 256, "ab"), "256");
    CHECK(token_is(t, 257, " ab"), "257");
    CHECK(token_is(t, 258, "abab"), "258");
    CHECK(token_is(t, 65, "A") && token_is(t, 255, "\xff"), "byte ranks");
    long l0;
    const char *z = ct_tokenizer_token(t, 0, &l0);
    CHECK(z && l0 == 1 && z[0] == 0, "rank 0 is byte 0");
    CHECK(ct_tokenizer_bos(t) == 259 && ct_tokenizer_eos(t) == 260, "specials %d %d", ct_tokenizer_bos(t),
          ct_tokenizer_eos(t));
    ct_tokenizer_free(t);

    t = ct_tokenizer_train_texts(&text, &len, 1, 262);
    CHECK(t && token_is(t, 259, " abab"), "merge 4");
    ct_tokenizer_free(t);
    // A fifth merge does not exist.
    t = ct_tokenizer_train_texts(&text, &len, 1, 263);
    CHECK(t == NULL && strstr(ct_last_error(), "runs out of pairs"), "error: %s", ct_last_error());
    ct_tokenizer_free(t);
    t = ct_tokenizer_train_texts(&text, &len, 1, 257);
    CHECK(t == NULL && strstr(ct_last_error(), "at least 258"), "error: %s", ct_last_error());
    ct_tokenizer_free(t);
}

static void test_train_deterministic(void) {
    long len;
    char *text = corpus(&len);
    char p1[] = "/tmp/ct_tok_a_XXXXXX", p2[] = "/tmp/ct_tok_b_XXXXXX", in[] = "/tmp/ct_tok_in_XXXXXX";
    int f1 = mkstemp(p1), f2 = mkstemp(p2), fi = mkstemp(in);
    CHECK(f1 >= 0 && f2 >= 0 && fi >= 0, "temp files");
    CHECK(write(fi, text, (size_t)len) == len, "write corpus");
    close(f1);
    close(f2);
    close(fi);
    const char *inputs[] = {in};
    CHECK(ct_tokenizer_train(inputs, 1, 400, p1) == CT_OK, "train 1: %s", ct_last_error());
    CHECK(ct_tokenizer_train(inputs, 1, 400, p2) == CT_OK, "train 2: %s", ct_last_error());
    CHECK(files_equal(p1, p2), "two trainings differ");
    ct_tokenizer *t = ct_tokenizer_load(p1);
    CHECK(t && ct_tokenizer_n_ranks(t) == 398 && ct_tokenizer_vocab_size(t) == 400, "reload: %s", ct_last_error());
    // The in-memory trainer gives the same table as the file trainer.
    const char *texts[] = {text};
    ct_tokenizer *m = ct_tokenizer_train_texts(texts, &len, 1, 400);
    CHECK(m != NULL, "train_texts: %s", ct_last_error());
    for (int32_t id = 0; t && m && id < 398; id++) {
        long la, lb;
        const char *a = ct_tokenizer_token(t, id, &la), *b = ct_tokenizer_token(m, id, &lb);
        if (la != lb || memcmp(a, b, (size_t)la)) {
            CHECK(0, "rank %d differs", id);
            break;
        }
    }
    // A common word of the corpus became a single token.
    int32_t *ids = NULL;
    long n = 0, cap = 0;
    if (t) ct_tokenizer_encode(t, " the", 4, &ids, &n, &cap);
    CHECK(n == 1, "\" the\" is %ld tokens", n);
    const char *bad[] = {"/nonexistent/ct_tok_input"};
    CHECK(ct_tokenizer_train(bad, 1, 400, p1) == CT_ERR && strstr(ct_last_error(), "/nonexistent/ct_tok_input"),
          "missing input: %s", ct_last_error());
    free(ids);
    ct_tokenizer_free(t);
    ct_tokenizer_free(m);
    unlink(p1);
    unlink(p2);
    unlink(in);
    free(text);
}

// Random byte strings of several kinds (returns the length).
static long random_bytes(char *s, long max) {
    long n = rnd() % (uint32_t)max;
    int kind = (int)(rnd() % 6);
    static const char *snippets[] = {"the", " the", "é", "wörld", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xe2\x82",
                                     "\xed\xa0\x80", "\xc0\xaf", "\n", "\r\n", " ", "\t", "'s", "123", "\0"};
    for (long i = 0; i < n;) {
        if (kind == 0) {  // any byte
            s[i++] = (char)rnd();
        } else if (kind == 1) {  // ASCII text-like
            static const char cs[] = "abcdefghijklmnopqrstuvwxyz   ..,!?'\n0123";
            s[i++] = cs[rnd() % (sizeof cs - 1)];
        } else if (kind == 2) {  // long runs of one byte
            char c = "a \n\0\xff" "1!"[rnd() % 7];
            long r = 1 + rnd() % 3000;
            for (long k = 0; k < r && i < n; k++) s[i++] = c;
        } else {  // snippets: multi-byte, truncated and invalid sequences
            const char *p = snippets[rnd() % (sizeof snippets / sizeof *snippets)];
            long l = p[0] ? (long)strlen(p) : 1;
            for (long k = 0; k < l && i < n; k++) s[i++] = p[k];
        }
    }
    return n;
}

static void round_trips(const ct_tokenizer *t, int iters, long max) {
    char *s = malloc((size_t)max);
    int32_t *ids = NULL;
    long cap = 0;
    for (int it = 0; it < iters; it++) {
        long len = random_bytes(s, max), n = 0, dl = -1;
        long r = ct_tokenizer_encode(t, s, len, &ids, &n, &cap);
        CHECK(r >= 0 && r <= len, "encode: %ld ids for %ld bytes (%s)", r, len, ct_last_error());
        int ok = 1;
        for (long i = 0; i < n; i++) ok &= ids[i] >= 0 && ids[i] < ct_tokenizer_n_ranks(t);
        CHECK(ok, "encode produced a special or invalid id");
        char *d = ct_tokenizer_decode(t, ids, n, &dl);
        CHECK(d && dl == len && !memcmp(d, s, (size_t)len), "round trip failed at iteration %d (len %ld)", it, len);
        free(d);
        if (ct_test_case_failed) break;
    }
    free(ids);
    free(s);
}

static void test_round_trip_hand(void) {
    ct_tokenizer *t = ct_tokenizer_load("tests/fixtures/tokenizer/hand.tiktoken");
    CHECK(t != NULL, "load: %s", ct_last_error());
    if (t) round_trips(t, 300, 8000);
    ct_tokenizer_free(t);
}

static void test_round_trip_trained(void) {
    long len;
    char *text = corpus(&len);
    const char *texts[] = {text};
    ct_tokenizer *t = ct_tokenizer_train_texts(texts, &len, 1, 500);
    CHECK(t != NULL, "train: %s", ct_last_error());
    if (t) round_trips(t, 300, 8000);
    ct_tokenizer_free(t);
    free(text);
}

// ---- naive reference: the merge rule written as plainly as possible --------------------------
static long ref_rank(const ct_tokenizer *t, const char *s, long len) {
    for (int32_t id = 0; id < ct_tokenizer_n_ranks(t); id++) {
        long l;
        const char *b = ct_tokenizer_token(t, id, &l);
        if (l == len && !memcmp(b, s, (size_t)len)) return id;
    }
    return -1;
}

typedef struct {
    const ct_tokenizer *t;
    int32_t *out;
    long n;
} ref_ctx;

// parts: byte strings as (start, length); merge the lowest-ranked adjacent pair, leftmost first.
static int ref_piece(void *vctx, const char *p, long len) {
    ref_ctx *c = vctx;
    long *st = malloc((size_t)len * sizeof *st), *ln = malloc((size_t)len * sizeof *ln), m = len;
    for (long i = 0; i < len; i++) st[i] = i, ln[i] = 1;
    for (;;) {
        long best = -1, bi = -1;
        for (long i = 0; i + 1 < m; i++) {
            long r = ref_rank(c->t, p + st[i], ln[i] + ln[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r, bi = i;
        }
        if (bi < 0) break;
        ln[bi] += ln[bi + 1];
        for (long i = bi + 1; i + 1 < m; i++) st[i] = st[i + 1], ln[i] = ln[i + 1];
        m--;
    }
    for (long i = 0; i < m; i++) c->out[c->n++] = (int32_t)ref_rank(c->t, p + st[i], ln[i]);
    free(st);
    free(ln);
    return 0;
}

static void test_against_reference(void) {
    long len;
    char *text = corpus(&len);
    const char *texts[] = {text};
    ct_tokenizer *t = ct_tokenizer_train_texts(texts, &len, 1, 450);
    CHECK(t != NULL, "train: %s", ct_last_error());
    char s[300];
    int32_t want[300], *ids = NULL;
    long cap = 0;
    for (int it = 0; t && it < 200 && !ct_test_case_failed; it++) {
        // Slices of the corpus (many merges apply) and random strings.
        long n;
        if (it % 2) {
            n = rnd() % 300;
            long at = rnd() % (uint32_t)(len - n);
            memcpy(s, text + at, (size_t)n);
        } else {
            n = random_bytes(s, 300);
        }
        ref_ctx c = {t, want, 0};
        ct_tokenizer_pretokenize(t, s, n, ref_piece, &c);
        long got = 0;
        ct_tokenizer_encode(t, s, n, &ids, &got, &cap);
        int same = got == c.n;
        for (long i = 0; same && i < got; i++) same = ids[i] == want[i];
        CHECK(same, "iteration %d: encode gives %ld ids, reference %ld", it, got, c.n);
    }
    free(ids);
    ct_tokenizer_free(t);
    free(text);
}

// The heap merge (long pieces) and tiktoken's scan (short pieces) pick the same merges.
static void test_scan_equals_heap(void) {
    long len;
    char *text = corpus(&len);
    const char *texts[] = {text};
    ct_tokenizer *t = ct_tokenizer_train_texts(texts, &len, 1, 500);
    CHECK(t != NULL, "train: %s", ct_last_error());
    uint8_t p[2000];
    int32_t a[2000], b[2000];
    for (int it = 0; t && it < 200 && !ct_test_case_failed; it++) {
        long n = 2 + rnd() % 1998;
        if (it % 2) {  // letters that the corpus merged a lot, so many merges compete
            static const char cs[] = "thereinsgo ";
            for (long i = 0; i < n; i++) p[i] = (uint8_t)cs[rnd() % (sizeof cs - 1)];
        } else {
            long at = rnd() % (uint32_t)(len - n);
            memcpy(p, text + at, (size_t)n);
        }
        long na = ct_bpe_merge(&t->vocab, p, n, a, 1), nb = ct_bpe_merge(&t->vocab, p, n, b, 2);
        CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a), "iteration %d (n %ld): scan %ld vs heap %ld",
              it, n, na, nb);
    }
    ct_tokenizer_free(t);
    free(text);
}

// ---- naive reference trainer: recount every pair before every merge ---------------------------
typedef struct {
    char *piece[4096];
    long len[4096], count[4096];
    int n;
} piece_list;

static int add_piece(void *ctx, const char *p, long len) {
    piece_list *l = ctx;
    for (int i = 0; i < l->n; i++)
        if (l->len[i] == len && !memcmp(l->piece[i], p, (size_t)len)) return l->count[i]++, 0;
    if (l->n == 4096) return 1;
    l->piece[l->n] = malloc((size_t)len);
    memcpy(l->piece[l->n], p, (size_t)len);
    l->len[l->n] = len;
    l->count[l->n++] = 1;
    return 0;
}

static void test_train_against_naive(void) {
    enum { V = 420, R = V - 2 };
    long len;
    char *text = corpus(&len);
    const char *texts[] = {text};
    ct_tokenizer *t = ct_tokenizer_train_texts(texts, &len, 1, V);
    CHECK(t != NULL, "train: %s", ct_last_error());
    piece_list *pl = calloc(1, sizeof *pl);
    if (t) CHECK(ct_tokenizer_pretokenize(t, text, len, add_piece, pl) == CT_OK, "pieces");
    // Token table: bytes of each rank.
    static char tokb[R][256];
    static long tokl[R];
    int nt = 256;
    for (int b = 0; b < 256; b++) tokb[b][0] = (char)b, tokl[b] = 1;
    int *sym[4096], slen[4096];
    for (int w = 0; w < pl->n; w++) {
        sym[w] = malloc((size_t)pl->len[w] * sizeof(int));
        for (long k = 0; k < pl->len[w]; k++) sym[w][k] = (uint8_t)pl->piece[w][k];
        slen[w] = (int)pl->len[w];
    }
    static long cnt[R][R];
    while (t && nt < R) {
        memset(cnt, 0, sizeof cnt);
        for (int w = 0; w < pl->n; w++)
            for (int k = 0; k + 1 < slen[w]; k++) cnt[sym[w][k]][sym[w][k + 1]] += pl->count[w];
        long best = 0;
        int ba = -1, bb = -1;
        for (int a = 0; a < nt; a++)  // ascending (a, b) and strict '>' keep the lowest pair on ties
            for (int b = 0; b < nt; b++)
                if (cnt[a][b] > best) best = cnt[a][b], ba = a, bb = b;
        if (ba < 0) break;
        char cat[256];
        long cl = tokl[ba] + tokl[bb];
        memcpy(cat, tokb[ba], (size_t)tokl[ba]);
        memcpy(cat + tokl[ba], tokb[bb], (size_t)tokl[bb]);
        int c = -1;
        for (int i = 0; i < nt; i++)
            if (tokl[i] == cl && !memcmp(tokb[i], cat, (size_t)cl)) c = i;
        if (c < 0) {
            c = nt++;
            memcpy(tokb[c], cat, (size_t)cl);
            tokl[c] = cl;
        }
        for (int w = 0; w < pl->n; w++) {
            int j = 0;
            for (int k = 0; k < slen[w];) {
                if (k + 1 < slen[w] && sym[w][k] == ba && sym[w][k + 1] == bb) sym[w][j++] = c, k += 2;
                else sym[w][j++] = sym[w][k++];
            }
            slen[w] = j;
        }
    }
    CHECK(t && nt == R && ct_tokenizer_n_ranks(t) == R, "naive reached %d ranks", nt);
    for (int id = 256; t && id < nt; id++) {
        long l;
        const char *b = ct_tokenizer_token(t, id, &l);
        if (l != tokl[id] || memcmp(b, tokb[id], (size_t)l)) {
            CHECK(0, "rank %d: trainer '%.*s', naive '%.*s'", id, (int)l, b, (int)tokl[id], tokb[id]);
            break;
        }
    }
    for (int w = 0; w < pl->n; w++) free(sym[w]), free(pl->piece[w]);
    free(pl);
    ct_tokenizer_free(t);
    free(text);
}

int main(void) {
    CT_RUN(test_train_by_hand);
    CT_RUN(test_train_deterministic);
    CT_RUN(test_train_against_naive);
    CT_RUN(test_round_trip_hand);
    CT_RUN(test_round_trip_trained);
    CT_RUN(test_against_reference);
    CT_RUN(test_scan_equals_heap);
    CT_TEST_EXIT();
}
