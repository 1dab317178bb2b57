// Error messages quote input (keys, values, paths, file contents), and the input decides what
// bytes they hold: a TOML key with a newline and an escape sequence ("a\nb\u001b[2J") once gave
// a two-line error and cleared the user's terminal. Every message is one line of printable
// text: control characters (C0, DEL, C1) and bytes that are not UTF-8 come out escaped (\n, \t,
// \xNN, \u0085), while UTF-8 text and backslashes stay as they are, so wrapping an escaped
// message again changes nothing. Through ct_set_error, ct_fatal, and a config file end to end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "fatal_child.h"
#include "test.h"

static int printable_line(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

static void test_set_error_escapes_controls(void) {
    ct_set_error("key '%s': unknown", "a\nb\x1b[2J\tc\r\x7f");
    CHECK(!strcmp(ct_last_error(), "key 'a\\nb\\x1b[2J\\tc\\r\\x7f': unknown"), "%s", ct_last_error());
    // C1 controls as UTF-8 (U+0085 NEL, U+009B CSI) and stray bytes that are not UTF-8.
    ct_set_error("%s", "x\xc2\x85y\xc2\x9bz\x9b\xff");
    CHECK(!strcmp(ct_last_error(), "x\\u0085y\\u009bz\\x9b\\xff"), "%s", ct_last_error());
}

static void test_set_error_keeps_text(void) {
    const char *s = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash \"q\"";
    ct_set_error("%s", s);
    CHECK(!strcmp(ct_last_error(), s), "%s", ct_last_error());
    // Wrapping an escaped message escapes nothing twice.
    ct_set_error("%s", "a\nb");
    ct_set_error("file x: %s", ct_last_error());
    CHECK(!strcmp(ct_last_error(), "file x: a\\nb"), "%s", ct_last_error());
}

static void fatal_with_controls(void) { ct_fatal("where\n", "what\x1b[31m %s", "now\r\n"); }

static void test_fatal_escapes_controls(void) {
    char err[512];
    int rc = ct_test_run_fatal_void(fatal_with_controls, err, sizeof err);
    CHECK(rc == 1 && !strcmp(err, "where\\n: what\\x1b[31m now\\r\\n\n"), "exit %d: '%s'", rc, err);
}

static void test_toml_key_with_newline_and_escape(void) {
    char path[] = "/tmp/ct_escape_XXXXXX";
    int fd = mkstemp(path);
    const char *text = "[training]\n\"st\\neps\\u001b[2J\" = 3\n";
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
    ct_config c;
    ct_config_defaults(&c);
    CHECK(ct_config_load_file(&c, path) == CT_ERR, "accepted");
    const char *e = ct_last_error();
    CHECK(printable_line(e) && strstr(e, "st\\neps\\x1b[2J") && strstr(e, path), "'%s'", e);
    unlink(path);
}

int main(void) {
    CT_RUN(test_set_error_escapes_controls);
    CT_RUN(test_set_error_keeps_text);
    CT_RUN(test_fatal_escapes_controls);
    CT_RUN(test_toml_key_with_newline_and_escape);
    CT_TEST_EXIT();
}
