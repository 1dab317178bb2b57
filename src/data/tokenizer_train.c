// BPE training: learn a rank table from text.
//
// 1. Pre-tokenise every text with the encoder's own pattern and count unique pieces (a hash
//    map from piece bytes to count); merges never cross piece boundaries, so a piece that
//    occurs a thousand times is processed once with weight 1000.
// 2. Every unique piece of two or more bytes is a "word": a sequence of symbols (ranks),
//    initially its bytes. Pair counts (a, b) -> sum over words of count * occurrences, and for
//    each pair a posting list of the words it occurs in.
// 3. Repeat until the table is full: take the most frequent pair (ties: lowest a, then lowest
//    b; a max-heap with lazy deletion), give its concatenation the next rank, and rewrite only
//    the words on that pair's posting list, updating the counts of the pairs they lose and
//    gain. Nothing is recounted from scratch, so a merge costs what it touches.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_check.h"
#include "data/prepare.h"
#include "data/tokenizer_internal.h"

// ---- step 1: unique pieces with counts ---------------------------------------------------
typedef struct {
    ct_vocab pieces;  // unique pieces in first-seen order
    int64_t *count;   // (pieces.n)
    long count_cap;
    int failed;
} piece_counter;

static int count_piece(void *vctx, const char *piece, long len) {
    piece_counter *pc = vctx;
    int added;
    int32_t id = ct_vocab_intern(&pc->pieces, (const uint8_t *)piece, len, &added);
    if (id < 0) goto oom;
    if (added) {
        if (id >= pc->count_cap) {
            long cap = pc->count_cap ? 2 * pc->count_cap : 4096;
            int64_t *c = realloc(pc->count, (size_t)cap * sizeof *c);
            if (!c) goto oom;
            pc->count = c;
            pc->count_cap = cap;
        }
        pc->count[id] = 0;
    }
    pc->count[id]++;
    return 0;
oom:
    pc->failed = 1;
    ct_set_error("tokenizer train: out of memory counting pieces");
    return 1;
}

// ---- step 2/3: pairs, heap, merges -----------------------------------------------------------
typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *post;  // (post_n) words containing the pair at some time (may hold stale entries)
    int32_t post_n, post_cap;
    int32_t last_word;  // last word appended to post (skips immediate repeats)
    int32_t touched;    // merge number that last changed the count
} pair_t;

typedef struct {
    int64_t count;
    int32_t a, b, pair;
} heap_ent;

typedef struct {
    pair_t *pair;
    long n_pair, pair_cap;
    int32_t *map;  // (map_cap) pair index or -1, keyed by (a, b)
    long map_cap;
    heap_ent *heap;
    long heap_n, heap_cap;
    int32_t *touched;  // (n_touched) pairs changed by the current merge
    long n_touched, touched_cap;
    int failed;
} trainer;

static inline uint64_t pair_hash(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return h ^ h >> 29;
}

static int grow_map(trainer *t) {
    long cap = t->map_cap ? 2 * t->map_cap : 1 << 16;
    int32_t *m = malloc((size_t)cap * sizeof *m);
    if (!m) return -1;
    memset(m, 0xff, (size_t)cap * sizeof *m);
    for (long p = 0; p < t->n_pair; p++) {
        unsigned long i = pair_hash(t->pair[p].a, t->pair[p].b) & (unsigned long)(cap - 1);
        while (m[i] >= 0) i = (i + 1) & (unsigned long)(cap - 1);
        m[i] = (int32_t)p;
    }
    free(t->map);
    t->map = m;
    t->map_cap = cap;
    return 0;
}

