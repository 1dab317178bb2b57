// TensorBoard event files: TFRecord framing, hand-encoded Event protocol buffers, CRC-32C.
// Format notes and the message definitions are in tensorboard.h.
#include "metrics/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/fs.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CT_HAVE_SSE42_CODE 1
#endif

// ---- CRC-32C --------------------------------------------------------------------------------
// Reflected (LSB-first) CRC with the Castagnoli polynomial 0x82F63B78: table[b] is the CRC
// register after shifting byte b through 8 steps, so one lookup replaces 8 shift/xor steps.
static uint32_t crc_table[256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t ct_crc32c_table(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_table_once, crc_table_build);
    const unsigned char *p = data;
    crc = ~crc;  // continuing from a finished CRC: undo its final xor (0 -> the initial 0xFFFFFFFF)
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#ifdef CT_HAVE_SSE42_CODE
// The SSE4.2 crc32 instruction computes exactly this reflected CRC-32C register update (without
// the initial / final inversion), 8 bytes per instruction. Compiled for SSE4.2 whatever -march
// says, and called only after the CPU was asked.
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    for (; n && ((uintptr_t)p & 7); n--) c = _mm_crc32_u8((uint32_t)c, *p++);  // align the 8-byte loads
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    for (; n; n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

bool ct_crc32c_sse42(uint32_t crc, const void *data, size_t n, uint32_t *out) {
#ifdef CT_HAVE_SSE42_CODE
    if (__builtin_cpu_supports("sse4.2")) {
        *out = crc32c_hw(crc, data, n);
        return true;
    }
#endif
    (void)crc, (void)data, (void)n, (void)out;
    return false;
}

uint32_t ct_crc32c(uint32_t crc, const void *data, size_t n) {
    uint32_t r;
    if (ct_crc32c_sse42(crc, data, n, &r)) return r;
    return ct_crc32c_table(crc, data, n);
}

uint32_t ct_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// ---- protocol buffer encoding ---------------------------------------------------------------
// Wire format: each field is a key varint (field_number << 3 | wire_type) then its payload:
// 0 = varint, 1 = 8 bytes little-endian, 2 = varint length + bytes, 5 = 4 bytes little-endian.
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

// A message being encoded: fixed capacity, enough for any Event this file writes (a tag is at
// most CT_TB_MAX_TAG bytes, the rest is under 64).
typedef struct {
    unsigned char b[CT_TB_MAX_TAG + 128];
    size_t n;
} pb_buf;

static void pb_varint(pb_buf *m, uint64_t v) {
    do {
        m->b[m->n++] = (unsigned char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
}
static void pb_key(pb_buf *m, unsigned field, unsigned wire) { pb_varint(m, (uint64_t)field << 3 | wire); }
static void pb_le(pb_buf *m, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) m->b[m->n++] = (unsigned char)(v >> (8 * i));
}
static void pb_double(pb_buf *m, unsigned field, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    pb_key(m, field, WIRE_FIXED64);
    pb_le(m, bits, 8);
}
static void pb_float(pb_buf *m, unsigned field, float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    pb_key(m, field, WIRE_FIXED32);
    pb_le(m, bits, 4);
}
static void pb_bytes(pb_buf *m, unsigned field, const void *p, size_t n) {
    pb_key(m, field, WIRE_LEN);
    pb_varint(m, n);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

// Event field numbers (event.proto) and the nested ones (summary.proto).
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1 };
enum { VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2 };

// Event{wall_time, step} -- every field written, in field order as protobuf serializes them
// (explicit zeros are valid; readers default absent fields to them anyway).
static void event_head(pb_buf *ev, double wall_time, int64_t step) {
    ev->n = 0;
    pb_double(ev, EVENT_WALL_TIME, wall_time);
    pb_key(ev, EVENT_STEP, WIRE_VARINT);
    pb_varint(ev, (uint64_t)step);  // int64: a negative step is its two's complement, 10 bytes
}

// ---- TFRecord framing -----------------------------------------------------------------------
static ct_status write_failed(ct_tb_writer *w) {
    w->failed = true;
    return ct_set_error("cannot write TensorBoard events %s: %s", w->path, strerror(errno ? errno : EIO));
}

// u64 length | masked crc(length) | data | masked crc(data), all little-endian.
static ct_status write_record(ct_tb_writer *w, const unsigned char *data, size_t n) {
    unsigned char head[12], tail[4];
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)n >> (8 * i));
    uint32_t hc = ct_crc32c_mask(ct_crc32c(0, head, 8)), dc = ct_crc32c_mask(ct_crc32c(0, data, n));
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i)), tail[i] = (unsigned char)(dc >> (8 * i));
    errno = 0;
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n || fwrite(tail, 1, 4, w->f) != 4)
        return write_failed(w);
    w->records++;
    return CT_OK;
}

