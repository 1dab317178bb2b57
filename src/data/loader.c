// Data loader (see loader.h for the sampling scheme).
#include "data/loader.h"

#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/memory.h"
#include "core/rng.h"
#include "data/loader_blend.h"
#include "data/shard.h"

// Nominal length of the synthetic stream: large enough that no run finishes an epoch.
#define CT_SYNTHETIC_TOKENS (1ull << 40)

struct ct_loader {
    char source[512], split[16];
    int seq_len, global_batch, dp_rank, dp_size, local_batch;
    uint64_t seed;
    uint32_t vocab_size;
    bool sequential, synthetic;
    uint64_t synth_key;       // synthetic token i = hash(synth_key, i) mod vocab
    uint64_t order_key;       // per-epoch permutation seed

    ct_shard *shards;         // (n_shards,)
    int n_shards;
    uint64_t *starts;         // (n_shards + 1,) stream offset of each shard's first token
    uint64_t n_tokens, n_windows;

    ct_shard_tok tok;         // the tokenizer the shards record (present 0: none does)
    uint32_t *perm;           // (n_windows,) window order of epoch perm_epoch; NULL when sequential
    uint64_t perm_epoch;
    int32_t *window;          // (T + 1,) scratch: one window, split into inputs and targets
    ct_loader_state st;

    // A blend (data/loader_blend.h): its datasets' loaders, and how many sequences each has given
    // to the first `cursor` sequences of the blend's order.
    ct_blend_spec *blend;
    ct_loader *parts[CT_BLEND_MAX];
    uint64_t drawn[CT_BLEND_MAX];
    uint64_t cursor;
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_split_file(const char *name, const char *split) {
    char own[64], llmc[64];
    snprintf(own, sizeof own, "%s_*.bin", split);    // ctitan: train_000.bin
    snprintf(llmc, sizeof llmc, "*_%s_*.bin", split);  // llm.c: fineweb_train_000001.bin
    return !fnmatch(own, name, 0) || !fnmatch(llmc, name, 0);
}

// Lists the shard files of a split in a folder, sorted by name. Returns the count (0 = none).
static int list_shards(const char *dir, const char *split, char ***out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 16;
    char **names = ct_xmalloc(sizeof(char *) * (size_t)cap);
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_split_file(e->d_name, split)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) names = realloc(names, sizeof(char *) * (size_t)(cap *= 2));
        if (!names) ct_fatal("loader", "out of memory");
        names[n++] = ct_xstrdup(path);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    *out = names;
    return n;
}

// Each open shard holds a file descriptor (shards are read, not mapped: data/shard.h), so a
// split of more shards than the soft limit on open files (often 1024) raises that limit
// towards the hard one; beyond it, the open that fails names its file.
static void ensure_fds(int n_shards) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = (rlim_t)n_shards + 256;  // room for everything else the process opens
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

// Every shard of a split that records a tokenizer records the same one (a shard that records
// none, written before shard version 2, cannot be checked and is let be).
static ct_status same_tokenizer(ct_loader *l, int i) {
    const ct_shard *s = &l->shards[i];
    if (!s->tok.present) return CT_OK;
    if (!l->tok.present) {  // the first shard that records one
        l->tok = s->tok;
        return CT_OK;
    }
    if (ct_shard_tok_same(&l->tok, &s->tok)) return CT_OK;
    int first = 0;
    while (!l->shards[first].tok.present) first++;
    char a[160], b[160];
    ct_shard_tok_describe(&l->tok, a, sizeof a);
    ct_shard_tok_describe(&s->tok, b, sizeof b);
    return ct_set_error_at(CT_E_DATA, s->path,
                           "%s: made with %s, but %s with %s: the split mixes data of two tokenizers; prepare it again "
                           "with one",
                           s->path, b, l->shards[first].path, a);
}

