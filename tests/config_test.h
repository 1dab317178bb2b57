// Helpers shared by the configuration tests (test_config.c, test_config_names.c): parsing an
// argument list, writing a TOML file, reading a stream whole. Errors are expected with
// EXPECT_ERROR (expect_error.h).
#ifndef CT_TEST_CONFIG_TEST_H
#define CT_TEST_CONFIG_TEST_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "test.h"

#define FIX "tests/fixtures/config/"

// ct_config_parse over a NULL-terminated list of arguments.
static inline ct_status parse(ct_config *c, ...) {
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, c);
    for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    return ct_config_parse(c, argc, argv);
}

static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static inline char *read_all(FILE *f) {
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    return s;
}
#endif
