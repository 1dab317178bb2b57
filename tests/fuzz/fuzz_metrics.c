// Fuzz target: a metrics.jsonl read back for plotting (ct_metrics_read_losses,
// metrics/metrics_read.c, each line through core/json.c), then drawn (ct_svg_plot_write,
// metrics/svg_plot.c) as `ctitan plot` does. The first byte picks the drawing's options
// (bit 0 --logy, bit 1 --diff with the run twice, bits 2-4 --smooth 0..7); the rest is the file.
//
// Properties beyond "no crash, no leak, no UB": an accepted file gives at least one loss point,
// steps whole and strictly increasing, every value finite; drawing it either succeeds or refuses
// with one line (a log axis cannot take a loss <= 0).
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "fuzz_util.h"
#include "metrics/metrics_read.h"
#include "metrics/svg_plot.h"

static void check_points(const double *x, const double *y, int n) {
    for (int i = 0; i < n; i++) {
        ct_fuzz_check(isfinite(x[i]) && x[i] >= 0 && x[i] == floor(x[i]) && isfinite(y[i]), "point %d (%g, %g)", i,
                      x[i], y[i]);
        ct_fuzz_check(i == 0 || x[i] > x[i - 1], "step %g after %g", x[i], x[i - 1]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char path[1024];
    ct_fuzz_write("metrics.jsonl", data + 1, size - 1, path, sizeof path);
    ct_metrics_losses l;
    if (ct_metrics_read_losses(path, &l) != CT_OK) {
        ct_fuzz_check(!l.x && !l.y && !l.vx && !l.vy && l.n == 0 && l.vn == 0, "points left after a refusal");
        return 0;
    }
    ct_fuzz_check(l.n >= 1 && l.vn >= 0 && l.lines >= l.n && l.lines >= l.vn, "%d points, %d val, %ld lines", l.n,
                  l.vn, l.lines);
    check_points(l.x, l.y, l.n);
    check_points(l.vx, l.vy, l.vn);
    ct_fuzz_check(l.tok_lines >= 0 && l.tok_lines <= l.lines && l.tok_sum >= 0, "tokens %g over %d lines", l.tok_sum,
                  l.tok_lines);

    ct_plot_options po = {.logy = data[0] & 1, .diff = data[0] & 2, .smooth = data[0] >> 2 & 7};
    ct_plot_run run = {.label = "run", .n = l.n, .x = l.x, .y = l.y, .vn = l.vn, .vx = l.vx, .vy = l.vy};
    ct_plot_run runs[2] = {run, run};
    runs[1].label = "again";
    FILE *f = fopen("/dev/null", "w");
    ct_fuzz_check(f != NULL, "/dev/null");
    ct_status st = ct_svg_plot_write(f, runs, po.diff ? 2 : 1, &po);
    fclose(f);
    if (st != CT_OK) {
        int nonpos = 0;
        for (int i = 0; i < l.n; i++) nonpos |= l.y[i] <= 0;
        for (int i = 0; i < l.vn; i++) nonpos |= l.vy[i] <= 0;
        ct_fuzz_check(po.logy && nonpos, "drawing refused: %s", ct_last_error());
    }
    ct_metrics_losses_free(&l);
    return 0;
}