static ct_status open_shards(ct_loader *l) {
    struct stat st;
    if (stat(l->source, &st) != 0) return ct_set_error_at(CT_E_IO, l->source, "%s: dataset not found", l->source);
    char **names = NULL;
    int n;
    if (S_ISDIR(st.st_mode)) {
        // .current is resolved once: every shard is then opened in the one folder it named, so a
        // prepare that replaces the dataset meanwhile cannot mix two datasets (data/shard.h).
        char folder[2048];
        if (ct_shard_dataset_folder(l->source, folder, sizeof folder) != CT_OK)
            return ct_set_error_at(CT_E_DATA, l->source, "%s", ct_last_error());
        n = list_shards(folder, l->split, &names);
        if (n < 0) return ct_set_error_at(CT_E_IO, l->source, "%s: cannot read folder", folder);
        if (n == 0) {
            free(names);
            // The validation split is made by `data prepare`; say how, rather than only what is missing.
            if (!strcmp(l->split, "val"))
                return ct_set_error_at(
                    CT_E_DATA, l->source,
                    "%s: no val shards (val_*.bin or *_val_*.bin) in folder; make them with `ctitan data "
                    "prepare ... --val-docs N` (the last N documents) or --val-fraction F, or give "
                    "validation.dataset, or set validation.enable false",
                    l->source);
            return ct_set_error_at(CT_E_DATA, l->source, "%s: no %s shards (%s_*.bin or *_%s_*.bin) in folder",
                                   l->source, l->split, l->split, l->split);
        }
    } else {
        n = 1;
        names = ct_xmalloc(sizeof(char *));
        names[0] = ct_xstrdup(l->source);
    }
    ensure_fds(n);
    l->shards = ct_xcalloc((size_t)n, sizeof(ct_shard));
    l->starts = ct_xcalloc((size_t)n + 1, sizeof(uint64_t));
    ct_status rc = CT_OK;
    for (int i = 0; i < n; i++) {
        if (rc == CT_OK) {
            rc = ct_shard_open(&l->shards[i], names[i], l->vocab_size);
            if (rc == CT_OK) {
                l->n_shards = i + 1;
                l->starts[i + 1] = l->starts[i] + l->shards[i].n_tokens;
                rc = same_tokenizer(l, i);
            }
        }
        free(names[i]);
    }
    free(names);
    if (rc != CT_OK) return rc;
    l->n_tokens = l->starts[l->n_shards];
    return CT_OK;
}

