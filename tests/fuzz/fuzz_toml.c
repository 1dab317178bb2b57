// Fuzz target: the TOML reader (core/toml.c) and the run configuration loaded from a TOML file
// (ct_config_load_file, core/config.c), the path every `--config FILE` takes.
//
// Properties beyond "no crash, no leak, no UB":
//   - the string parser and the file parser agree (a file is the same text read from disk);
//   - a configuration that loads writes out (ct_config_write_toml, the config.toml a run saves
//     beside its metrics) as TOML that loads back to the same configuration: reloading a run's
//     effective config must reproduce the run.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/toml.h"
#include "fuzz_util.h"

// Visits every node, reading each field a consumer reads.
static long walk(const ct_toml_value *v) {
    long n = 1;
    ct_fuzz_check(ct_toml_type_name(v->type) != NULL, "type %d", (int)v->type);
    ct_fuzz_check(v->line >= 1 && v->col >= 1, "position %d:%d", v->line, v->col);
    if (v->type == CT_TOML_STRING) n += (long)strlen(v->s) > 0;
    if (v->type == CT_TOML_TABLE || v->type == CT_TOML_ARRAY) {
        for (int i = 0; i < v->n; i++) {
            if (v->type == CT_TOML_TABLE) {
                ct_fuzz_check(ct_toml_get(v, v->keys[i]) != NULL, "key '%s' not found in its table", v->keys[i]);
            }
            n += walk(v->items[i]);
        }
    }
    return n;
}

// The configuration as the TOML text ct_config_write_toml gives (malloc'd).
static char *config_text(const ct_config *c, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ct_fuzz_check(f != NULL, "open_memstream");
    ct_config_write_toml(c, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    int has_nul = strlen(text) != size;

    ct_toml_value *root = ct_toml_parse(text, "<fuzz>");
    if (root) {
        ct_fuzz_check(root->type == CT_TOML_TABLE, "root is a %s", ct_toml_type_name(root->type));
        walk(root);
        ct_toml_get_path(root, "model.dim");
        ct_toml_get_path(root, "a.b.c");
    }

    char path[1024];
    ct_fuzz_write("config.toml", data, size, path, sizeof path);
    ct_toml_value *from_file = ct_toml_parse_file(path);
    // A file with a NUL byte is refused as not text; otherwise the two parsers see the same text.
    if (!has_nul) ct_fuzz_check(!root == !from_file, "string parse %s, file parse %s", root ? "ok" : "failed",
                                from_file ? "ok" : ct_last_error());
    ct_toml_free(from_file);
    ct_toml_free(root);

    ct_config c;
    ct_config_defaults(&c);
    if (ct_config_load_file(&c, path) == CT_OK) {
        ct_config_validate(&c);
        size_t len1, len2;
        char *t1 = config_text(&c, &len1);
        char again[1024];
        ct_fuzz_write("again.toml", (const uint8_t *)t1, len1, again, sizeof again);
        ct_config c2;
        ct_config_defaults(&c2);
        ct_fuzz_check(ct_config_load_file(&c2, again) == CT_OK, "the written config does not load: %s\n%s",
                      ct_last_error(), t1);
        char *t2 = config_text(&c2, &len2);
        ct_fuzz_check(len1 == len2 && !memcmp(t1, t2, len1), "the written config loads as another:\n%s\n---\n%s", t1,
                      t2);
        free(t1);
        free(t2);
    }
    free(text);
    return 0;
}