static int32_t pair_index(trainer *t, int32_t a, int32_t b) {
    if (2 * (t->n_pair + 1) > t->map_cap && grow_map(t)) return -1;
    unsigned long mask = (unsigned long)t->map_cap - 1, i = pair_hash(a, b) & mask;
    for (; t->map[i] >= 0; i = (i + 1) & mask)
        if (t->pair[t->map[i]].a == a && t->pair[t->map[i]].b == b) return t->map[i];
    if (t->n_pair == t->pair_cap) {
        long cap = t->pair_cap ? 2 * t->pair_cap : 1 << 15;
        pair_t *p = realloc(t->pair, (size_t)cap * sizeof *p);
        if (!p) return -1;
        t->pair = p;
        t->pair_cap = cap;
    }
    int32_t p = (int32_t)t->n_pair++;
    t->pair[p] = (pair_t){a, b, 0, NULL, 0, 0, -1, -1};
    t->map[i] = p;
    return p;
}

// count(a, b) += delta for word w; with `post`, makes sure w is on the pair's posting list.
static void pair_add(trainer *t, int32_t a, int32_t b, int64_t delta, int32_t w, int post, int32_t merge_no) {
    int32_t p = pair_index(t, a, b);
    if (p < 0) goto oom;
    pair_t *q = &t->pair[p];
    q->count += delta;
    if (q->touched != merge_no) {
        q->touched = merge_no;
        if (t->n_touched == t->touched_cap) {
            long cap = t->touched_cap ? 2 * t->touched_cap : 4096;
            int32_t *tt = realloc(t->touched, (size_t)cap * sizeof *tt);
            if (!tt) goto oom;
            t->touched = tt;
            t->touched_cap = cap;
        }
        t->touched[t->n_touched++] = p;
    }
    if (post && q->last_word != w) {
        if (q->post_n == q->post_cap) {
            int32_t cap = q->post_cap ? 2 * q->post_cap : 4;
            int32_t *pp = realloc(q->post, (size_t)cap * sizeof *pp);
            if (!pp) goto oom;
            q->post = pp;
            q->post_cap = cap;
        }
        q->post[q->post_n++] = w;
        q->last_word = w;
    }
    return;
oom:
    t->failed = 1;
}

