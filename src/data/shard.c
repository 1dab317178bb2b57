// Token shard writer and reader (format in shard.h and docs/data_format.md).
// Tokens are stored in the host's byte order, which ctitan requires to be little-endian
// (x86-64, aarch64); header fields are encoded byte by byte so they are little-endian anyway.
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_check.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards assume a little-endian host");

int ct_shard_token_width(uint32_t vocab_size) { return vocab_size <= 65536u ? 2 : 4; }

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// ---- writing --------------------------------------------------------------------------------

void ct_shard_tok_describe(const ct_shard_tok *t, char *buf, size_t n) {
    if (!t->present) {
        snprintf(buf, n, "no tokenizer recorded");
        return;
    }
    char hex[2 * CT_SHARD_TOK_HASH_BYTES + 1];
    for (int i = 0; i < CT_SHARD_TOK_HASH_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", t->hash[i]);
    snprintf(buf, n, "tokenizer %s, bos %d, eos %d", hex, t->bos, t->eos);
}

int ct_shard_tok_same(const ct_shard_tok *a, const ct_shard_tok *b) {
    if (!a->present || !b->present || memcmp(a->hash, b->hash, CT_SHARD_TOK_HASH_BYTES)) return 0;
    if (a->bos >= 0 && b->bos >= 0 && a->bos != b->bos) return 0;
    return !(a->eos >= 0 && b->eos >= 0 && a->eos != b->eos);
}

struct ct_shard_writer {
    FILE *f;
    char path[512];
    uint32_t vocab_size;
    int width;
    uint64_t count;
    ct_shard_tok tok;
    unsigned char buf[1 << 16];  // conversion buffer: int32 ids -> u16/u32 in pieces
};

static void fill_header(unsigned char h[CT_SHARD_HEADER_BYTES], int width, uint64_t count, uint32_t vocab,
                        const ct_shard_tok *tok) {
    memset(h, 0, CT_SHARD_HEADER_BYTES);
    memcpy(h, CT_SHARD_MAGIC, 8);
    put_u32(h + 8, CT_SHARD_VERSION);
    put_u32(h + 12, (uint32_t)width);
    put_u64(h + 16, count);
    put_u32(h + 24, vocab);
    if (tok->present) {
        put_u32(h + 28, 1);
        put_u32(h + 32, (uint32_t)tok->bos);
        put_u32(h + 36, (uint32_t)tok->eos);
        memcpy(h + 40, tok->hash, CT_SHARD_TOK_HASH_BYTES);
    }
}

void ct_shard_writer_set_tokenizer(ct_shard_writer *w, const ct_shard_tok *tok) { w->tok = *tok; }

ct_shard_writer *ct_shard_writer_open(const char *path, uint32_t vocab_size) {
    if (vocab_size == 0) {
        ct_set_error_at(CT_E_DATA, path, "%s: vocab size 0", path);
        return NULL;
    }
    FILE *f = ct_file_fopen_write(path, "token shard", CT_FILE_WRITE_TRUNC);
    if (!f) return NULL;
    ct_shard_writer *w = ct_xcalloc(1, sizeof *w);
    w->f = f;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->vocab_size = vocab_size;
    w->width = ct_shard_token_width(vocab_size);
    unsigned char h[CT_SHARD_HEADER_BYTES];
    fill_header(h, w->width, 0, vocab_size, &w->tok);  // count (and tokenizer) patched by close()
    if (fwrite(h, 1, sizeof h, f) != sizeof h) {
        ct_set_error_at(CT_E_IO, path, "%s: write failed: %s", path, strerror(errno));
        fclose(f);
        free(w);
        return NULL;
    }
    return w;
}

ct_status ct_shard_writer_append(ct_shard_writer *w, const int32_t *tokens, uint64_t n) {
    const uint64_t per = sizeof w->buf / (uint64_t)w->width;
    for (uint64_t done = 0; done < n;) {
        uint64_t k = n - done < per ? n - done : per;
        for (uint64_t i = 0; i < k; i++) {
            int32_t t = tokens[done + i];
            if (t < 0 || (uint32_t)t >= w->vocab_size)
                return ct_set_error_at(CT_E_DATA, w->path, "%s: token id %d out of range [0, %u)", w->path, t,
                                       w->vocab_size);
            if (w->width == 2) {
                uint16_t v = (uint16_t)t;
                memcpy(w->buf + 2 * i, &v, 2);
            } else {
                uint32_t v = (uint32_t)t;
                memcpy(w->buf + 4 * i, &v, 4);
            }
        }
        if (fwrite(w->buf, (size_t)w->width, k, w->f) != k)
            return ct_set_error_at(CT_E_IO, w->path, "%s: write failed: %s", w->path, strerror(errno));
        done += k;
        w->count += k;
    }
    return CT_OK;
}

uint64_t ct_shard_writer_count(const ct_shard_writer *w) { return w->count; }

ct_status ct_shard_writer_close(ct_shard_writer *w) {
    unsigned char h[CT_SHARD_HEADER_BYTES];
    fill_header(h, w->width, w->count, w->vocab_size, &w->tok);
    ct_status st = CT_OK;
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->f) != sizeof h)
        st = ct_set_error_at(CT_E_IO, w->path, "%s: cannot write header: %s", w->path, strerror(errno));
    if (fclose(w->f) != 0 && st == CT_OK)
        st = ct_set_error_at(CT_E_IO, w->path, "%s: close failed: %s", w->path, strerror(errno));
    free(w);
    return st;
}

