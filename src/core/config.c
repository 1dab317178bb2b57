// Run configuration: defaults from the settings table, then a TOML file, then command-line
// overrides. Every error is one line that names the setting (and the file:line when it came
// from a file), with a "did you mean" suggestion for names that are nearly right.
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/toml.h"

enum { ERR_CAP = 512 };

static void *field_ptr(ct_config *c, const ct_setting *s) { return (char *)c + s->offset; }
static const void *field_cptr(const ct_config *c, const ct_setting *s) { return (const char *)c + s->offset; }

// ---- enum values ------------------------------------------------------------------------------

// Copies into `out` the stored spelling that `value` names: one of the choices or a synonym,
// compared without case ("GPipe" -> "gpipe", "bfloat16" -> "bf16", "8b" -> "8B").
static int enum_match(const ct_setting *s, const char *value, char *out, size_t cap) {
    size_t n = strlen(value);
    for (const char *p = s->choices; *p;) {
        size_t w = strcspn(p, "|");
        if (w == n && !strncasecmp(p, value, n) && w < cap) {
            memcpy(out, p, w);
            out[w] = 0;
            return 1;
        }
        p += w + (p[w] == '|');
    }
    for (const char *p = s->synonyms; p && *p;) {
        size_t w = strcspn(p, "|");
        const char *eq = memchr(p, '=', w);
        if (eq && (size_t)(eq - p) == n && !strncasecmp(p, value, n) && (size_t)(p + w - eq - 1) < cap) {
            memcpy(out, eq + 1, (size_t)(p + w - eq - 1));
            out[p + w - eq - 1] = 0;
            return 1;
        }
        p += w + (p[w] == '|');
    }
    return 0;
}

// ---- setting one value ------------------------------------------------------------------------

// Stores `value` (text, as typed on the command line) into the setting's field. On failure
// writes why into err ("expected an integer, got 'x'") and returns 0.
static int set_from_text(ct_config *c, const ct_setting *s, const char *value, char *err, size_t cap) {
    void *f = field_ptr(c, s);
    char *end;
    switch (s->type) {
    case CT_SET_INT: {
        errno = 0;
        long long x = strtoll(value, &end, 10);
        if (!*value || *end || isspace((unsigned char)*value)) {
            snprintf(err, cap, "expected an integer, got '%s'", value);
            return 0;
        }
        if (errno == ERANGE || x < INT_MIN || x > INT_MAX) {
            snprintf(err, cap, "expected an integer in [%d, %d], got %s", INT_MIN, INT_MAX, value);
            return 0;
        }
        *(int *)f = (int)x;
        return 1;
    }
    case CT_SET_FLOAT: {
        double x = strtod(value, &end);
        if (!*value || *end || isspace((unsigned char)*value)) {
            snprintf(err, cap, "expected a number, got '%s'", value);
            return 0;
        }
        *(double *)f = x;
        return 1;
    }
    case CT_SET_BOOL:
        if (!strcasecmp(value, "true") || !strcmp(value, "1")) {
            *(bool *)f = true;
        } else if (!strcasecmp(value, "false") || !strcmp(value, "0")) {
            *(bool *)f = false;
        } else {
            snprintf(err, cap, "expected true, false, 1 or 0, got '%s'", value);
            return 0;
        }
        return 1;
    case CT_SET_STRING:
        if (strlen(value) >= s->size) {
            snprintf(err, cap, "expected at most %zu characters, got %zu", s->size - 1, strlen(value));
            return 0;
        }
        strcpy(f, value);
        return 1;
    case CT_SET_ENUM:
        if (!enum_match(s, value, f, s->size)) {
            snprintf(err, cap, "expected one of %s, got '%s'", s->choices, value);
            return 0;
        }
        return 1;
    }
    return 0;
}

static const char *type_word(const ct_setting *s) {
    switch (s->type) {
    case CT_SET_INT: return "an integer";
    case CT_SET_FLOAT: return "a number";
    case CT_SET_BOOL: return "a boolean (true or false)";
    default: return "a string";
    }
}

