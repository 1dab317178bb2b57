// Loss curves as SVG (see svg_plot.h). Pixel coordinates are written with two decimals, so a
// value maps to the same text wherever it is drawn (a test compares them as strings).
#include "metrics/svg_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Tableau 10: distinct hues that survive greyscale printing and the common colour blindnesses.
static const char *const k_colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                        "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#7f7f7f"};
static const char *colour(int r) { return k_colours[r % 10]; }

#define MAX_TICKS 64

// ---- axes ----------------------------------------------------------------------------------

static double nice_step(double range, int target) {
    double raw = range / (target > 0 ? target : 1);
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

void ct_plot_axis_linear(ct_plot_axis *a, double lo, double hi, int target, bool from_zero) {
    memset(a, 0, sizeof *a);
    if (!(hi > lo)) {  // one value (or a flat line): give it some room rather than divide by zero
        double d = lo == 0 ? 0.5 : fabs(lo) * 0.05;
        lo -= d;
        hi += d;
    }
    if (from_zero && lo >= 0 && lo <= hi / 5) lo = 0;
    a->step = nice_step(hi - lo, target);
    // Whole multiples, so that ticks are k * step exactly as printed (no drift from adding).
    double i0 = floor(lo / a->step + 1e-9), i1 = ceil(hi / a->step - 1e-9);
    if (i1 <= i0) i1 = i0 + 1;
    a->lo = i0 * a->step;
    a->hi = i1 * a->step;
}

void ct_plot_axis_log(ct_plot_axis *a, double lo, double hi) {
    memset(a, 0, sizeof *a);
    a->log = true;
    if (!(hi > lo)) {
        lo /= 1.1;
        hi *= 1.1;
    }
    double decades = log10(hi / lo);
    // Loss curves usually span less than a decade; 1-2-5 there would leave one or two ticks.
    a->mantissa_mask = decades <= 1 ? 0x3fe : decades <= 3 ? (1 << 1 | 1 << 2 | 1 << 5) : 1 << 1;
    double k = floor(log10(lo));
    a->lo = pow(10, k);
    for (int m = 9; m >= 1; m--)
        if ((a->mantissa_mask >> m & 1) && m * pow(10, k) <= lo * (1 + 1e-12)) {
            a->lo = m * pow(10, k);
            break;
        }
    k = floor(log10(hi));
    a->hi = pow(10, k + 1);
    for (int m = 1; m <= 9; m++)
        if ((a->mantissa_mask >> m & 1) && m * pow(10, k) >= hi * (1 - 1e-12)) {
            a->hi = m * pow(10, k);
            break;
        }
    // A loss from 7.7 down to 7.1 has only the ticks 7 and 8 in any decade's mantissas: there a
    // 1-2-5 step (still placed on the log scale) says more.
    double t[MAX_TICKS];
    if (ct_plot_axis_ticks(a, t, MAX_TICKS) < 4) {
        double step = nice_step(hi - lo, 5), i0 = floor(lo / step + 1e-9), i1 = ceil(hi / step - 1e-9);
        if (i0 >= 1) {  // else the range reaches down to 0, and the mantissa ticks were many
            a->step = step;
            a->lo = i0 * step;
            a->hi = (i1 > i0 ? i1 : i0 + 1) * step;
        }
    }
}

int ct_plot_axis_ticks(const ct_plot_axis *a, double *t, int max) {
    int n = 0;
    if (!a->log || a->step > 0) {
        double i0 = round(a->lo / a->step), i1 = round(a->hi / a->step);
        for (double i = i0; i <= i1 && n < max; i++) t[n++] = i * a->step;
        return n;
    }
    for (double k = floor(log10(a->lo)); k <= ceil(log10(a->hi)); k++)
        for (int m = 1; m <= 9; m++) {
            double v = m * pow(10, k);
            if ((a->mantissa_mask >> m & 1) && v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9) && n < max)
                t[n++] = v;
        }
    return n;
}