ct_status ct_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size) {
    ct_shard_writer *w = ct_shard_writer_open(path, vocab_size);
    if (!w) return CT_ERR;
    if (ct_shard_writer_append(w, tokens, n) != CT_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        ct_shard_writer_close(w);
        return ct_set_error("%s", msg);
    }
    return ct_shard_writer_close(w);
}

ct_status ct_shard_write_llmc(const char *path, const int32_t *tokens, uint64_t n) {
    if (n > INT32_MAX)
        return ct_set_error_at(CT_E_DATA, path, "%s: %llu tokens do not fit an llm.c header", path,
                               (unsigned long long)n);
    FILE *f = ct_file_fopen_write(path, "token shard", CT_FILE_WRITE_TRUNC);
    if (!f) return CT_ERR;
    int32_t h[256] = {0};
    h[0] = CT_SHARD_LLMC_MAGIC;
    h[1] = 1;
    h[2] = (int32_t)n;
    int ok = fwrite(h, sizeof h, 1, f) == 1;
    for (uint64_t i = 0; ok && i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535) {
            fclose(f);
            return ct_set_error_at(CT_E_DATA, path, "%s: token id %d does not fit u16", path, tokens[i]);
        }
        uint16_t v = (uint16_t)tokens[i];
        ok = fwrite(&v, 2, 1, f) == 1;
    }
    if (fclose(f) != 0) ok = 0;
    return ok ? CT_OK : ct_set_error_at(CT_E_IO, path, "%s: write failed: %s", path, strerror(errno));
}

// ---- reading --------------------------------------------------------------------------------
// Shards are read with pread into the caller's buffers, not memory-mapped: a mapped file that is
// truncated while in use (a dataset rewritten under a running job, a full disk) raises SIGBUS on
// the next access and kills the process without naming anything; a short pread is an error
// that names the file. The fd stays open, so a shard replaced by rename keeps being read whole.

// Token ids are handed out as int32: an id at or above 2^31 would come back negative.
#define CT_SHARD_MAX_ID_LIMIT (1ull << 31)

// Tokens per read of the validation scan (16 MiB of u32).
#define CT_SHARD_SCAN_TOKENS (1u << 22)

