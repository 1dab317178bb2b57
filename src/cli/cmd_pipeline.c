// `ctitan pipeline show`: a pipeline schedule as a picture, without running anything. The
// schedule is generated (--schedule, --pp, --vpp, --microbatches) or read from a hand-written CSV
// (--schedule_file), checked and timed by the simulator with its default costs (F 1, B 2, I 1,
// W 1), and printed as a text grid with each rank's idle fraction, the mean bubble beside the
// textbook formula, and the peak micro-batches in flight per rank. --svg / --trace / --csv write
// the SVG timeline, a Chrome trace (Perfetto) and the schedule's CSV. Errors: one line, exit 2.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "parallel/pipeline_schedules.h"
#include "train/pipeline_trace.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan pipeline show --schedule NAME --pp P [--vpp V] --microbatches M\n"
            "                            [--svg FILE] [--trace FILE] [--csv FILE]\n"
            "       ctitan pipeline show --schedule_file CSV --pp P [--schedule NAME] [--microbatches M] ...\n"
            "NAME: gpipe, 1f1b, interleaved_1f1b, looped_bfs, interleaved_zb, zb_h1, zbv (or TorchTitan's\n"
            "names). V defaults to 2 for looped schedules and ZBV, else 1. A CSV has one row per rank\n"
            "(\"0F0,0SEND_F0,...\"); its stage count and micro-batches are read from it, and --schedule\n"
            "only chooses the placement (round-robin unless it names ZBV). --svg: timeline picture;\n"
            "--trace: Chrome trace JSON (Perfetto; one cost unit drawn as 1 ms); --csv: the schedule.\n");
}

