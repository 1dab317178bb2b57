// Run configuration: defaults from the settings table, then a TOML file, then command-line
// overrides. Every error is one line that names the setting (and the file:line when it came
// from a file), with a "did you mean" suggestion for names that are nearly right.
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/config_internal.h"
#include "core/toml.h"

enum { ERR_CAP = 512 };


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

// The place of `name` among the setting's choices, or -1.
static int choice_index(const ct_setting *s, const char *name) {
    size_t n = strlen(name);
    int at = 0;
    for (const char *p = s->choices; *p; p += strcspn(p, "|"), p += *p == '|', at++)
        if (strcspn(p, "|") == n && !strncmp(p, name, n)) return at;
    return -1;
}

// The spelling of choice `v` of `s`, in `out`; 0 when v is outside the choices.
int ct_setting_choice_name(const ct_setting *s, int v, char *out, size_t cap) {
    int at = 0;
    for (const char *p = s->choices; *p; p += strcspn(p, "|"), p += *p == '|', at++)
        if (at == v) {
            snprintf(out, cap, "%.*s", (int)strcspn(p, "|"), p);
            return 1;
        }
    return 0;
}

const char *ct_setting_choice(const char *name, int v, char *buf, size_t cap) {
    const ct_setting *s = ct_setting_find(name);
    if (!s || s->type != CT_SET_ENUM || !ct_setting_choice_name(s, v, buf, cap)) snprintf(buf, cap, "?");
    return buf;
}

// ---- setting one value ------------------------------------------------------------------------

// A list setting from "a, b,c": the names without the spaces around them, joined by commas.
static int set_list(char *f, size_t size, const char *value, char *err, size_t cap) {
    char buf[1024];
    size_t k = 0;
    for (const char *p = value; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, ","), e = w;
        while (e && p[e - 1] == ' ') e--;
        if (!e) {
            snprintf(err, cap, "expected names separated by commas, got an empty name in '%s'", value);
            return 0;
        }
        if (k + e + 2 >= sizeof buf || k + e + 1 >= size) {
            snprintf(err, cap, "expected at most %zu characters, got %zu", size - 1, strlen(value));
            return 0;
        }
        if (k) buf[k++] = ',';
        memcpy(buf + k, p, e);
        k += e;
        p += w + (p[w] == ',');
    }
    buf[k] = 0;
    strcpy(f, buf);
    return 1;
}

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
    case CT_SET_NAME:
        if (!enum_match(s, value, f, s->size)) {
            snprintf(err, cap, "expected one of %s, got '%s'", s->choices, value);
            return 0;
        }
        return 1;
    case CT_SET_ENUM: {
        char name[64];
        int at = enum_match(s, value, name, sizeof name) ? choice_index(s, name) : -1;
        if (at < 0) {
            snprintf(err, cap, "expected one of %s, got '%s'", s->choices, value);
            return 0;
        }
        *(int *)f = at;
        return 1;
    }
    case CT_SET_LIST: return set_list(f, s->size, value, err, cap);
    }
    return 0;
}

static const char *type_word(const ct_setting *s) {
    switch (s->type) {
    case CT_SET_INT: return "an integer";
    case CT_SET_FLOAT: return "a number";
    case CT_SET_BOOL: return "a boolean (true or false)";
    case CT_SET_LIST: return "a list of strings";
    default: return "a string";
    }
}

// An array of strings as the command line writes it ("a,b"); 0 with `err` when an item is not a
// string or holds a comma.
static int join_array(const ct_toml_value *v, char *out, size_t size, char *err, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < v->n; i++) {
        const ct_toml_value *it = v->items[i];
        if (it->type != CT_TOML_STRING) {
            snprintf(err, cap, "expected a list of strings, got an array holding %s %s",
                     it->type == CT_TOML_INT || it->type == CT_TOML_ARRAY ? "an" : "a", ct_toml_type_name(it->type));
            return 0;
        }
        if (strchr(it->s, ',')) {
            snprintf(err, cap, "expected names without ',', got '%s'", it->s);
            return 0;
        }
        size_t n = strlen(it->s);
        if (k + n + 2 > size) {
            snprintf(err, cap, "expected at most %zu characters in all", size - 1);
            return 0;
        }
        if (k) out[k++] = ',';
        memcpy(out + k, it->s, n + 1);
        k += n;
    }
    return 1;
}

