// The subcommands' option parser (cli/options.h).
#include "cli/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool ct_opt_name_eq(const char *given, size_t len, const char *name) {
    if (strlen(name) != len) return false;
    for (size_t i = 0; i < len; i++) {
        char a = given[i] == '_' ? '-' : given[i], b = name[i] == '_' ? '-' : name[i];
        if (a != b) return false;
    }
    return true;
}

static void opt_label(const ct_opt *o, char *buf, size_t cap) {
    int n = o->short_name ? snprintf(buf, cap, "-%c, --%s", o->short_name, o->name) : snprintf(buf, cap, "--%s", o->name);
    if (o->type != CT_OPT_FLAG && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " %s%s", o->metavar ? o->metavar : "VALUE", o->type == CT_OPT_LIST ? "..." : "");
}

void ct_opt_usage(const ct_opt_spec *s, FILE *f) {
    fprintf(f, "usage: %s %s\noptions ('-' and '_' in a name are the same; --name=value works too):\n", s->prog,
            s->args ? s->args : "[options]");
    size_t width = strlen("-h, --help");
    char label[160];
    for (int i = 0; i < s->n_opts; i++) {
        opt_label(&s->opts[i], label, sizeof label);
        if (strlen(label) > width) width = strlen(label);
    }
    for (int i = 0; i < s->n_opts; i++) {
        opt_label(&s->opts[i], label, sizeof label);
        fprintf(f, "  %-*s  %s\n", (int)width, label, s->opts[i].help ? s->opts[i].help : "");
    }
    fprintf(f, "  %-*s  %s\n", (int)width, "-h, --help", "this help");
    if (s->about) fputs(s->about, f);
}

static int err(const ct_opt_spec *s, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "%s: ", s->prog);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return CT_OPT_ERROR;
}

// Stores one value of option o (named `as` in messages, as the user wrote it).
static int store(const ct_opt_spec *s, const ct_opt *o, const char *as, const char *v, int argc) {
    char *end;
    errno = 0;
    char range[96] = "";
    // An upper bound of 1e15 or more only keeps the value in its type: not worth printing.
    if (o->min < o->max && o->max >= 1e15) snprintf(range, sizeof range, " >= %.15g", o->min);
    else if (o->min < o->max) snprintf(range, sizeof range, " in [%.15g, %.15g]", o->min, o->max);
    switch (o->type) {
        case CT_OPT_FLAG: *(bool *)o->dest = true; return 0;
        case CT_OPT_STR: *(const char **)o->dest = v; return 0;
        case CT_OPT_LIST: {
            ct_opt_list *l = o->dest;
            if (!l->v && !(l->v = calloc((size_t)argc + 1, sizeof *l->v))) return err(s, "%s%s: out of memory", as, "");
            l->v[l->n++] = v;
            return 0;
        }
        case CT_OPT_LONG: {
            long x = strtol(v, &end, 10);
            if (errno || end == v || *end || (o->min < o->max && (x < o->min || x > o->max))) {
                fprintf(stderr, "%s: %s: expected an integer%s, got '%s'\n", s->prog, as, range, v);
                return CT_OPT_ERROR;
            }
            *(long *)o->dest = x;
            return 0;
        }
        case CT_OPT_DOUBLE: {
            double x = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(x) || (o->min < o->max && (x < o->min || x > o->max))) {
                fprintf(stderr, "%s: %s: expected a number%s, got '%s'\n", s->prog, as, range, v);
                return CT_OPT_ERROR;
            }
            *(double *)o->dest = x;
            return 0;
        }
        case CT_OPT_U64: {
            unsigned long long x = strtoull(v, &end, 10);
            // strtoull takes "-1" as 2^64-1: a sign is refused before it can wrap.
            if (errno || end == v || *end || strchr(v, '-') || strchr(v, '+')) {
                fprintf(stderr, "%s: %s: expected an integer >= 0, got '%s'\n", s->prog, as, v);
                return CT_OPT_ERROR;
            }
            *(unsigned long long *)o->dest = x;
            return 0;
        }
    }
    return CT_OPT_ERROR;
}

int ct_opt_parse(const ct_opt_spec *s, int argc, char **argv) {
    if (s->n_pos) *s->n_pos = 0;
    bool only_pos = false;  // after "--"
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || !a[1]) {  // "-" alone is a value (stdin), not an option
            if (!s->pos) return err(s, "unexpected argument '%s' (%s --help)", a, s->prog);
            s->pos[(*s->n_pos)++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ct_opt_usage(s, stdout);
            return CT_OPT_HELP;
        }
        const ct_opt *o = NULL;
        const char *inline_v = NULL;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (int k = 0; k < s->n_opts && !o; k++)
                if (ct_opt_name_eq(name, len, s->opts[k].name)) o = &s->opts[k];
            if (eq) inline_v = eq + 1;
        } else if (!a[2]) {
            for (int k = 0; k < s->n_opts && !o; k++)
                if (s->opts[k].short_name == a[1]) o = &s->opts[k];
        }
        if (!o) {
            // The name alone (up to '='), so that a value is not echoed as part of it.
            char name[128];
            size_t len = strcspn(a, "=");
            snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), a);
            return err(s, "unknown option '%s' (%s --help)", name, s->prog);
        }
        char as[160];  // the option as written, for messages
        snprintf(as, sizeof as, "%.*s", (int)strcspn(a, "="), a);
        if (o->type == CT_OPT_FLAG) {
            if (inline_v) return err(s, "%s takes no value%s", as, "");
            store(s, o, as, NULL, argc);
            continue;
        }
        if (inline_v) {
            int rc = store(s, o, as, inline_v, argc);
            if (rc) return rc;
        } else {
            // A list's first value cannot be an option: `--input --out x` is a missing input.
            if (i + 1 >= argc || (o->type == CT_OPT_LIST && !strncmp(argv[i + 1], "--", 2)))
                return err(s, "%s: expected a value%s", as, "");
            int rc = store(s, o, as, argv[++i], argc);
            if (rc) return rc;
        }
        if (o->type == CT_OPT_LIST)  // every following argument up to the next option is one more value
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) store(s, o, as, argv[++i], argc);
    }
    return CT_OPT_OK;
}