double ct_plot_axis_frac(const ct_plot_axis *a, double v) {
    if (a->log) return (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

void ct_plot_tick_label(const ct_plot_axis *a, double v, char *buf, int size) {
    double top = fmax(fabs(a->lo), fabs(a->hi)), scale = 1;
    const char *suffix = "";
    if (top >= 1e9) scale = 1e9, suffix = "G";
    else if (top >= 1e6) scale = 1e6, suffix = "M";
    else if (top >= 1e4) scale = 1e3, suffix = "k";
    if (fabs(v) < (a->step > 0 ? a->step : fabs(v)) * 1e-6) {  // never "-0.0" or "0k"
        snprintf(buf, (size_t)size, "0");
        return;
    }
    if (!(a->step > 0)) {  // a log axis's mantissa ticks
        snprintf(buf, (size_t)size, "%g%s", v / scale, suffix);
        return;
    }
    int decimals = (int)-floor(log10(a->step / scale) + 1e-9);
    if (decimals < 0) decimals = 0;
    snprintf(buf, (size_t)size, "%.*f%s", decimals, v / scale, suffix);
}

// ---- text ----------------------------------------------------------------------------------

// Text as XML character data: markup characters escaped, and bytes XML 1.0 cannot hold (control
// characters, malformed UTF-8 -- a folder name can be any bytes) written as '?', so the file
// always parses.
static void put_text(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        bool ok = len > 0 && !(len == 2 && c < 0xc2) && !(len == 4 && c > 0xf4);
        for (int i = 1; ok && i < len; i++) ok = (p[i] & 0xc0) == 0x80;
        if (ok && len == 3) {  // no overlong forms, no UTF-16 surrogates
            unsigned cp = (c & 0x0f) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
            ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
        }
        if (ok && len == 4) ok = !(c == 0xf0 && p[1] < 0x90) && !(c == 0xf4 && p[1] > 0x8f);
        if (!ok || (len == 1 && c < 0x20 && c != '\t')) {
            fputc('?', f);
            p++;
            continue;
        }
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else fwrite(p, 1, (size_t)len, f);
        p += len;
    }
}

// Characters of UTF-8 text (continuation bytes not counted), for sizing the legend.
static int text_width(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xc0) != 0x80;
    return n;
}

// ---- drawing -------------------------------------------------------------------------------

typedef struct {
    FILE *f;
    double left, top, w, h;  // the plot area of the current panel, pixels
    ct_plot_axis x, y;
} panel;

static double px(const panel *p, double v) { return p->left + ct_plot_axis_frac(&p->x, v) * p->w; }
static double py(const panel *p, double v) { return p->top + (1 - ct_plot_axis_frac(&p->y, v)) * p->h; }

