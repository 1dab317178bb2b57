// Integer helpers shared by every layer, defined once.
#ifndef CT_MATHUTIL_H
#define CT_MATHUTIL_H

static inline long ct_min_l(long a, long b) { return a < b ? a : b; }
static inline long ct_max_l(long a, long b) { return a > b ? a : b; }
#endif
