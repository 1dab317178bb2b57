// A whole pipeline schedule as CSV: one row per rank, one action per cell, in the text form of
// parallel/schedule.h ("0F0,0SEND_F0,1RECV_B0,..."), the layout PyTorch's pipelining runtime
// reads and writes, so a user can hand-write or edit a schedule in a spreadsheet.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_check.h"
#include "parallel/pipeline_schedules.h"

char *ct_pp_schedule_format_csv(const ct_schedule *lists, int pp) {
    size_t total = 1;
    for (int r = 0; r < pp; r++) total += (size_t)ct_schedule_format(&lists[r], NULL, 0) + 1;
    char *text = ct_xmalloc(total), *p = text;
    for (int r = 0; r < pp; r++) {
        // The text form separates actions with spaces; a CSV row with commas.
        int n = ct_schedule_format(&lists[r], p, total - (size_t)(p - text));
        for (int i = 0; i < n; i++)
            if (p[i] == ' ') p[i] = ',';
        p += n;
        *p++ = '\n';
    }
    *p = 0;
    return text;
}

ct_status ct_pp_schedule_write_csv(const char *path, const ct_schedule *lists, int pp) {
    char *text = ct_pp_schedule_format_csv(lists, pp);
    FILE *f = ct_file_fopen_write(path, "schedule CSV", CT_FILE_WRITE_TRUNC);
    if (!f) {
        free(text);
        return CT_ERR;
    }
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    free(text);
    return ok ? CT_OK : ct_set_error("schedule csv: writing %s failed", path);
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

ct_status ct_pp_schedule_parse_csv(const char *text, int pp, ct_schedule *lists) {
    for (int r = 0; r < pp; r++) ct_schedule_init(&lists[r]);
    int rows = 0, line_no = 0;
    const char *p = text;
    char cell[64];
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        line_no++;
        const char *q = p;
        while (q < p + len && blank(*q)) q++;
        bool skip = q == p + len || *q == '#';  // blank line or comment
        int col = 0;
        if (!skip && rows == pp) {
            ct_pp_lists_free(lists, pp);
            return ct_set_error("schedule csv: line %d: more than %d rows (one per pipeline rank)", line_no, pp);
        }
        for (const char *c = p; !skip && c <= p + len;) {
            const char *end = memchr(c, ',', (size_t)(p + len - c));
            if (!end) end = p + len;
            col++;
            const char *a = c, *b = end;  // trim spaces around the cell
            while (a < b && blank(*a)) a++;
            while (b > a && blank(b[-1])) b--;
            c = end + 1;
            if (a == b) continue;  // empty cell: nothing to do at this step
            ct_schedule one;
            size_t n = (size_t)(b - a);
            if (n >= sizeof cell || memchr(a, ' ', n) || memchr(a, '\t', n)) {
                ct_pp_lists_free(lists, pp);
                return ct_set_error("schedule csv: row %d, column %d: '%.*s' is not one action", rows + 1, col,
                                    (int)(n > 40 ? 40 : n), a);
            }
            memcpy(cell, a, n);
            cell[n] = 0;
            if (ct_schedule_parse(&one, cell)) {
                char why[256];
                snprintf(why, sizeof why, "%s", ct_last_error());
                ct_pp_lists_free(lists, pp);
                return ct_set_error("schedule csv: row %d, column %d: %s", rows + 1, col, why);
            }
            ct_action act = one.actions[0];
            ct_schedule_push(&lists[rows], act.kind, act.stage, act.mb);
            ct_schedule_free(&one);
        }
        // A row of empty cells would be a rank with nothing to do -- never a schedule, and what
        // the writer would put as an empty line, which reads back as no row at all.
        if (!skip && lists[rows].count == 0) {
            ct_pp_lists_free(lists, pp);
            return ct_set_error("schedule csv: row %d (line %d) has no actions, only empty cells", rows + 1, line_no);
        }
        if (!skip) rows++;
        p += len + (eol ? 1 : 0);
    }
    if (rows != pp) {
        ct_pp_lists_free(lists, pp);
        return ct_set_error("schedule csv: %d rows, but pipeline_degree is %d (one row per rank)", rows, pp);
    }
    return CT_OK;
}

ct_status ct_pp_schedule_read_csv(const char *path, int pp, ct_schedule *lists) {
    char *text;
    size_t n;
    if (ct_file_read_all(path, "pipeline schedule CSV", CT_FILE_TEXT_CONFIG_MAX, &text, &n) != CT_OK) return CT_ERR;
    ct_status st = ct_pp_schedule_parse_csv(text, pp, lists);
    if (st) {
        char why[320];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct_set_error("%s: %s", path, why);
    }
    free(text);
    return st;
}
