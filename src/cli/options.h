// One option parser for every subcommand but `train` (which has ct_config_parse). A subcommand
// describes its options in a table; the parser reads `--name value` and `--name=value`, treats
// '-' and '_' in a name as the same character (so `--vocab-size` and `--vocab_size`,
// `--max_new_tokens` and `--max-new-tokens` are one option: the two styles the commands grew
// with both keep working), prints the usage generated from the table for `--help` / `-h`, and
// answers an unknown option, a missing value or a bad number with one line naming the option.
#ifndef CT_CLI_OPTIONS_H
#define CT_CLI_OPTIONS_H
#include <stdbool.h>
#include <stdio.h>

typedef enum {
    CT_OPT_FLAG,    // no value: *(bool *)dest = true
    CT_OPT_STR,     // const char **dest
    CT_OPT_LIST,    // ct_opt_list *dest: one or more values, up to the next argument that starts with "--"
    CT_OPT_LONG,    // long *dest, in [min, max] when min < max
    CT_OPT_DOUBLE,  // double *dest, finite, in [min, max] when min < max
    CT_OPT_U64,     // unsigned long long *dest (no sign accepted)
} ct_opt_type;

// The values of a CT_OPT_LIST option (pointers into argv). v is allocated by the parser: free() it.
typedef struct {
    const char **v;
    int n;
} ct_opt_list;

typedef struct {
    const char *name;     // without "--", spelt as documented ('-' and '_' match each other)
    char short_name;      // a one-letter alias (-o), or 0
    ct_opt_type type;
    void *dest;
    const char *metavar;  // the value's name in the usage ("N", "FILE"); ignored for flags
    const char *help;     // one line
    double min, max;      // range of a number, inclusive; checked when min < max
} ct_opt;

typedef struct {
    const char *prog;   // "ctitan tokenizer train": the prefix of every message
    const char *args;   // the synopsis after prog in the usage line
    const char *about;  // text after the option list (ends with '\n'), or NULL
    const ct_opt *opts;
    int n_opts;
    // Arguments that are not options: NULL when the command takes none (one is then an error),
    // else an array of argc entries that receives them in order, their count in *n_pos.
    const char **pos;
    int *n_pos;
} ct_opt_spec;

enum { CT_OPT_OK = 0, CT_OPT_HELP = 1, CT_OPT_ERROR = 2 };

// Parses argv[0..argc) (the arguments after the subcommand's name) into the table's
// destinations. CT_OPT_OK; CT_OPT_HELP after printing the usage to stdout (the command then
// exits 0); CT_OPT_ERROR after printing one line to stderr (the command then exits 2).
int ct_opt_parse(const ct_opt_spec *spec, int argc, char **argv);

// The usage: "usage: PROG ARGS", one line per option (and -h, --help), then the about text.
void ct_opt_usage(const ct_opt_spec *spec, FILE *f);

// Does `given` (a name without "--", up to its '=' or end) name `name`, '-' == '_'?
bool ct_opt_name_eq(const char *given, size_t len, const char *name);
#endif