// Permutation of the windows for one epoch: Fisher-Yates from a generator seeded by
// (seed, split, epoch), so any epoch can be rebuilt on its own after a restore.
static void build_perm(ct_loader *l, uint64_t epoch) {
    ct_rng r;
    ct_rng_seed(&r, ct_rng_u64(l->order_key, epoch));
    for (uint64_t i = 0; i < l->n_windows; i++) l->perm[i] = (uint32_t)i;
    for (uint64_t i = l->n_windows - 1; i > 0; i--) {
        uint64_t j = (uint64_t)(((unsigned __int128)ct_rng_next(&r) * (i + 1)) >> 64);  // in [0, i]
        uint32_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
    l->perm_epoch = epoch;
}

ct_status ct_loader_check_source(const char *source) {
    ct_blend_spec tmp;
    return ct_blend_is_blend(source) ? ct_blend_parse(source, &tmp) : CT_OK;
}

// The header of the split's first shard (a blend's first dataset standing for the blend: the
// loader checks that all agree), without opening the split; false when there is none to read.
static bool peek_header(const char *source, const char *split, unsigned char h[CT_SHARD_HEADER_BYTES]) {
    ct_blend_spec tmp;
    if (ct_blend_is_blend(source)) source = ct_blend_parse(source, &tmp) == CT_OK ? tmp.path[0] : NULL;
    struct stat st;
    if (!source || !strcmp(source, "synthetic") || stat(source, &st) != 0) return false;
    char **names = NULL;
    int n = 0;
    char folder[2048];
    if (S_ISDIR(st.st_mode) && (ct_shard_dataset_folder(source, folder, sizeof folder) != CT_OK ||
                                (n = list_shards(folder, split, &names)) <= 0)) {
        free(names);
        return false;
    }
    int fd = open(n > 0 ? names[0] : source, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              pread(fd, h, CT_SHARD_HEADER_BYTES, 0) == (ssize_t)CT_SHARD_HEADER_BYTES && !memcmp(h, CT_SHARD_MAGIC, 8);
    if (fd >= 0) close(fd);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return ok;
}

uint32_t ct_loader_peek_vocab(const char *source, const char *split) {
    unsigned char h[CT_SHARD_HEADER_BYTES];
    // Only ctitan's own header names its vocabulary (bytes 24..27, little-endian).
    if (!peek_header(source, split, h)) return 0;
    return (uint32_t)h[24] | (uint32_t)h[25] << 8 | (uint32_t)h[26] << 16 | (uint32_t)h[27] << 24;
}

// The header alone (ct_shard_open would scan every token): the fields ct_shard_open reads.
ct_shard_tok ct_loader_peek_tokenizer(const char *source, const char *split) {
    ct_shard_tok tok = {0};
    unsigned char h[CT_SHARD_HEADER_BYTES];
    if (peek_header(source, split, h) && h[8] >= 2 && (h[28] & 1)) {
        tok.present = 1;
        memcpy(&tok.bos, h + 32, 4);  // little-endian host (data/shard.c)
        memcpy(&tok.eos, h + 36, 4);
        memcpy(tok.hash, h + 40, CT_SHARD_TOK_HASH_BYTES);
    }
    return tok;
}

ct_shard_tok ct_loader_tokenizer(const ct_loader *l) { return l->tok; }

// A blend: each dataset opened as a loader of its own (it is read by sequence index, so its batch
// and data-parallel place do not matter); the blend's epoch is the sum of their windows, which
// only gives the position a range. The datasets must record one tokenizer.
static ct_loader *open_blend(ct_loader *l, const ct_loader_config *cfg) {
    l->blend = ct_xcalloc(1, sizeof *l->blend);
    if (ct_blend_parse(l->source, l->blend)) {
        ct_loader_free(l);
        return NULL;
    }
    for (int d = 0; d < l->blend->n; d++) {
        ct_loader_config pc = *cfg;
        pc.source = l->blend->path[d];
        pc.global_batch = 1, pc.dp_rank = 0, pc.dp_size = 1;
        if (!(l->parts[d] = ct_loader_open(&pc))) {
            char why[1024];
            snprintf(why, sizeof why, "%s", ct_last_error());
            ct_set_error("training.dataset blend, dataset %d: %s", d + 1, why);
            ct_loader_free(l);
            return NULL;
        }
        const ct_shard_tok *a = &l->parts[0]->tok, *b = &l->parts[d]->tok;
        if (a->present != b->present || (a->present && memcmp(a->hash, b->hash, CT_SHARD_TOK_HASH_BYTES))) {
            ct_set_error("training.dataset blend: %s and %s were made with different tokenizers", l->blend->path[0],
                         l->blend->path[d]);
            ct_loader_free(l);
            return NULL;
        }
        l->n_windows += l->parts[d]->n_windows;
        l->n_tokens += l->parts[d]->n_tokens;
    }
    l->tok = l->parts[0]->tok;
    return l;
}

ct_loader *ct_loader_open(const ct_loader_config *cfg) {
    if (cfg->seq_len < 1 || cfg->global_batch < 1 || cfg->dp_size < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= cfg->dp_size) {
        ct_set_error("data loader: bad configuration (seq_len %d, global batch %d, dp rank %d of %d)", cfg->seq_len,
                     cfg->global_batch, cfg->dp_rank, cfg->dp_size);
        return NULL;
    }
    if (cfg->global_batch % cfg->dp_size != 0) {
        ct_set_error("data loader: global batch %d sequences is not divisible by %d data-parallel ranks", cfg->global_batch,
                     cfg->dp_size);
        return NULL;
    }
    const char *split = cfg->split ? cfg->split : "train";
    if (strlen(split) >= 16 || strchr(split, '/')) {
        ct_set_error("data loader: bad split name '%s'", split);
        return NULL;
    }
    ct_loader *l = ct_xcalloc(1, sizeof *l);
    snprintf(l->source, sizeof l->source, "%s", cfg->source ? cfg->source : "synthetic");
    snprintf(l->split, sizeof l->split, "%s", split);
    l->seq_len = cfg->seq_len;
    l->global_batch = cfg->global_batch;
    l->dp_rank = cfg->dp_rank;
    l->dp_size = cfg->dp_size;
    l->local_batch = cfg->global_batch / cfg->dp_size;
    l->seed = cfg->seed;
    l->vocab_size = cfg->vocab_size;
    l->sequential = cfg->sequential;
    l->synthetic = !strcmp(l->source, "synthetic");
    l->perm_epoch = UINT64_MAX;
    if (ct_blend_is_blend(l->source)) return open_blend(l, cfg);
    char name[64];
    snprintf(name, sizeof name, "loader/order/%s", l->split);
    l->order_key = ct_rng_key(cfg->seed, name);
    snprintf(name, sizeof name, "loader/synthetic/%s", l->split);
    l->synth_key = ct_rng_key(cfg->seed, name);

    if (l->synthetic) {
        if (l->vocab_size == 0) {
            ct_set_error("data loader: the synthetic source needs a vocab size");
            free(l);
            return NULL;
        }
        l->n_tokens = CT_SYNTHETIC_TOKENS;
        l->sequential = true;  // tokens are already pseudo-random; no order to shuffle
    } else if (open_shards(l) != CT_OK) {
        ct_loader_free(l);
        return NULL;
    }
    if (l->n_tokens < (uint64_t)l->seq_len + 1) {
        ct_set_error_at(
            CT_E_DATA, l->source, "%s: %llu tokens in the %s split, fewer than one sample (seq_len + 1 = %d)%s",
            l->source, (unsigned long long)l->n_tokens, l->split, l->seq_len + 1,
            strcmp(l->split, "val") ? ""
                                    : "; prepare a larger validation split (`ctitan data prepare --val-docs N` "
                                      "or a larger --val-fraction F)");
        ct_loader_free(l);
        return NULL;
    }
    l->n_windows = (l->n_tokens - 1) / (uint64_t)l->seq_len;
    if (!l->sequential) {
        if (l->n_windows > UINT32_MAX) {
            ct_set_error_at(CT_E_DATA, l->source,
                            "%s: %llu windows per epoch; the shuffled order supports up to 2^32 (raise seq_len)",
                            l->source, (unsigned long long)l->n_windows);
            ct_loader_free(l);
            return NULL;
        }
        l->perm = ct_mem_alloc(CT_MEM_OTHER, sizeof(uint32_t) * l->n_windows);
        build_perm(l, 0);
    }
    l->window = ct_mem_alloc(CT_MEM_OTHER, sizeof(int32_t) * ((size_t)l->seq_len + 1));
    return l;
}

void ct_loader_free(ct_loader *l) {
    if (!l) return;
    for (int d = 0; l->blend && d < l->blend->n; d++) ct_loader_free(l->parts[d]);
    free(l->blend);
    for (int i = 0; i < l->n_shards; i++) ct_shard_close(&l->shards[i]);
    free(l->shards);
    free(l->starts);
    if (l->perm) ct_mem_free(l->perm);
    if (l->window) ct_mem_free(l->window);
    free(l);
}

// Copies stream tokens [off, off + n) into out, crossing shard boundaries as needed.
static void copy_stream(const ct_loader *l, uint64_t off, uint64_t n, int32_t *out) {
    if (l->synthetic) {
        for (uint64_t k = 0; k < n; k++) out[k] = (int32_t)(ct_rng_u64(l->synth_key, off + k) % l->vocab_size);
        return;
    }
    // Last shard whose start is <= off; empty shards share a start with their successor,
    // so "last" lands on the one that actually holds token `off`.
    int lo = 0, hi = l->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->starts[mid] <= off) lo = mid;
        else hi = mid - 1;
    }
    for (int k = lo; n > 0; k++) {
        uint64_t begin = off - l->starts[k];
        uint64_t avail = l->shards[k].n_tokens - begin;
        uint64_t take = n < avail ? n : avail;
        ct_shard_copy(&l->shards[k], begin, take, out);
        out += take;
        off += take;
        n -= take;
    }
}

