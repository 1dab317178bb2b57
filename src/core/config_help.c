// Text for people: `ctitan train --help [SECTION]` (the settings table grouped by section, wrapped
// to the terminal) and the start-up warning block of settings read but not acted on.
#include <stdio.h>
#include <string.h>

#include "core/config.h"

// Prints `text` wrapped at spaces to `width` columns: the first line continues from column `col`
// (what the caller has printed already), the others start at column `indent`. A word too long for
// a line of its own is cut after a '|' or ',' where it can be, else where the line ends.
static void wrap(FILE *f, const char *text, int col, int indent, int width) {
    if (width < indent + 20) width = indent + 20;
    const char *p = text;
    bool line_empty = col <= indent;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int n = (int)strcspn(p, " ");
        int need = n + (line_empty ? 0 : 1);
        if (col + need > width && !line_empty) {
            fprintf(f, "\n%*s", indent, "");
            col = indent, line_empty = true;
            continue;
        }
        if (!line_empty) fputc(' ', f), col++;
        if (col + n > width) {  // longer than a whole line: cut it
            int room = width - col, cut = room;
            for (int i = room - 1; i > room / 2; i--)
                if (p[i] == '|' || p[i] == ',') {
                    cut = i + 1;
                    break;
                }
            fprintf(f, "%.*s\n%*s", cut, p, indent, "");
            p += cut, col = indent, line_empty = true;
            continue;
        }
        fprintf(f, "%.*s", n, p);
        col += n, p += n, line_empty = false;
    }
    fputc('\n', f);
}

// ---- --help -----------------------------------------------------------------------------------

static const char *const TOP = "top";
static const char *const IGNORED = "ignored";

// The section of a setting: its name up to the first '.', or "top".
static void section_of(const char *name, char *out, size_t cap) {
    const char *dot = strchr(name, '.');
    if (dot) snprintf(out, cap, "%.*s", (int)(dot - name), name);
    else snprintf(out, cap, "%s", TOP);
}

// The sections in table order, comma-separated, then "ignored".
static void section_list(char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < ct_n_settings; i++) {
        char sec[64];
        section_of(ct_settings[i].name, sec, sizeof sec);
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) {
            char other[64];
            section_of(ct_settings[j].name, other, sizeof other);
            seen = !strcmp(sec, other);
        }
        if (!seen && k < cap) k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "", sec);
    }
    if (k < cap) snprintf(out + k, cap - k, ", %s", IGNORED);
}

static void print_setting(FILE *f, const ct_setting *s, int width) {
    static const char *words[] = {"int", "float", "bool", "string", "", "list", ""};
    char head[512], def[300], text[1024];
    if (s->type == CT_SET_STRING) snprintf(def, sizeof def, "\"%s\"", s->def);
    else if (s->type == CT_SET_LIST) snprintf(def, sizeof def, "\"%s\"", s->def);
    else snprintf(def, sizeof def, "%s", s->def);
    snprintf(head, sizeof head, "%s (default %s)",
             s->type == CT_SET_ENUM || s->type == CT_SET_NAME ? s->choices : words[s->type], def);
    fprintf(f, "  --%s", s->name);
    wrap(f, head, 4 + (int)strlen(s->name), 6, width);
    const char *note = ct_setting_build_note(s);
    snprintf(text, sizeof text, "%s%s%s%s%s", s->desc, note ? " -- " : "", note ? note : "",
             s->aliases ? ". TorchTitan: " : "", s->aliases ? s->aliases : "");
    fprintf(f, "      ");
    wrap(f, text, 6, 6, width);
}

static void print_ignored(FILE *f, int width) {
    fprintf(f, "\n[%s] ", IGNORED);
    wrap(f, "TorchTitan settings read but not acted on (start-up lists them, with the reason):", 3 + (int)strlen(IGNORED),
         2, width);
    for (int i = 0; i < ct_n_ignored_settings; i++) {
        const ct_ignored_setting *g = &ct_ignored_settings[i];
        fprintf(f, "  ");
        wrap(f, g->names, 2, 4, width);
        char text[512];
        snprintf(text, sizeof text, "%s%s%s%s", g->why, g->quiet ? " (not listed when it is " : "",
                 g->quiet ? g->quiet : "", g->quiet ? ")" : "");
        fprintf(f, "      ");
        wrap(f, text, 6, 6, width);
    }
}

ct_status ct_config_print_help(FILE *f, int width, const char *section) {
    char sections[512];
    section_list(sections, sizeof sections);
    if (section) {
        bool known = !strcmp(section, IGNORED);
        for (int i = 0; i < ct_n_settings && !known; i++) {
            char sec[64];
            section_of(ct_settings[i].name, sec, sizeof sec);
            known = !strcmp(sec, section);
        }
        if (!known) return ct_set_error_at(CT_E_CONFIG, section, "no section '%s' (sections: %s)", section, sections);
    }
    if (!section) {
        wrap(f,
             "Settings come from a TOML file (--config FILE) and --name value or --name=value arguments, which win. "
             "'-' and '_' in a name are the same. TorchTitan's names work too (given after \"TorchTitan:\"), and "
             "its settings for what ctitan does without are read and listed at start-up (section ignored).",
             0, 0, width);
        fprintf(f, "sections (--help SECTION shows one):");
        wrap(f, sections, 36, 2, width);
    }
    if (section && !strcmp(section, IGNORED)) {
        print_ignored(f, width);
        return CT_OK;
    }
    char current[64] = "";
    for (int i = 0; i < ct_n_settings; i++) {
        const ct_setting *s = &ct_settings[i];
        char sec[64];
        section_of(s->name, sec, sizeof sec);
        if (section && strcmp(sec, section)) continue;
        if (strcmp(sec, current)) {
            snprintf(current, sizeof current, "%s", sec);
            if (!strcmp(sec, TOP)) fprintf(f, "\n[%s] settings outside any section:\n", TOP);
            else fprintf(f, "\n[%s]\n", sec);
        }
        print_setting(f, s, width);
    }
    if (!section) print_ignored(f, width);
    return CT_OK;
}

// ---- the warning block ------------------------------------------------------------------------

void ct_config_print_notes(const ct_config_report *rep, FILE *f, int width) {
    if (!rep->n_notes) return;
    char text[1200];
    snprintf(text, sizeof text, "warning: %d setting%s not acted on as TorchTitan would (the run goes on):", rep->n_notes,
             rep->n_notes == 1 ? " is" : "s are");
    wrap(f, text, 0, 2, width);
    for (int i = 0; i < rep->n_notes; i++) {
        const ct_config_note *n = &rep->notes[i];
        if (n->where[0]) snprintf(text, sizeof text, "%s = %s (%s)", n->key, n->value, n->where);
        else snprintf(text, sizeof text, "%s %s", n->key, n->value);
        fprintf(f, "  ");
        wrap(f, text, 2, 6, width);
        fprintf(f, "      ");
        wrap(f, n->why, 6, 6, width);
    }
}