// Grid, ticks and their labels, frame, clip path and the y axis's name. Labels closer than a
// label's size to the previous one are left out (their grid line stays), so a log axis with
// every mantissa or a long token axis never prints over itself.
static void draw_frame(const panel *p, const char *ylabel, const char *clip_id) {
    FILE *f = p->f;
    double xt[MAX_TICKS], yt[MAX_TICKS];
    int nx = ct_plot_axis_ticks(&p->x, xt, MAX_TICKS), ny = ct_plot_axis_ticks(&p->y, yt, MAX_TICKS);
    double bottom = p->top + p->h;
    fprintf(f, "<clipPath id=\"%s\"><rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/></clipPath>\n", clip_id,
            p->left, p->top, p->w, p->h);
    fprintf(f, "<g stroke=\"#e8e8e8\" stroke-width=\"1\">\n");
    for (int i = 0; i < nx; i++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", px(p, xt[i]), p->top, px(p, xt[i]), bottom);
    for (int i = 0; i < ny; i++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", p->left, py(p, yt[i]), p->left + p->w,
                py(p, yt[i]));
    fprintf(f, "</g>\n<g font-size=\"12\" fill=\"#333\">\n");
    char label[64];
    double last = -1e30;
    for (int i = 0; i < nx; i++) {
        ct_plot_tick_label(&p->x, xt[i], label, sizeof label);
        double x = px(p, xt[i]);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", x, bottom, x, bottom + 5);
        if (x - last < 7.0 * (double)strlen(label) + 10) continue;
        fprintf(f, "<text class=\"xtick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", x, bottom + 19, label);
        last = x;
    }
    last = 1e30;
    for (int i = 0; i < ny; i++) {
        ct_plot_tick_label(&p->y, yt[i], label, sizeof label);
        double y = py(p, yt[i]);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", p->left - 5, y, p->left, y);
        if (last - y < 15) continue;
        fprintf(f, "<text class=\"ytick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", p->left - 9, y + 4, label);
        last = y;
    }
    fprintf(f, "</g>\n");
    fprintf(f,
            "<rect class=\"plot-area\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#444\" "
            "stroke-width=\"1\"/>\n",
            p->left, p->top, p->w, p->h);
    fprintf(f,
            "<text transform=\"translate(20 %.2f) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\" "
            "fill=\"#222\">",
            p->top + p->h / 2);
    put_text(f, ylabel);
    fprintf(f, "</text>\n");
}

static void polyline(const panel *p, const char *cls, const char *col, double width, double opacity, const char *dash,
                     const double *x, const double *y, int n, const char *label, const char *what) {
    FILE *f = p->f;
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" stroke-opacity=\"%g\"%s%s%s points=\"",
            cls, col, width, opacity, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    for (int i = 0; i < n; i++) fprintf(f, "%s%.2f,%.2f", i ? " " : "", px(p, x[i]), py(p, y[i]));
    fprintf(f, "\"><title>");
    put_text(f, label);
    fprintf(f, ": %s</title></polyline>\n", what);
}

// Centred moving average of y[0..n) over `window` points, narrowed at the ends.
static void moving_average(const double *y, int n, int window, double *out) {
    int h1 = (window - 1) / 2, h2 = window - 1 - h1;
    double *cs = malloc(((size_t)n + 1) * sizeof *cs);
    if (!cs) {  // drawing the raw values again is better than no chart
        memcpy(out, y, (size_t)n * sizeof *out);
        return;
    }
    cs[0] = 0;
    for (int i = 0; i < n; i++) cs[i + 1] = cs[i] + y[i];
    for (int i = 0; i < n; i++) {
        int a = i - h1 < 0 ? 0 : i - h1, b = i + h2 >= n ? n - 1 : i + h2;
        out[i] = (cs[b + 1] - cs[a]) / (b - a + 1);
    }
    free(cs);
}

// Index of x in the first run's sorted xs, or -1 (the diff panel compares runs at equal x).
static int find_x(const double *xs, int n, double x) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (xs[mid] < x) lo = mid + 1;
        else if (xs[mid] > x) hi = mid - 1;
        else return mid;
    }
    return -1;
}

static void legend(FILE *f, const panel *p, const ct_plot_run *runs, int n_runs, bool any_val) {
    char (*text)[320] = malloc((size_t)n_runs * sizeof *text);
    if (!text) return;
    int widest = any_val ? (int)strlen("validation loss") : 0;
    for (int r = 0; r < n_runs; r++) {
        if (runs[r].vn)
            snprintf(text[r], sizeof text[r], "%.240s  (val %.4f)", runs[r].label, runs[r].vy[runs[r].vn - 1]);
        else
            snprintf(text[r], sizeof text[r], "%.240s", runs[r].label);
        if (text_width(text[r]) > widest) widest = text_width(text[r]);
    }
    int rows = n_runs + (any_val ? 2 : 0);
    double lw = 48 + widest * 6.7, lh = 12 + 20.0 * rows, gx = p->left + p->w - lw - 10, gy = p->top + 10;
    fprintf(f, "<g font-size=\"12\" fill=\"#222\">\n");
    fprintf(f,
            "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" rx=\"4\" fill=\"#ffffff\" fill-opacity=\"0.9\" "
            "stroke=\"#cccccc\"/>\n",
            gx, gy, lw, lh);
    for (int r = 0; r < rows; r++) {
        double y = gy + 20.0 * (r + 1);
        bool run = r < n_runs, dashed = r == n_runs + 1;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>\n",
                gx + 10, y, gx + 34, y, run ? colour(r) : "#888888", dashed ? " stroke-dasharray=\"6 4\"" : "");
        fprintf(f, "<text class=\"%s\" x=\"%.2f\" y=\"%.2f\">", run ? "legend" : "legend-style", gx + 40, y + 4);
        put_text(f, run ? text[r] : dashed ? "validation loss" : "training loss");
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n");
    free(text);
}