// Sequence p of epoch `epoch` of this loader's order (p < n_windows) into inputs, targets (T each).
static void read_sequence(ct_loader *l, uint64_t epoch, uint64_t p, int32_t *inputs, int32_t *targets) {
    const int T = l->seq_len;
    uint64_t w = p;
    if (!l->sequential) {
        if (l->perm_epoch != epoch) build_perm(l, epoch);  // at most once per epoch boundary
        w = l->perm[p];
    }
    copy_stream(l, w * (uint64_t)T, (uint64_t)T + 1, l->window);
    memcpy(inputs, l->window, sizeof(int32_t) * (size_t)T);
    memcpy(targets, l->window + 1, sizeof(int32_t) * (size_t)T);
}

// A blend's sequences n0 .. n0 + B - 1: the rule picks each one's dataset (every rank walks the
// whole global batch, so all agree), this rank reads its own B / dp of them.
static void blend_next_batch(ct_loader *l, int32_t *inputs, int32_t *targets) {
    const int T = l->seq_len;
    uint64_t mine = (uint64_t)l->dp_rank * (uint64_t)l->local_batch;
    for (uint64_t s = 0; s < (uint64_t)l->global_batch; s++) {
        int d = ct_blend_next(l->blend, l->cursor + s, l->drawn);
        if (s < mine || s >= mine + (uint64_t)l->local_batch) continue;
        ct_loader *part = l->parts[d];
        uint64_t k = l->drawn[d] - 1;  // this dataset's k-th sequence
        size_t at = (size_t)(s - mine) * (size_t)T;
        read_sequence(part, k / part->n_windows, k % part->n_windows, inputs + at, targets + at);
    }
    l->cursor += (uint64_t)l->global_batch;
}

