// Tests of metrics/svg_plot.c: 1-2-5 linear axes (hand-worked cases, then random ranges), log axes
// (mantissa ticks, the linear-step fallback of a narrow range), tick labels, and the SVG writer's
// structure, escaping and refusals. The end-to-end command is tests/test_plot.sh.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/svg_plot.h"
#include "test.h"

static int ticks(const ct_plot_axis *a, double *t) { return ct_plot_axis_ticks(a, t, 64); }

static void test_linear_axis_cases(void) {
    ct_plot_axis a;
    double t[64];
    ct_plot_axis_linear(&a, 2.0, 4.0, 7, false);  // 2/7 = 0.29 -> 0.5
    CHECK(a.lo == 2 && a.hi == 4 && a.step == 0.5, "lo %g hi %g step %g", a.lo, a.hi, a.step);
    CHECK(ticks(&a, t) == 5 && t[0] == 2 && t[1] == 2.5 && t[4] == 4, "ticks %g %g %g", t[0], t[1], t[4]);
    ct_plot_axis_linear(&a, 1, 5, 8, true);  // a step axis from 1: starts at 0; 5/8 -> 1
    CHECK(a.lo == 0 && a.hi == 5 && a.step == 1, "lo %g hi %g step %g", a.lo, a.hi, a.step);
    ct_plot_axis_linear(&a, 100, 200, 8, true);  // far from 0: not stretched to it
    CHECK(a.lo == 100 && a.hi == 200 && a.step == 20, "lo %g hi %g step %g", a.lo, a.hi, a.step);
    ct_plot_axis_linear(&a, 2048, 409600, 8, true);  // tokens: 51k per interval -> 100k
    CHECK(a.lo == 0 && a.hi == 500000 && a.step == 100000, "lo %g hi %g step %g", a.lo, a.hi, a.step);
    ct_plot_axis_linear(&a, 7.1234, 7.7, 5, false);  // 0.115 -> 0.2, widened outwards
    CHECK_CLOSE(a.lo, 7.0, 0, 1e-12);
    CHECK_CLOSE(a.hi, 7.8, 0, 1e-12);
    CHECK_CLOSE(a.step, 0.2, 0, 1e-15);
    ct_plot_axis_linear(&a, -0.03, 0.012, 5, false);  // a difference panel around zero
    CHECK_CLOSE(a.step, 0.01, 0, 1e-15);
    CHECK_CLOSE(a.lo, -0.03, 0, 1e-12);
    CHECK_CLOSE(a.hi, 0.02, 0, 1e-12);
    ct_plot_axis_linear(&a, 3, 3, 5, false);  // one value: some room around it, never lo == hi
    CHECK(a.lo < 3 && a.hi > 3, "lo %g hi %g", a.lo, a.hi);
    ct_plot_axis_linear(&a, 0, 0, 5, false);
    CHECK(a.lo < 0 && a.hi > 0, "lo %g hi %g", a.lo, a.hi);
}

// Over random ranges: the step is 1, 2 or 5 x 10^k, the axis covers the data, its ends are whole
// steps, and the number of intervals stays near the target.
static void test_linear_axis_random(void) {
    srand(12345);
    for (int it = 0; it < 20000; it++) {
        double scale = pow(10, rand() % 16 - 8), lo = (rand() / (double)RAND_MAX - 0.3) * scale;
        double hi = lo + rand() / (double)RAND_MAX * scale + scale * 1e-6;
        int target = 3 + rand() % 8;
        ct_plot_axis a;
        ct_plot_axis_linear(&a, lo, hi, target, it & 1);
        double mant = a.step / pow(10, floor(log10(a.step) + 1e-9));
        bool one_two_five = fabs(mant - 1) < 1e-9 || fabs(mant - 2) < 1e-9 || fabs(mant - 5) < 1e-9;
        double intervals = (a.hi - a.lo) / a.step;
        CHECK(one_two_five, "step %g (mantissa %g) for [%g, %g]", a.step, mant, lo, hi);
        CHECK(a.lo <= lo && a.hi >= hi, "axis [%g, %g] misses [%g, %g]", a.lo, a.hi, lo, hi);
        CHECK(fabs(a.lo / a.step - round(a.lo / a.step)) < 1e-6 && fabs(intervals - round(intervals)) < 1e-6,
              "ends not whole steps: [%g, %g] step %g", a.lo, a.hi, a.step);
        CHECK(intervals >= 1 && intervals <= 2.5 * target + 2, "%g intervals for target %d on [%g, %g]", intervals,
              target, lo, hi);
        if (ct_test_case_failed) return;
    }
}