// Stores a TOML value. Types must match, except that an integer may be given for a float.
static int set_from_toml(ct_config *c, const ct_setting *s, const ct_toml_value *v, char *err, size_t cap) {
    bool ok = (s->type == CT_SET_INT && v->type == CT_TOML_INT) ||
              (s->type == CT_SET_FLOAT && (v->type == CT_TOML_INT || v->type == CT_TOML_FLOAT)) ||
              (s->type == CT_SET_BOOL && v->type == CT_TOML_BOOL) ||
              ((s->type == CT_SET_STRING || s->type == CT_SET_ENUM) && v->type == CT_TOML_STRING);
    if (!ok) {
        snprintf(err, cap, "expected %s, got %s %s", type_word(s), v->type == CT_TOML_INT || v->type == CT_TOML_ARRAY ? "an" : "a",
                 ct_toml_type_name(v->type));
        return 0;
    }
    switch (s->type) {
    case CT_SET_INT:
        if (v->i < INT_MIN || v->i > INT_MAX) {
            snprintf(err, cap, "expected an integer in [%d, %d], got %lld", INT_MIN, INT_MAX, v->i);
            return 0;
        }
        *(int *)field_ptr(c, s) = (int)v->i;
        return 1;
    case CT_SET_FLOAT: *(double *)field_ptr(c, s) = v->type == CT_TOML_INT ? (double)v->i : v->f; return 1;
    case CT_SET_BOOL: *(bool *)field_ptr(c, s) = v->b; return 1;
    default: return set_from_text(c, s, v->s, err, cap);
    }
}

// ---- names and suggestions --------------------------------------------------------------------

static int edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 120 || nb > 120) return INT_MAX;
    int row[128];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

// Scores `cand` as a suggestion for `key`: a small edit distance, or `key` being the last
// part(s) of `cand` ("seq_len" -> "training.seq_len"). Returns the score, INT_MAX if too far.
static int suggestion_score(const char *key, const char *cand) {
    size_t nk = strlen(key), nc = strlen(cand);
    if (nc > nk && cand[nc - nk - 1] == '.' && !strcmp(cand + nc - nk, key)) return 1;
    int d = edit_distance(key, cand);
    int limit = (int)nk / 4 > 2 ? (int)nk / 4 : 2;
    return d <= limit ? d : INT_MAX;
}

// Writes "unknown setting 'key'" plus " (did you mean 'x'?)" when a name or alias is close; an
// alias that is close suggests the canonical name of its setting.
static void unknown_message(const char *key, char *err, size_t cap) {
    const char *best = NULL;
    int best_d = INT_MAX;
    // Scored in the names' own spelling ('_'): "local-batch-sise" is one edit from an alias.
    char folded[512];
    snprintf(folded, sizeof folded, "%s", key);
    for (char *p = folded; *p; p++)
        if (*p == '-') *p = '_';
    for (int i = 0; i < ct_n_settings; i++) {
        int d = suggestion_score(folded, ct_settings[i].name);
        char word[128];
        for (const char *p = ct_settings[i].aliases; p && *p; p += strcspn(p, " "), p += *p == ' ') {
            size_t w = strcspn(p, " ");
            if (w >= sizeof word) continue;
            memcpy(word, p, w);
            word[w] = 0;
            int da = suggestion_score(folded, word);
            if (da < d) d = da;
        }
        if (d < best_d) best = ct_settings[i].name, best_d = d;
    }
    if (best)
        snprintf(err, cap, "unknown setting '%s' (did you mean '%s'?)", key, best);
    else
        snprintf(err, cap, "unknown setting '%s' (ctitan train --help lists them)", key);
}

ct_status ct_config_set(ct_config *c, const char *key, const char *value) {
    char err[ERR_CAP];
    const ct_setting *s = ct_setting_find(key);
    if (!s) {
        unknown_message(key, err, sizeof err);
        return ct_set_error("%s", err);
    }
    if (!set_from_text(c, s, value, err, sizeof err)) return ct_set_error("%s: %s", key, err);
    return CT_OK;
}

void ct_config_defaults(ct_config *c) {
    memset(c, 0, sizeof *c);
    char err[ERR_CAP];
    for (int i = 0; i < ct_n_settings; i++)
        if (!set_from_text(c, &ct_settings[i], ct_settings[i].def, err, sizeof err))
            ct_fatal("config", "bad default of %s: %s", ct_settings[i].name, err);
    // CTITAN_DEVICE sets the default of training.device for every run started in this
    // environment (the test suite on the test device: make test-sim); a file or flag still wins.
    const char *dev = getenv("CTITAN_DEVICE");
    if (dev && *dev && !set_from_text(c, ct_setting_find("training.device"), dev, err, sizeof err))
        ct_fatal("config", "the environment variable CTITAN_DEVICE=%s: %s", dev, err);
}

// activation_checkpoint.selective = true means mode selective (a conflict with mode = full is
// left for ct_config_validate to report).
static void resolve(ct_config *c) {
    if (c->ac_selective && !strcmp(c->ac_mode, "none")) strcpy(c->ac_mode, "selective");
}

// ---- TOML files -------------------------------------------------------------------------------

typedef struct {
    const char *path;
    int *set_line;  // per setting: line where this file set it (0 = not yet)
} file_walk;

