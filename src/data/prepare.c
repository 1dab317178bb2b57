// Corpus -> token shards (see prepare.h).
#include "data/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/fs.h"
#include "core/strlist.h"
#include "data/corpus.h"
#include "data/prepare_swap.h"
#include "data/prepare_workers.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#define CT_DEFAULT_SHARD_TOKENS 100000000ull

// ---- listing --------------------------------------------------------------------------------

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// A Megatron pair is read once however it was named (PREFIX, PREFIX.bin, PREFIX.idx, or the
// folder holding it): its index's path is listed, and only once.
static void push_once(ct_strlist *l, const char *path) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], path)) return;
    ct_strlist_push(l, path);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

void ct_data_free_list(char **list, int n) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
}

int ct_data_list_files(const char *const *inputs, int n_inputs, char ***out) {
    ct_strlist all = {0};
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        char pair[4096], other[4096];
        if (stat(inputs[i], &st) != 0) {
            // Megatron names a dataset by its prefix: PREFIX.idx + PREFIX.bin.
            snprintf(pair, sizeof pair, "%s.idx", inputs[i]);
            snprintf(other, sizeof other, "%s.bin", inputs[i]);
            if (exists(pair) && exists(other)) {
                push_once(&all, pair);
                continue;
            }
            ct_set_error("%s: cannot read: %s", inputs[i], strerror(errno));
            ct_data_free_list(all.v, all.n);
            return -1;
        }
        if (!S_ISDIR(st.st_mode)) {
            // A file given by name must be a regular one (a FIFO would block the read later);
            // the check, and its message, are ct_file_open_regular's.
            int fd;
            uint64_t size;
            if (ct_file_open_regular(inputs[i], "corpus file", 0, &fd, &size) != CT_OK) {
                ct_data_free_list(all.v, all.n);
                return -1;
            }
            close(fd);
            ct_corpus_sniff_result k = ct_corpus_sniff(inputs[i]);
            if (k == CT_SNIFF_MEGATRON_BIN) {
                snprintf(pair, sizeof pair, "%.*s.idx", (int)(strlen(inputs[i]) - 4), inputs[i]);
                push_once(&all, pair);
            } else if (k == CT_SNIFF_MEGATRON_IDX)
                push_once(&all, inputs[i]);
            else
                ct_strlist_push(&all, inputs[i]);
            continue;
        }
        DIR *d = opendir(inputs[i]);
        if (!d) {
            ct_set_error("%s: cannot open folder: %s", inputs[i], strerror(errno));
            ct_data_free_list(all.v, all.n);
            return -1;
        }
        ct_strlist here = {0};
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.' || ends_with(e->d_name, ".u8")) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", inputs[i], e->d_name);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            // (Opened through ct_file_open_regular: the entry may have become a FIFO since it was
            // listed; such an entry is kept, and refused with its reason when read.)
            ct_corpus_sniff_result k = ct_corpus_sniff(path);
            if (k == CT_SNIFF_MEGATRON_BIN || k == CT_SNIFF_BINARY) continue;
            ct_strlist_push(&here, path);
        }
        closedir(d);
        ct_strlist_sort(&here);
        for (int k = 0; k < here.n; k++) {
            if (ct_corpus_sniff(here.v[k]) == CT_SNIFF_MEGATRON_IDX) push_once(&all, here.v[k]);
            else ct_strlist_push(&all, here.v[k]);
        }
        ct_strlist_free(&here);
    }
    *out = all.v;
    return all.n;
}

// ---- documents ------------------------------------------------------------------------------

// Length of the line starting at p (without its '\n').
static size_t line_len(const char *p, const char *end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return (size_t)((nl ? nl : end) - p);
}

static bool is_separator(const char *line, size_t n) { return n == 1 && line[0] == '%'; }

bool ct_data_is_fortune_text(const char *text, size_t len) {
    for (const char *p = text, *end = text + len; p < end;) {
        size_t n = line_len(p, end);
        if (is_separator(p, n)) return true;
        p += n + 1;
    }
    return false;
}

static bool is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return false;
    return true;
}