static void test_log_axis(void) {
    ct_plot_axis a;
    double t[64];
    ct_plot_axis_log(&a, 2.1, 7.6);  // under a decade: every mantissa
    CHECK(a.log && a.step == 0 && a.lo == 2 && a.hi == 8, "lo %g hi %g step %g", a.lo, a.hi, a.step);
    CHECK(ticks(&a, t) == 7 && t[0] == 2 && t[6] == 8, "%d ticks", ticks(&a, t));
    ct_plot_axis_log(&a, 0.5, 40);  // two decades: 1-2-5
    int n = ticks(&a, t);
    CHECK(a.lo == 0.5 && a.hi == 50 && n == 7, "lo %g hi %g, %d ticks", a.lo, a.hi, n);
    CHECK_CLOSE(t[1], 1, 0, 1e-12);
    CHECK_CLOSE(t[2], 2, 0, 1e-12);
    CHECK_CLOSE(t[6], 50, 0, 1e-12);
    ct_plot_axis_log(&a, 0.002, 300);  // five decades: powers of ten
    n = ticks(&a, t);
    CHECK(n == 7 && fabs(a.lo - 0.001) < 1e-15 && fabs(a.hi - 1000) < 1e-9, "lo %g hi %g, %d ticks", a.lo, a.hi, n);
    ct_plot_axis_log(&a, 7.1, 7.7);  // only 7 and 8 in the decade: a 0.2 step on the log scale
    CHECK(a.step > 0 && fabs(a.step - 0.2) < 1e-12 && fabs(a.lo - 7.0) < 1e-12 && fabs(a.hi - 7.8) < 1e-12,
          "lo %g hi %g step %g", a.lo, a.hi, a.step);
    CHECK(ticks(&a, t) == 5, "%d ticks", ticks(&a, t));
    // Log placement: the geometric mean is half-way, whichever tick style.
    CHECK_CLOSE(ct_plot_axis_frac(&a, sqrt(a.lo * a.hi)), 0.5, 0, 1e-12);
    ct_plot_axis_log(&a, 2.1, 7.6);
    CHECK_CLOSE(ct_plot_axis_frac(&a, 4), 0.5, 0, 1e-12);
    CHECK_CLOSE(ct_plot_axis_frac(&a, 2), 0, 0, 1e-12);
    CHECK_CLOSE(ct_plot_axis_frac(&a, 8), 1, 0, 1e-12);
}

static void test_tick_labels(void) {
    ct_plot_axis a;
    char s[64];
    ct_plot_axis_linear(&a, 2, 4, 7, false);
    ct_plot_tick_label(&a, 2.5, s, sizeof s);
    CHECK(!strcmp(s, "2.5"), "%s", s);
    ct_plot_tick_label(&a, 4, s, sizeof s);
    CHECK(!strcmp(s, "4.0"), "%s", s);
    ct_plot_axis_linear(&a, 0, 10240, 8, true);  // tokens: 0 .. 12k in 2k steps
    ct_plot_tick_label(&a, 12000, s, sizeof s);
    CHECK(!strcmp(s, "12k"), "%s", s);
    ct_plot_tick_label(&a, 0, s, sizeof s);
    CHECK(!strcmp(s, "0"), "%s", s);
    ct_plot_axis_linear(&a, 0, 2.2e6, 8, true);  // 500k steps need one decimal in M
    ct_plot_tick_label(&a, 1.5e6, s, sizeof s);
    CHECK(!strcmp(s, "1.5M"), "%s", s);
    ct_plot_axis_linear(&a, -0.03, 0.012, 5, false);
    ct_plot_tick_label(&a, -0.03 + 3 * a.step, s, sizeof s);  // a sum that lands near, not on, 0
    CHECK(!strcmp(s, "0"), "%s", s);
    ct_plot_tick_label(&a, -0.02, s, sizeof s);
    CHECK(!strcmp(s, "-0.02"), "%s", s);
    ct_plot_axis_log(&a, 0.5, 40);
    ct_plot_tick_label(&a, 0.5, s, sizeof s);
    CHECK(!strcmp(s, "0.5"), "%s", s);
    ct_plot_tick_label(&a, 20, s, sizeof s);
    CHECK(!strcmp(s, "20"), "%s", s);
}

