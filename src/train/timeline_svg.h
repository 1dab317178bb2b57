// A static SVG timeline: one lane per rank, coloured bars on a time axis, a legend. What the
// pipeline pictures (train/pipeline_trace.c: one bar per action) and the profiler's pictures
// (train/profiling.c: spans nested in levels) are both drawn with.
#ifndef CT_TIMELINE_SVG_H
#define CT_TIMELINE_SVG_H
#include <stdbool.h>

#include "core/error.h"

typedef struct {
    double t0, t1;      // on the timeline's clock (any origin: the earliest start is the left edge)
    int lane;           // row
    int level;          // nesting level inside the lane, 0 = top (the lane has `levels` of them)
    bool thin;          // drawn as a thin strip at the bottom of its level (a wait, a receive)
    const char *fill;   // "#4e79a7"
    const char *label;  // drawn inside when it fits; NULL: none
    const char *tip;    // hover text before the times; NULL: the label
} ct_svg_bar;

typedef struct {
    const char *fill, *what;
} ct_svg_legend;

typedef struct {
    const char *title;
    int n_lanes;
    const char *const *lane_names;  // (n_lanes)
    int levels;                     // levels per lane (>= 1)
    int level_height;               // pixels per level (24 for one level of pipeline actions)
    const ct_svg_bar *bars;
    int n_bars;
    double scale;                   // axis value per unit of t ("ms": 1e3 for seconds)
    const char *unit;               // "ms", "units"
    const ct_svg_legend *legend;
    int n_legend;
} ct_svg_timeline;

// Bars of zero (or negative) length are left out; the rest each get a <rect> with a <title>
// (tip, lane name, start and end on the axis) for hovering. CT_ERR + message naming path.
ct_status ct_svg_timeline_write(const char *path, const ct_svg_timeline *tl);
#endif