int ct_data_for_each_document(const char *text, size_t len, ct_data_doc_fn fn, void *ctx) {
    if (!ct_data_is_fortune_text(text, len)) return is_blank(text, len) ? 0 : fn(text, len, ctx);
    const char *end = text + len, *doc = text;
    for (const char *p = text; p <= end;) {
        size_t n = p < end ? line_len(p, end) : 0;
        if (p == end || is_separator(p, n)) {
            // The document is everything between separators, its last newline included.
            size_t dlen = (size_t)(p - doc);
            if (!is_blank(doc, dlen)) {
                int rc = fn(doc, dlen, ctx);
                if (rc) return rc;
            }
            if (p == end) break;
            doc = p + n + (p + n < end);  // after the separator line
        }
        p += n + 1;
        if (p > end) p = end;
    }
    return 0;
}

// ---- shard output ---------------------------------------------------------------------------

typedef struct {
    const char *out_dir, *name;  // "train" | "val"
    uint32_t vocab;
    const ct_shard_tok *tok;     // recorded in every shard's header
    uint64_t shard_tokens;
    ct_shard_writer *w;
    int shards;
    uint64_t tokens;
} split_out;

static ct_status split_append(split_out *s, const int32_t *ids, uint64_t n) {
    while (n > 0) {
        if (!s->w) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s_%03d.bin", s->out_dir, s->name, s->shards);
            if (!(s->w = ct_shard_writer_open(path, s->vocab))) return CT_ERR;
            ct_shard_writer_set_tokenizer(s->w, s->tok);
            s->shards++;
        }
        uint64_t room = s->shard_tokens - ct_shard_writer_count(s->w);
        uint64_t k = n < room ? n : room;
        if (ct_shard_writer_append(s->w, ids, k) != CT_OK) return CT_ERR;
        ids += k;
        n -= k;
        s->tokens += k;
        if (ct_shard_writer_count(s->w) == s->shard_tokens) {
            ct_shard_writer *w = s->w;
            s->w = NULL;
            if (ct_shard_writer_close(w) != CT_OK) return CT_ERR;
        }
    }
    return CT_OK;
}

static ct_status split_close(split_out *s) {
    if (!s->w) return CT_OK;
    ct_shard_writer *w = s->w;
    s->w = NULL;
    return ct_shard_writer_close(w);
}

// ---- progress -------------------------------------------------------------------------------

