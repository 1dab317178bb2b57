// TensorBoard event files (src/metrics/tensorboard.h), read back by a reader written here from
// the format's description, sharing no code with the writer: its own bitwise CRC-32C, its own
// TFRecord framing and protocol-buffer decoding. Plus CRC-32C known answers (RFC 3720 B.4), the
// table and SSE4.2 versions against each other, corruption caught, refusals, and a failed write.
//
// `test_tensorboard --write DIR` only writes the fixture file that tests/interop/tensorboard_read.py
// reads with the real tensorboard package (make test-interop); the expected values are below.
// `test_tensorboard --dump FILE` prints an event file through the reader here, for shell tests:
// "file_version V" for the first event, then one "TAG STEP VALUE WALL_TIME" line per scalar;
// exit 1 with the reader's error (a CRC, framing or decoding failure) on stderr.
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics/tensorboard.h"
#include "test.h"

// ---- the independent reader -----------------------------------------------------------------
// CRC-32C one bit at a time, straight from the definition: reflected polynomial 0x82F63B78,
// register starts at ~0, result inverted.
static uint32_t ref_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}
static uint32_t ref_masked(const unsigned char *p, size_t n) {
    uint32_t c = ref_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

enum { MAX_EVENTS = 4096 };  // a short training run's file (about 25 scalars a step)
typedef struct {
    double wall_time;
    int64_t step;
    char file_version[64];
    bool has_value;
    char tag[CT_TB_MAX_TAG + 1];
    float value;
} rd_event;

typedef struct {
    rd_event ev[MAX_EVENTS];
    int n;
    char err[160];
} rd_file;

// Reads a varint at *p (< end); false when it runs past end or past 10 bytes.
static bool rd_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

// One field: its number, wire type and payload (pointer + length for LEN, value for the rest).
typedef struct {
    unsigned field, wire;
    uint64_t v;
    const unsigned char *data;
    size_t len;
} rd_field;

static bool rd_next(const unsigned char **p, const unsigned char *end, rd_field *f) {
    uint64_t key;
    if (!rd_varint(p, end, &key)) return false;
    f->field = (unsigned)(key >> 3), f->wire = key & 7;
    switch (f->wire) {
    case 0: return rd_varint(p, end, &f->v);
    case 1:
        if (end - *p < 8) return false;
        f->v = le(*p, 8), *p += 8;
        return true;
    case 5:
        if (end - *p < 4) return false;
        f->v = le(*p, 4), *p += 4;
        return true;
    case 2:
        if (!rd_varint(p, end, &f->v) || f->v > (uint64_t)(end - *p)) return false;
        f->data = *p, f->len = (size_t)f->v, *p += f->len;
        return true;
    default: return false;
    }
}

// Value{tag = 1 string, simple_value = 2 float}; anything else is an error (the writer writes no more).
static bool rd_value(const unsigned char *p, const unsigned char *end, rd_event *e) {
    rd_field f;
    bool tag = false, val = false;
    while (p < end) {
        if (!rd_next(&p, end, &f)) return false;
        if (f.field == 1 && f.wire == 2 && f.len <= CT_TB_MAX_TAG) {
            memcpy(e->tag, f.data, f.len), e->tag[f.len] = 0, tag = true;
        } else if (f.field == 2 && f.wire == 5) {
            uint32_t bits = (uint32_t)f.v;
            memcpy(&e->value, &bits, 4), val = true;
        } else {
            return false;
        }
    }
    return tag && val;
}

static bool rd_event_msg(const unsigned char *p, const unsigned char *end, rd_event *e) {
    memset(e, 0, sizeof *e);
    rd_field f;
    while (p < end) {
        if (!rd_next(&p, end, &f)) return false;
        if (f.field == 1 && f.wire == 1) {
            memcpy(&e->wall_time, &f.v, 8);
        } else if (f.field == 2 && f.wire == 0) {
            e->step = (int64_t)f.v;
        } else if (f.field == 3 && f.wire == 2 && f.len < sizeof e->file_version) {
            memcpy(e->file_version, f.data, f.len);
        } else if (f.field == 5 && f.wire == 2) {  // Summary{repeated Value value = 1}: exactly one here
            const unsigned char *q = f.data, *qend = f.data + f.len;
            rd_field v;
            if (!rd_next(&q, qend, &v) || v.field != 1 || v.wire != 2 || q != qend) return false;
            if (!rd_value(v.data, v.data + v.len, e)) return false;
            e->has_value = true;
        } else {
            return false;
        }
    }
    return true;
}

// Parses a whole event file's bytes; false with r->err on the first framing, CRC or decode error.
static bool rd_parse(const unsigned char *b, size_t n, rd_file *r) {
    r->n = 0;
    r->err[0] = 0;
    size_t off = 0;
    while (off < n) {
        if (n - off < 12) return snprintf(r->err, sizeof r->err, "partial header at %zu", off), false;
        uint64_t len = le(b + off, 8);
        if ((uint32_t)le(b + off + 8, 4) != ref_masked(b + off, 8))
            return snprintf(r->err, sizeof r->err, "length CRC mismatch at %zu", off), false;
        if (len > n - off - 12 || n - off - 12 - len < 4)
            return snprintf(r->err, sizeof r->err, "record at %zu runs past the end", off), false;
        const unsigned char *data = b + off + 12;
        if ((uint32_t)le(data + len, 4) != ref_masked(data, (size_t)len))
            return snprintf(r->err, sizeof r->err, "data CRC mismatch at %zu", off), false;
        if (r->n == MAX_EVENTS) return snprintf(r->err, sizeof r->err, "more than %d events", MAX_EVENTS), false;
        if (!rd_event_msg(data, data + len, &r->ev[r->n]))
            return snprintf(r->err, sizeof r->err, "event %d does not decode", r->n), false;
        r->n++;
        off += 12 + (size_t)len + 4;
    }
    return true;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

// ---- helpers --------------------------------------------------------------------------------
static char tmp_root[256];

static void make_tmp_root(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/ct_test_tb_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

// Names of the files in `dir` (up to 8); returns how many there are.
static int list_files(const char *dir, char names[8][512]) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && n < 8) snprintf(names[n++], 512, "%s", e->d_name);
    closedir(d);
    return n;
}

// The fixture the interop check reads too: tags, steps and values it recomputes on its side.
// loss = 10 / (step + 1) and lr = 1e-3 * step for steps 1..10; memory/params_mib = 123.25 at
// steps 1..10; comm/tp/bytes = 1.5e9 * step at steps 1..10; nonfinite = NaN at step 1, +Inf at 2.
// wall_time = 1700000000 + step.
static ct_status write_fixture(ct_tb_writer *w) {
    for (int s = 1; s <= 10; s++) {
        double t = 1700000000.0 + s;
        if (ct_tb_add_scalar(w, "loss", s, 10.0 / (s + 1), t) || ct_tb_add_scalar(w, "lr", s, 1e-3 * s, t) ||
            ct_tb_add_scalar(w, "memory/params_mib", s, 123.25, t) || ct_tb_add_scalar(w, "comm/tp/bytes", s, 1.5e9 * s, t))
            return CT_ERR;
    }
    if (ct_tb_add_scalar(w, "nonfinite", 1, NAN, 1700000001.0) || ct_tb_add_scalar(w, "nonfinite", 2, INFINITY, 1700000002.0))
        return CT_ERR;
    return CT_OK;
}

// ---- cases ----------------------------------------------------------------------------------
static void test_crc32c_known_answers(void) {
    // RFC 3720 (iSCSI) B.4 test vectors and the usual "123456789" check value.
    unsigned char zeros[32] = {0}, ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xFF, inc[i] = (unsigned char)i, dec[i] = (unsigned char)(31 - i);
    struct {
        const unsigned char *p;
        size_t n;
        uint32_t want;
    } v[] = {{(const unsigned char *)"123456789", 9, 0xE3069283u},
             {zeros, 32, 0x8A9136AAu},
             {ones, 32, 0x62A8AB43u},
             {inc, 32, 0x46DD794Eu},
             {dec, 32, 0x113FDB5Cu},
             {(const unsigned char *)"", 0, 0}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        CHECK(ref_crc32c(v[i].p, v[i].n) == v[i].want, "reference, vector %zu: %08x", i, ref_crc32c(v[i].p, v[i].n));
        CHECK(ct_crc32c_table(0, v[i].p, v[i].n) == v[i].want, "table, vector %zu: %08x", i,
              ct_crc32c_table(0, v[i].p, v[i].n));
        CHECK(ct_crc32c(0, v[i].p, v[i].n) == v[i].want, "dispatch, vector %zu: %08x", i, ct_crc32c(0, v[i].p, v[i].n));
        uint32_t hw;
        if (ct_crc32c_sse42(0, v[i].p, v[i].n, &hw)) CHECK(hw == v[i].want, "sse4.2, vector %zu: %08x", i, hw);
    }
    CHECK(ct_crc32c_mask(0) == 0xa282ead8u, "mask(0) = %08x", ct_crc32c_mask(0));
    CHECK(ct_crc32c_mask(0xE3069283u) == (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u), "mask");
}

// The table and SSE4.2 versions give the same CRC for every length 0..300 at every alignment,
// and continuing a CRC over a split buffer gives the CRC of the whole.
static void test_crc32c_table_and_sse42_agree(void) {
    unsigned char buf[320];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) x = x * 1103515245u + 12345u, buf[i] = (unsigned char)(x >> 16);
    uint32_t probe;
    bool hw = ct_crc32c_sse42(0, buf, 1, &probe);
    printf("  SSE4.2 crc32 %s\n", hw ? "available: compared with the table" : "not available: table only");
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++) {
            uint32_t want = ref_crc32c(buf + off, n), t = ct_crc32c_table(0, buf + off, n), h = want;
            if (hw) ct_crc32c_sse42(0, buf + off, n, &h);
            CHECK(t == want && h == want, "off %zu n %zu: ref %08x table %08x sse4.2 %08x", off, n, want, t, h);
            size_t cut = n / 3;
            uint32_t chained = ct_crc32c(ct_crc32c(0, buf + off, cut), buf + off + cut, n - cut);
            uint32_t chained_t = ct_crc32c_table(ct_crc32c_table(0, buf + off, cut), buf + off + cut, n - cut);
            CHECK(chained == want && chained_t == want, "chained off %zu n %zu", off, n);
            if (ct_test_case_failed) return;
        }
}