// The integers TorchTitan writes for a setting that ctitan keeps as text: selective_ac_option = 2
// (every 2nd block) as well as '2' and "op".
static bool takes_integer_text(const ct_setting *s) { return !strcmp(s->name, "activation_checkpoint.selective_ac_option"); }

// Stores a TOML value. Types must match, except that an integer may be given for a float.
static int set_from_toml(ct_config *c, const ct_setting *s, const ct_toml_value *v, char *err, size_t cap) {
    if (s->type == CT_SET_LIST && v->type == CT_TOML_ARRAY) {
        char joined[1024];
        return join_array(v, joined, sizeof joined, err, cap) && set_from_text(c, s, joined, err, cap);
    }
    if (takes_integer_text(s) && v->type == CT_TOML_INT) {
        char text[32];
        snprintf(text, sizeof text, "%lld", v->i);
        return set_from_text(c, s, text, err, cap);
    }
    bool ok =
        (s->type == CT_SET_INT && v->type == CT_TOML_INT) ||
        (s->type == CT_SET_FLOAT && (v->type == CT_TOML_INT || v->type == CT_TOML_FLOAT)) ||
        (s->type == CT_SET_BOOL && v->type == CT_TOML_BOOL) ||
        ((s->type == CT_SET_STRING || s->type == CT_SET_ENUM || s->type == CT_SET_NAME || s->type == CT_SET_LIST) &&
         v->type == CT_TOML_STRING);
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
        return ct_set_error_at(CT_E_CONFIG, key, "%s", err);
    }
    if (!set_from_text(c, s, value, err, sizeof err)) return ct_set_error_at(CT_E_CONFIG, s->name, "%s: %s", key, err);
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

// ---- the report: problems and notes ----------------------------------------------------------

// The setting a problem's message starts with ("model.dim: expected ...", "--training.steps: ...",
// "activation_checkpoint.selective = true conflicts ..."), by its canonical name; "" when none.
static void leading_setting(const char *msg, char *out, size_t cap) {
    char word[128];
    const char *p = msg + (strncmp(msg, "--", 2) ? 0 : 2);
    size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
    const ct_setting *s = NULL;
    if (n && n < sizeof word) {
        memcpy(word, p, n);
        word[n] = 0;
        s = ct_setting_find(word);
    }
    snprintf(out, cap, "%s", s ? s->name : "");
}

static ct_status add_problem(ct_config_report *rep, ct_error_code code, const char *subject, const char *fmt,
                             va_list ap) {
    char msg[ERR_CAP * 2], derived[96];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!subject) {
        leading_setting(msg, derived, sizeof derived);
        subject = derived;
    }
    ct_set_error_at(code, subject, "%s", msg);
    if (rep) {
        if (rep->n_problems < CT_CONFIG_MAX_PROBLEMS) {
            snprintf(rep->problems[rep->n_problems], sizeof rep->problems[0], "%s", ct_last_error());
            snprintf(rep->subjects[rep->n_problems], sizeof rep->subjects[0], "%s", ct_last_error_subject());
            rep->codes[rep->n_problems] = code;
        }
        rep->n_problems++;
    }
    return CT_ERR;
}

ct_status ct_config_problem(ct_config_report *rep, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_problem(rep, CT_E_CONFIG, NULL, fmt, ap);
    va_end(ap);
    return CT_ERR;
}

ct_status ct_config_problem_at(ct_config_report *rep, ct_error_code code, const char *subject, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_problem(rep, code, subject ? subject : "", fmt, ap);
    va_end(ap);
    return CT_ERR;
}