typedef struct {
    int mode;  // 0 none, 1 plain lines, 2 bar
    uint64_t total, done;
    int last;  // last percentage (bar) or tenth (plain) reported
    double t0; // when reading began (CLOCK_MONOTONIC seconds)
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "12.3 MB/s, ETA 1m05s" (input bytes per second so far, and the rest at that rate).
static void rate_eta(const progress *p, char *buf, size_t n) {
    double dt = now_s() - p->t0, rate = dt > 0 ? (double)p->done / dt : 0;
    if (rate <= 0) {
        snprintf(buf, n, "-- MB/s, ETA --");
        return;
    }
    double eta = (double)(p->total > p->done ? p->total - p->done : 0) / rate;
    long s = (long)(eta + 0.5);
    if (s >= 3600) snprintf(buf, n, "%.1f MB/s, ETA %ldh%02ldm", rate / 1e6, s / 3600, s / 60 % 60);
    else snprintf(buf, n, "%.1f MB/s, ETA %ldm%02lds", rate / 1e6, s / 60, s % 60);
}

static void progress_update(progress *p, uint64_t tokens, const char *file) {
    if (!p->mode) return;
    int pct = p->total ? (int)(100 * p->done / p->total) : 100;
    char re[64];
    if (p->mode == 2) {
        if (pct == p->last) return;
        p->last = pct;
        char bar[31];
        int fill = pct * 30 / 100;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        rate_eta(p, re, sizeof re);
        fprintf(stderr, "\rprepare [%s] %3d%%  %.1f/%.1f MB  %s  %llu tokens", bar, pct, p->done / 1e6, p->total / 1e6,
                re, (unsigned long long)tokens);
        if (pct == 100) fputc('\n', stderr);
    } else {
        if (pct / 10 == p->last) return;
        p->last = pct / 10;
        rate_eta(p, re, sizeof re);
        fprintf(stderr, "prepare: %3d%%  %.1f/%.1f MB  %s  %llu tokens  (%s)\n", pct, p->done / 1e6, p->total / 1e6, re,
                (unsigned long long)tokens, file);
    }
    fflush(stderr);
}

// ---- the pipeline ---------------------------------------------------------------------------

typedef struct {
    uint32_t vocab;
    uint64_t doc_index;
    long val_every;      // k: document i goes to val when i % k == k - 1; 0 = no spread split
    uint64_t val_docs;   // > 0: the last val_docs documents go to val (moved there at the end)
    uint64_t *starts;    // (min(val_docs, docs),) train token offset where each of the last
    uint64_t n_starts;   //   val_docs documents began: document i at starts[i % val_docs]
    split_out out[2];
    ct_data_prepare_result *res;  // files / bytes counted by the reader, the rest by the writer
    progress *pr;
} prep_ctx;

// The writer's part of each document (called in file order): the validation split's choice and
// the shard it goes to. ids: the document's tokens, BOS / EOS included.
static int on_document(void *ctx, const int32_t *ids, uint64_t n) {
    prep_ctx *c = ctx;
    int which = c->val_every > 0 && (long)(c->doc_index % (uint64_t)c->val_every) == c->val_every - 1;
    if (c->val_docs) {
        if (c->n_starts < c->val_docs) {  // grows to val_docs entries, then wraps
            c->starts = realloc(c->starts, sizeof(uint64_t) * (size_t)(c->n_starts + 1));
            if (!c->starts) ct_fatal("data prepare", "out of memory");
            c->n_starts++;
        }
        c->starts[c->doc_index % c->val_docs] = c->out[0].tokens;
    }
    c->doc_index++;
    c->res->docs[which]++;
    return split_append(&c->out[which], ids, n) != CT_OK;
}

// The reader's count of each file, as it is opened.
static void on_file(void *ctx, const ct_corpus *cr, uint64_t size) {
    prep_ctx *c = ctx;
    c->res->files++;
    c->res->files_of[ct_corpus_format_of(cr)]++;
    c->res->bytes += size;
}

static void on_progress(void *ctx, uint64_t bytes_done, const char *file) {
    prep_ctx *c = ctx;
    c->pr->done = bytes_done;
    uint64_t tokens = c->out[0].tokens + c->out[1].tokens;
    progress_update(c->pr, tokens, file);
}

// Moves the train stream's tokens from position `cut` on into the (empty) validation split: the
// train shards past the cut are copied and deleted, the one the cut falls in is rewritten with
// its head only. Everything happens in the staging folder, through the shard reader and writer.
static ct_status move_tail_to_val(prep_ctx *c, const char *staging, uint64_t cut) {
    split_out *t = &c->out[0], *v = &c->out[1];
    uint64_t per = t->shard_tokens, k0 = cut / per, head = cut % per;
    enum { CHUNK = 1 << 20 };
    int32_t *buf = ct_xmalloc(sizeof(int32_t) * CHUNK);
    ct_status st = CT_OK;
    for (int k = (int)k0; k < t->shards && st == CT_OK; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/train_%03d.bin", staging, k);
        ct_shard sh;
        if ((st = ct_shard_open(&sh, path, 0)) != CT_OK) break;
        for (uint64_t x = (uint64_t)k == k0 ? head : 0; x < sh.n_tokens && st == CT_OK;) {
            uint64_t m = sh.n_tokens - x < CHUNK ? sh.n_tokens - x : CHUNK;
            ct_shard_copy(&sh, x, m, buf);
            st = split_append(v, buf, m);
            x += m;
        }
        // The shard read stays open (it reads by descriptor) while its name is rewritten.
        if (st == CT_OK && unlink(path) != 0) st = ct_set_error("%s: cannot remove: %s", path, strerror(errno));
        if (st == CT_OK && (uint64_t)k == k0 && head > 0) {
            ct_shard_writer *w = ct_shard_writer_open(path, c->vocab);
            if (!w) st = CT_ERR;
            else ct_shard_writer_set_tokenizer(w, t->tok);  // the rewritten head records it as the original did
            for (uint64_t x = 0; x < head && st == CT_OK;) {
                uint64_t m = head - x < CHUNK ? head - x : CHUNK;
                ct_shard_copy(&sh, x, m, buf);
                st = ct_shard_writer_append(w, buf, m);
                x += m;
            }
            if (w && ct_shard_writer_close(w) != CT_OK) st = CT_ERR;
        }
        ct_shard_close(&sh);
    }
    free(buf);
    t->tokens = cut;
    t->shards = (int)k0 + (head > 0);
    return st;
}

// The validation split's final form: the last val_docs documents, or, when the spread rule
// picked no document, the last ceil(F x tokens) tokens. CT_ERR when val_docs leaves no training.
static ct_status finish_val(prep_ctx *c, const ct_data_prepare_opts *o, const char *staging) {
    ct_data_prepare_result *r = c->res;
    uint64_t docs = r->docs[0] + r->docs[1], tokens = c->out[0].tokens;
    if (c->val_docs) {
        if (docs <= c->val_docs)
            return ct_set_error("--val-docs %llu: the corpus has %llu document%s, so none would be left to train on; give "
                                "fewer, or --val-fraction F (which takes the last tokens of a corpus of few documents)",
                                (unsigned long long)c->val_docs, (unsigned long long)docs, docs == 1 ? "" : "s");
        uint64_t cut = c->starts[(docs - c->val_docs) % c->val_docs];
        r->docs[0] = docs - c->val_docs;
        r->docs[1] = c->val_docs;
        r->val = CT_VAL_LAST_DOCS;
        return move_tail_to_val(c, staging, cut);
    }
    if (c->val_every == 0) return CT_OK;
    if (r->docs[1] > 0) {
        r->val = CT_VAL_SPREAD;
        return CT_OK;
    }
    uint64_t want = (uint64_t)ceil(o->val_fraction * (double)tokens);
    if (want == 0 || want >= tokens) return CT_OK;  // too small to split: no validation
    r->val = CT_VAL_LAST_TOKENS;
    return move_tail_to_val(c, staging, tokens - want);
}

ct_status ct_data_prepare(const ct_data_prepare_opts *o, ct_data_prepare_result *res) {
    memset(res, 0, sizeof *res);
    if (!(o->val_fraction >= 0 && o->val_fraction <= 0.5))
        return ct_set_error("--val-fraction %g outside [0, 0.5]", o->val_fraction);
    if (o->val_docs && o->val_fraction > 0)
        return ct_set_error("--val-docs and --val-fraction both given; the validation split is one or the other");
    if (o->val_docs > CT_PREPARE_MAX_VAL_DOCS)
        return ct_set_error("--val-docs %llu: more than %llu", (unsigned long long)o->val_docs,
                            (unsigned long long)CT_PREPARE_MAX_VAL_DOCS);
    if (o->n_inputs < 1) return ct_set_error("no input files");
    char **files;
    int n_files = ct_data_list_files(o->inputs, o->n_inputs, &files);
    if (n_files < 0) return CT_ERR;
    if (n_files == 0) {
        ct_data_free_list(files, 0);
        return ct_set_error("no corpus files in the inputs (%s%s)", o->inputs[0], o->n_inputs > 1 ? ", ..." : "");
    }
    ct_tokenizer *tok = ct_tokenizer_load(o->tokenizer_path);
    if (!tok) {
        ct_data_free_list(files, n_files);
        return CT_ERR;
    }
    long vocab = ct_tokenizer_vocab_size(tok);
    // Documents are separated by EOS; the shards record the tokenizer (data/shard.h).
    if (ct_tokenizer_eos(tok) < 0) {
        ct_tokenizer_free(tok);
        ct_data_free_list(files, n_files);
        return ct_set_error("%s: the tokenizer names no EOS token, which ends every document: give eos_token in the "
                            "tokenizer_config.json beside it",
                            o->tokenizer_path);
    }
    ct_shard_tok rec = {.present = 1, .bos = ct_tokenizer_bos(tok), .eos = ct_tokenizer_eos(tok)};
    if (ct_tokenizer_hash(tok, rec.hash) != CT_OK) {
        ct_tokenizer_free(tok);
        ct_data_free_list(files, n_files);
        return CT_ERR;
    }
    // The first folder of out_dir's path that does not exist yet: a failed prepare removes what
    // it created, from out_dir up to that one (only folders left empty).
    char created[4096] = "";
    for (size_t i = 1, n = strlen(o->out_dir); i <= n && !created[0]; i++)
        if (o->out_dir[i] == '/' || o->out_dir[i] == 0) {
            snprintf(created, sizeof created, "%.*s", (int)i, o->out_dir);
            if (access(created, F_OK) == 0) created[0] = 0;
        }
    // The new shards go to a staging folder inside out_dir, which becomes the dataset in one step
    // once every shard is complete (data/prepare_swap.h); a prepare that fails on the way -- a bad
    // input, a full disk, an empty corpus -- or is killed leaves the previous dataset as it was.
    ct_prep_swap swap = {.lock_fd = -1};
    ct_status st = ct_fs_make_dirs(o->out_dir);
    if (st == CT_OK) st = ct_prep_swap_begin(&swap, o->out_dir);
    const char *staging = swap.staging;
    prep_ctx c = {.vocab = (uint32_t)vocab, .res = res, .val_docs = o->val_docs};
    c.val_every = !o->val_docs && o->val_fraction > 0 ? (long)(1.0 / o->val_fraction + 0.5) : 0;
    for (int k = 0; k < 2; k++)
        c.out[k] = (split_out){.out_dir = staging, .name = k ? "val" : "train", .vocab = (uint32_t)vocab, .tok = &rec,
                               .shard_tokens = o->shard_tokens ? o->shard_tokens : CT_DEFAULT_SHARD_TOKENS};
    progress pr = {.mode = o->progress == 0 ? 0 : o->progress > 0 ? o->progress : (isatty(2) ? 2 : 1), .last = -1};
    for (int i = 0; i < n_files; i++) {
        struct stat sb;
        if (stat(files[i], &sb) == 0) pr.total += (uint64_t)sb.st_size;
    }
    c.pr = &pr;
    pr.t0 = now_s();
    ct_corpus_opts copts = {.text_field = o->text_field, .vocab_size = (uint32_t)vocab};
    ct_prep_pipeline pl = {.files = files, .n_files = n_files, .corpus = &copts, .tok = tok,
                           .add_bos = ct_tokenizer_add_bos(tok), .eos = ct_tokenizer_eos(tok),
                           .threads = o->threads > 0 ? o->threads : ct_prep_default_threads(), .ctx = &c,
                           .on_file = on_file, .emit = on_document, .on_progress = on_progress};
    if (st == CT_OK) st = ct_prep_run(&pl);
    // The train split is complete (closed) before its tail may move to validation.
    ct_status cs = split_close(&c.out[0]);
    if (st == CT_OK) st = cs;
    // A corpus of empty or blank files gives no shards: a dataset the loader would refuse, so
    // refuse it here rather than replace a good one with it.
    if (st == CT_OK && res->docs[0] + res->docs[1] == 0)
        st = ct_set_error("no documents in the inputs (%s%s: %llu file%s, every one empty or blank); nothing written",
                          o->inputs[0], o->n_inputs > 1 ? ", ..." : "", (unsigned long long)res->files,
                          res->files == 1 ? "" : "s");
    if (st == CT_OK) st = finish_val(&c, o, staging);
    cs = split_close(&c.out[1]);
    if (st == CT_OK) st = cs;
    for (int k = 0; k < 2; k++) {
        res->tokens[k] = c.out[k].tokens;
        res->shards[k] = c.out[k].shards;
    }
    int replaced = 0;
    if (st == CT_OK) st = ct_prep_swap_commit(&swap, &replaced);
    if (st == CT_OK && replaced && o->progress)
        fprintf(stderr, "prepare: replaced %d shards of an earlier run in %s\n", replaced, o->out_dir);
    ct_prep_swap_end(&swap);  // removes the staging folder unless it became the dataset
    if (st != CT_OK && created[0]) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->out_dir);
        for (char *slash; strlen(dir) >= strlen(created) && rmdir(dir) == 0 && (slash = strrchr(dir, '/'));) *slash = 0;
    }
    free(c.starts);
    ct_tokenizer_free(tok);
    ct_data_free_list(files, n_files);
    return st;
}