static int any_setting_under(const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < ct_n_settings; i++) {
        if (ct_setting_name_eq(ct_settings[i].name, prefix, n) && ct_settings[i].name[n] == '.') return 1;
        for (const char *p = ct_settings[i].aliases; p && *p; p += strcspn(p, " "), p += *p == ' ')
            if (ct_setting_name_eq(p, prefix, n) && p[n] == '.') return 1;
    }
    return 0;
}

static ct_status walk_table(ct_config *c, const ct_toml_value *t, const char *prefix, file_walk *w) {
    char err[ERR_CAP];
    if (t->n == 0 && *prefix && !any_setting_under(prefix))
        return ct_set_error("%s:%d: unknown section [%s]", w->path, t->line, prefix);
    for (int k = 0; k < t->n; k++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", t->keys[k]);
        const ct_toml_value *v = t->items[k];
        const ct_setting *s = ct_setting_find(name);
        if (v->type == CT_TOML_TABLE && !s) {
            if (walk_table(c, v, name, w)) return CT_ERR;
            continue;
        }
        if (!s) {
            unknown_message(name, err, sizeof err);
            return ct_set_error("%s:%d: %s", w->path, v->line, err);
        }
        int idx = (int)(s - ct_settings);
        if (w->set_line[idx])
            return ct_set_error("%s:%d: '%s' sets %s again (already set at line %d)", w->path, v->line, name, s->name,
                                w->set_line[idx]);
        if (!set_from_toml(c, s, v, err, sizeof err)) return ct_set_error("%s:%d: %s: %s", w->path, v->line, name, err);
        w->set_line[idx] = v->line;
    }
    return CT_OK;
}

ct_status ct_config_load_file(ct_config *c, const char *path) {
    ct_toml_value *root = ct_toml_parse_file(path);
    if (!root) return CT_ERR;
    int set_line[256] = {0};
    if (ct_n_settings > 256) ct_fatal("config", "settings table larger than the walk's bookkeeping");
    file_walk w = {path, set_line};
    ct_status st = walk_table(c, root, "", &w);
    ct_toml_free(root);
    if (st == CT_OK) resolve(c);
    return st;
}

// ---- the command line -------------------------------------------------------------------------

static int is_config_flag(const char *arg, const char **inline_value) {
    static const char *names[] = {"--config", "--job.config_file"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(names[i]);
        // "--job.config-file" too: '-' and '_' are one character in a name (ct_setting_find).
        if (!strncmp(arg, "--", 2) && strlen(arg) >= n && ct_setting_name_eq(arg + 2, names[i] + 2, n - 2) &&
            (arg[n] == 0 || arg[n] == '=')) {
            *inline_value = arg[n] == '=' ? arg + n + 1 : NULL;
            return 1;
        }
    }
    return 0;
}

ct_status ct_config_parse(ct_config *c, int argc, char **argv) {
    ct_config_defaults(c);
    // The file first, wherever --config sits among the arguments, so that every other
    // argument overrides it.
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (!is_config_flag(argv[i], &v)) continue;
        if (!v) {
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) return ct_set_error("%s: expected a file name", argv[i]);
            v = argv[++i];
        }
        if (path) return ct_set_error("%s: a config file was already given ('%s')", argv[i - (argv[i] == v)], path);
        path = v;
    }
    if (path && ct_config_load_file(c, path)) return CT_ERR;

    char err[ERR_CAP];
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v;
        if (is_config_flag(arg, &v)) {
            i += v == NULL;
            continue;
        }
        if (strncmp(arg, "--", 2) || !arg[2])
            return ct_set_error("unexpected argument '%s' (settings are written --section.key value)", arg);
        char key[256];
        const char *eq = strchr(arg, '=');
        size_t klen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (klen >= sizeof key) return ct_set_error("unknown setting '%.40s...'", arg + 2);
        memcpy(key, arg + 2, klen);
        key[klen] = 0;
        const ct_setting *s = ct_setting_find(key);
        if (!s) {
            unknown_message(key, err, sizeof err);
            return ct_set_error("%s", err);
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
            value = argv[++i];
        } else if (s->type == CT_SET_BOOL) {
            value = "true";  // a bare --flag
        } else {
            return ct_set_error("--%s: expected a value (%s)", key, s->type == CT_SET_ENUM ? s->choices : type_word(s));
        }
        if (!set_from_text(c, s, value, err, sizeof err)) return ct_set_error("--%s: %s", key, err);
    }
    resolve(c);
    return ct_config_validate(c);
}

// ---- help and the effective configuration -----------------------------------------------------

