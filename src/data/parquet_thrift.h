// Thrift's compact protocol, read side only, as Parquet stores its footer (FileMetaData) and its
// page headers: structs are fields (a header byte with the id delta and the type, or an id as a
// zigzag varint), integers zigzag varints (LEB128), binary a varint length and bytes, lists a
// size-and-type byte (size 15: a varint follows), booleans in the field's type nibble (1 true,
// 2 false) or, inside a list, one byte. Reads are bounded by the buffer: running off its end, a
// varint over 10 bytes, nesting deeper than CT_THRIFT_MAX_DEPTH or an unknown type set `err`
// (a short phrase) and every later read returns 0 / false.
#ifndef CT_PARQUET_THRIFT_H
#define CT_PARQUET_THRIFT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_THRIFT_MAX_DEPTH 32

enum {
    CT_TT_STOP = 0, CT_TT_TRUE = 1, CT_TT_FALSE = 2, CT_TT_I8 = 3, CT_TT_I16 = 4, CT_TT_I32 = 5, CT_TT_I64 = 6,
    CT_TT_DOUBLE = 7, CT_TT_BINARY = 8, CT_TT_LIST = 9, CT_TT_SET = 10, CT_TT_MAP = 11, CT_TT_STRUCT = 12,
};

typedef struct {
    const uint8_t *p, *start, *end;
    const char *err;  // NULL while all is well
    bool truncated;   // err came from running off the end (a longer read may succeed)
    int depth;
} ct_thrift;

void ct_thrift_init(ct_thrift *t, const void *buf, size_t len);
size_t ct_thrift_offset(const ct_thrift *t);  // bytes consumed

// The next field of the struct being read: true with *id and *type, false at its STOP (or an
// error). *last is the previous field's id (start each struct at 0).
bool ct_thrift_field(ct_thrift *t, int *last, int *id, int *type);
// An integer field or list element of type I8 / I16 / I32 / I64 (other types: err).
int64_t ct_thrift_int(ct_thrift *t, int type);
// A boolean: the field's type nibble when in_list is false, else one element byte.
bool ct_thrift_bool(ct_thrift *t, int type, bool in_list);
// BINARY (a string): *s points into the buffer.
bool ct_thrift_binary(ct_thrift *t, int type, const uint8_t **s, uint64_t *len);
// A LIST or SET header: element type and count (the count is checked against the bytes left).
bool ct_thrift_list(ct_thrift *t, int type, int *elem, uint64_t *n);
// Struct nesting for the caller's own struct reads: enter before its fields, leave after STOP.
bool ct_thrift_enter(ct_thrift *t);
void ct_thrift_leave(ct_thrift *t);
// Skips one value of the type (whole structs, lists and maps); in_list as for ct_thrift_bool.
void ct_thrift_skip(ct_thrift *t, int type, bool in_list);
#endif
