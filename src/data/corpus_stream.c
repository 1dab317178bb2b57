// Byte streams for the text formats (corpus_internal.h): a file read front to back, through zlib
// (gzip, concatenated members too) or libzstd (any number of frames) when it is compressed, and
// the lines of such a stream, each checked to be UTF-8 without NUL before anyone sees it.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "data/corpus_internal.h"

#define CT_CSTREAM_IN_BYTES (256u << 10)

struct ct_cstream {
    int fd;
    char *path;
    ct_corpus_codec codec;
    unsigned char *in;      // compressed input: in[in_pos, in_len) not yet consumed
    size_t in_len, in_pos;
    uint64_t in_off;        // file offset just past in[in_len)
    bool in_eof;
    z_stream z;
    bool z_ready;
    ZSTD_DStream *zs;
    size_t z_last;          // zstd: the last return of ZSTD_decompressStream (0: a frame ended)
    uint64_t frame_at;      // zstd: compressed offset of the frame being decoded
    bool done;
};

// Compressed bytes consumed so far.
static uint64_t consumed(const ct_cstream *s) { return s->in_off - (s->in_len - s->in_pos); }

// Refills the input buffer once it is used up. 0 ok (possibly at EOF), -1 read error.
static int refill(ct_cstream *s) {
    if (s->in_pos < s->in_len || s->in_eof) return 0;
    ssize_t n;
    do n = read(s->fd, s->in, CT_CSTREAM_IN_BYTES);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return ct_set_error_at(CT_E_IO, s->path, "%s: read failed at byte %llu: %s", s->path,
                               (unsigned long long)s->in_off, strerror(errno)),
               -1;
    s->in_len = (size_t)n;
    s->in_pos = 0;
    s->in_off += (uint64_t)n;
    if (n == 0) s->in_eof = true;
    return 0;
}

ct_cstream *ct_cstream_open(int fd, const char *path, ct_corpus_codec codec) {
    ct_cstream *s = ct_xcalloc(1, sizeof *s);
    s->fd = fd;
    s->path = ct_xstrdup(path);
    s->codec = codec;
    if (codec != CT_CODEC_NONE) s->in = ct_xmalloc(CT_CSTREAM_IN_BYTES);
    if (codec == CT_CODEC_GZIP) {
        // 16 + 15: a gzip wrapper (header and CRC-32 / length trailer checked), 32 KiB window.
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
            ct_set_error_at(CT_E_IO, path, "%s: cannot start the gzip decoder (out of memory)", path);
            ct_cstream_close(s);
            return NULL;
        }
        s->z_ready = true;
    } else if (codec == CT_CODEC_ZSTD) {
        if (!(s->zs = ZSTD_createDStream()) || ZSTD_isError(ZSTD_initDStream(s->zs))) {
            ct_set_error_at(CT_E_IO, path, "%s: cannot start the zstd decoder (out of memory)", path);
            ct_cstream_close(s);
            return NULL;
        }
    }
    return s;
}

void ct_cstream_close(ct_cstream *s) {
    if (!s) return;
    if (s->z_ready) inflateEnd(&s->z);
    if (s->zs) ZSTD_freeDStream(s->zs);
    if (s->fd >= 0) close(s->fd);
    free(s->in);
    free(s->path);
    free(s);
}

uint64_t ct_cstream_in_pos(const ct_cstream *s) { return s->codec == CT_CODEC_NONE ? s->in_off : consumed(s); }

static long read_plain(ct_cstream *s, char *buf, size_t n) {
    ssize_t k;
    do k = read(s->fd, buf, n);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return ct_set_error_at(CT_E_IO, s->path, "%s: read failed at byte %llu: %s", s->path,
                               (unsigned long long)s->in_off, strerror(errno)),
               -1;
    s->in_off += (uint64_t)k;
    return (long)k;
}

