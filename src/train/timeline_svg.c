// A static SVG timeline (train/timeline_svg.h).
#include "train/timeline_svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/file_check.h"

// Text as SVG character data: the markup characters escaped (titles may hold "<", names "&").
static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

ct_status ct_svg_timeline_write(const char *path, const ct_svg_timeline *tl) {
    double t0 = INFINITY, t1 = -INFINITY;
    for (int i = 0; i < tl->n_bars; i++) {
        if (tl->bars[i].t0 < t0) t0 = tl->bars[i].t0;
        if (tl->bars[i].t1 > t1) t1 = tl->bars[i].t1;
    }
    if (t0 > t1) t0 = t1 = 0;  // no bars at all
    double span = t1 > t0 ? t1 - t0 : 1;
    int levels = tl->levels > 0 ? tl->levels : 1, lh = tl->level_height > 0 ? tl->level_height : 24;
    // One level: bars fill it; several: a pixel between levels, so nested spans read apart.
    int bar = levels == 1 ? lh : lh - 1, lane_h = levels * lh, font = lh >= 20 ? 10 : 8;
    const int left = 70, plot_w = 1100, top = 40, gap = 10;
    int height = top + tl->n_lanes * (lane_h + gap) + 70 + 18 * ((tl->n_legend + 7) / 8 - 1),
        width = left + plot_w + 20;
    FILE *f = ct_file_fopen_write(path, "timeline SVG", CT_FILE_WRITE_TRUNC);
    if (!f) return CT_ERR;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"monospace\" "
               "font-size=\"10\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height);
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\">", left);
    put_text(f, tl->title ? tl->title : "timeline");
    fprintf(f, "</text>\n");
    for (int r = 0; r < tl->n_lanes; r++) {
        int y = top + r * (lane_h + gap);
        fprintf(f, "<text x=\"8\" y=\"%d\" font-size=\"12\">", y + lane_h / 2 + 4);
        put_text(f, tl->lane_names[r]);
        fprintf(f, "</text>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eeeeee\"/>\n", left, y + lane_h,
                left + plot_w, y + lane_h);
    }
    for (int i = 0; i < tl->n_bars; i++) {
        const ct_svg_bar *b = &tl->bars[i];
        if (b->lane < 0 || b->lane >= tl->n_lanes || b->level < 0 || b->level >= levels) continue;
        double x = left + (b->t0 - t0) / span * plot_w, w = (b->t1 - b->t0) / span * plot_w;
        if (w <= 0) continue;  // zero-length (simulated comm, a span too short to time) shows nothing
        int y = top + b->lane * (lane_h + gap) + b->level * lh;
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"white\" "
                   "stroke-width=\"0.5\"><title>",
                x, b->thin ? y + bar - 6 : y, w, b->thin ? 6 : bar, b->fill);
        put_text(f, b->tip ? b->tip : b->label);
        fputc(' ', f);
        put_text(f, tl->lane_names[b->lane]);
        fprintf(f, ": %.4g to %.4g %s</title></rect>\n", (b->t0 - t0) * tl->scale, (b->t1 - t0) * tl->scale, tl->unit);
        int n = b->label ? (int)strlen(b->label) : 0;
        if (n && !b->thin && w >= (font == 10 ? 6.5 : 5.2) * n + 2) {
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"white\" text-anchor=\"middle\"%s>", x + w / 2,
                    y + bar / 2 + font * 2 / 5, font == 10 ? "" : " font-size=\"8\"");
            put_text(f, b->label);
            fprintf(f, "</text>\n");
        }
    }
    // Time axis: ten ticks.
    int ya = top + tl->n_lanes * (lane_h + gap) + 4;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, ya, left + plot_w, ya);
    for (int k = 0; k <= 10; k++) {
        double x = left + plot_w * k / 10.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>", x, ya, x, ya + 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.3g%s%s</text>\n", x, ya + 15,
                span * tl->scale * k / 10, k == 10 ? " " : "", k == 10 ? tl->unit : "");
    }
    for (int i = 0; i < tl->n_legend; i++) {
        int x = left + (i % 8) * 130, y = ya + 30 + 18 * (i / 8);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">", x, y,
                tl->legend[i].fill, x + 16, y + 10);
        put_text(f, tl->legend[i].what);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    bool ok = !ferror(f);
    if (fclose(f) || !ok) return ct_set_error("%s: write failed", path);
    return CT_OK;
}
