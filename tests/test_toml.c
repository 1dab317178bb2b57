// The TOML reader: value types, nesting, comments, and for each syntax error the exact
// file:line:col and the thing that was expected. Expected values and positions are worked out
// by hand from the input text.
#include <string.h>

#include "core/toml.h"
#include "expect_error.h"
#include "test.h"

static const ct_toml_value *at(const ct_toml_value *root, const char *path) { return ct_toml_get_path(root, path); }

static void test_scalars(void) {
    const char *text =
        "int1 = +42\n"
        "int2 = -17\n"
        "int3 = 1_000_000\n"
        "int4 = 0\n"
        "hex = 0xff\n"
        "oct = 0o17\n"
        "bin = 0b101\n"
        "big = 9223372036854775807\n"
        "f1 = 8e-4\n"
        "f2 = -0.25\n"
        "f3 = 6.626e-34\n"
        "f4 = 1_0.0_1\n"
        "f5 = 5E+2\n"
        "f6 = inf\n"
        "f7 = -inf\n"
        "f8 = nan\n"
        "t = true\n"
        "f = false\n";
    ct_toml_value *r = ct_toml_parse(text, "t.toml");
    CHECK(r, "parse failed: %s", ct_last_error());
    if (!r) return;
    const char *ints[] = {"int1", "int2", "int3", "int4", "hex", "oct", "bin", "big"};
    long long want_i[] = {42, -17, 1000000, 0, 255, 15, 5, 9223372036854775807LL};
    for (int k = 0; k < 8; k++) {
        const ct_toml_value *v = at(r, ints[k]);
        CHECK(v && v->type == CT_TOML_INT && v->i == want_i[k], "%s", ints[k]);
    }
    const char *flts[] = {"f1", "f2", "f3", "f4", "f5"};
    double want_f[] = {0.0008, -0.25, 6.626e-34, 10.01, 500.0};
    for (int k = 0; k < 5; k++) {
        const ct_toml_value *v = at(r, flts[k]);
        CHECK(v && v->type == CT_TOML_FLOAT, "%s", flts[k]);
        if (v) CHECK_CLOSE(v->f, want_f[k], 1e-15, 0);
    }
    CHECK(isinf(at(r, "f6")->f) && at(r, "f6")->f > 0, "inf");
    CHECK(isinf(at(r, "f7")->f) && at(r, "f7")->f < 0, "-inf");
    CHECK(isnan(at(r, "f8")->f), "nan");
    CHECK(at(r, "t")->type == CT_TOML_BOOL && at(r, "t")->b, "true");
    CHECK(at(r, "f")->type == CT_TOML_BOOL && !at(r, "f")->b, "false");
    CHECK(at(r, "f3")->line == 11 && at(r, "f3")->col == 6, "position %d:%d", at(r, "f3")->line, at(r, "f3")->col);
    ct_toml_free(r);
}

static void test_strings(void) {
    const char *text =
        "basic = \"tab\\there \\\"q\\\" back\\\\slash \\u00E9 \\U0001F600\"\n"
        "literal = 'C:\\path\\no escapes'\n"
        "empty = \"\"\n"
        "ml = \"\"\"\n"
        "line one\n"
        "line \\\n"
        "    two\"\"\"\n"
        "mll = '''\n"
        "raw \\n text\n"
        "'''\n"
        "hash = \"a # not a comment\" # a comment\n";
    ct_toml_value *r = ct_toml_parse(text, "t.toml");
    CHECK(r, "parse failed: %s", ct_last_error());
    if (!r) return;
    CHECK(!strcmp(at(r, "basic")->s, "tab\there \"q\" back\\slash \xC3\xA9 \xF0\x9F\x98\x80"), "basic: [%s]", at(r, "basic")->s);
    CHECK(!strcmp(at(r, "literal")->s, "C:\\path\\no escapes"), "literal: [%s]", at(r, "literal")->s);
    CHECK(!strcmp(at(r, "empty")->s, ""), "empty");
    CHECK(!strcmp(at(r, "ml")->s, "line one\nline two"), "ml: [%s]", at(r, "ml")->s);
    CHECK(!strcmp(at(r, "mll")->s, "raw \\n text\n"), "mll: [%s]", at(r, "mll")->s);
    CHECK(!strcmp(at(r, "hash")->s, "a # not a comment"), "hash: [%s]", at(r, "hash")->s);
    ct_toml_free(r);
}

