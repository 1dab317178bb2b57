// safetensors: number conversions against hand-worked bit patterns, writer/reader round trips,
// a file assembled byte by byte in the test, and every corrupt-file check.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "expect_error.h"
#include "test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static void test_conversions(void) {
    // bf16 keeps the top 16 bits of fp32; halfway cases go to the even neighbour.
    CHECK(ct_f32_to_bf16(1.0f) == 0x3f80, "1.0");
    CHECK(ct_f32_to_bf16(-2.0f) == 0xc000, "-2.0");
    CHECK(ct_f32_to_bf16(1.0f + 0.00390625f) == 0x3f80, "1 + 2^-8 is a tie: down to even 0x3f80");
    CHECK(ct_f32_to_bf16(1.0f + 3 * 0.00390625f) == 0x3f82, "1 + 3*2^-8 is a tie: up to even 0x3f82");
    CHECK(ct_f32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81, "just above a tie rounds up");
    CHECK(ct_f32_to_bf16(bits_f32(0x3f807fffu)) == 0x3f80, "just below a tie rounds down");
    CHECK(ct_f32_to_bf16(bits_f32(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to inf");
    uint16_t nan = ct_f32_to_bf16(bits_f32(0x7f800001u));
    CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x7f), "NaN with low payload stays NaN (got %04x)", nan);
    CHECK(ct_bf16_to_f32(0x4049) == 3.140625f, "bf16 0x4049");
    // fp16: normal, negative, subnormals, max, inf.
    CHECK(ct_f16_to_f32(0x3c00) == 1.0f, "1.0");
    CHECK(ct_f16_to_f32(0xc000) == -2.0f, "-2.0");
    CHECK(ct_f16_to_f32(0x3555) == 0.333251953125f, "1/3 in f16");
    CHECK(ct_f16_to_f32(0x0001) == 5.9604644775390625e-8f, "smallest subnormal 2^-24");
    CHECK(ct_f16_to_f32(0x03ff) == 1023 * 5.9604644775390625e-8f, "largest subnormal");
    CHECK(ct_f16_to_f32(0x7bff) == 65504.0f, "max");
    CHECK(ct_f16_to_f32(0xfc00) == -INFINITY, "-inf");
    CHECK(isnan(ct_f16_to_f32(0x7e00)), "NaN");
}

static void test_roundtrip(void) {
    const char *p = tmp_path("rt.safetensors");
    float a[6] = {1.5f, -2.25f, 3e-5f, 1e10f, 0.0f, -0.0f};
    int64_t sa[2] = {2, 3};
    enum { NB = 1000 };
    static float b[NB];
    unsigned s = 1;
    for (int i = 0; i < NB; i++) {
        s = s * 1664525u + 1013904223u;
        b[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 10.0f;
    }
    int64_t sb[3] = {10, 10, 10};
    float scalar = 42.0f;
    int32_t ints[3] = {-1, 0, 7};
    int64_t si[1] = {3};
    ct_st_writer *w = ct_st_writer_new();
    ct_st_writer_metadata(w, "format", "ctitan");
    ct_st_writer_metadata(w, "quote\"and\\slash\nnewline", "tab\there \xc3\xa9");
    CHECK(ct_st_writer_add(w, "layers.0.attention.wq.weight", CT_F32, 2, sa, CT_F32, a) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_add(w, "bf", CT_BF16, 3, sb, CT_F32, b) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_add(w, "scalar", CT_F32, 0, NULL, CT_F32, &scalar) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_add(w, "ints", CT_I32, 1, si, CT_I32, ints) == CT_OK, "%s", ct_last_error());
    CHECK(ct_st_writer_add(w, "bf", CT_F32, 1, si, CT_F32, a) == CT_ERR, "duplicate name accepted");
    CHECK(ct_st_writer_add(w, "x", CT_F16, 1, si, CT_F32, a) == CT_ERR, "F32 -> F16 is not offered");
    CHECK(ct_st_writer_write(w, p) == CT_OK, "%s", ct_last_error());
    ct_st_writer_free(w);
    CHECK(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0, "temporary file left behind");

    // Layout: u64 length, JSON, data section 8-byte aligned, total size = 8 + N + data bytes.
    FILE *f = fopen(p, "rb");
    unsigned char len[8];
    CHECK(f && fread(len, 1, 8, f) == 8, "read");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK((8 + n) % 8 == 0, "data section not aligned (N = %llu)", (unsigned long long)n);
    CHECK((long)(8 + n) + 24 + 2 * NB + 4 + 12 == size, "size %ld", size);

    ct_st_file *r = ct_st_open(p);
    CHECK(r != NULL, "%s", ct_last_error());
    if (!r) return;
    CHECK(ct_st_num_tensors(r) == 4, "%d tensors", ct_st_num_tensors(r));
    CHECK(ct_st_num_metadata(r) == 2, "metadata count");
    const char *m = ct_st_metadata(r, "format");
    CHECK(m && !strcmp(m, "ctitan"), "metadata format");
    m = ct_st_metadata(r, "quote\"and\\slash\nnewline");
    CHECK(m && !strcmp(m, "tab\there \xc3\xa9"), "escaped metadata");
    CHECK(ct_st_metadata(r, "missing") == NULL, "missing key");
    const ct_st_tensor *t = ct_st_find(r, "layers.0.attention.wq.weight");
    CHECK(t && t->dtype == CT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6, "wq info");
    float out[NB];
    CHECK(ct_st_read_f32(r, "layers.0.attention.wq.weight", out, 6) == CT_OK, "%s", ct_last_error());
    CHECK(!memcmp(out, a, sizeof a), "fp32 values differ");
    t = ct_st_find(r, "bf");
    CHECK(t && t->dtype == CT_BF16 && t->ndim == 3 && t->numel == NB, "bf info");
    CHECK(ct_st_read_f32(r, "bf", out, NB) == CT_OK, "%s", ct_last_error());
    // Reference: of the two bf16 neighbours of b[i] (truncated, and one step further from
    // zero), the closer one in float64; ties to the even pattern.
    int bad = 0;
    for (int i = 0; i < NB; i++) {
        uint32_t u;
        memcpy(&u, &b[i], 4);
        uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        double dlo = fabs((double)ct_bf16_to_f32(lo) - b[i]), dhi = fabs((double)ct_bf16_to_f32(hi) - b[i]);
        uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1 ? hi : lo);
        bad += out[i] != ct_bf16_to_f32(want);
    }
    CHECK(bad == 0, "%d bf16 values not the nearest bf16", bad);
    t = ct_st_find(r, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1, "scalar info");
    CHECK(ct_st_read_f32(r, "scalar", out, 1) == CT_OK && out[0] == 42.0f, "scalar value");
    t = ct_st_find(r, "ints");
    CHECK(t && t->dtype == CT_I32 && !memcmp(t->data, ints, sizeof ints), "ints bytes");
    CHECK(ct_st_read_f32(r, "ints", out, 3) == CT_ERR, "I32 -> fp32 should be refused");
    CHECK(ct_st_read_f32(r, "bf", out, 999) == CT_ERR && strstr(ct_last_error(), "1000 elements"), "element count");
    CHECK(ct_st_read_f32(r, "nope", out, 1) == CT_ERR && strstr(ct_last_error(), "no tensor nope"), "absent");
    ct_st_close(r);
}