// ---- the writer -----------------------------------------------------------------------------
double ct_tb_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The n of file names ".<pid>.<n>": distinct for each writer a process opens.
static atomic_uint tb_file_counter;

ct_status ct_tb_open(ct_tb_writer *w, const char *folder) {
    memset(w, 0, sizeof *w);
    if (!folder || !*folder) return ct_set_error("TensorBoard: no folder given for the event files");
    if (strlen(folder) > 1000) return ct_set_error("TensorBoard folder name is longer than 1000 bytes: %.60s...", folder);
    if (ct_fs_make_dirs(folder)) return ct_set_error("TensorBoard: %s", ct_last_error());
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) || !host[0]) snprintf(host, sizeof host, "localhost");
    host[64] = 0;  // HOST_NAME_MAX on Linux; keeps the path within its buffer
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    long long now = (long long)time(NULL);
    int fd = -1;
    // O_EXCL: an existing file is never appended to or truncated, whoever made it.
    for (int tries = 0; fd < 0 && tries < 1000; tries++) {
        unsigned n = atomic_fetch_add(&tb_file_counter, 1);
        snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.%u", folder, now, host, (long)getpid(), n);
        if (ct_file_open_write(w->path, "TensorBoard events file", CT_FILE_WRITE_EXCL | CT_FILE_WRITE_NOFOLLOW, &fd) &&
            errno != EEXIST)
            return CT_ERR;
    }
    if (fd < 0) return ct_set_error("cannot create TensorBoard events in %s: 1000 names taken", folder);
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        int e = errno;
        close(fd);
        return ct_set_error("cannot open TensorBoard events %s: %s", w->path, strerror(e));
    }
    pb_buf ev;
    event_head(&ev, ct_tb_wall_time(), 0);
    static const char version[] = "brain.Event:2";  // the version readers check for
    pb_bytes(&ev, EVENT_FILE_VERSION, version, sizeof version - 1);
    if (write_record(w, ev.b, ev.n) || ct_tb_flush(w)) {
        ct_status st = CT_ERR;  // keep write_record's message; close's would say less
        fclose(w->f);
        w->f = NULL;
        return st;
    }
    return CT_OK;
}

// Valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) without C0 / DEL.
static bool tag_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x20 || c == 0x7F) return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        if (!len || c > 0xF4 || i + len > n) return false;
        uint32_t cp = c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

ct_status ct_tb_add_scalar(ct_tb_writer *w, const char *tag, int64_t step, double value, double wall_time) {
    if (!w->f) return ct_set_error("TensorBoard: writer is not open");
    if (w->failed) return ct_set_error("TensorBoard events %s: an earlier write failed, nothing more is written", w->path);
    size_t tn = tag ? strlen(tag) : 0;
    if (tn == 0 || tn > CT_TB_MAX_TAG)
        return ct_set_error("TensorBoard tag must have 1 to %d bytes, not %zu", CT_TB_MAX_TAG, tn);
    if (!tag_ok((const unsigned char *)tag, tn))
        return ct_set_error("TensorBoard tag \"%s\" is not UTF-8 text without control characters", tag);
    // Innermost first: the length of each message goes before it in its parent.
    pb_buf val = {.n = 0}, sum = {.n = 0}, ev;
    pb_bytes(&val, VALUE_TAG, tag, tn);
    pb_float(&val, VALUE_SIMPLE_VALUE, (float)value);
    pb_bytes(&sum, SUMMARY_VALUE, val.b, val.n);
    event_head(&ev, wall_time, step);
    pb_bytes(&ev, EVENT_SUMMARY, sum.b, sum.n);
    return write_record(w, ev.b, ev.n);
}

ct_status ct_tb_flush(ct_tb_writer *w) {
    if (!w->f) return ct_set_error("TensorBoard: writer is not open");
    if (w->failed) return ct_set_error("TensorBoard events %s: an earlier write failed", w->path);
    errno = 0;
    if (fflush(w->f) || ferror(w->f)) return write_failed(w);
    return CT_OK;
}

ct_status ct_tb_close(ct_tb_writer *w) {
    if (!w->f) return CT_OK;
    bool failed_before = w->failed;
    ct_status st = failed_before ? ct_set_error("TensorBoard events %s are incomplete: a write failed", w->path)
                                 : ct_tb_flush(w);
    errno = 0;
    if (fclose(w->f) && st == CT_OK) st = write_failed(w);
    w->f = NULL;
    return st;
}
