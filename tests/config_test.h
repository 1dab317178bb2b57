// Helpers shared by the configuration tests (test_config.c, test_config_names.c): parsing an
// argument list, expecting a one-line error, writing a TOML file, reading a stream whole.
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

// Parses and expects failure with a message containing each of the given fragments, on one line.
#define EXPECT_ERR(call, ...)                                                                  \
    do {                                                                                       \
        ct_status st_ = (call);                                                                \
        CHECK(st_ == CT_ERR, "%s accepted", #call);                                            \
        const char *frags_[] = {__VA_ARGS__};                                                  \
        for (size_t f_ = 0; f_ < sizeof frags_ / sizeof frags_[0]; f_++)                       \
            CHECK(strstr(ct_last_error(), frags_[f_]), "%s: message \"%s\" lacks \"%s\"", #call, \
                  ct_last_error(), frags_[f_]);                                                \
        CHECK(!strchr(ct_last_error(), '\n'), "message is not one line");                      \
    } while (0)

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