// Writes u64 length + header text + data exactly as given.
static const char *write_raw(const char *name, uint64_t hlen, const char *header, const void *data, size_t data_bytes) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (data_bytes) fwrite(data, 1, data_bytes, f);
    fclose(f);
    return p;
}

static void test_read_by_hand(void) {
    // Data section: F32 [1, 2, 3, 4] (16 bytes), BF16 [1.0, -3.0] (4 bytes), F16 [0.5, -1.5]
    // (4 bytes) — bit patterns worked out by hand.
    unsigned char data[24] = {
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,
        0x80, 0x3f, 0x40, 0xc0,  // bf16 0x3f80 = 1.0, 0xc040 = -3.0
        0x00, 0x38, 0x00, 0xbe,  // f16 0x3800 = 0.5, 0xbe00 = -1.5
    };
    // Whitespace, escapes in a name (\u002e is '.'), metadata in the middle, keys in any order.
    const char *h =
        "{ \"b\\u002e0\" : {\"shape\":[2],\"dtype\":\"BF16\",\"data_offsets\":[16,20]},\n"
        "  \"__metadata__\": {\"format\":\"pt\", \"who\":\"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\"\"},\n"
        "  \"a\": {\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "  \"h\": {\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[20,24]} }   ";
    const char *p = write_raw("hand.safetensors", strlen(h), h, data, sizeof data);
    ct_st_file *r = ct_st_open(p);
    CHECK(r != NULL, "%s", ct_last_error());
    if (!r) return;
    CHECK(ct_st_num_tensors(r) == 3, "count");
    CHECK(!strcmp(ct_st_tensor_at(r, 0)->name, "b.0") && !strcmp(ct_st_tensor_at(r, 1)->name, "a"), "names in header order");
    const char *who = ct_st_metadata(r, "who");
    CHECK(who && !strcmp(who, "caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\""), "unicode escapes: '%s'", who ? who : "(null)");
    float out[4];
    CHECK(ct_st_read_f32(r, "a", out, 4) == CT_OK && out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 4, "F32");
    CHECK(ct_st_read_f32(r, "b.0", out, 2) == CT_OK && out[0] == 1.0f && out[1] == -3.0f, "BF16 %g %g", out[0], out[1]);
    CHECK(ct_st_read_f32(r, "h", out, 2) == CT_OK && out[0] == 0.5f && out[1] == -1.5f, "F16 %g %g", out[0], out[1]);
    const ct_st_tensor *t = ct_st_find(r, "a");
    CHECK(t && t->begin == 0 && t->end == 16 && t->shape[0] == 2 && t->shape[1] == 2, "a info");
    ct_st_close(r);
}

