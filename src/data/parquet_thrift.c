// Thrift compact protocol reader (see parquet_thrift.h).
#include "data/parquet_thrift.h"

#include <string.h>

void ct_thrift_init(ct_thrift *t, const void *buf, size_t len) {
    *t = (ct_thrift){.p = buf, .start = buf, .end = (const uint8_t *)buf + len};
}

size_t ct_thrift_offset(const ct_thrift *t) { return (size_t)(t->p - t->start); }

static void fail(ct_thrift *t, const char *why) {
    if (!t->err) t->err = why;
    t->p = t->end;
}

static uint8_t byte(ct_thrift *t) {
    if (t->err) return 0;
    if (t->p >= t->end) {
        t->truncated = true;
        fail(t, "the metadata ends inside a value");
        return 0;
    }
    return *t->p++;
}

static uint64_t varint(ct_thrift *t) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        uint8_t b = byte(t);
        if (t->err) return 0;
        if (shift == 63 && b > 1) break;  // bits past 64
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    fail(t, "a varint longer than 64 bits");
    return 0;
}

static int64_t zigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

bool ct_thrift_field(ct_thrift *t, int *last, int *id, int *type) {
    uint8_t h = byte(t);
    if (t->err || h == 0) return false;
    *type = h & 0x0f;
    int delta = h >> 4;
    if (delta) *id = *last + delta;
    else {
        int64_t v = zigzag(varint(t));
        if (v < -32768 || v > 32767) fail(t, "a field id outside i16");
        *id = (int)v;
    }
    if (*type > CT_TT_STRUCT) fail(t, "an unknown field type");
    if (t->err) return false;
    *last = *id;
    return true;
}

int64_t ct_thrift_int(ct_thrift *t, int type) {
    switch (type) {
    case CT_TT_I8: return (int8_t)byte(t);
    case CT_TT_I16:
    case CT_TT_I32:
    case CT_TT_I64: {
        int64_t v = zigzag(varint(t));
        if (type == CT_TT_I16 && (v < INT16_MIN || v > INT16_MAX)) fail(t, "an i16 out of range");
        if (type == CT_TT_I32 && (v < INT32_MIN || v > INT32_MAX)) fail(t, "an i32 out of range");
        return t->err ? 0 : v;
    }
    default: fail(t, "a field of an unexpected type"); return 0;
    }
}

bool ct_thrift_bool(ct_thrift *t, int type, bool in_list) {
    if (in_list) {
        uint8_t b = byte(t);
        return b == 1;
    }
    if (type != CT_TT_TRUE && type != CT_TT_FALSE) fail(t, "a field of an unexpected type");
    return type == CT_TT_TRUE;
}

bool ct_thrift_binary(ct_thrift *t, int type, const uint8_t **s, uint64_t *len) {
    if (type != CT_TT_BINARY) fail(t, "a field of an unexpected type");
    uint64_t n = varint(t);
    if (t->err) return false;
    if (n > (uint64_t)(t->end - t->p)) {
        t->truncated = true;
        fail(t, "a string longer than the metadata left");
        return false;
    }
    *s = t->p;
    *len = n;
    t->p += n;
    return true;
}

bool ct_thrift_list(ct_thrift *t, int type, int *elem, uint64_t *n) {
    if (type != CT_TT_LIST && type != CT_TT_SET) fail(t, "a field of an unexpected type");
    uint8_t h = byte(t);
    *elem = h & 0x0f;
    *n = h >> 4;
    if (*n == 15) *n = varint(t);
    if (*elem == CT_TT_STOP || *elem > CT_TT_STRUCT) fail(t, "a list of an unknown type");
    // Every element takes at least one byte: a count beyond the bytes left cannot be real.
    if (!t->err && *n > (uint64_t)(t->end - t->p)) {
        t->truncated = true;
        fail(t, "a list longer than the metadata left");
    }
    return !t->err;
}

bool ct_thrift_enter(ct_thrift *t) {
    if (++t->depth > CT_THRIFT_MAX_DEPTH) fail(t, "nesting deeper than 32");
    return !t->err;
}

void ct_thrift_leave(ct_thrift *t) { t->depth--; }

void ct_thrift_skip(ct_thrift *t, int type, bool in_list) {
    if (t->err) return;
    switch (type) {
    case CT_TT_TRUE:
    case CT_TT_FALSE:
        if (in_list) byte(t);
        break;
    case CT_TT_I8: byte(t); break;
    case CT_TT_I16:
    case CT_TT_I32:
    case CT_TT_I64: varint(t); break;
    case CT_TT_DOUBLE:
        if (t->end - t->p < 8) {
            t->truncated = true;
            fail(t, "the metadata ends inside a value");
        } else
            t->p += 8;
        break;
    case CT_TT_BINARY: {
        const uint8_t *s;
        uint64_t n;
        ct_thrift_binary(t, type, &s, &n);
        break;
    }
    case CT_TT_LIST:
    case CT_TT_SET: {
        int elem;
        uint64_t n;
        if (!ct_thrift_list(t, type, &elem, &n) || !ct_thrift_enter(t)) return;
        for (uint64_t i = 0; i < n && !t->err; i++) ct_thrift_skip(t, elem, true);
        ct_thrift_leave(t);
        break;
    }
    case CT_TT_MAP: {
        uint64_t n = varint(t);
        if (t->err || n == 0) return;
        uint8_t kv = byte(t);
        if (n > (uint64_t)(t->end - t->p)) {
            t->truncated = true;
            fail(t, "a map longer than the metadata left");
            return;
        }
        if (!ct_thrift_enter(t)) return;
        for (uint64_t i = 0; i < n && !t->err; i++) {
            ct_thrift_skip(t, kv >> 4, true);
            ct_thrift_skip(t, kv & 0x0f, true);
        }
        ct_thrift_leave(t);
        break;
    }
    case CT_TT_STRUCT: {
        if (!ct_thrift_enter(t)) return;
        int last = 0, id, ft;
        while (ct_thrift_field(t, &last, &id, &ft)) ct_thrift_skip(t, ft, false);
        ct_thrift_leave(t);
        break;
    }
    default: fail(t, "a value of an unknown type");
    }
}