// The first problem in ct_last_error(), with its code and subject, CT_ERR; or CT_OK when there is none.
static ct_status report_status(const ct_config_report *rep) {
    if (!rep->n_problems) return CT_OK;
    return ct_set_error_at(rep->codes[0], rep->subjects[0], "%s", rep->problems[0]);
}

static void add_note(ct_config_report *rep, const char *key, const char *value, const char *where, const char *why) {
    if (rep->n_notes >= CT_CONFIG_MAX_NOTES) return;
    ct_config_note *n = &rep->notes[rep->n_notes++];
    ct_error_escape(n->key, sizeof n->key, key);
    ct_error_escape(n->value, sizeof n->value, value);
    if (strlen(value) >= sizeof n->value - 1) memcpy(n->value + sizeof n->value - 4, "...", 4);
    ct_error_escape(n->where, sizeof n->where, where);
    n->why = why;
}

static int setting_index(const char *name) {
    const ct_setting *s = ct_setting_find(name);
    if (!s) ct_fatal("config", "no setting %s in the table", name);
    return (int)(s - ct_settings);
}

// A TOML value as written ("\"text\"", 2, [\"a\", \"b\"]); `raw` leaves a string unquoted.
static void toml_text(const ct_toml_value *v, bool raw, char *out, size_t cap) {
    switch (v->type) {
    case CT_TOML_STRING: snprintf(out, cap, raw ? "%s" : "\"%s\"", v->s); break;
    case CT_TOML_INT: snprintf(out, cap, "%lld", v->i); break;
    case CT_TOML_FLOAT: snprintf(out, cap, "%g", v->f); break;
    case CT_TOML_BOOL: snprintf(out, cap, "%s", v->b ? "true" : "false"); break;
    case CT_TOML_TABLE: snprintf(out, cap, "{...}"); break;
    case CT_TOML_ARRAY: {
        size_t k = (size_t)snprintf(out, cap, "[");
        for (int i = 0; i < v->n && k < cap; i++) {
            k += (size_t)snprintf(out + k, cap - k, "%s", i ? ", " : "");
            if (k < cap) toml_text(v->items[i], false, out + k, cap - k);
            k = strlen(out);
        }
        if (k < cap) snprintf(out + k, cap - k, "]");
        break;
    }
    }
}

// A TorchTitan key ctitan reads without acting on: a note, unless its value is the quiet one.
static void note_ignored(ct_config_report *rep, const ct_ignored_setting *ig, const char *key, const char *raw,
                         const char *shown, const char *where) {
    rep->torchtitan = true;
    if (ig->quiet && !strcmp(raw, ig->quiet)) return;
    add_note(rep, key, shown, where, ig->why);
}

// ---- resolving settings that speak of others --------------------------------------------------

// model.converters: float8 and mx name quantization.float8.enable and quantization.mxfp8.enable,
// which a file may not also turn off.
static void resolve_converters(ct_config *c, ct_config_report *rep) {
    static const struct {
        const char *name;
        int kind;  // 1 float8, 2 mx, 0 grouped matmuls (nothing in Llama 3)
    } known[] = {{"float8", 1}, {"quantize.linear.float8", 1}, {"mx", 2}, {"mxfp8", 2}, {"quantize.linear.mx", 2},
                 {"quantize.grouped_mm.float8", 0}, {"quantize.grouped_mm.mx", 0}};
    bool want[3] = {false, false, false};
    for (const char *p = c->converters; *p; p += strcspn(p, ","), p += *p == ',') {
        char item[CT_STR];
        snprintf(item, sizeof item, "%.*s", (int)strcspn(p, ","), p);
        int kind = -1;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && kind < 0; i++)
            if (!strcmp(item, known[i].name)) kind = known[i].kind;
        if (kind < 0)
            ct_config_problem(rep, "model.converters: unknown converter '%s' (float8 or mx; quantize.linear.float8 and "
                                   "quantize.linear.mx say the same)", item);
        else if (kind == 0)
            add_note(rep, "model.converters", item, "model.converters",
                     "Llama 3 has no grouped matmuls (no mixture of experts) to convert");
        else
            want[kind] = true;
    }
    if (want[1] && want[2]) {
        ct_config_problem(rep, "model.converters: float8 and mx exclude each other (one 8-bit format per run): keep one");
        return;
    }
    struct {
        bool on;
        bool *field;
        const char *setting, *converter;
    } turn[] = {{want[1], &c->float8, "quantization.float8.enable", "float8"},
                {want[2], &c->mxfp8, "quantization.mxfp8.enable", "mx"}};
    for (int i = 0; i < 2; i++) {
        if (!turn[i].on) continue;
        if (rep->set[setting_index(turn[i].setting)] && !*turn[i].field)
            ct_config_problem(rep, "model.converters holds %s but %s = false: drop one of the two", turn[i].converter,
                              turn[i].setting);
        else
            *turn[i].field = true;
    }
}