// Writes a chart to memory; returns the text (caller frees) or NULL when the writer refused.
static char *render(const ct_plot_run *runs, int n, const ct_plot_options *o) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ct_status st = ct_svg_plot_write(f, runs, n, o);
    fclose(f);
    if (st) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void test_svg_structure(void) {
    double x1[] = {1, 2, 3, 4}, y1[] = {4, 3.5, 3, 2}, vx[] = {2, 4}, vy[] = {3.6, 2.2};
    double x2[] = {1, 2, 3}, y2[] = {3.9, 3.2, 2.8};
    ct_plot_run runs[] = {{.label = "alpha", .n = 4, .x = x1, .y = y1, .vn = 2, .vx = vx, .vy = vy},
                          {.label = "beta", .n = 3, .x = x2, .y = y2}};
    ct_plot_options o = {.title = "T"};
    char *s = render(runs, 2, &o);
    CHECK(s != NULL, "refused: %s", ct_last_error());
    if (!s) return;
    CHECK(!strncmp(s, "<?xml", 5) && strstr(s, "</svg>\n"), "framing");
    CHECK(count(s, "<polyline class=\"loss\"") == 2, "loss lines %d", count(s, "<polyline class=\"loss\""));
    CHECK(count(s, "<polyline class=\"val-loss\"") == 1 && count(s, "stroke-dasharray=\"6 4\" points") == 1, "val");
    CHECK(count(s, "<circle") == 2, "val markers");
    CHECK(strstr(s, ">alpha  (val 2.2000)</text>") && strstr(s, ">beta</text>"), "legend");
    CHECK(strstr(s, ">validation loss</text>") && strstr(s, ">training loss</text>"), "legend styles");
    CHECK(count(s, "<polyline class=\"loss-diff\"") == 0 && count(s, "loss-smoothed") == 0, "no extras by default");
    free(s);

    o.diff = true;  // beta minus alpha at steps 1, 2, 3
    s = render(runs, 2, &o);
    CHECK(s && count(s, "<polyline class=\"loss-diff\"") == 1, "diff panel");
    CHECK(s && strstr(s, "height=\"760\""), "taller with the panel");
    free(s);

    double xs[30], ys[30];
    for (int i = 0; i < 30; i++) xs[i] = i + 1, ys[i] = 5 - 0.1 * i + (i % 2 ? 0.3 : -0.3);
    ct_plot_run noisy = {.label = "n", .n = 30, .x = xs, .y = ys};
    ct_plot_options so = {.smooth = 10};  // 30 points = 3 windows: smoothed
    s = render(&noisy, 1, &so);
    CHECK(s && count(s, "class=\"loss-smoothed\"") == 1 && count(s, "<polyline class=\"loss\"") == 1, "smoothed");
    free(s);
    ct_plot_run one = {.label = "one", .n = 1, .x = xs, .y = ys};  // one logged step: a dot, not an empty line
    s = render(&one, 1, &so);
    CHECK(s && count(s, "class=\"loss-point\"") == 1 && count(s, "<polyline class=\"loss\"") == 1, "one point");
    free(s);
    so.smooth = 11;  // fewer than 3 windows: raw only
    s = render(&noisy, 1, &so);
    CHECK(s && count(s, "class=\"loss-smoothed\"") == 0, "too short to smooth");
    free(s);
}

static void test_svg_escaping(void) {
    double x[] = {1, 2}, y[] = {1, 2};
    // Markup in a title and a label, and bytes no XML file may hold (a control character, a lone
    // continuation byte, a truncated sequence, an overlong '/', a surrogate), next to valid UTF-8.
    ct_plot_run run = {.label = "a<b>&\"c\x01\x80\xe2\x82 \xc0\xaf \xed\xa0\x80 \xc3\xa9", .n = 2, .x = x, .y = y};
    ct_plot_options o = {.title = "loss & <friends>"};
    char *s = render(&run, 1, &o);
    CHECK(s != NULL, "refused");
    if (!s) return;
    CHECK(strstr(s, ">loss &amp; &lt;friends&gt;</text>"), "title escaped");
    CHECK(strstr(s, ">a&lt;b&gt;&amp;&quot;c???? ?? ??? \xc3\xa9</text>"), "label escaped");
    free(s);
}

static void test_svg_refusals(void) {
    double x[] = {1, 2}, y[] = {1, 0}, bad[] = {1, NAN};
    ct_plot_run run = {.label = "r", .n = 2, .x = x, .y = y};
    ct_plot_options o = {.logy = true};
    CHECK(render(&run, 1, &o) == NULL && strstr(ct_last_error(), "log axis"), "%s", ct_last_error());
    o.logy = false;
    char *s = render(&run, 1, &o);  // zero is fine on a linear axis
    CHECK(s != NULL, "linear zero");
    free(s);
    run.y = bad;
    CHECK(render(&run, 1, &o) == NULL && strstr(ct_last_error(), "non-finite"), "%s", ct_last_error());
    run.n = 0;
    CHECK(render(&run, 1, &o) == NULL && strstr(ct_last_error(), "no loss"), "%s", ct_last_error());
}

int main(void) {
    CT_RUN(test_linear_axis_cases);
    CT_RUN(test_linear_axis_random);
    CT_RUN(test_log_axis);
    CT_RUN(test_tick_labels);
    CT_RUN(test_svg_structure);
    CT_RUN(test_svg_escaping);
    CT_RUN(test_svg_refusals);
    CT_TEST_EXIT();
}
