// metrics.jsonl -> loss curves (metrics_read.h).
#include "metrics/metrics_read.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/json.h"

static void push(double **xs, double **ys, int *n, int *cap, double x, double y) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        double *nx = realloc(*xs, (size_t)*cap * sizeof **xs), *ny = nx ? realloc(*ys, (size_t)*cap * sizeof **ys) : NULL;
        if (!nx || !ny) ct_fatal("metrics", "out of memory");
        *xs = nx, *ys = ny;
    }
    (*xs)[*n] = x, (*ys)[(*n)++] = y;
}

// A number field: 1 with *v for a finite number, 0 when absent or null (a gap), -1 for anything else.
static int number(const ct_json *obj, const char *key, double *v) {
    const ct_json *j = ct_json_get(obj, key);
    if (!j || j->type == CT_JSON_NULL) return 0;
    if (j->type != CT_JSON_NUMBER) return -1;
    *v = j->number;
    return isfinite(*v) ? 1 : 0;
}

void ct_metrics_losses_free(ct_metrics_losses *l) {
    free(l->x), free(l->y), free(l->vx), free(l->vy);
    memset(l, 0, sizeof *l);
}

ct_status ct_metrics_read_losses(const char *path, ct_metrics_losses *r) {
    memset(r, 0, sizeof *r);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return ct_set_error("%s: is a folder (its metrics.jsonl?)", path);
    // Through core/file_check like every reader: a FIFO is refused instead of blocking.
    int fd;
    uint64_t bytes;
    if (ct_file_open_regular(path, "metrics file", 0, &fd, &bytes)) return CT_ERR;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int e = errno;
        close(fd);
        return ct_set_error("%s: cannot open: %s", path, strerror(e));
    }
    char *text = NULL;
    size_t size = 0;
    ssize_t len;
    long lineno = 0;
    double last_step = -1;
    ct_status rc = CT_OK;
    char what[PATH_MAX + 32];
    while (!rc && (len = getline(&text, &size, f)) >= 0) {
        lineno++;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
        if (strspn(text, " \t") == (size_t)len) continue;  // a blank line (a hand-edited file's last)
        r->lines++;
        snprintf(what, sizeof what, "%s:%ld", path, lineno);
        ct_json *j = ct_json_parse(text, (size_t)len, what);
        if (!j) {
            char why[PATH_MAX + 200];
            snprintf(why, sizeof why, "%s", ct_last_error());
            rc = ct_set_error("%s (not a JSON line)", why);
            break;
        }
        double step, loss, val, tps, sec;
        int has_loss, has_val;
        if (j->type != CT_JSON_OBJECT) rc = ct_set_error("%s: not a JSON object", what);
        else if (number(j, "step", &step) != 1 || step < 0 || step != floor(step))
            rc = ct_set_error("%s: no \"step\" (a whole number)", what);
        else if (step <= last_step)
            // The trainer keeps one run per file (a resumed run continues its own steps), so a
            // step going back means two files were joined: drawing it would zigzag.
            rc = ct_set_error("%s: step %.0f after step %.0f (two runs in one file?)", what, step, last_step);
        else if ((has_loss = number(j, "loss", &loss)) < 0) rc = ct_set_error("%s: \"loss\" is not a number", what);
        else if ((has_val = number(j, "val_loss", &val)) < 0) rc = ct_set_error("%s: \"val_loss\" is not a number", what);
        else {
            last_step = step;
            if (has_loss) push(&r->x, &r->y, &r->n, &r->cap, step, loss);
            if (has_val) push(&r->vx, &r->vy, &r->vn, &r->vcap, step, val);
            if (number(j, "tokens_per_s", &tps) == 1 && number(j, "step_seconds", &sec) == 1 && tps > 0 && sec > 0) {
                r->tok_sum += tps * sec;
                r->tok_lines++;
            }
        }
        ct_json_free(j);
    }
    if (!rc && ferror(f)) rc = ct_set_error("%s: read failed after line %ld", path, lineno);
    free(text);
    fclose(f);
    if (!rc && r->n == 0) rc = ct_set_error("%s: no loss values (%ld lines)", path, r->lines);
    if (rc) ct_metrics_losses_free(r);
    return rc;
}