// compile.components: "model" fuses the blocks' kernels (compile.enable means that alone), "loss"
// is always fused here.
static void resolve_compile(ct_config *c, ct_config_report *rep) {
    bool model = false, loss = false;
    for (const char *p = c->compile_components; *p; p += strcspn(p, ","), p += *p == ',') {
        size_t n = strcspn(p, ",");
        if (n == 5 && !strncmp(p, "model", 5)) model = true;
        else if (n == 4 && !strncmp(p, "loss", 4)) loss = true;
        else ct_config_problem(rep, "compile.components: unknown component '%.*s' (model, loss)", (int)n, p);
    }
    if (c->compile && !model) c->compile = false;  // nothing else to fuse
    if (rep->set[setting_index("compile.components")] && !loss)
        add_note(rep, "compile.components", c->compile_components, "compile.components",
                 "without loss: the loss is the fused chunked cross-entropy whatever compile says");
}

// activation_checkpoint.selective = true means mode selective (a conflict with mode = full is
// left for ct_config_validate to report); then the settings above.
static void resolve(ct_config *c, ct_config_report *rep) {
    if (c->ac_selective && c->ac_mode == CT_CFG_AC_NONE) c->ac_mode = CT_CFG_AC_SELECTIVE;
    resolve_converters(c, rep);
    resolve_compile(c, rep);
}

// Where a file written for TorchTitan leaves a setting out and the two defaults differ in a way
// that changes the run, the block says so.
static void note_defaults(ct_config_report *rep) {
    if (rep->torchtitan && !rep->set[setting_index("mixed_precision")])
        add_note(rep, "training.mixed_precision_param", "(not given)", "",
                 "TorchTitan's default is bfloat16, ctitan's fp32: this run computes in fp32 (give it to choose)");
}

// ---- TOML files -------------------------------------------------------------------------------

typedef struct {
    const char *path;
    int *set_line;  // per setting: line where this file set it (0 = not yet)
    ct_config_report *rep;
} file_walk;

static int any_setting_under(const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < ct_n_settings; i++) {
        if (ct_setting_name_eq(ct_settings[i].name, prefix, n) && ct_settings[i].name[n] == '.') return 1;
        for (const char *p = ct_settings[i].aliases; p && *p; p += strcspn(p, " "), p += *p == ' ')
            if (ct_setting_name_eq(p, prefix, n) && p[n] == '.') return 1;
    }
    for (int i = 0; i < ct_n_ignored_settings; i++)
        for (const char *p = ct_ignored_settings[i].names; *p; p += strcspn(p, " "), p += *p == ' ')
            if (ct_setting_name_eq(p, prefix, n) && p[n] == '.') return 1;
    return 0;
}

