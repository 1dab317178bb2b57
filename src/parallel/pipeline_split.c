#include "parallel/pipeline_split.h"

#include <stdlib.h>
#include <string.h>

// Reads "layers.4,layers.8" or "4,8" into first[1..]; returns how many points it read, -1 on a
// malformed entry.
static int read_points(const char *text, int *points, int cap) {
    int n = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        if (!strncmp(p, "layers.", 7)) p += 7;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',' && *end != ' ') || n == cap) return -1;
        points[n++] = (int)v;
        p = end;
    }
    return n;
}

ct_status ct_pp_split_layers(int n_layers, int n_stages, int layers_per_stage, const char *split_points, int *first) {
    if (n_stages < 1) return ct_set_error("pipeline: %d stages", n_stages);
    if (n_layers < n_stages)
        return ct_set_error("pipeline: %d layers cannot give each of %d stages (pipeline_degree x stages per rank) "
                            "a block; use at most %d stages",
                            n_layers, n_stages, n_layers);
    first[0] = 0;
    first[n_stages] = n_layers;
    if (split_points && split_points[0]) {
        int pts[n_stages + 1];
        int n = read_points(split_points, pts, n_stages);
        if (n < 0 || n != n_stages - 1)
            return ct_set_error("parallelism.pipeline_split_points: \"%s\" must name %d first blocks (one per stage "
                                "after the first), e.g. \"layers.%d\"",
                                split_points, n_stages - 1, n_layers / n_stages);
        for (int s = 1; s < n_stages; s++) {
            first[s] = pts[s - 1];
            if (first[s] <= first[s - 1] || first[s] >= n_layers)
                return ct_set_error("parallelism.pipeline_split_points: \"%s\" leaves stage %d without blocks "
                                    "(points must increase strictly within 1..%d)",
                                    split_points, first[s] <= first[s - 1] ? s - 1 : s, n_layers - 1);
        }
        return CT_OK;
    }
    if (layers_per_stage > 0) {
        if ((long)layers_per_stage * n_stages != n_layers)
            return ct_set_error("parallelism.pipeline_layers_per_stage: %d x %d stages = %d blocks, the model has %d "
                                "(use %d, or leave it 0 for an even split)",
                                layers_per_stage, n_stages, layers_per_stage * n_stages, n_layers,
                                n_layers % n_stages ? 0 : n_layers / n_stages);
        for (int s = 1; s < n_stages; s++) first[s] = s * layers_per_stage;
        return CT_OK;
    }
    int base = n_layers / n_stages, extra = n_layers % n_stages;
    for (int s = 1; s < n_stages; s++) first[s] = first[s - 1] + base + (s - 1 < extra ? 1 : 0);
    return CT_OK;
}
