// Writing a configuration back out: the effective settings as TOML (config.toml in a run's
// folder, `--print_config`), every value in the form the loader reads, and the build note a
// setting carries in the help.
#include "core/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h"

const char *ct_setting_build_note(const ct_setting *s) {
    if (!strcmp(s->name, "training.device")) {
#ifdef CT_HAVE_CUDA
        return "this build has the cuda kernels and NCCL comm: training.device cuda runs";
#else
        return "this build has no CUDA: cuda needs a build with make CUDA=1";
#endif
    }
    return NULL;
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
    case CT_SET_ENUM:
        if (!ct_setting_choice_name(s, *(const int *)field_cptr(c, s), buf, sizeof buf)) snprintf(buf, sizeof buf, "?");
        write_string(f, buf);
        break;
    case CT_SET_LIST: {
        // ["a", "b"]: what TorchTitan writes, and what a file reads back.
        char item[CT_STR * 4];
        fputc('[', f);
        for (const char *p = field_cptr(c, s); *p; p += strcspn(p, ","), p += *p == ',') {
            snprintf(item, sizeof item, "%.*s", (int)strcspn(p, ","), p);
            if (p != (const char *)field_cptr(c, s)) fputs(", ", f);
            write_string(f, item);
        }
        fputc(']', f);
        break;
    }
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