static void walk_table(ct_config *c, const ct_toml_value *t, const char *prefix, file_walk *w) {
    char err[ERR_CAP];
    if (t->n == 0 && *prefix && !any_setting_under(prefix)) {
        ct_config_problem_at(w->rep, CT_E_CONFIG, prefix, "%s:%d: unknown section [%s]", w->path, t->line, prefix);
        return;
    }
    for (int k = 0; k < t->n; k++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", t->keys[k]);
        const ct_toml_value *v = t->items[k];
        const ct_setting *s = ct_setting_find(name);
        if (v->type == CT_TOML_TABLE && !s) {
            walk_table(c, v, name, w);
            continue;
        }
        if (!s) {
            const ct_ignored_setting *ig = ct_ignored_setting_find(name);
            if (ig) {
                char raw[256], shown[256], where[512];
                toml_text(v, true, raw, sizeof raw);
                toml_text(v, false, shown, sizeof shown);
                snprintf(where, sizeof where, "%s:%d", w->path, v->line);
                note_ignored(w->rep, ig, name, raw, shown, where);
                continue;
            }
            unknown_message(name, err, sizeof err);
            ct_config_problem_at(w->rep, CT_E_CONFIG, name, "%s:%d: %s", w->path, v->line, err);
            continue;
        }
        int idx = (int)(s - ct_settings);
        if (w->set_line[idx]) {
            // Two names of one setting with one value (TorchTitan's float8 and mx filter_fqns,
            // say) say the same thing twice; with two values the file contradicts itself.
            ct_config *again = ct_xmalloc(sizeof *again);
            *again = *c;
            bool same = set_from_toml(again, s, v, err, sizeof err) &&
                        !memcmp(field_cptr(again, s), field_cptr(c, s), s->size);
            free(again);
            if (same) continue;
            ct_config_problem_at(w->rep, CT_E_CONFIG, s->name, "%s:%d: '%s' sets %s again (already set at line %d)",
                                 w->path, v->line, name, s->name, w->set_line[idx]);
            continue;
        }
        if (!set_from_toml(c, s, v, err, sizeof err)) {
            ct_config_problem_at(w->rep, CT_E_CONFIG, s->name, "%s:%d: %s: %s", w->path, v->line, name, err);
            continue;
        }
        w->set_line[idx] = v->line;
        w->rep->set[idx] = 1;
        if (s->offset == offsetof(ct_config, model_name)) w->rep->torchtitan = true;
    }
}

static void load_file_into(ct_config *c, const char *path, ct_config_report *rep) {
    ct_toml_value *root = ct_toml_parse_file(path);
    if (!root) {  // a file that cannot be read keeps its code (io); one that is not TOML is a config problem
        ct_error_code code = ct_last_error_code() == CT_E_IO ? CT_E_IO : CT_E_CONFIG;
        ct_config_problem_at(rep, code, path, "%s", ct_last_error());
        return;
    }
    int set_line[CT_CONFIG_MAX_SETTINGS] = {0};
    if (ct_n_settings > CT_CONFIG_MAX_SETTINGS) ct_fatal("config", "settings table larger than the walk's bookkeeping");
    file_walk w = {path, set_line, rep};
    walk_table(c, root, "", &w);
    ct_toml_free(root);
}

static ct_config_report *new_report(void) {
    ct_config_report *rep = ct_xcalloc(1, sizeof *rep);
    return rep;
}