// Several scalars written, read back by the reader above: file name, version record, then each
// event's tag, step, value and wall time.
static void test_write_and_read_back(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/run/tb", tmp_root);  // two levels that do not exist yet
    ct_tb_writer w;
    CHECK(ct_tb_open(&w, dir) == CT_OK, "open: %s", ct_last_error());
    if (ct_test_case_failed) return;
    struct {
        const char *tag;
        int64_t step;
        double value, wall;
    } s[] = {{"loss", 1, 10.5, 1700000000.25},
             {"loss", 2, 9.75, 1700000001.5},
             {"grad_norm", 2, 1.0 / 3.0, 1700000001.5},
             {"lr", 3, 3e-4, 1700000002.0},
             {"memory/activations_mib", 3, 1234.5, 1700000002.0},
             {"comm/dp_shard/bytes", 1LL << 40, 6.5e12, 1700000003.0},
             {"comm/tp/wait_s", -7, -0.0625, 0.0},
             {"val_loss", 0, NAN, 1700000004.0},
             {"tokens_per_s", 4, INFINITY, 1700000004.0},
             {"Übergröße/日本", 5, 42.0, 1700000005.0}};
    int ns = (int)(sizeof s / sizeof s[0]);
    for (int i = 0; i < ns; i++)
        CHECK(ct_tb_add_scalar(&w, s[i].tag, s[i].step, s[i].value, s[i].wall) == CT_OK, "add %s: %s", s[i].tag,
              ct_last_error());
    CHECK(ct_tb_flush(&w) == CT_OK, "flush: %s", ct_last_error());
    CHECK(w.records == ns + 1, "records %lld", w.records);
    char path[1280];
    snprintf(path, sizeof path, "%s", w.path);
    CHECK(ct_tb_close(&w) == CT_OK, "close: %s", ct_last_error());
    CHECK(ct_tb_close(&w) == CT_OK, "second close");

    char names[8][512];
    CHECK(list_files(dir, names) == 1, "files in %s: %d", dir, list_files(dir, names));
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    host[64] = 0;
    long long t;
    int used = 0;
    CHECK(sscanf(names[0], "events.out.tfevents.%lld.%n", &t, &used) == 1 && used > 0, "name %s", names[0]);
    CHECK(t > 1600000000LL && !strncmp(names[0] + used, host, strlen(host)), "name %s (host %s)", names[0], host);
    CHECK(strstr(path, names[0]) != NULL, "writer's path %s", path);

    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    static rd_file r;
    CHECK(b && rd_parse(b, n, &r), "parse: %s", r.err);
    free(b);
    if (ct_test_case_failed) return;
    CHECK(r.n == ns + 1, "events %d", r.n);
    CHECK(!strcmp(r.ev[0].file_version, "brain.Event:2") && !r.ev[0].has_value && r.ev[0].step == 0,
          "first event: version '%s'", r.ev[0].file_version);
    CHECK(r.ev[0].wall_time > 1600000000.0, "first event's wall time %f", r.ev[0].wall_time);
    for (int i = 0; i < ns && i + 1 < r.n; i++) {
        const rd_event *e = &r.ev[i + 1];
        CHECK(e->has_value && !strcmp(e->tag, s[i].tag), "event %d tag '%s' want '%s'", i, e->tag, s[i].tag);
        CHECK(e->step == s[i].step, "event %d step %lld want %lld", i, (long long)e->step, (long long)s[i].step);
        float want = (float)s[i].value;
        CHECK(memcmp(&e->value, &want, 4) == 0 || (isnan(want) && isnan(e->value)), "event %d value %.9g want %.9g", i,
              e->value, want);
        CHECK(e->wall_time == s[i].wall, "event %d wall time %.17g", i, e->wall_time);
        CHECK(e->file_version[0] == 0, "event %d has a file_version", i);
    }
    // -0.0625 keeps its sign bit: the float is written bit for bit.
    CHECK(signbit(r.ev[7].value), "negative value lost its sign");
}

