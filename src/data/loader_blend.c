#include "data/loader_blend.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ct_blend_is_blend(const char *source) {
    if (!source) return false;
    while (isspace((unsigned char)*source)) source++;
    char *end;
    (void)strtod(source, &end);
    return end != source && (*end == 0 || isspace((unsigned char)*end));
}

ct_status ct_blend_parse(const char *source, ct_blend_spec *out) {
    memset(out, 0, sizeof *out);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", source);
    char *words[2 * CT_BLEND_MAX + 1];
    int nw = 0;
    for (char *save = NULL, *t = strtok_r(buf, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (nw == 2 * CT_BLEND_MAX)
            return ct_set_error("training.dataset: a blend of more than %d datasets", CT_BLEND_MAX);
        words[nw++] = t;
    }
    if (nw < 2 || nw % 2)
        return ct_set_error("training.dataset '%s': a blend is weight-path pairs (\"0.7 data/a 0.3 data/b\"), this has "
                            "%d word%s",
                            source, nw, nw == 1 ? "" : "s");
    double sum = 0;
    for (int i = 0; i < nw; i += 2) {
        char *end;
        double w = strtod(words[i], &end);
        if (*end || !(w > 0) || !isfinite(w))
            return ct_set_error("training.dataset: the blend's weight '%s' (before %s) is not a positive number",
                                words[i], words[i + 1]);
        if (!strcmp(words[i + 1], "synthetic"))
            return ct_set_error("training.dataset: a blend mixes token shards; 'synthetic' cannot be one of them");
        int d = out->n++;
        out->w[d] = w;
        snprintf(out->path[d], sizeof out->path[d], "%s", words[i + 1]);
        sum += w;
    }
    for (int d = 0; d < out->n; d++) out->w[d] /= sum;
    return CT_OK;
}

int ct_blend_next(const ct_blend_spec *b, uint64_t n, uint64_t *count) {
    int best = 0;
    double best_gap = -INFINITY;
    for (int d = 0; d < b->n; d++) {
        double gap = b->w[d] * (double)(n + 1) - (double)count[d];
        if (gap > best_gap) best = d, best_gap = gap;
    }
    count[best]++;
    return best;
}