// Largest of n tokens. A plain max-reduction the compiler vectorises, split over threads for a
// big piece (the scan reads every token once at open, so it runs at disk or memory bandwidth).
static uint32_t max_of(const void *buf, int width, uint64_t n) {
    if (width == 2) {
        const uint16_t *t = buf;
        uint16_t m = 0;
#pragma omp parallel for simd reduction(max : m) if (n >= (1u << 20))
        for (uint64_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
        return m;
    }
    const uint32_t *t = buf;
    uint32_t m = 0;
#pragma omp parallel for simd reduction(max : m) if (n >= (1u << 20))
    for (uint64_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}

// Every token below `limit`, or CT_ERR naming the first that is not.
static ct_status scan_tokens(const ct_shard *s, uint64_t limit) {
    const uint64_t chunk = s->n_tokens < CT_SHARD_SCAN_TOKENS ? s->n_tokens : CT_SHARD_SCAN_TOKENS;
    void *buf = malloc((size_t)(chunk ? chunk : 1) * (size_t)s->token_width);
    if (!buf) return ct_set_error_at(CT_E_MEMORY, s->path, "%s: out of memory for the token scan", s->path);
    ct_status st = CT_OK;
    for (uint64_t at = 0; at < s->n_tokens && st == CT_OK; at += chunk) {
        uint64_t n = s->n_tokens - at < chunk ? s->n_tokens - at : chunk;
        st = ct_file_pread(s->fd, s->path, buf, (size_t)(n * (uint64_t)s->token_width),
                           s->data_offset + at * (uint64_t)s->token_width);
        if (st == CT_OK && max_of(buf, s->token_width, n) >= limit) {
            uint64_t i = 0;
            uint32_t id;
            for (;; i++) {
                id = s->token_width == 2 ? ((const uint16_t *)buf)[i] : ((const uint32_t *)buf)[i];
                if (id >= limit) break;
            }
            st = ct_set_error_at(CT_E_DATA, s->path, "%s: token id %u at index %llu is >= vocab size %llu", s->path, id,
                              (unsigned long long)(at + i), (unsigned long long)limit);
        }
    }
    free(buf);
    return st;
}

static ct_status fail(ct_shard *s, ct_status st) {
    ct_shard_close(s);
    return st;
}

ct_status ct_shard_open(ct_shard *s, const char *path, uint32_t vocab_limit) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    uint64_t size;
    // (a FIFO is refused without blocking; core/file_check.h)
    if (ct_file_open_regular(path, "token shard", 0, &s->fd, &size) != CT_OK) return CT_ERR;
    if (size < 8)
        return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: truncated file: %llu bytes, smaller than any shard header",
                                       path, (unsigned long long)size));
    unsigned char p[CT_SHARD_LLMC_HEADER_BYTES];  // the larger of the two headers
    const size_t got = size < sizeof p ? (size_t)size : sizeof p;
    if (ct_file_pread(s->fd, path, p, got, 0) != CT_OK) return fail(s, CT_ERR);
    uint64_t header;
    if (!memcmp(p, CT_SHARD_MAGIC, 8)) {
        if (size < CT_SHARD_HEADER_BYTES)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: truncated file: %llu bytes, header needs %d", path,
                                           (unsigned long long)size, CT_SHARD_HEADER_BYTES));
        uint32_t version = get_u32(p + 8), width = get_u32(p + 12);
        if (version != 1 && version != CT_SHARD_VERSION)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: unsupported shard version %u (expected 1 or %d)", path,
                                           version, CT_SHARD_VERSION));
        s->version = version;
        if (width != 2 && width != 4)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: bad token width %u (expected 2 or 4)", path, width));
        s->format = CT_SHARD_CTITAN;
        s->token_width = (int)width;
        s->n_tokens = get_u64(p + 16);
        s->vocab_size = get_u32(p + 24);
        if (s->vocab_size == 0) return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: vocab size 0 in header", path));
        if (width == 2 && s->vocab_size > 65536)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: vocab size %u does not fit 2-byte tokens", path,
                                           s->vocab_size));
        if (version >= 2) {
            uint32_t flags = get_u32(p + 28);
            if (flags & ~1u)
                return fail(s, ct_set_error_at(CT_E_DATA, path,
                                               "%s: unknown header flags 0x%x (this ctitan knows bit 0, the tokenizer)",
                                               path, flags));
            if (flags & 1u) {
                s->tok.present = 1;
                s->tok.bos = (int32_t)get_u32(p + 32);
                s->tok.eos = (int32_t)get_u32(p + 36);
                memcpy(s->tok.hash, p + 40, CT_SHARD_TOK_HASH_BYTES);
                const char *which = s->tok.bos < -1 || s->tok.bos >= (int64_t)s->vocab_size ? "bos" : NULL;
                if (!which && (s->tok.eos < -1 || s->tok.eos >= (int64_t)s->vocab_size)) which = "eos";
                if (which)
                    return fail(
                        s, ct_set_error_at(CT_E_DATA, path, "%s: header %s id %d is outside the vocabulary of %u", path,
                                           which, which[0] == 'b' ? s->tok.bos : s->tok.eos, s->vocab_size));
            }
        }
        header = CT_SHARD_HEADER_BYTES;
    } else if ((int32_t)get_u32(p) == CT_SHARD_LLMC_MAGIC) {
        if (size < CT_SHARD_LLMC_HEADER_BYTES)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: truncated file: %llu bytes, llm.c header needs %d",
                                           path, (unsigned long long)size, CT_SHARD_LLMC_HEADER_BYTES));
        uint32_t version = get_u32(p + 4);
        if (version != 1)
            return fail(s, ct_set_error_at(CT_E_DATA, path, "%s: unsupported llm.c shard version %u (expected 1)", path,
                                           version));
        int32_t count = (int32_t)get_u32(p + 8);
        if (count < 0)
            return fail(s,
                        ct_set_error_at(CT_E_DATA, path, "%s: negative token count %d in llm.c header", path, count));
        s->format = CT_SHARD_LLMC;
        s->version = 1;
        s->token_width = 2;
        s->n_tokens = (uint64_t)count;
        s->vocab_size = 65536;  // llm.c headers carry no vocabulary size
        header = CT_SHARD_LLMC_HEADER_BYTES;
    } else {
        return fail(s,
                    ct_set_error_at(CT_E_DATA, path, "%s: wrong magic: not a ctitan (\"%s\") or llm.c (%d) token shard",
                                    path, CT_SHARD_MAGIC, CT_SHARD_LLMC_MAGIC));
    }
    // Compare in a way that cannot overflow for an absurd header count.
    const uint64_t data = size - header;
    if (s->n_tokens > data / (uint64_t)s->token_width || data != s->n_tokens * (uint64_t)s->token_width)
        return fail(
            s, ct_set_error_at(
                   CT_E_DATA, path,
                   "%s: truncated file: header says %llu tokens (%llu bytes of data), file has %llu bytes of data",
                   path, (unsigned long long)s->n_tokens,
                   (unsigned long long)s->n_tokens * (unsigned long long)s->token_width, (unsigned long long)data));
    s->data_offset = header;
    uint64_t limit = s->vocab_size;
    if (vocab_limit > 0 && vocab_limit < limit) limit = vocab_limit;
    if (limit > CT_SHARD_MAX_ID_LIMIT) limit = CT_SHARD_MAX_ID_LIMIT;
    if (s->n_tokens > 0 && scan_tokens(s, limit) != CT_OK) return fail(s, CT_ERR);
    return CT_OK;
}

