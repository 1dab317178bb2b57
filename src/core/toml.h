// A small TOML reader of our own, enough for run configurations: tables `[a]` and `[a.b]`,
// arrays of tables `[[a]]`, dotted keys `a.b = 1`, quoted keys, basic and literal strings
// (single- and multi-line, with escapes), integers (sign, underscores, 0x/0o/0b), floats
// (exponents, inf, nan), booleans, arrays (nested, multi-line, trailing comma), inline tables
// and comments. Dates and times are refused with a message.
//
// The result is a tree of ct_toml_value nodes; each node remembers the line and column where it
// was written so the config layer can report `file:line: ...` for a setting it rejects.
// Syntax errors come back as one line `file:line:col: expected <what>` via ct_last_error().
#ifndef CT_TOML_H
#define CT_TOML_H
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef enum {
    CT_TOML_TABLE,
    CT_TOML_ARRAY,
    CT_TOML_STRING,
    CT_TOML_INT,
    CT_TOML_FLOAT,
    CT_TOML_BOOL,
} ct_toml_type;

// How a table or array came to exist; TOML lets some be extended later and not others.
enum {
    CT_TOML_HOW_IMPLICIT,  // a parent of [a.b.c] or a value: may still get its own [header]
    CT_TOML_HOW_HEADER,    // defined by [header]: a second [header] is an error
    CT_TOML_HOW_DOTTED,    // created by a dotted key a.b = 1: more dotted keys may extend it
    CT_TOML_HOW_FROZEN,    // inline table {..} or static array [..]: complete as written
    CT_TOML_HOW_AOT,       // array of tables [[a]]: each [[a]] appends a table
};

typedef struct ct_toml_value ct_toml_value;
struct ct_toml_value {
    ct_toml_type type;
    int line, col;             // where the value (or the table's first mention) starts, 1-based
    char *s;                   // CT_TOML_STRING: the decoded text (UTF-8, NUL-terminated)
    long long i;               // CT_TOML_INT
    double f;                  // CT_TOML_FLOAT
    bool b;                    // CT_TOML_BOOL
    // CT_TOML_TABLE: n entries keys[k] -> items[k], in file order.
    // CT_TOML_ARRAY: n items, keys is NULL.
    int n, cap;
    char **keys;
    ct_toml_value **items;
    // Bookkeeping for TOML's "define each table once" rules (CT_TOML_HOW_*).
    unsigned char how;
};

// Parses `text` (NUL-terminated). `name` is used in error messages (a file name or "<string>").
// Returns the root table, or NULL with the message in ct_last_error().
ct_toml_value *ct_toml_parse(const char *text, const char *name);

// Reads and parses a file; a missing or unreadable file is an error naming the path.
ct_toml_value *ct_toml_parse_file(const char *path);

void ct_toml_free(ct_toml_value *v);

// The value under `key` in a table (a single key, not a dotted path), or NULL.
const ct_toml_value *ct_toml_get(const ct_toml_value *table, const char *key);

// The value at a dotted path such as "model.dim" (bare key parts only), or NULL.
const ct_toml_value *ct_toml_get_path(const ct_toml_value *root, const char *path);

// "table", "array", "string", "integer", "float", "boolean".
const char *ct_toml_type_name(ct_toml_type t);
#endif