// One byte changed anywhere (a length, a CRC, the event data) or a record cut short: the reader
// reports it. Also shows the masked CRCs cover every byte of the file.
static void test_corrupted_byte_detected(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/corrupt", tmp_root);
    ct_tb_writer w;
    CHECK(ct_tb_open(&w, dir) == CT_OK, "open: %s", ct_last_error());
    if (ct_test_case_failed) return;
    for (int i = 1; i <= 3; i++) CHECK(ct_tb_add_scalar(&w, "loss", i, 1.0 / i, 1700000000.0 + i) == CT_OK, "add");
    char path[1280];
    snprintf(path, sizeof path, "%s", w.path);
    CHECK(ct_tb_close(&w) == CT_OK, "close: %s", ct_last_error());
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    static rd_file r;
    CHECK(b && rd_parse(b, n, &r) && r.n == 4, "clean file: %s", r.err);
    if (ct_test_case_failed) {
        free(b);
        return;
    }
    int missed = 0;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            b[i] ^= (unsigned char)(1 << bit);
            if (rd_parse(b, n, &r)) missed++;
            b[i] ^= (unsigned char)(1 << bit);
        }
    }
    CHECK(missed == 0, "%d of %zu single-bit flips not detected", missed, 3 * n);
    for (size_t cut = 1; cut < 20; cut++) CHECK(!rd_parse(b, n - cut, &r), "file cut by %zu bytes parsed", cut);
    free(b);
}

