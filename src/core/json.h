// ctitan's one JSON reader (RFC 8259, recursive descent, nesting limited to 64) and string
// writer: safetensors headers, the files of a Hugging Face model directory (config.json,
// model.safetensors.index.json, tokenizer files), metrics.jsonl for plots, traces in tests.
//
// The whole document becomes a tree of ct_json nodes. Numbers are doubles, and a number written
// as an integer that fits int64 is also kept exactly (is_int, integer): safetensors offsets go
// past 2^53. Strings are UTF-8 with escapes resolved (\u0000 is refused, so a string is
// NUL-terminated text).
#ifndef CT_JSON_H
#define CT_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef enum { CT_JSON_NULL, CT_JSON_BOOL, CT_JSON_NUMBER, CT_JSON_STRING, CT_JSON_ARRAY, CT_JSON_OBJECT } ct_json_type;

typedef struct ct_json {
    ct_json_type type;
    int boolean;            // CT_JSON_BOOL
    double number;          // CT_JSON_NUMBER (nearest double)
    bool is_int;            // CT_JSON_NUMBER written without fraction or exponent, within int64
    int64_t integer;        // its exact value when is_int
    char *string;           // CT_JSON_STRING
    int n;                  // CT_JSON_ARRAY / CT_JSON_OBJECT: children
    struct ct_json *items;  // (n)
    char **keys;            // (n) CT_JSON_OBJECT only
} ct_json;

// Parses len bytes of text. NULL + ct_last_error "what: bad JSON at byte N: reason".
ct_json *ct_json_parse(const char *text, size_t len, const char *what);
// Reads and parses a regular file of at most max_bytes (core/file_check; `what` names the kind of
// file in the size message). NULL + error naming the file (not a regular file, over the limit,
// "cannot open", or the parse error).
ct_json *ct_json_read_file(const char *path, const char *what, uint64_t max_bytes);
void ct_json_free(ct_json *j);

// The value of `key` in an object (the last one when a key repeats); NULL if absent or j is
// not an object.
const ct_json *ct_json_get(const ct_json *j, const char *key);

// Writes s (len bytes of UTF-8) as a JSON string literal with quotes, escaping '"', '\' and
// control characters.
void ct_json_write_string(FILE *f, const char *s, size_t len);
#endif