// After a gzip member's end: another member may follow (what `cat a.gz b.gz` makes); anything
// else after the end is refused rather than dropped.
static int gzip_next_member(ct_cstream *s) {
    if (refill(s)) return -1;
    if (s->in_pos == s->in_len) {
        s->done = true;
        return 0;
    }
    if (s->in[s->in_pos] != 0x1f) {
        ct_set_error("%s: compressed byte %llu: data after the end of the gzip stream (not another gzip member); "
                     "recompress the file",
                     s->path, (unsigned long long)consumed(s));
        return -1;
    }
    inflateReset(&s->z);
    return 0;
}

static long read_gzip(ct_cstream *s, char *buf, size_t n) {
    size_t got = 0;
    while (got == 0 && !s->done) {
        if (refill(s)) return -1;
        bool no_input = s->in_pos == s->in_len;  // and none to come: refill reached the end
        s->z.next_in = s->in + s->in_pos;
        s->z.avail_in = (uInt)(s->in_len - s->in_pos);
        s->z.next_out = (Bytef *)buf;
        s->z.avail_out = (uInt)(n > (1u << 30) ? (1u << 30) : n);
        uInt out_before = s->z.avail_out;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        s->in_pos = s->in_len - s->z.avail_in;
        got = out_before - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            if (gzip_next_member(s)) return -1;
        } else if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_STREAM_ERROR) {
            ct_set_error("%s: compressed byte %llu: corrupt gzip data (%s)", s->path, (unsigned long long)consumed(s),
                         s->z.msg ? s->z.msg : "bad data");
            return -1;
        } else if (rc == Z_MEM_ERROR) {
            ct_set_error("%s: out of memory in the gzip decoder", s->path);
            return -1;
        } else if (got == 0 && no_input) {
            ct_set_error("%s: compressed byte %llu: the gzip stream is truncated (the file ends inside it)", s->path,
                         (unsigned long long)consumed(s));
            return -1;
        }
    }
    return (long)got;
}

static long read_zstd(ct_cstream *s, char *buf, size_t n) {
    size_t got = 0;
    while (got == 0 && !s->done) {
        if (refill(s)) return -1;
        bool no_input = s->in_pos == s->in_len;  // and none to come
        if (no_input && s->z_last == 0) {        // the end, between frames
            s->done = true;
            break;
        }
        if (s->z_last == 0) s->frame_at = consumed(s);  // a frame begins here
        ZSTD_inBuffer in = {s->in, s->in_len, s->in_pos};
        ZSTD_outBuffer out = {buf, n, 0};
        size_t rc = ZSTD_decompressStream(s->zs, &out, &in);
        s->in_pos = in.pos;
        if (ZSTD_isError(rc)) {
            ct_set_error("%s: compressed byte %llu: corrupt zstd data in the frame that starts at byte %llu (%s)", s->path,
                         (unsigned long long)consumed(s), (unsigned long long)s->frame_at, ZSTD_getErrorName(rc));
            return -1;
        }
        s->z_last = rc;
        got = out.pos;
        if (got == 0 && no_input && rc != 0) {
            ct_set_error("%s: compressed byte %llu: the zstd stream is truncated (the file ends inside a frame)", s->path,
                         (unsigned long long)consumed(s));
            return -1;
        }
    }
    return (long)got;
}

long ct_cstream_read(ct_cstream *s, char *buf, size_t n) {
    if (n == 0) return 0;
    switch (s->codec) {
    case CT_CODEC_GZIP: return read_gzip(s, buf, n);
    case CT_CODEC_ZSTD: return read_zstd(s, buf, n);
    default: return read_plain(s, buf, n);
    }
}

// ---- UTF-8 ------------------------------------------------------------------------------------

bool ct_utf8_check(const char *str, size_t n, size_t *bad) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        // ASCII runs, eight bytes at a time when none has its top bit set and none is NUL.
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) || ((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull)) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned c = s[i];
        if (c == 0) return *bad = i, false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            if (c == 0xe0) lo = 0xa0;       // no overlong 3-byte forms
            else if (c == 0xed) hi = 0x9f;  // no surrogates
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            if (c == 0xf0) lo = 0x90;       // no overlong 4-byte forms
            else if (c == 0xf4) hi = 0x8f;  // nothing past U+10FFFF
        } else
            return *bad = i, false;
        if (i + k >= n) return *bad = i, false;  // cut short by the end
        if (s[i + 1] < lo || s[i + 1] > hi) return *bad = i, false;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return *bad = i, false;
        i += k + 1;
    }
    return true;
}

