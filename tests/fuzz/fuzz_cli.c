// Fuzz target: command-line overrides (ct_config_parse, core/config.c): the input is split at
// newlines into argv, as `ctitan train ARG...` would receive it (without the program and
// subcommand names). A `--config FILE` among them loads that file first, as in a real run.
//
// Property beyond "no crash, no leak, no UB": a configuration that parses and validates writes
// out as TOML (the config.toml a run saves) that loads back to the same configuration.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "fuzz_util.h"

enum { MAX_ARGS = 64 };

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
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (char *p = text; argc < MAX_ARGS;) {
        argv[argc++] = p;
        char *nl = memchr(p, '\n', (size_t)(text + size - p));
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    if (size == 0) argc = 0;

    ct_config c;
    if (ct_config_parse(&c, argc, argv) == CT_OK) {
        ct_config_check_implemented(&c);
        ct_config_shard_degree(&c, 8);
        size_t len1, len2;
        char *t1 = config_text(&c, &len1);
        char path[1024];
        ct_fuzz_write("effective.toml", (const uint8_t *)t1, len1, path, sizeof path);
        ct_config c2;
        char arg0[] = "--config";
        char *argv2[] = {arg0, path, NULL};
        ct_fuzz_check(ct_config_parse(&c2, 2, argv2) == CT_OK, "the written config does not load: %s\n%s",
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
