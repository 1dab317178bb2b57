// Line charts of training runs as standalone SVG, written by hand (no plotting library): the
// training loss of each run as a solid line, its validation loss dashed in the same colour, a
// legend, axes with 1-2-5 ticks (or decades for a log y axis), and optionally a lower panel with
// each run's loss minus the first run's. `ctitan plot` (cli/cmd_plot.c) reads metrics.jsonl files
// into ct_plot_run's and calls ct_svg_plot_write.
//
// The output is meant to be checked by programs as well as looked at: every training-loss line is
// one <polyline class="loss"> with one point per value, the validation loss <polyline
// class="val-loss">, the plot area <rect class="plot-area">, tick labels <text class="xtick"> /
// <text class="ytick">, legend entries <text class="legend">, in run order.
#ifndef CT_SVG_PLOT_H
#define CT_SVG_PLOT_H
#include <stdbool.h>
#include <stdio.h>

#include "core/error.h"

typedef struct {
    const char *label;        // the legend's name for the run (UTF-8; escaped on output)
    int n;                    // training-loss points: x[i], y[i], x non-decreasing
    const double *x, *y;
    int vn;                   // validation-loss points (may be 0)
    const double *vx, *vy;
} ct_plot_run;

typedef struct {
    const char *title;        // NULL: "Training loss"
    const char *xlabel;       // NULL: "step"
    bool logy;                // log-scale loss axis (every y must be > 0)
    int smooth;               // > 1: also draw a centred moving average over this many points, bold
                              // over a faint raw line (only for runs with >= 3 windows of points)
    bool diff;                // lower panel: loss minus the first run's at the same x (>= 2 runs);
                              // the picture grows from 900 x 500 pixels to 900 x 760
} ct_plot_options;

// One axis: [lo, hi] is what the plot area spans; ticks at whole multiples of step (linear, and a
// log axis whose step is > 0), or at the chosen mantissas of each decade (log with step 0:
// mantissa_mask bit m set = m x 10^k is a tick, m = 1..9).
typedef struct {
    bool log;
    double lo, hi, step;
    int mantissa_mask;
} ct_plot_axis;

// A linear axis over the data range [lo, hi] with about `target` intervals of a 1, 2 or 5 x 10^k
// step, widened outwards to multiples of the step; from_zero starts it at 0 when the data start
// near it (lo >= 0 and lo <= hi / 5), as a step axis should. An empty range is widened around lo.
void ct_plot_axis_linear(ct_plot_axis *a, double lo, double hi, int target, bool from_zero);
// A log axis over [lo, hi] (both > 0): every mantissa 1..9 when the data span at most one decade,
// 1-2-5 up to three, else powers of ten; widened outwards to the nearest ticks. Where that leaves
// fewer than 4 ticks (a narrow range), ticks of a linear 1-2-5 step instead, still placed on the
// log scale.
void ct_plot_axis_log(ct_plot_axis *a, double lo, double hi);
// The axis's ticks, ascending, into t (at most max); returns how many.
int ct_plot_axis_ticks(const ct_plot_axis *a, double *t, int max);
// Where v falls on the axis, 0 (lo) to 1 (hi).
double ct_plot_axis_frac(const ct_plot_axis *a, double v);
// A tick label: the fewest decimals the step needs, and k / M / G for axes reaching 10^4 (token
// counts), so 12000 reads "12k".
void ct_plot_tick_label(const ct_plot_axis *a, double v, char *buf, int size);

// Writes the chart. CT_ERR + message when no run has a point, when a log axis meets a value <= 0,
// or when a write fails.
ct_status ct_svg_plot_write(FILE *f, const ct_plot_run *runs, int n_runs, const ct_plot_options *o);
#endif
