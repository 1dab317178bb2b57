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
        char path[1024];
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
    return ct_set_error("%s: made with %s, but %s with %s: the split mixes data of two tokenizers; prepare it again "
                        "with one",
                        s->path, b, l->shards[first].path, a);
}

static ct_status open_shards(ct_loader *l) {
    struct stat st;
    if (stat(l->source, &st) != 0) return ct_set_error("%s: dataset not found", l->source);
    char **names = NULL;
    int n;
    if (S_ISDIR(st.st_mode)) {
        n = list_shards(l->source, l->split, &names);
        if (n < 0) return ct_set_error("%s: cannot read folder", l->source);
        if (n == 0) {
            free(names);
            // The validation split is made by `data prepare`; say how, rather than only what is missing.
            if (!strcmp(l->split, "val"))
                return ct_set_error("%s: no val shards (val_*.bin or *_val_*.bin) in folder; make them with `ctitan data "
                                    "prepare ... --val-docs N` (the last N documents) or --val-fraction F, or give "
                                    "validation.dataset, or set validation.enable false",
                                    l->source);
            return ct_set_error("%s: no %s shards (%s_*.bin or *_%s_*.bin) in folder", l->source, l->split, l->split, l->split);
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

uint32_t ct_loader_peek_vocab(const char *source, const char *split) {
    struct stat st;
    if (!source || !strcmp(source, "synthetic") || stat(source, &st) != 0) return 0;
    char **names = NULL;
    int n = 0;
    if (S_ISDIR(st.st_mode)) {
        n = list_shards(source, split, &names);
        if (n <= 0) {
            free(names);
            return 0;
        }
    }
    const char *first = n > 0 ? names[0] : source;
    uint32_t vocab = 0;
    int fd = open(first, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    unsigned char h[28];
    // Only ctitan's own header names its vocabulary (bytes 24..27, little-endian).
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h &&
        !memcmp(h, CT_SHARD_MAGIC, 8))
        vocab = (uint32_t)h[24] | (uint32_t)h[25] << 8 | (uint32_t)h[26] << 16 | (uint32_t)h[27] << 24;
    if (fd >= 0) close(fd);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return vocab;
}

ct_shard_tok ct_loader_peek_tokenizer(const char *source, const char *split) {
    ct_shard_tok none = {0};
    struct stat st;
    if (!source || !strcmp(source, "synthetic") || stat(source, &st) != 0) return none;
    char **names = NULL;
    int n = 0;
    if (S_ISDIR(st.st_mode)) {
        n = list_shards(source, split, &names);
        if (n <= 0) {
            free(names);
            return none;
        }
    }
    // The header alone (ct_shard_open would scan every token): the fields ct_shard_open reads.
    const char *first = n > 0 ? names[0] : source;
    ct_shard_tok tok = none;
    int fd = open(first, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    unsigned char h[CT_SHARD_HEADER_BYTES];
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h &&
        !memcmp(h, CT_SHARD_MAGIC, 8) && h[8] >= 2 && (h[28] & 1)) {
        tok.present = 1;
        memcpy(&tok.bos, h + 32, 4);  // little-endian host (data/shard.c)
        memcpy(&tok.eos, h + 36, 4);
        memcpy(tok.hash, h + 40, CT_SHARD_TOK_HASH_BYTES);
    }
    if (fd >= 0) close(fd);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return tok;
}

ct_shard_tok ct_loader_tokenizer(const ct_loader *l) { return l->tok; }

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
        ct_set_error("%s: %llu tokens in the %s split, fewer than one sample (seq_len + 1 = %d)%s", l->source,
                     (unsigned long long)l->n_tokens, l->split, l->seq_len + 1,
                     strcmp(l->split, "val") ? ""
                                             : "; prepare a larger validation split (`ctitan data prepare --val-docs N` "
                                               "or a larger --val-fraction F)");
        ct_loader_free(l);
        return NULL;
    }
    l->n_windows = (l->n_tokens - 1) / (uint64_t)l->seq_len;
    if (!l->sequential) {
        if (l->n_windows > UINT32_MAX) {
            ct_set_error("%s: %llu windows per epoch; the shuffled order supports up to 2^32 (raise seq_len)", l->source,
                         (unsigned long long)l->n_windows);
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

void ct_loader_next_batch(ct_loader *l, int32_t *inputs, int32_t *targets) {
    const int T = l->seq_len;
    for (int b = 0; b < l->local_batch; b++) {
        // Index of this sequence in the global order, counted from the current state.
        uint64_t p = l->st.position + (uint64_t)l->dp_rank * (uint64_t)l->local_batch + (uint64_t)b;
        uint64_t epoch = l->st.epoch + p / l->n_windows;
        p %= l->n_windows;
        uint64_t w = p;
        if (!l->sequential) {
            if (l->perm_epoch != epoch) build_perm(l, epoch);  // at most once per epoch boundary
            w = l->perm[p];
        }
        copy_stream(l, w * (uint64_t)T, (uint64_t)T + 1, l->window);
        memcpy(inputs + (size_t)b * T, l->window, sizeof(int32_t) * (size_t)T);
        memcpy(targets + (size_t)b * T, l->window + 1, sizeof(int32_t) * (size_t)T);
    }
    uint64_t p = l->st.position + (uint64_t)l->global_batch;
    l->st.epoch += p / l->n_windows;
    l->st.position = p % l->n_windows;
}

ct_loader_state ct_loader_get_state(const ct_loader *l) { return l->st; }

ct_status ct_loader_set_state(ct_loader *l, ct_loader_state st) {
    if (st.position >= l->n_windows)
        return ct_set_error("%s: loader position %llu out of range (%llu windows per epoch)", l->source,
                            (unsigned long long)st.position, (unsigned long long)l->n_windows);
    l->st = st;
    return CT_OK;
}

void ct_loader_reset(ct_loader *l) { l->st = (ct_loader_state){0, 0}; }

uint64_t ct_loader_num_tokens(const ct_loader *l) { return l->n_tokens; }
uint64_t ct_loader_num_windows(const ct_loader *l) { return l->n_windows; }
int ct_loader_num_shards(const ct_loader *l) { return l->n_shards; }
int ct_loader_local_batch(const ct_loader *l) { return l->local_batch; }