// Heap order: larger count first, then smaller a, then smaller b.
static inline int ent_before(const heap_ent *x, const heap_ent *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static void heap_push(trainer *t, int32_t p) {
    if (t->heap_n == t->heap_cap) {
        long cap = t->heap_cap ? 2 * t->heap_cap : 1 << 16;
        heap_ent *h = realloc(t->heap, (size_t)cap * sizeof *h);
        if (!h) {
            t->failed = 1;
            return;
        }
        t->heap = h;
        t->heap_cap = cap;
    }
    heap_ent e = {t->pair[p].count, t->pair[p].a, t->pair[p].b, p};
    long i = t->heap_n++;
    while (i > 0) {
        long up = (i - 1) / 2;
        if (!ent_before(&e, &t->heap[up])) break;
        t->heap[i] = t->heap[up];
        i = up;
    }
    t->heap[i] = e;
}

static heap_ent heap_pop(trainer *t) {
    heap_ent top = t->heap[0], last = t->heap[--t->heap_n];
    long i = 0, n = t->heap_n;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ent_before(&t->heap[c + 1], &t->heap[c])) c++;
        if (!ent_before(&t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = last;
    return top;
}

static void trainer_free(trainer *t) {
    for (long p = 0; p < t->n_pair; p++) free(t->pair[p].post);
    free(t->pair);
    free(t->map);
    free(t->heap);
    free(t->touched);
}

static ct_tokenizer *train_from_counts(const piece_counter *pc, long vocab_size) {
    long target = vocab_size - 2;  // ranks; the 2 specials follow
    ct_vocab v;
    ct_vocab_init(&v);
    trainer t = {0};
    int32_t *sym = NULL, *wstamp = NULL;
    long *woff = NULL;
    int32_t *wlen = NULL;
    int64_t *wcnt = NULL;
    uint8_t *buf = NULL;
    ct_tokenizer *tok = NULL;

    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        int added;
        if (ct_vocab_intern(&v, &c, 1, &added) < 0) goto oom;
    }
    // Words: unique pieces of >= 2 bytes (single bytes have no pairs to merge).
    long n_words = 0, n_sym = 0;
    for (long i = 0; i < pc->pieces.n; i++) {
        long len = pc->pieces.off[i + 1] - pc->pieces.off[i];
        if (len >= 2) n_words++, n_sym += len;
    }
    if (n_words > INT32_MAX) return ct_set_error("tokenizer train: too many unique pieces"), NULL;
    sym = malloc((size_t)(n_sym ? n_sym : 1) * sizeof *sym);  // (n_sym) all words' symbols
    woff = malloc((size_t)(n_words + 1) * sizeof *woff);      // (n_words) start in sym
    wlen = malloc((size_t)(n_words + 1) * sizeof *wlen);      // (n_words) current symbol count
    wcnt = malloc((size_t)(n_words + 1) * sizeof *wcnt);      // (n_words) occurrences of the piece
    wstamp = malloc((size_t)(n_words + 1) * sizeof *wstamp);  // (n_words) last merge that visited it
    if (!sym || !woff || !wlen || !wcnt || !wstamp) goto oom;
    long w = 0, o = 0;
    for (long i = 0; i < pc->pieces.n; i++) {
        long len;
        const uint8_t *s = ct_vocab_get(&pc->pieces, (int32_t)i, &len);
        if (len < 2) continue;
        woff[w] = o;
        wlen[w] = (int32_t)len;
        wcnt[w] = pc->count[i];
        wstamp[w] = -1;
        for (long k = 0; k < len; k++) sym[o + k] = s[k];  // rank of byte x is x
        for (long k = 0; k + 1 < len; k++) pair_add(&t, s[k], s[k + 1], wcnt[w], (int32_t)w, 1, -1);
        o += len;
        w++;
    }
    if (t.failed) goto oom;
    for (long p = 0; p < t.n_pair; p++) heap_push(&t, (int32_t)p);
    t.n_touched = 0;

    long buf_cap = 0;
    for (int32_t merge_no = 0; v.n < target; merge_no++) {
        // The best pair whose heap entry is current.
        int32_t P = -1;
        while (t.heap_n) {
            heap_ent e = heap_pop(&t);
            if (t.pair[e.pair].count == e.count && e.count > 0) {
                P = e.pair;
                break;
            }
        }
        if (P < 0) {
            ct_set_error("tokenizer train: the text runs out of pairs to merge at %ld ranks; vocab_size %ld needs %ld "
                         "(use more text or a smaller vocab_size)",
                         v.n, vocab_size, target);
            goto fail;
        }
        int32_t a = t.pair[P].a, b = t.pair[P].b;
        long la, lb;
        ct_vocab_get(&v, a, &la);
        ct_vocab_get(&v, b, &lb);
        if (la + lb > buf_cap) {
            free(buf);
            buf = malloc((size_t)(buf_cap = 2 * (la + lb)));
            if (!buf) goto oom;
        }
        // v.bytes may move when interning, so copy both halves out first.
        memcpy(buf, ct_vocab_get(&v, a, &la), (size_t)la);
        memcpy(buf + la, ct_vocab_get(&v, b, &lb), (size_t)lb);
        int added;
        int32_t c = ct_vocab_intern(&v, buf, la + lb, &added);  // an existing token is reused
        if (c < 0) goto oom;

        t.n_touched = 0;
        for (int32_t k = 0; k < t.pair[P].post_n; k++) {
            int32_t wi = t.pair[P].post[k];  // re-read: t.pair moves when pairs are added
            if (wstamp[wi] == merge_no) continue;
            wstamp[wi] = merge_no;
            int32_t *s = sym + woff[wi];
            int32_t L = wlen[wi], j = 0, has = 0;
            for (int32_t i = 0; i + 1 < L && !has; i++) has = s[i] == a && s[i + 1] == b;
            if (!has) continue;  // stale posting: an earlier merge consumed the pair here
            for (int32_t i = 0; i + 1 < L; i++) pair_add(&t, s[i], s[i + 1], -wcnt[wi], wi, 0, merge_no);
            for (int32_t i = 0; i < L;) {
                if (i + 1 < L && s[i] == a && s[i + 1] == b) s[j++] = c, i += 2;
                else s[j++] = s[i++];
            }
            wlen[wi] = j;
            // Pairs without c were in the word before, so the word is on their lists already.
            for (int32_t i = 0; i + 1 < j; i++)
                pair_add(&t, s[i], s[i + 1], wcnt[wi], wi, s[i] == c || s[i + 1] == c, merge_no);
        }
        for (long k = 0; k < t.n_touched; k++)
            if (t.pair[t.touched[k]].count > 0) heap_push(&t, t.touched[k]);
        if (t.failed) goto oom;
    }
    tok = ct_tokenizer_from_vocab(&v, NULL, 0);
    goto done;
oom:
    ct_set_error("tokenizer train: out of memory");
fail:
    ct_vocab_free(&v);
done:
    trainer_free(&t);
    free(sym);
    free(woff);
    free(wlen);
    free(wcnt);
    free(wstamp);
    free(buf);
    return tok;
}

static void counter_free(piece_counter *pc) {
    ct_vocab_free(&pc->pieces);
    free(pc->count);
}

static int check_vocab_size(long vocab_size) {
    if (vocab_size < 258 || vocab_size > INT32_MAX) {
        ct_set_error("tokenizer train: vocab_size %ld must be at least 258 (256 bytes + 2 special tokens)", vocab_size);
        return -1;
    }
    return 0;
}

ct_tokenizer *ct_tokenizer_train_texts(const char *const *texts, const long *lens, int n_texts, long vocab_size) {
    if (check_vocab_size(vocab_size)) return NULL;
    ct_pretok *pt = ct_pretok_new();
    if (!pt) return NULL;
    piece_counter pc = {0};
    ct_vocab_init(&pc.pieces);
    ct_tokenizer *tok = NULL;
    for (int i = 0; i < n_texts; i++)
        if (ct_pretok_split(pt, texts[i], lens[i], count_piece, &pc) != CT_OK || pc.failed) goto done;
    tok = train_from_counts(&pc, vocab_size);
done:
    ct_pretok_free(pt);
    counter_free(&pc);
    return tok;
}


ct_status ct_tokenizer_train(const char *const *inputs, int n_inputs, long vocab_size, const char *out_path) {
    if (check_vocab_size(vocab_size)) return CT_ERR;
    // The same files `data prepare` reads from the same inputs (data/prepare.h): a folder's text
    // files, without fortune's *.dat indexes and *.u8 duplicates, so the tokenizer is trained on
    // the corpus it will encode.
    char **files = NULL;
    long n_files = 0;
    ct_status st = CT_ERR;
    ct_pretok *pt = NULL;
    piece_counter pc = {0};
    ct_vocab_init(&pc.pieces);
    n_files = ct_data_list_files(inputs, n_inputs, &files);
    if (n_files < 0) {
        n_files = 0;
        goto done;
    }
    if (!n_files) {
        ct_set_error("tokenizer train: no input files");
        goto done;
    }
    if (!(pt = ct_pretok_new())) goto done;
    for (long i = 0; i < n_files; i++) {
        // Each file is held whole while it is split; 1 GiB, as for `tokenizer encode --input`.
        char *text;
        size_t len;
        if (ct_file_read_all(files[i], "tokenizer training file", 1ull << 30, &text, &len) != CT_OK) goto done;
        ct_status s = ct_pretok_split(pt, text, (long)len, count_piece, &pc);
        free(text);
        if (s != CT_OK || pc.failed) goto done;
    }
    ct_tokenizer *tok = train_from_counts(&pc, vocab_size);
    if (!tok) goto done;
    st = ct_tokenizer_save(tok, out_path);
    ct_tokenizer_free(tok);
done:
    ct_data_free_list(files, (int)n_files);
    ct_pretok_free(pt);
    counter_free(&pc);
    return st;
}