static void type_text(const ct_setting *s, char *out, size_t cap) {
    static const char *words[] = {"int", "float", "bool", "string", ""};
    snprintf(out, cap, "%s", s->type == CT_SET_ENUM ? s->choices : words[s->type]);
}

static void default_text(const ct_setting *s, char *out, size_t cap) {
    if (s->type == CT_SET_STRING)
        snprintf(out, cap, "\"%s\"", s->def);
    else
        snprintf(out, cap, "%s", s->def);
}

const char *ct_setting_build_note(const ct_setting *s) {
    if (!strcmp(s->name, "training.device")) {
#ifdef CT_HAVE_CUDA
        return "this build: the cuda kernels and NCCL comm are built, training on them is not yet";
#else
        return "this build has no CUDA: cuda needs a build with make CUDA=1";
#endif
    }
    return NULL;
}

void ct_config_print_help(FILE *f) {
    int wn = 0, wt = 0, wd = 0;
    char buf[256];
    for (int i = 0; i < ct_n_settings; i++) {
        const ct_setting *s = &ct_settings[i];
        int n = (int)strlen(s->name) + 2;
        if (n > wn) wn = n;
        type_text(s, buf, sizeof buf);
        if ((int)strlen(buf) > wt) wt = (int)strlen(buf);
        default_text(s, buf, sizeof buf);
        if ((int)strlen(buf) > wd) wd = (int)strlen(buf);
    }
    fprintf(f, "settings (TOML file via --config FILE; override with --name value or --name=value; '-' and '_' in a "
               "name are the same):\n");
    fprintf(f, "  %-*s  %-*s  %-*s  %s\n", wn, "name", wt, "type", wd, "default", "description [TorchTitan alias]");
    for (int i = 0; i < ct_n_settings; i++) {
        const ct_setting *s = &ct_settings[i];
        char name[160], type[128], def[300];
        snprintf(name, sizeof name, "--%s", s->name);
        type_text(s, type, sizeof type);
        default_text(s, def, sizeof def);
        fprintf(f, "  %-*s  %-*s  %-*s  %s", wn, name, wt, type, wd, def, s->desc);
        const char *note = ct_setting_build_note(s);
        if (note) fprintf(f, " -- %s", note);
        if (s->aliases) fprintf(f, " [%s]", s->aliases);
        fputc('\n', f);
    }
}

// Shortest %g spelling that reads back as the same double, always recognisable as a TOML float.
static void format_float(double x, char *out, size_t cap) {
    if (isnan(x)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, cap, "%sinf", x < 0 ? "-" : "");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x) break;
    }
    if (!strpbrk(out, ".eE")) strncat(out, ".0", cap - strlen(out) - 1);
}

static void write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20 || ch == 0x7F) fprintf(f, "\\u%04X", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void write_value(FILE *f, const ct_config *c, const ct_setting *s) {
    char buf[64];
    switch (s->type) {
    case CT_SET_INT: fprintf(f, "%d", *(const int *)field_cptr(c, s)); break;
    case CT_SET_FLOAT:
        format_float(*(const double *)field_cptr(c, s), buf, sizeof buf);
        fputs(buf, f);
        break;
    case CT_SET_BOOL: fputs(*(const bool *)field_cptr(c, s) ? "true" : "false", f); break;
    default: write_string(f, field_cptr(c, s)); break;
    }
}

void ct_config_write_toml(const ct_config *c, FILE *f) {
    fprintf(f, "# Effective ctitan configuration (reload with --config FILE).\n");
    // Top-level keys must come before the first [section].
    for (int i = 0; i < ct_n_settings; i++) {
        const ct_setting *s = &ct_settings[i];
        if (strchr(s->name, '.')) continue;
        fprintf(f, "%s = ", s->name);
        write_value(f, c, s);
        fprintf(f, "  # %s\n", s->desc);
    }
    // Then one [section] per first name part, in table order.
    for (int i = 0; i < ct_n_settings; i++) {
        const char *dot = strchr(ct_settings[i].name, '.');
        if (!dot) continue;
        size_t n = (size_t)(dot - ct_settings[i].name);
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strncmp(ct_settings[j].name, ct_settings[i].name, n + 1);
        if (seen) continue;
        fprintf(f, "\n[%.*s]\n", (int)n, ct_settings[i].name);
        for (int j = i; j < ct_n_settings; j++) {
            const ct_setting *s = &ct_settings[j];
            if (strncmp(s->name, ct_settings[i].name, n + 1)) continue;
            fprintf(f, "%s = ", s->name + n + 1);
            write_value(f, c, s);
            fprintf(f, "  # %s\n", s->desc);
        }
    }
}