void ct_loader_next_batch(ct_loader *l, int32_t *inputs, int32_t *targets) {
    const int T = l->seq_len;
    if (l->blend) {
        blend_next_batch(l, inputs, targets);
    } else {
        for (int b = 0; b < l->local_batch; b++) {
            // Index of this sequence in the global order, counted from the current state.
            uint64_t p = l->st.position + (uint64_t)l->dp_rank * (uint64_t)l->local_batch + (uint64_t)b;
            read_sequence(l, l->st.epoch + p / l->n_windows, p % l->n_windows, inputs + (size_t)b * T,
                          targets + (size_t)b * T);
        }
    }
    uint64_t p = l->st.position + (uint64_t)l->global_batch;
    l->st.epoch += p / l->n_windows;
    l->st.position = p % l->n_windows;
}

// The blend's counts after its first n sequences, by replaying the rule.
static void blend_seek(ct_loader *l, uint64_t n) {
    memset(l->drawn, 0, sizeof l->drawn);
    for (uint64_t i = 0; i < n; i++) ct_blend_next(l->blend, i, l->drawn);
    l->cursor = n;
}

int ct_loader_blend_parts(const ct_loader *l) { return l->blend ? l->blend->n : 0; }
const char *ct_loader_blend_path(const ct_loader *l, int d) { return l->blend->path[d]; }
double ct_loader_blend_weight(const ct_loader *l, int d) { return l->blend->w[d]; }
uint64_t ct_loader_blend_tokens(const ct_loader *l, int d) { return l->drawn[d] * (uint64_t)l->seq_len; }

ct_loader_state ct_loader_get_state(const ct_loader *l) { return l->st; }

ct_status ct_loader_set_state(ct_loader *l, ct_loader_state st) {
    if (st.position >= l->n_windows)
        return ct_set_error_at(CT_E_DATA, l->source, "%s: loader position %llu out of range (%llu windows per epoch)",
                               l->source, (unsigned long long)st.position, (unsigned long long)l->n_windows);
    l->st = st;
    if (l->blend) blend_seek(l, st.epoch * l->n_windows + st.position);
    return CT_OK;
}

void ct_loader_reset(ct_loader *l) {
    l->st = (ct_loader_state){0, 0};
    if (l->blend) blend_seek(l, 0);
}

uint64_t ct_loader_num_tokens(const ct_loader *l) { return l->n_tokens; }
uint64_t ct_loader_num_windows(const ct_loader *l) { return l->n_windows; }
int ct_loader_num_shards(const ct_loader *l) {
    int n = l->n_shards;
    for (int d = 0; l->blend && d < l->blend->n; d++) n += l->parts[d]->n_shards;
    return n;
}
int ct_loader_local_batch(const ct_loader *l) { return l->local_batch; }