static int fail(const char *fmt, const char *arg) {
    fprintf(stderr, "ctitan pipeline show: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

static int positive(const char *opt, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 4096) {
        fprintf(stderr, "ctitan pipeline show: %s: '%s' is not a positive integer\n", opt, s);
        return 2;
    }
    *out = (int)v;
    return 0;
}

typedef struct {
    const char *schedule, *file, *svg, *trace, *csv;
    int pp, vpp, n_mb;  // 0: not given
} show_args;

static int parse(int argc, char **argv, show_args *a) {
    memset(a, 0, sizeof *a);
    // The counts are read as text and checked by positive(), whose message tests rely on.
    const char *pp = NULL, *vpp = NULL, *mb = NULL;
    const ct_opt opts[] = {
        {"schedule", 0, CT_OPT_STR, &a->schedule, "NAME", "gpipe, 1f1b, interleaved_1f1b, looped_bfs, interleaved_zb, zb_h1, zbv", 0, 0},
        {"schedule_file", 0, CT_OPT_STR, &a->file, "CSV", "a hand-written schedule, one row per rank", 0, 0},
        {"pp", 0, CT_OPT_STR, &pp, "P", "pipeline ranks", 0, 0},
        {"vpp", 0, CT_OPT_STR, &vpp, "V", "stages per rank (2 for looped schedules and ZBV, else 1)", 0, 0},
        {"microbatches", 0, CT_OPT_STR, &mb, "M", "micro-batches per step", 0, 0},
        {"svg", 0, CT_OPT_STR, &a->svg, "FILE", "timeline picture", 0, 0},
        {"trace", 0, CT_OPT_STR, &a->trace, "FILE", "Chrome trace JSON (Perfetto; one cost unit drawn as 1 ms)", 0, 0},
        {"csv", 0, CT_OPT_STR, &a->csv, "FILE", "the schedule as CSV", 0, 0},
    };
    const ct_opt_spec spec = {
        "ctitan pipeline show", "--schedule NAME --pp P [--vpp V] --microbatches M [--svg FILE] [--trace FILE] [--csv FILE]\n"
                                "       ctitan pipeline show --schedule_file CSV --pp P [--schedule NAME] [--microbatches M] ...",
        "A CSV has one row per rank (\"0F0,0SEND_F0,...\"); its stage count and micro-batches are read from it,\n"
        "and --schedule only chooses the placement (round-robin unless it names ZBV).\n",
        opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL};
    int prc = ct_opt_parse(&spec, argc, argv);
    if (prc) return prc == CT_OPT_HELP ? -1 : 2;
    if (pp && positive("--pp", pp, &a->pp)) return 2;
    if (vpp && positive("--vpp", vpp, &a->vpp)) return 2;
    if (mb && positive("--microbatches", mb, &a->n_mb)) return 2;
    if (!a->pp) return fail("%s", "needs --pp");
    if (!a->file && !a->schedule) return fail("%s", "needs --schedule or --schedule_file");
    if (!a->file && !a->n_mb) return fail("%s", "needs --microbatches");
    return 0;
}

// The lists to show: generated, or read from the CSV (stage count and micro-batches from its cells).
static int build(const show_args *a, ct_schedule *lists, ct_pp_kind *kind, int *vpp, int *n_mb) {
    if (a->schedule && ct_pp_kind_parse(a->schedule, kind)) return fail("%s", ct_last_error());
    if (!a->file) {
        *vpp = a->vpp ? a->vpp
                      : (*kind == CT_PP_INTERLEAVED_1F1B || *kind == CT_PP_LOOPED_BFS || *kind == CT_PP_ZBV ||
                         *kind == CT_PP_INTERLEAVED_ZB)
                            ? 2
                            : 1;
        *n_mb = a->n_mb;
        if (ct_pp_generate(*kind, a->pp, *vpp, *n_mb, lists)) return fail("%s", ct_last_error());
        return 0;
    }
    if (ct_pp_schedule_read_csv(a->file, a->pp, lists)) return fail("%s", ct_last_error());
    int max_stage = -1, max_mb = -1;
    for (int r = 0; r < a->pp; r++)
        for (int i = 0; i < lists[r].count; i++) {
            if (lists[r].actions[i].stage > max_stage) max_stage = lists[r].actions[i].stage;
            if (lists[r].actions[i].mb > max_mb) max_mb = lists[r].actions[i].mb;
        }
    if ((max_stage + 1) % a->pp) {
        fprintf(stderr, "ctitan pipeline show: %s: %d stages do not divide over --pp %d ranks\n", a->file,
                max_stage + 1, a->pp);
        return 2;
    }
    *vpp = (max_stage + 1) / a->pp;
    *n_mb = a->n_mb ? a->n_mb : max_mb + 1;
    return 0;
}

static void print_table(const show_args *a, ct_pp_kind kind, int vpp, int n_mb, const ct_pp_sim_result *sim) {
    printf("\nrank  busy  idle  idle fraction  peak micro-batches in flight\n");
    for (int r = 0; r < sim->pp; r++)
        printf("%4d %5.0f %5.0f %14.3f %29d\n", r, sim->busy[r], sim->makespan - sim->busy[r], sim->idle_frac[r],
               sim->peak_in_flight[r]);
    printf("bubble (mean idle fraction over ranks, makespan %.0f units): simulated %.4f", sim->makespan, sim->bubble);
    const char *formula = "none";
    double tb = a->schedule ? ct_pp_textbook_bubble(kind, sim->pp, vpp, n_mb, NULL, &formula) : -1;
    if (tb >= 0)
        printf(", textbook %s = %.4f (p %d, v %d, m %d)\n", formula, tb, sim->pp, vpp, n_mb);
    else
        printf(", textbook: no one-line formula for %s\n", a->file ? "a hand-written schedule" : ct_pp_kind_name(kind));
}

// Builds, simulates, prints and writes; the caller owns lists and sim.
static int show_lists(const show_args *a, ct_schedule *lists, ct_pp_sim_result *sim) {
    ct_pp_kind kind = CT_PP_1F1B;
    int vpp = 1, n_mb = 0, rc = build(a, lists, &kind, &vpp, &n_mb);
    if (rc) return rc;
    ct_pp_placement placement = a->schedule ? ct_pp_kind_placement(kind) : CT_PP_ROUND_ROBIN;
    int n_stages = a->pp * vpp, stage_rank[n_stages];
    ct_pp_stage_ranks(placement, a->pp, vpp, stage_rank);
    if (ct_pp_simulate(lists, a->pp, stage_rank, n_stages, n_mb, NULL, sim)) return fail("%s", ct_last_error());
    const char *name = a->file ? a->file : ct_pp_kind_name(kind);
    printf("%s: pp %d, vpp %d, %d micro-batches; %d stages, %s\n", name, a->pp, vpp, n_mb, n_stages,
           placement == CT_PP_V_SHAPE ? "V-shape (rank r runs stages r and 2p-1-r)"
                                      : "round-robin (stage s on rank s mod p)");
    printf("cell <stage><F|B|I|W><micro-batch>: F forward, B backward, I input-gradient, W weight-gradient "
           "(\"1F3\" = stage 1 forward of micro-batch 3);\none column per time unit (costs F 1, B 2, I 1, W 1), "
           "'~' continues an action, '.' idle\n\n");
    ct_pp_timeline tl = ct_pp_timeline_of_sim(lists, sim);
    char *grid = ct_pp_trace_grid(&tl, 1.0, 0);
    fputs(grid, stdout);
    free(grid);
    print_table(a, kind, vpp, n_mb, sim);
    char title[300];
    snprintf(title, sizeof title, "%s: pp %d, vpp %d, %d micro-batches (simulated, default costs)", name, a->pp, vpp,
             n_mb);
    const char *outs[3] = {a->svg, a->trace, a->csv};
    for (int k = 0; k < 3; k++) {
        if (!outs[k]) continue;
        ct_status st = k == 0   ? ct_pp_trace_write_svg(outs[k], &tl, title)
                       : k == 1 ? ct_pp_trace_write_chrome(outs[k], &tl)
                                : ct_pp_schedule_write_csv(outs[k], lists, a->pp);
        if (st) return fail("%s", ct_last_error());
        printf("wrote %s\n", outs[k]);
    }
    return 0;
}

static int show(int argc, char **argv) {
    show_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    ct_schedule lists[a.pp];
    for (int r = 0; r < a.pp; r++) ct_schedule_init(&lists[r]);
    ct_pp_sim_result sim = {0};
    rc = show_lists(&a, lists, &sim);
    ct_pp_sim_result_free(&sim);
    ct_pp_lists_free(lists, a.pp);
    return rc;
}

int ct_cmd_pipeline(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "show")) return show(argc - 1, argv + 1);
    fprintf(stderr, "ctitan pipeline: unknown subcommand '%s' (show)\n", argv[0]);
    return 2;
}