void ct_shard_close(ct_shard *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

// A read that fails after the shard was validated at open: the file changed under the job. The
// readers have no error path (the training step does not allocate or fail), so this ends the
// job -- with the file named, where a mapping would have died of SIGBUS.
static void read_or_die(const ct_shard *s, void *buf, uint64_t n, uint64_t first) {
    if (ct_file_pread(s->fd, s->path, buf, (size_t)(n * (uint64_t)s->token_width),
                      s->data_offset + first * (uint64_t)s->token_width) != CT_OK)
        ct_fatal("data", "%s", ct_last_error());
}

uint32_t ct_shard_token(const ct_shard *s, uint64_t i) {
    uint32_t v = 0;  // little-endian host: a u16 lands in the low half
    read_or_die(s, &v, 1, i);
    return v;
}

void ct_shard_copy(const ct_shard *s, uint64_t start, uint64_t n, int32_t *out) {
    if (n == 0) return;
    if (s->token_width == 4) {  // ids < 2^31 (checked at open): the u32 bits are the int32
        read_or_die(s, out, n, start);
        return;
    }
    uint16_t buf[4096];  // 2-byte tokens, widened a piece at a time
    for (uint64_t done = 0; done < n;) {
        uint64_t k = n - done < 4096 ? n - done : 4096;
        read_or_die(s, buf, k, start + done);
        for (uint64_t j = 0; j < k; j++) out[done + j] = buf[j];
        done += k;
    }
}

// ---- a dataset folder -------------------------------------------------------------------------

ct_status ct_shard_dataset_folder(const char *dir, char *out, size_t n) {
    char link[4096], target[256];
    snprintf(link, sizeof link, "%s/" CT_DATASET_CURRENT, dir);
    ssize_t k = readlink(link, target, sizeof target - 1);
    if (k < 0 && (errno == ENOENT || errno == ENOTDIR)) {
        snprintf(out, n, "%s", dir);
        return CT_OK;
    }
    if (k < 0 || k == (ssize_t)sizeof target - 1)
        return ct_set_error("%s: not a link `data prepare` made (%s); move it away or prepare the dataset again", link,
                            k < 0 ? strerror(errno) : "target too long");
    target[k] = 0;
    // prepare links a name beside .current; anything else was not made by it.
    struct stat st;
    if (strchr(target, '/') || strncmp(target, CT_DATASET_SHARDS_PREFIX, strlen(CT_DATASET_SHARDS_PREFIX)) ||
        snprintf(out, n, "%s/%s", dir, target) >= (int)n || stat(out, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_set_error("%s: links to %s, not to a folder of shards beside it; prepare the dataset again", link,
                            target);
    return CT_OK;
}
