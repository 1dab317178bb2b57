// Corpus readers: the format of a file from its first bytes, and the one interface over the
// readers (see corpus.h).
#include "data/corpus.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/json.h"
#include "data/corpus_internal.h"

static const uint8_t GZIP_MAGIC[2] = {0x1f, 0x8b};
static const uint8_t ZSTD_MAGIC[4] = {0x28, 0xb5, 0x2f, 0xfd};
static const char MEGATRON_MAGIC[9] = "MMIDIDX\0";  // 9 bytes with the terminating NUL

const char *ct_corpus_format_name(ct_corpus_format f) {
    static const char *n[] = {"text", "JSONL", "Parquet", "Megatron"};
    return f >= 0 && f < CT_CORPUS_N_FORMATS ? n[f] : "?";
}

const char *ct_corpus_codec_name(ct_corpus_codec c) { return c == CT_CODEC_GZIP ? "gzip" : c == CT_CODEC_ZSTD ? "zstd" : ""; }

bool ct_corpus_is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return false;
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// The first n bytes of a file (fewer if it is shorter): the count, or -1 (error set).
static long head_of(const char *path, uint8_t *buf, size_t n) {
    int fd;
    uint64_t size;
    if (ct_file_open_regular(path, "corpus file", 0, &fd, &size) != CT_OK) return -1;
    size_t k = size < n ? (size_t)size : n;
    ct_status st = ct_file_pread(fd, path, buf, k, 0);
    close(fd);
    return st == CT_OK ? (long)k : -1;
}

// PREFIX.idx for PREFIX.bin (into out); false when the name does not end in .bin.
static bool sibling(const char *path, const char *from, const char *to, char *out, size_t cap) {
    if (!ends_with(path, from)) return false;
    snprintf(out, cap, "%.*s%s", (int)(strlen(path) - strlen(from)), path, to);
    return true;
}

ct_corpus_sniff_result ct_corpus_sniff(const char *path) {
    enum { HEAD = 65536 };
    uint8_t *buf = ct_xmalloc(HEAD);
    long n = head_of(path, buf, HEAD);
    char other[4096];
    ct_corpus_sniff_result r;
    if (n < 0) r = CT_SNIFF_UNREADABLE;
    else if ((n >= 2 && !memcmp(buf, GZIP_MAGIC, 2)) || (n >= 4 && !memcmp(buf, ZSTD_MAGIC, 4))) r = CT_SNIFF_COMPRESSED;
    else if (n >= 4 && !memcmp(buf, "PAR1", 4)) r = CT_SNIFF_PARQUET;
    else if (n >= 9 && !memcmp(buf, MEGATRON_MAGIC, 9)) r = CT_SNIFF_MEGATRON_IDX;
    // An index by name with its .bin beside it: a Megatron pair (a bad index is refused as such).
    else if (sibling(path, ".idx", ".bin", other, sizeof other) && access(other, F_OK) == 0) r = CT_SNIFF_MEGATRON_IDX;
    else if (sibling(path, ".bin", ".idx", other, sizeof other) && access(other, F_OK) == 0) r = CT_SNIFF_MEGATRON_BIN;
    else r = memchr(buf, 0, (size_t)n) ? CT_SNIFF_BINARY : CT_SNIFF_TEXT;
    free(buf);
    return r;
}

// JSON Lines or plain text: by the name (less .gz / .zst) when it says, else by the first line.
static ct_corpus_format text_kind(const char *path, ct_lines *l, int *rc) {
    char name[4096];
    snprintf(name, sizeof name, "%s", path);
    const char *comp[] = {".gz", ".zst", ".zstd"};
    for (int i = 0; i < 3; i++)
        if (ends_with(name, comp[i])) name[strlen(name) - strlen(comp[i])] = 0;
    *rc = 0;
    if (ends_with(name, ".jsonl") || ends_with(name, ".ndjson") || ends_with(name, ".json")) return CT_CORPUS_JSONL;
    if (ends_with(name, ".txt")) return CT_CORPUS_TEXT;
    const char *line;
    size_t len;
    bool nl;
    uint64_t off;
    *rc = ct_lines_peek(l, &line, &len, &nl, &off);
    if (*rc != 1) return CT_CORPUS_TEXT;  // empty, or an error the caller reports
    *rc = 0;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
    if (i == len || line[i] != '{') return CT_CORPUS_TEXT;
    ct_json *j = ct_json_parse(line, len, path);
    bool object = j && j->type == CT_JSON_OBJECT;
    ct_json_free(j);
    return object ? CT_CORPUS_JSONL : CT_CORPUS_TEXT;
}