// Two writers open at once in one folder (as two ranks, or two runs, in the same second would be)
// get two files, each complete.
static void test_two_writers_two_files(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/two", tmp_root);
    ct_tb_writer a, b;
    CHECK(ct_tb_open(&a, dir) == CT_OK && ct_tb_open(&b, dir) == CT_OK, "open: %s", ct_last_error());
    if (ct_test_case_failed) return;
    CHECK(strcmp(a.path, b.path) != 0, "same path %s", a.path);
    CHECK(ct_tb_add_scalar(&a, "a", 1, 1, 1) == CT_OK && ct_tb_add_scalar(&b, "b", 1, 2, 1) == CT_OK, "add");
    CHECK(ct_tb_close(&a) == CT_OK && ct_tb_close(&b) == CT_OK, "close");
    char names[8][512];
    CHECK(list_files(dir, names) == 2, "files: %d", list_files(dir, names));
    const char *paths[2] = {a.path, b.path};
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        unsigned char *buf = slurp(paths[i], &n);
        static rd_file r;
        CHECK(buf && rd_parse(buf, n, &r) && r.n == 2 && r.ev[1].tag[0] == "ab"[i], "file %s: %s", paths[i], r.err);
        free(buf);
    }
}

// Refusals with a message, and the writer still good afterwards.
static void test_refusals(void) {
    ct_tb_writer w;
    char file[512], dir[600];
    snprintf(file, sizeof file, "%s/plainfile", tmp_root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL, "create %s", file);
    if (f) fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    CHECK(ct_tb_open(&w, dir) == CT_ERR && strstr(ct_last_error(), file) && strstr(ct_last_error(), "TensorBoard"),
          "folder under a file: %s", ct_last_error());
    CHECK(w.f == NULL, "left open");
    CHECK(ct_tb_open(&w, "") == CT_ERR, "empty folder");
    CHECK(ct_tb_add_scalar(&w, "loss", 1, 1, 1) == CT_ERR && strstr(ct_last_error(), "not open"), "add on closed: %s",
          ct_last_error());
    CHECK(ct_tb_close(&w) == CT_OK, "closing a closed writer");

    snprintf(dir, sizeof dir, "%s/refuse", tmp_root);
    CHECK(ct_tb_open(&w, dir) == CT_OK, "open: %s", ct_last_error());
    if (ct_test_case_failed) return;
    static char longtag[CT_TB_MAX_TAG + 2];
    memset(longtag, 'x', CT_TB_MAX_TAG + 1);
    const char *bad[] = {"", "a\nb", "tab\there", "\xff\xfe", "over\xc0\xaflong", "\xed\xa0\x80surrogate", "cut\xe6\x97",
                         longtag};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ct_tb_add_scalar(&w, bad[i], 1, 1.0, 1.0) == CT_ERR && strstr(ct_last_error(), "tag"), "tag %zu accepted",
              i);
    longtag[CT_TB_MAX_TAG] = 0;  // exactly the limit: fine
    CHECK(ct_tb_add_scalar(&w, longtag, 1, 2.0, 1.0) == CT_OK, "tag of %d bytes: %s", CT_TB_MAX_TAG, ct_last_error());
    CHECK(ct_tb_add_scalar(&w, "after", 2, 3.0, 1.0) == CT_OK, "add after refusals: %s", ct_last_error());
    char path[1280];
    snprintf(path, sizeof path, "%s", w.path);
    CHECK(ct_tb_close(&w) == CT_OK, "close");
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    static rd_file r;
    CHECK(b && rd_parse(b, n, &r) && r.n == 3, "refused tags left something in the file: %s (%d events)", r.err, r.n);
    CHECK(r.n == 3 && strlen(r.ev[1].tag) == CT_TB_MAX_TAG && !strcmp(r.ev[2].tag, "after"), "tags read back");
    free(b);
}