ct_status ct_config_load_file(ct_config *c, const char *path) {
    ct_config_report *rep = new_report();
    load_file_into(c, path, rep);
    resolve(c, rep);
    ct_status st = report_status(rep);
    free(rep);
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

// The arguments after the file: each --key value sets its setting; problems are collected.
static void parse_arguments(ct_config *c, int argc, char **argv, ct_config_report *rep) {
    char err[ERR_CAP];
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v;
        if (is_config_flag(arg, &v)) {
            i += v == NULL;
            continue;
        }
        if (strncmp(arg, "--", 2) || !arg[2]) {
            ct_config_problem_at(rep, CT_E_CONFIG, arg,
                                 "unexpected argument '%s' (settings are written --section.key value)", arg);
            continue;
        }
        char key[256];
        const char *eq = strchr(arg, '=');
        size_t klen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        bool has_next = i + 1 < argc && strncmp(argv[i + 1], "--", 2);
        if (klen >= sizeof key) {
            ct_config_problem_at(rep, CT_E_CONFIG, arg + 2, "unknown setting '%.40s...'", arg + 2);
            i += !eq && has_next;
            continue;
        }
        memcpy(key, arg + 2, klen);
        key[klen] = 0;
        const ct_setting *s = ct_setting_find(key);
        if (!s) {
            const ct_ignored_setting *ig = ct_ignored_setting_find(key);
            const char *value = eq ? eq + 1 : has_next ? argv[++i] : "true";
            if (ig) {
                note_ignored(rep, ig, key, value, value, "command line");
                continue;
            }
            unknown_message(key, err, sizeof err);
            ct_config_problem_at(rep, CT_E_CONFIG, key, "%s", err);
            continue;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (has_next) {
            value = argv[++i];
        } else if (s->type == CT_SET_BOOL) {
            value = "true";  // a bare --flag
        } else {
            ct_config_problem(rep, "--%s: expected a value (%s)", key,
                              s->type == CT_SET_ENUM || s->type == CT_SET_NAME ? s->choices : type_word(s));
            continue;
        }
        if (!set_from_text(c, s, value, err, sizeof err)) {
            ct_config_problem(rep, "--%s: %s", key, err);
            continue;
        }
        rep->set[s - ct_settings] = 1;
        if (s->offset == offsetof(ct_config, model_name)) rep->torchtitan = true;
    }
}

ct_status ct_config_parse_report(ct_config *c, int argc, char **argv, ct_config_report *rep) {
    memset(rep, 0, sizeof *rep);
    ct_config_defaults(c);
    // The file first, wherever --config sits among the arguments, so that every other
    // argument overrides it.
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (!is_config_flag(argv[i], &v)) continue;
        if (!v) {
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
                return ct_config_problem(rep, "%s: expected a file name", argv[i]);
            v = argv[++i];
        }
        if (path)
            return ct_config_problem(rep, "%s: a config file was already given ('%s')", argv[i - (argv[i] == v)], path);
        path = v;
    }
    if (path) load_file_into(c, path, rep);
    parse_arguments(c, argc, argv, rep);
    resolve(c, rep);
    ct_config_validate_report(c, rep);
    note_defaults(rep);
    return report_status(rep);
}

ct_status ct_config_parse(ct_config *c, int argc, char **argv) {
    ct_config_report *rep = new_report();
    ct_status st = ct_config_parse_report(c, argc, argv, rep);
    free(rep);
    return st;
}

ct_status ct_config_apply_world(ct_config *c, int world_size, ct_config_report *rep) {
    if (c->global_batch_size <= 0 || c->micro_batch_size < 1) return CT_OK;  // validation speaks of bad values
    int dp = c->data_replicate_degree * ct_config_shard_degree(c, world_size);
    long per = (long)c->micro_batch_size * (dp > 0 ? dp : 1);
    if (c->global_batch_size % per)
        return ct_config_problem(rep,
                                 "training.global_batch_size %d is not a multiple of micro_batch_size "
                                 "(training.local_batch_size) %d x data-parallel degree %d = %ld sequences: make it a "
                                 "multiple of %ld",
                                 c->global_batch_size, c->micro_batch_size, dp, per, per);
    long accum = c->global_batch_size / per;
    if (rep && rep->set[setting_index("gradient_accumulation_steps")] && c->gradient_accumulation_steps != accum)
        return ct_config_problem(rep,
                                 "training.global_batch_size %d means gradient_accumulation_steps %ld (%ld sequences "
                                 "per micro-batch over the job), but gradient_accumulation_steps is %d: give one of "
                                 "the two",
                                 c->global_batch_size, accum, per, c->gradient_accumulation_steps);
    c->gradient_accumulation_steps = (int)accum;
    return CT_OK;
}