// The lower panel: each later run's loss minus the first run's at the same x (runs too close to
// tell apart above), over the upper panel's x axis.
static ct_status diff_panel(FILE *f, const panel *up, const ct_plot_run *runs, int n_runs, const ct_plot_options *o,
                            double top, double height) {
    const ct_plot_run *ref = &runs[0];
    int *dn = calloc((size_t)n_runs, sizeof *dn);
    double **dx = calloc((size_t)n_runs, sizeof *dx), **dy = calloc((size_t)n_runs, sizeof *dy);
    bool ok = dn && dx && dy;
    double lo = 0, hi = 0;  // zero always shown: it is the first run
    for (int r = 1; ok && r < n_runs; r++) {
        const ct_plot_run *run = &runs[r];
        dx[r] = malloc(((size_t)run->n + 1) * sizeof **dx);
        dy[r] = malloc(((size_t)run->n + 1) * sizeof **dy);
        if (!dx[r] || !dy[r]) {
            ok = false;
            break;
        }
        for (int i = 0; i < run->n; i++) {
            int j = find_x(ref->x, ref->n, run->x[i]);
            if (j < 0) continue;
            dx[r][dn[r]] = run->x[i];
            dy[r][dn[r]++] = run->y[i] - ref->y[j];
        }
        if (o->smooth > 1 && dn[r] >= 3 * o->smooth) {
            double *sm = malloc((size_t)dn[r] * sizeof *sm);
            if (!sm) {
                ok = false;
                break;
            }
            moving_average(dy[r], dn[r], o->smooth, sm);
            memcpy(dy[r], sm, (size_t)dn[r] * sizeof *sm);
            free(sm);
        }
        for (int i = 0; i < dn[r]; i++) lo = fmin(lo, dy[r][i]), hi = fmax(hi, dy[r][i]);
    }
    if (ok) {
        panel q = {.f = f, .left = up->left, .top = top, .w = up->w, .h = height, .x = up->x};
        ct_plot_axis_linear(&q.y, lo, hi, 5, false);
        char name[300];
        snprintf(name, sizeof name, "loss \xe2\x88\x92 %.240s", ref->label);  // U+2212 minus
        draw_frame(&q, name, "ct-plot-clip2");
        fprintf(f, "<g clip-path=\"url(#ct-plot-clip2)\" stroke-linejoin=\"round\" stroke-linecap=\"round\">\n");
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"6 4\"/>\n",
                q.left, py(&q, 0), q.left + q.w, py(&q, 0), colour(0));
        for (int r = 1; r < n_runs; r++)
            if (dn[r])
                polyline(&q, "loss-diff", colour(r), 1.8, 0.95, NULL, dx[r], dy[r], dn[r], runs[r].label,
                         "training loss minus the first run's");
        fprintf(f, "</g>\n<text x=\"%.2f\" y=\"%.2f\" font-size=\"12\" fill=\"#666\">difference to ", q.left + 8,
                q.top + 16);
        put_text(f, ref->label);
        fprintf(f, " at the same ");
        put_text(f, o->xlabel ? o->xlabel : "step");
        fprintf(f, "%s; above zero: higher loss</text>\n", o->smooth > 1 ? " (averaged like the curves)" : "");
    }
    for (int r = 0; r < n_runs; r++) {
        if (dx) free(dx[r]);
        if (dy) free(dy[r]);
    }
    free(dx), free(dy), free(dn);
    return ok ? CT_OK : ct_set_error("out of memory drawing the difference panel");
}