// A write the file system refuses (here: the file-size limit) is an error naming the file, and
// nothing more is written after it.
static void test_write_failure_reported(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/full", tmp_root);
    ct_tb_writer w;
    CHECK(ct_tb_open(&w, dir) == CT_OK, "open: %s", ct_last_error());
    if (ct_test_case_failed) return;
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = {.rlim_cur = 64 * 1024, .rlim_max = old.rlim_max};
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
    ct_status st = CT_OK;
    int i;
    for (i = 0; i < 100000 && st == CT_OK; i++) {
        st = ct_tb_add_scalar(&w, "loss", i, 1.0, 1.0);
        if (st == CT_OK && i % 100 == 0) st = ct_tb_flush(&w);
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    CHECK(st == CT_ERR && strstr(msg, w.path) && strstr(msg, strerror(EFBIG)), "after %d scalars: %s", i, msg);
    CHECK(w.failed, "failed not set");
    CHECK(ct_tb_add_scalar(&w, "loss", 1, 1.0, 1.0) == CT_ERR && strstr(ct_last_error(), "earlier write failed"),
          "add after a failure: %s", ct_last_error());
    CHECK(ct_tb_close(&w) == CT_ERR && strstr(ct_last_error(), "incomplete"), "close after a failure: %s",
          ct_last_error());
    CHECK(w.f == NULL, "still open");
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
}

static int dump(const char *path) {
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    static rd_file r;
    if (!b || !rd_parse(b, n, &r)) {
        fprintf(stderr, "test_tensorboard --dump %s: %s\n", path, b ? r.err : strerror(errno));
        free(b);
        return 1;
    }
    free(b);
    for (int i = 0; i < r.n; i++) {
        const rd_event *e = &r.ev[i];
        if (e->file_version[0]) printf("file_version %s\n", e->file_version);
        if (e->has_value) printf("%s %lld %.9g %.6f\n", e->tag, (long long)e->step, e->value, e->wall_time);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        ct_tb_writer w;
        if (ct_tb_open(&w, argv[2]) || write_fixture(&w) || ct_tb_close(&w)) {
            fprintf(stderr, "test_tensorboard --write: %s\n", ct_last_error());
            return 1;
        }
        printf("%s\n", w.path);
        return 0;
    }
    make_tmp_root();
    CT_RUN(test_crc32c_known_answers);
    CT_RUN(test_crc32c_table_and_sse42_agree);
    CT_RUN(test_write_and_read_back);
    CT_RUN(test_corrupted_byte_detected);
    CT_RUN(test_two_writers_two_files);
    CT_RUN(test_refusals);
    CT_RUN(test_write_failure_reported);
    remove_tree(tmp_root);
    CT_TEST_EXIT();
}
