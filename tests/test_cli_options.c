// The subcommands' option parser (cli/options.h): both spellings of a name, the = form, an
// unknown option, a missing value, a bad number, and a usage that lists every option.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/options.h"
#include "test.h"

typedef struct {
    const char *model;
    long max_new;
    double temp;
    bool bos;
    ct_opt_list in;
} vals;

#define N_OPTS 5
static void table(vals *v, ct_opt *o) {
    const ct_opt t[N_OPTS] = {
        {"model", 0, CT_OPT_STR, &v->model, "FILE", "the model", 0, 0},
        {"max_new_tokens", 0, CT_OPT_LONG, &v->max_new, "N", "tokens to add", 0, 1000},
        {"temperature", 't', CT_OPT_DOUBLE, &v->temp, "T", "sampling temperature", 0, 0},
        {"bos", 0, CT_OPT_FLAG, &v->bos, NULL, "begin with BOS", 0, 0},
        {"input-file", 0, CT_OPT_LIST, &v->in, "FILE", "inputs", 0, 0},
    };
    memcpy(o, t, sizeof t);
}

// Parses with stderr captured into err; returns the parser's result.
static int parse(vals *v, int argc, char **argv, char *err, size_t cap) {
    memset(v, 0, sizeof *v);
    ct_opt o[N_OPTS];
    table(v, o);
    ct_opt_spec s = {"ctitan test", "[options]", NULL, o, N_OPTS, NULL, NULL};
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = ct_opt_parse(&s, argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = 0;
    fclose(tmp);
    return rc;
}

static void test_both_spellings_and_equals(void) {
    vals v;
    char err[512];
    char *a1[] = {"--max_new_tokens", "7", "--model=m.st", "--bos", "-t", "0.5"};
    CHECK(parse(&v, 6, a1, err, sizeof err) == CT_OPT_OK && v.max_new == 7 && !strcmp(v.model, "m.st") && v.bos &&
              v.temp == 0.5, "underscore / = form: %s", err);
    char *a2[] = {"--max-new-tokens=9", "--input_file", "a", "b", "--temperature=2"};
    CHECK(parse(&v, 5, a2, err, sizeof err) == CT_OPT_OK && v.max_new == 9 && v.in.n == 2 && !strcmp(v.in.v[1], "b") &&
              v.temp == 2, "dash spelling: %s", err);
    free(v.in.v);
}

static void test_errors_name_the_option(void) {
    vals v;
    char err[512];
    char *a1[] = {"--colour", "red"};
    CHECK(parse(&v, 2, a1, err, sizeof err) == CT_OPT_ERROR && strstr(err, "unknown option '--colour'") &&
              !strchr(strchr(err, '\n') + 1, '\n'), "unknown: %s", err);
    char *a2[] = {"--model"};
    CHECK(parse(&v, 1, a2, err, sizeof err) == CT_OPT_ERROR && strstr(err, "--model: expected a value"), "missing: %s",
          err);
    char *a3[] = {"--max_new_tokens", "12x"};
    CHECK(parse(&v, 2, a3, err, sizeof err) == CT_OPT_ERROR && strstr(err, "--max_new_tokens") && strstr(err, "12x"),
          "bad number: %s", err);
    char *a4[] = {"--max-new-tokens=1001"};
    CHECK(parse(&v, 1, a4, err, sizeof err) == CT_OPT_ERROR && strstr(err, "--max-new-tokens") && strstr(err, "1000"),
          "out of range: %s", err);
    char *a5[] = {"--bos=1"};
    CHECK(parse(&v, 1, a5, err, sizeof err) == CT_OPT_ERROR && strstr(err, "--bos takes no value"), "flag value: %s", err);
    char *a6[] = {"stray"};
    CHECK(parse(&v, 1, a6, err, sizeof err) == CT_OPT_ERROR && strstr(err, "unexpected argument 'stray'"), "stray: %s",
          err);
    char *a7[] = {"--input-file", "--bos"};
    CHECK(parse(&v, 2, a7, err, sizeof err) == CT_OPT_ERROR && strstr(err, "--input-file: expected a value"),
          "empty list: %s", err);
    free(v.in.v);
}

static void test_help_lists_every_option(void) {
    vals v = {0};
    ct_opt o[N_OPTS];
    table(&v, o);
    ct_opt_spec s = {"ctitan test", "--model FILE [options]", "about text\n", o, N_OPTS, NULL, NULL};
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    ct_opt_usage(&s, f);
    fclose(f);
    CHECK(!strncmp(buf, "usage: ctitan test --model FILE [options]\n", 42), "usage line: %s", buf);
    for (int i = 0; i < N_OPTS; i++) {
        char want[64];
        snprintf(want, sizeof want, "--%s", o[i].name);
        CHECK(strstr(buf, want) && strstr(buf, o[i].help), "%s missing from: %s", want, buf);
    }
    CHECK(strstr(buf, "-t, --temperature T") && strstr(buf, "-h, --help") && strstr(buf, "about text"), "%s", buf);
    char *a[] = {"--bos", "--help"};
    char err[64];
    fflush(stdout);
    FILE *null = fopen("/dev/null", "w");
    int saved = dup(1);
    dup2(fileno(null), 1);
    int rc = parse(&v, 2, a, err, sizeof err);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(null);
    CHECK(rc == CT_OPT_HELP, "--help: %d", rc);
}

int main(void) {
    CT_RUN(test_both_spellings_and_equals);
    CT_RUN(test_errors_name_the_option);
    CT_RUN(test_help_lists_every_option);
    CT_TEST_EXIT();
}