ct_status ct_svg_plot_write(FILE *f, const ct_plot_run *runs, int n_runs, const ct_plot_options *o) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    bool any_val = false;
    for (int r = 0; r < n_runs; r++) {
        for (int i = 0; i < runs[r].n + runs[r].vn; i++) {
            bool v = i >= runs[r].n;
            double x = v ? runs[r].vx[i - runs[r].n] : runs[r].x[i], y = v ? runs[r].vy[i - runs[r].n] : runs[r].y[i];
            if (!isfinite(x) || !isfinite(y)) return ct_set_error("%s: a non-finite point", runs[r].label);
            if (o->logy && y <= 0) return ct_set_error("%s: loss %g cannot be drawn on a log axis", runs[r].label, y);
            xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
        }
        any_val |= runs[r].vn > 0;
    }
    if (!(xlo <= xhi)) return ct_set_error("nothing to plot: no loss values");
    bool diff = o->diff && n_runs >= 2;
    const int W = 900, H = diff ? 760 : 500;
    const double ml = 78, mr = 28, mt = 64, mb = 58, gap = 44;
    double ph2 = diff ? floor((H - mt - mb - gap) * 0.34) : 0, ph1 = H - mt - mb - (diff ? gap + ph2 : 0);

    panel p = {.f = f, .left = ml, .top = mt, .w = W - ml - mr, .h = ph1};
    ct_plot_axis_linear(&p.x, xlo, xhi, 8, true);
    if (o->logy) ct_plot_axis_log(&p.y, ylo, yhi);
    else ct_plot_axis_linear(&p.y, ylo, yhi, ph1 >= 300 ? 7 : 5, false);

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    fprintf(f, "<text x=\"%.2f\" y=\"30\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\" fill=\"#222\">",
            W / 2.0);
    put_text(f, o->title ? o->title : "Training loss");
    fprintf(f, "</text>\n");
    bool any_smooth = false;
    for (int r = 0; r < n_runs; r++) any_smooth |= o->smooth > 1 && runs[r].n >= 3 * o->smooth;
    if (any_smooth)
        fprintf(f,
                "<text x=\"%.2f\" y=\"50\" text-anchor=\"middle\" font-size=\"12\" fill=\"#666\">faint: every logged "
                "value; bold: centred %d-point moving average</text>\n",
                W / 2.0, o->smooth);

    draw_frame(&p, o->logy ? "loss (log scale)" : "loss", "ct-plot-clip1");
    fprintf(f, "<g clip-path=\"url(#ct-plot-clip1)\" stroke-linejoin=\"round\" stroke-linecap=\"round\">\n");
    double *sm = NULL;
    for (int r = 0; r < n_runs; r++) {
        const ct_plot_run *run = &runs[r];
        bool smooth = o->smooth > 1 && run->n >= 3 * o->smooth;
        polyline(&p, "loss", colour(r), smooth ? 1 : 1.8, smooth ? 0.3 : 0.95, NULL, run->x, run->y, run->n, run->label,
                 "training loss");
        if (run->n == 1)  // a line through one point draws nothing
            fprintf(f, "<circle class=\"loss-point\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\"/>\n", px(&p, run->x[0]),
                    py(&p, run->y[0]), colour(r));
        double *grown = smooth ? realloc(sm, (size_t)run->n * sizeof *sm) : NULL;
        if (grown) {
            sm = grown;
            moving_average(run->y, run->n, o->smooth, sm);
            polyline(&p, "loss-smoothed", colour(r), 2.2, 0.95, NULL, run->x, sm, run->n, run->label,
                     "training loss, moving average");
        }
        if (!run->vn) continue;
        polyline(&p, "val-loss", colour(r), 1.8, 0.95, "6 4", run->vx, run->vy, run->vn, run->label, "validation loss");
        for (int i = 0; i < run->vn; i++) {
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" stroke=\"#ffffff\"><title>", px(&p, run->vx[i]),
                    py(&p, run->vy[i]), colour(r));
            put_text(f, run->label);
            fprintf(f, ": validation loss %.4f</title></circle>\n", run->vy[i]);
        }
    }
    fprintf(f, "</g>\n");
    // Top right: losses fall, so that corner is usually empty.
    legend(f, &p, runs, n_runs, any_val);

    if (diff && diff_panel(f, &p, runs, n_runs, o, mt + ph1 + gap, ph2)) {
        free(sm);
        return CT_ERR;
    }
    free(sm);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\" fill=\"#222\">", ml + p.w / 2, H - 14.0);
    put_text(f, o->xlabel ? o->xlabel : "step");
    fprintf(f, "</text>\n</svg>\n");
    if (ferror(f)) return ct_set_error("write failed");
    return CT_OK;
}