static void test_tables_and_nesting(void) {
    const char *text =
        "# a comment line\r\n"
        "top = 1   # trailing comment\r\n"
        "\r\n"
        "[model]\r\n"
        "dim = 256\r\n"
        "rope.theta = 500000.0\r\n"
        "\"quoted.key\" = 'q'\r\n"
        "[ quantization . float8 ]\n"
        "enable = true\n"
        "[a.b.c]\n"
        "x = 1\n"
        "[a]\n"  // defining a parent after its child is allowed
        "y = 2\n"
        "[arrays]\n"
        "nested = [ [1, 2], [\"a\", 'b'], [] ]\n"
        "multi = [\n"
        "  1,  # one\n"
        "  2,\n"
        "  # a comment line inside\n"
        "  3,\n"
        "]\n"
        "inline = { name = \"x\", size.w = 3 }\n"
        "[[runs]]\n"
        "n = 1\n"
        "[[runs]]\n"
        "n = 2\n";
    ct_toml_value *r = ct_toml_parse(text, "t.toml");
    CHECK(r, "parse failed: %s", ct_last_error());
    if (!r) return;
    CHECK(at(r, "top")->i == 1, "top");
    CHECK(at(r, "model.dim")->i == 256, "model.dim");
    CHECK(at(r, "model.rope.theta")->f == 500000.0, "dotted key");
    const ct_toml_value *model = at(r, "model");
    CHECK(ct_toml_get(model, "quoted.key") && !strcmp(ct_toml_get(model, "quoted.key")->s, "q"), "quoted key is one key");
    CHECK(at(r, "quantization.float8.enable")->b, "dotted table header with spaces");
    CHECK(at(r, "a.b.c.x")->i == 1 && at(r, "a.y")->i == 2, "parent after child");
    const ct_toml_value *nested = at(r, "arrays.nested");
    CHECK(nested->type == CT_TOML_ARRAY && nested->n == 3, "nested n=%d", nested->n);
    CHECK(nested->items[0]->n == 2 && nested->items[0]->items[1]->i == 2, "nested[0]");
    CHECK(!strcmp(nested->items[1]->items[1]->s, "b"), "nested[1]");
    CHECK(nested->items[2]->type == CT_TOML_ARRAY && nested->items[2]->n == 0, "empty array");
    const ct_toml_value *multi = at(r, "arrays.multi");
    CHECK(multi->n == 3 && multi->items[2]->i == 3, "multi-line array with trailing comma");
    CHECK(!strcmp(at(r, "arrays.inline.name")->s, "x") && at(r, "arrays.inline.size.w")->i == 3, "inline table");
    const ct_toml_value *runs = at(r, "runs");
    CHECK(runs->type == CT_TOML_ARRAY && runs->n == 2 && ct_toml_get(runs->items[1], "n")->i == 2, "array of tables");
    // Keys keep file order.
    CHECK(!strcmp(model->keys[0], "dim") && !strcmp(model->keys[1], "rope"), "order");
    CHECK(at(r, "model.dim")->line == 5, "line of model.dim = %d", at(r, "model.dim")->line);
    ct_toml_free(r);
}

static void test_empty_and_comment_only(void) {
    ct_toml_value *r = ct_toml_parse("", "t.toml");
    CHECK(r && r->n == 0, "empty document");
    ct_toml_free(r);
    r = ct_toml_parse("# only\n   # comments\n\n", "t.toml");
    CHECK(r && r->n == 0, "comment-only document");
    ct_toml_free(r);
}