// ---- lines ------------------------------------------------------------------------------------

void ct_lines_init(ct_lines *l, ct_cstream *s, const char *path, ct_corpus_codec codec) {
    *l = (ct_lines){.s = s, .path = path, .codec = codec};
}

void ct_lines_free(ct_lines *l) {
    free(l->buf);
    ct_cstream_close(l->s);
    l->buf = NULL;
    l->s = NULL;
}

const char *ct_lines_where(const ct_lines *l, uint64_t off, char *buf, size_t cap) {
    snprintf(buf, cap, "byte %llu%s", (unsigned long long)off, l->codec ? " of the decompressed data" : "");
    return buf;
}

static int bad_bytes(const ct_lines *l, const char *line, uint64_t off, size_t at) {
    char where[128];
    unsigned char c = (unsigned char)line[at];
    ct_lines_where(l, off + at, where, sizeof where);
    size_t k = strlen(where);
    snprintf(where + k, sizeof where - k, " (line %llu)", (unsigned long long)l->line_no);
    if (c == 0)
        ct_set_error("%s: %s: a NUL byte, so this is not text; binary input is not tokenised (give text, JSONL, "
                     "Parquet or a Megatron .bin/.idx pair)",
                     l->path, where);
    else
        ct_set_error("%s: %s: invalid UTF-8 (byte 0x%02x); text must be UTF-8 (convert it first, e.g. with iconv)",
                     l->path, where, c);
    return -1;
}

int ct_lines_next(ct_lines *l, const char **line, size_t *len, bool *nl, uint64_t *off) {
    size_t scanned = 0;  // bytes of buf[start, end) already searched for '\n'
    for (;;) {
        char *p = l->end > l->start + scanned ? memchr(l->buf + l->start + scanned, '\n', l->end - l->start - scanned) : NULL;
        if (p || (l->eof && l->end > l->start)) {
            size_t n = p ? (size_t)(p - (l->buf + l->start)) : l->end - l->start;
            *line = l->buf + l->start;
            *len = n;
            *nl = p != NULL;
            *off = l->buf_off + l->start;
            l->start += n + (p != NULL);
            l->line_no++;
            size_t bad;
            if (!ct_utf8_check(*line, n, &bad)) return bad_bytes(l, *line, *off, bad);
            return 1;
        }
        if (l->eof) return 0;
        scanned = l->end - l->start;
        if (l->start > 0) {  // keep only the unfinished line, at the front
            memmove(l->buf, l->buf + l->start, scanned);
            l->buf_off += l->start;
            l->end -= l->start;
            l->start = 0;
        }
        if (l->end == l->cap) {
            if (l->cap > CT_CORPUS_DOC_MAX) {
                char where[96];
                ct_set_error("%s: %s: a line of more than %llu bytes; split the input into shorter lines or documents",
                             l->path, ct_lines_where(l, l->buf_off, where, sizeof where),
                             (unsigned long long)CT_CORPUS_DOC_MAX);
                return -1;
            }
            l->cap = l->cap ? 2 * l->cap : (64u << 10);
            l->buf = realloc(l->buf, l->cap);
            if (!l->buf) ct_fatal("data prepare", "out of memory");
        }
        long got = ct_cstream_read(l->s, l->buf + l->end, l->cap - l->end);
        if (got < 0) return -1;
        if (got == 0) l->eof = true;
        l->end += (size_t)got;
    }
}

int ct_lines_peek(ct_lines *l, const char **line, size_t *len, bool *nl, uint64_t *off) {
    int rc = ct_lines_next(l, line, len, nl, off);
    if (rc == 1) {  // the line is still in the buffer, at its stream offset
        l->start = (size_t)(*off - l->buf_off);
        l->line_no--;
    }
    return rc;
}