ct_corpus *ct_corpus_open(const char *path, const ct_corpus_opts *opts) {
    ct_corpus *c = ct_xcalloc(1, sizeof *c);
    c->path = ct_xstrdup(path);
    const char *field = opts && opts->text_field && *opts->text_field ? opts->text_field : "text";
    if (strlen(field) >= sizeof c->text_field) {
        ct_set_error("--text-field: a name of %zu bytes, too long", strlen(field));
        goto fail;
    }
    snprintf(c->text_field, sizeof c->text_field, "%s", field);
    c->vocab_size = opts ? opts->vocab_size : 0;

    char other[4096];
    uint8_t head[9] = {0};
    int fd;
    uint64_t size;
    if (ct_file_open_regular(path, "corpus file", 0, &fd, &size) != CT_OK) goto fail;
    size_t k = size < 9 ? (size_t)size : 9;
    if (ct_file_pread(fd, path, head, k, 0) != CT_OK) {
        close(fd);
        goto fail;
    }
    // Megatron: the index (by its magic, or by name with its .bin beside it), or the .bin with
    // its .idx beside it; a bad index is then refused as an index, not as a binary of no kind.
    bool idx = (k == 9 && !memcmp(head, MEGATRON_MAGIC, 9)) ||
               (sibling(path, ".idx", ".bin", other, sizeof other) && access(other, F_OK) == 0);
    if (idx || (sibling(path, ".bin", ".idx", other, sizeof other) && access(other, F_OK) == 0)) {
        close(fd);
        c->format = CT_CORPUS_MEGATRON;
        if (idx && !sibling(path, ".idx", ".bin", other, sizeof other)) {
            ct_set_error_at(
                CT_E_DATA, path,
                "%s: a Megatron index whose name does not end in .idx, so its .bin cannot be found; name it "
                "PREFIX.idx beside PREFIX.bin",
                path);
            goto fail;
        }
        char idx_path[4096];
        snprintf(idx_path, sizeof idx_path, "%s", idx ? path : other);
        if (idx) snprintf(other, sizeof other, "%.*s.bin", (int)(strlen(path) - 4), path);
        else snprintf(other, sizeof other, "%s", path);
        if (ct_corpus_megatron_open(c, idx_path, other) != CT_OK) goto fail_opened;
        return c;
    }
    if (k >= 4 && !memcmp(head, "PAR1", 4)) {
        c->format = CT_CORPUS_PARQUET;
        if (ct_corpus_parquet_open(c, fd, size) != CT_OK) goto fail_opened;
        return c;
    }
    if (k >= 2 && !memcmp(head, GZIP_MAGIC, 2)) c->codec = CT_CODEC_GZIP;
    else if (k >= 4 && !memcmp(head, ZSTD_MAGIC, 4)) c->codec = CT_CODEC_ZSTD;
    ct_cstream *s = ct_cstream_open(fd, path, c->codec);
    if (!s) goto fail;
    ct_lines l;
    ct_lines_init(&l, s, c->path, c->codec);
    int rc;
    c->format = text_kind(path, &l, &rc);
    if (rc < 0) {
        ct_lines_free(&l);
        goto fail;
    }
    if ((c->format == CT_CORPUS_JSONL ? ct_corpus_jsonl_open(c, &l) : ct_corpus_text_open(c, &l)) != CT_OK) goto fail_opened;
    return c;
fail_opened:
    c->ops = NULL;  // the reader cleaned up after itself
fail:
    free(c->path);
    free(c);
    return NULL;
}

int ct_corpus_next(ct_corpus *c, ct_corpus_doc *doc) {
    if (c->failed) return ct_set_error("%s: read after an error", c->path), -1;
    for (;;) {
        int rc = c->ops->next(c, doc);
        if (rc < 0) c->failed = true;
        if (rc <= 0) return rc;
        if (doc->text ? !ct_corpus_is_blank(doc->text, doc->len) : doc->n_ids > 0) return 1;
    }
}

ct_corpus_format ct_corpus_format_of(const ct_corpus *c) { return c->format; }
ct_corpus_codec ct_corpus_codec_of(const ct_corpus *c) { return c->codec; }
uint64_t ct_corpus_position(const ct_corpus *c) { return c->ops->position(c); }

void ct_corpus_close(ct_corpus *c) {
    if (!c) return;
    if (c->ops) c->ops->close(c);
    free(c->path);
    free(c);
}