// ct_st_open must fail with `code`, the file as the subject, and a message naming it and containing
// `what`.
static int open_fails_with(ct_error_code code, const char *path, const char *what) {
    ct_st_file *r = ct_st_open(path);
    if (r) {
        ct_st_close(r);
        printf("  %s opened\n", path);
        return 0;
    }
    return error_is(code, path, what) && error_is(code, path, path);
}
// A file that opens but is not a well-formed safetensors file.
static int open_fails(const char *path, const char *what) { return open_fails_with(CT_E_DATA, path, what); }

static void test_corrupt(void) {
    unsigned char data[16] = {0};
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    // Sanity: the uncorrupted file opens.
    ct_st_file *r = ct_st_open(write_raw("good.st", strlen(ok), ok, data, 16));
    CHECK(r != NULL, "%s", ct_last_error());
    ct_st_close(r);

    const char *p = tmp_path("tiny.st");
    FILE *f = fopen(p, "wb");
    fwrite("\x10\x00\x00", 1, 3, f);
    fclose(f);
    CHECK(open_fails(p, "truncated"), "3-byte file");
    CHECK(open_fails(write_raw("cut.st", strlen(ok), ok, data, 10), "out of range"), "data cut short");
    CHECK(open_fails(write_raw("hlen.st", strlen(ok) + 100, ok, data, 16), "truncated safetensors file: header length"),
          "header length > file");
    CHECK(open_fails(write_raw("hlen2.st", (uint64_t)1 << 62, ok, data, 16), "header length"), "huge header length");
    // A text file (a tokenizer's lines) given as a model: its first 8 characters are no length.
    p = tmp_path("tokenizer.txt");
    f = fopen(p, "wb");
    fputs("AA== 0\nAQ== 1\nAg== 2\nAw== 3\n", f);
    fclose(f);
    CHECK(open_fails(p, "not a safetensors model file (its first 8 bytes, read as a header length, give "),
          "text file as a model");

    const char *bad_json[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}",   // missing brace
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},}",  // trailing comma
        "{\"a\\q\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",  // bad escape
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}} x",   // trailing garbage
        "{\"a\":{\"dtype\":F32,\"shape\":[2,2],\"data_offsets\":[0,16]}}",      // unquoted string
        "{\"a\" {\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",  // missing colon
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}\x01",  // control char
        "{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",  // lone surrogate
        "[1,2]",  // not an object
    };
    for (int i = 0; i < 9; i++) {
        char name[32];
        snprintf(name, sizeof name, "json%d.st", i);
        CHECK(open_fails(write_raw(name, strlen(bad_json[i]), bad_json[i], data, 16), "JSON"), "bad JSON case %d", i);
    }
    const char *oor = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[4,20]}}";
    CHECK(open_fails(write_raw("oor.st", strlen(oor), oor, data, 16), "out of range"), "offsets past the end");
    const char *rev = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}";
    CHECK(open_fails(write_raw("rev.st", strlen(rev), rev, data, 16), "out of range"), "begin > end");
    const char *ovl =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    CHECK(open_fails(write_raw("ovl.st", strlen(ovl), ovl, data, 16), "overlap"), "overlap");
    const char *mis = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    CHECK(open_fails(write_raw("mis.st", strlen(mis), mis, data, 16), "needs 8"), "dtype/shape size mismatch");
    const char *unk = "{\"a\":{\"dtype\":\"F33\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    CHECK(open_fails(write_raw("unk.st", strlen(unk), unk, data, 16), "unknown dtype"), "unknown dtype");
    const char *neg = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,-2],\"data_offsets\":[0,16]}}";
    CHECK(open_fails(write_raw("neg.st", strlen(neg), neg, data, 16), "shape"), "negative dimension");
    const char *big = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}";
    CHECK(open_fails(write_raw("big.st", strlen(big), big, data, 16), "shape"), "overflowing shape");
    const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    CHECK(open_fails(write_raw("dup.st", strlen(dup), dup, data, 16), "duplicate"), "duplicate name");
    const char *meta = "{\"__metadata__\":{\"k\":5},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    CHECK(open_fails(write_raw("meta.st", strlen(meta), meta, data, 16), "not a string"), "non-string metadata");
    CHECK(open_fails_with(CT_E_IO, tmp_path("absent.st"), "cannot open"), "missing file");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_test_st_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", tmpdir);
    if (system(cmd) != 0) return 1;
    CT_RUN(test_conversions);
    CT_RUN(test_roundtrip);
    CT_RUN(test_read_by_hand);
    CT_RUN(test_corrupt);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    CT_TEST_EXIT();
}