// Each bad input, the position (worked out by counting characters) and what was expected.
static void test_syntax_errors(void) {
    static const struct {
        const char *text, *where, *expected;
    } cases[] = {
        {"a = \n", "bad.toml:1:5: ", "expected a value after '='"},
        {"a = \"abc\n", "bad.toml:1:9: ", "expected \" to close the string"},
        {"a = 'abc", "bad.toml:1:9: ", "expected ' to close the string"},
        {"a = 1 2\n", "bad.toml:1:7: ", "expected end of line after the value"},
        {"[a\n", "bad.toml:1:3: ", "expected ']' to close the table header"},
        {"[[a]\n", "bad.toml:1:4: ", "expected ']]' to close the table header"},
        {"[a] x\n", "bad.toml:1:5: ", "expected end of line after the table header"},
        {"a 1\n", "bad.toml:1:3: ", "expected '=' after the key"},
        {"x = 1\n= 1\n", "bad.toml:2:1: ", "expected a key"},
        {"a.\n", "bad.toml:1:3: ", "expected a key after '.'"},
        {"a = 1__0\n", "bad.toml:1:7: ", "expected a digit after '_'"},
        {"a = 1.\n", "bad.toml:1:7: ", "expected a digit after '.'"},
        {"a = 1.e5\n", "bad.toml:1:7: ", "expected a digit after '.'"},
        {"a = 1e\n", "bad.toml:1:7: ", "expected a digit in the exponent"},
        {"a = 007\n", "bad.toml:1:5: ", "expected a number without leading zeros"},
        {"a = 12abc\n", "bad.toml:1:7: ", "expected end of the number, found 'a'"},
        {"a = 0xg\n", "bad.toml:1:7: ", "expected a hex digit"},
        {"a = 99999999999999999999\n", "bad.toml:1:5: ", "expected an integer that fits in 64 bits"},
        {"a = 1979-05-27\n", "bad.toml:1:5: ", "expected a string, number or boolean (dates and times are not supported)"},
        {"a = bf16\n", "bad.toml:1:5: ", "expected a value (a quoted string"},
        {"a = \"\\q\"\n", "bad.toml:1:6: ", "expected an escape sequence"},
        {"a = \"\\u12G4\"\n", "bad.toml:1:10: ", "expected 4 hex digits after '\\u'"},
        {"a = \"\\uD800\"\n", "bad.toml:1:6: ", "expected a Unicode scalar value"},
        {"a = \"x\ty\x01\"\n", "bad.toml:1:9: ", "expected a printable character"},
        {"a = [1, 2\n", "bad.toml:2:1: ", "expected ',' or ']' in the array"},
        {"a = [1 2]\n", "bad.toml:1:8: ", "expected ',' or ']' in the array"},
        {"a = {b = 1\n", "bad.toml:1:11: ", "expected ',' or '}' in the inline table"},
        {"a = {b 1}\n", "bad.toml:1:8: ", "expected '=' after the key"},
        {"[t]\na = 1\n\n  b = \"\"\"never closed\n", "bad.toml:4:7: ", "expected \"\"\" to close the multi-line string"},
        {"a = 1\na = 2\n", "bad.toml:2:1: ", "duplicate key 'a' (first set at line 1)"},
        {"[m]\nd = 1\nd = 2\n", "bad.toml:3:1: ", "duplicate key 'm.d'"},
        {"[x]\n[x]\n", "bad.toml:2:1: ", "expected each table once: [x] was already defined at line 1"},
        {"a = 1\n[a]\n", "bad.toml:2:1: ", "expected 'a' to be a table, but line 1 made it an integer"},
        {"a = 1\na.b = 2\n", "bad.toml:2:1: ", "expected 'a' to be a table, but line 1 made it an integer"},
        {"a = [1]\n[[a]]\n", "bad.toml:2:1: ", "expected 'a' to be an array of tables, but line 1 made it a plain array"},
        {"a = {x = 1}\na.y = 2\n", "bad.toml:2:1: ", "expected a new key: table 'a' was completed at line 1"},
        {"a = 1\r", "bad.toml:1:6: ", "expected end of line after the value, found byte 0x0D"},
        {"@\n", "bad.toml:1:1: ", "expected a key, a [table] header or a comment"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ct_toml_value *r = ct_toml_parse(cases[k].text, "bad.toml");
        CHECK(!r, "case %zu accepted: %s", k, cases[k].text);
        ct_toml_free(r);
        const char *e = ct_last_error();
        size_t nw = strlen(cases[k].where);
        CHECK(!strncmp(e, cases[k].where, nw), "case %zu position: got \"%s\", want prefix \"%s\"", k, e, cases[k].where);
        CHECK(!strncmp(e + (strlen(e) >= nw ? nw : 0), cases[k].expected, strlen(cases[k].expected)),
              "case %zu: got \"%s\", want \"%s%s\"", k, e, cases[k].where, cases[k].expected);
        CHECK(!strchr(e, '\n'), "case %zu: message is not one line", k);
    }
}

static void test_missing_file(void) {
    ct_toml_value *r = ct_toml_parse_file("tests/fixtures/config/does_not_exist.toml");
    CHECK(!r, "missing file accepted");
    EXPECT_ERROR(CT_ERR, CT_E_IO, "tests/fixtures/config/does_not_exist.toml",
                 "tests/fixtures/config/does_not_exist.toml: cannot open");
}

static void test_deep_nesting_refused(void) {
    char text[400] = "a = ";
    for (int k = 0; k < 100; k++) strcat(text, "[");
    ct_toml_value *r = ct_toml_parse(text, "deep.toml");
    CHECK(!r, "deep nesting accepted");
    EXPECT_ERROR(CT_ERR, CT_E_DATA, "deep.toml", "expected arrays and tables nested at most");
}

int main(void) {
    CT_RUN(test_scalars);
    CT_RUN(test_strings);
    CT_RUN(test_tables_and_nesting);
    CT_RUN(test_empty_and_comment_only);
    CT_RUN(test_syntax_errors);
    CT_RUN(test_missing_file);
    CT_RUN(test_deep_nesting_refused);
    CT_TEST_EXIT();
}
