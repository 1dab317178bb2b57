// Fuzz target: a pipeline schedule as CSV (ct_pp_schedule_read_csv, parallel/schedule_csv.c, and
// each cell through ct_schedule_parse, parallel/schedule.c), the file pipeline_schedule_file
// names; then the simulator that checks it before a run (ct_pp_simulate, pipeline_sim.c), which
// takes the stages and micro-batches the cells name at their word. The first byte picks the
// pipeline: degree pp = 1 + bits 0-1, virtual stages vpp = 1 + bit 2, micro-batches
// 1 + bits 3-5, V-shape placement bit 6; the rest is the file.
//
// Properties beyond "no crash, no leak, no UB": pp lists on success, and the CSV ctitan writes
// for them (ct_pp_schedule_format_csv) parses back to the same actions.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "parallel/pipeline_schedules.h"

static int same_lists(const ct_schedule *a, const ct_schedule *b, int pp) {
    for (int r = 0; r < pp; r++) {
        if (a[r].count != b[r].count) return 0;
        for (int i = 0; i < a[r].count; i++)
            if (a[r].actions[i].kind != b[r].actions[i].kind || a[r].actions[i].stage != b[r].actions[i].stage ||
                a[r].actions[i].mb != b[r].actions[i].mb)
                return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int pp = 1 + (data[0] & 3), vpp = 1 + (data[0] >> 2 & 1), n_mb = 1 + (data[0] >> 3 & 7);
    const ct_pp_placement placement = data[0] & 64 ? CT_PP_V_SHAPE : CT_PP_ROUND_ROBIN;
    char path[1024];
    ct_fuzz_write("schedule.csv", data + 1, size - 1, path, sizeof path);
    ct_schedule lists[4], again[4];
    if (ct_pp_schedule_read_csv(path, pp, lists) != CT_OK) {
        for (int r = 0; r < pp; r++)
            ct_fuzz_check(lists[r].count == 0 && !lists[r].actions, "rank %d's list left after a refusal", r);
        return 0;
    }
    char *text = ct_pp_schedule_format_csv(lists, pp);
    ct_fuzz_check(ct_pp_schedule_parse_csv(text, pp, again) == CT_OK, "the written CSV does not parse: %s",
                  ct_last_error());
    ct_fuzz_check(same_lists(lists, again, pp), "the actions changed in a write and read:\n%s", text);
    free(text);
    ct_pp_lists_free(again, pp);

    int stage_rank[8];
    ct_pp_stage_ranks(placement, pp, vpp, stage_rank);
    ct_pp_sim_result sim;
    if (ct_pp_simulate(lists, pp, stage_rank, pp * vpp, n_mb, NULL, &sim) == CT_OK)
        ct_fuzz_check(sim.pp == pp && sim.makespan >= 0 && sim.bubble >= 0 && sim.bubble <= 1, "makespan %g bubble %g",
                      sim.makespan, sim.bubble);
    ct_pp_sim_result_free(&sim);
    ct_pp_lists_free(lists, pp);
    return 0;
}
