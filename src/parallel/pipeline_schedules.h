// Pipeline schedules as data: where each stage runs, per-rank action lists for
// GPipe, 1F1B, interleaved 1F1B, looped BFS, zero-bubble (ZB-H1 / interleaved) and ZBV, their
// CSV form, and a simulator that checks all ranks' lists together before anything runs.
//
// Stages are numbered globally 0 .. S-1 with S = pp * vpp (pp ranks, vpp virtual stages each).
// Every generated list uses the actions of parallel/schedule.h and these conventions, which the
// executor relies on:
//   - stage s's forward output goes by sSEND_Fm right after sFm on the sender and arrives by
//     (s+1)RECV_Fm right before (s+1)Fm on the receiver;
//   - the gradient of stage s+1's input goes by (s+1)SEND_Bm right after (s+1)Bm or (s+1)Im, and
//     arrives by sRECV_Bm right before sBm / sIm;
//   - no SEND/RECV between two stages on the same rank (ZBV's turn): the executor passes the
//     tensor locally;
//   - sends never block, a receive blocks until its send has been issued;
//   - a training list ends with REDUCE_GRADS RESHARD, a forward-only list with RESHARD.
// Receives sit right before their consumer, so a micro-batch's activation slot is taken no
// earlier than needed (ct_schedule_max_in_flight counts from the receive); an executor that
// posts receives earlier does so on its own account.
#ifndef CT_PIPELINE_SCHEDULES_H
#define CT_PIPELINE_SCHEDULES_H
#include <stdbool.h>

#include "core/error.h"
#include "parallel/schedule.h"

// ------------------------------------------------------------------ placement

typedef enum {
    CT_PP_ROUND_ROBIN = 0,  // stage s on rank s % pp (GPipe, 1F1B, interleaved, looped BFS, ZB-H1)
    CT_PP_V_SHAPE,          // zig-zag: rank s % pp going down, pp-1 - s % pp coming back (ZBV, vpp 2)
} ct_pp_placement;

// The pp rank that runs global stage `stage`.
int ct_pp_stage_rank(ct_pp_placement placement, int stage, int pp);
// Fills stage_rank (pp * vpp entries) with ct_pp_stage_rank of every stage.
void ct_pp_stage_ranks(ct_pp_placement placement, int pp, int vpp, int *stage_rank);

// ------------------------------------------------------------------ schedule kinds

typedef enum {
    CT_PP_GPIPE = 0,        // "GPipe" / gpipe: every forward, then every backward; vpp 1
    CT_PP_1F1B,             // "1F1B" / 1f1b: warm-up forwards, one forward one backward, cool-down; vpp 1
    CT_PP_INTERLEAVED_1F1B, // "Interleaved1F1B" / interleaved_1f1b: Megatron's order; vpp >= 2, m % pp == 0
    CT_PP_LOOPED_BFS,       // "LoopedBFS" / looped_bfs: each local stage's micro-batches at once; vpp >= 2
    CT_PP_INTERLEAVED_ZB,   // "InterleavedZeroBubble": ZB-H1 with backward split into I and W; vpp >= 1
    CT_PP_ZB_H1,            // zb_h1 (zbh1, zb1p): the same generator with vpp 1
    CT_PP_ZBV,              // "ZBVZeroBubble" / zbv: V-shape placement, I/W split; vpp 2
    CT_PP_NKINDS
} ct_pp_kind;

// Accepts TorchTitan's names case-insensitively ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
// "InterleavedZeroBubble", "ZBVZeroBubble") and the snake_case aliases above. CT_ERR with the list
// of names otherwise.
ct_status ct_pp_kind_parse(const char *name, ct_pp_kind *kind);
const char *ct_pp_kind_name(ct_pp_kind kind);  // TorchTitan's spelling ("ZBV" -> "ZBVZeroBubble")
ct_pp_placement ct_pp_kind_placement(ct_pp_kind kind);
// The placement a schedule name needs (ct_pp_kind_parse + ct_pp_kind_placement).
ct_status ct_pp_placement_of(const char *name, ct_pp_placement *placement);
bool ct_pp_kind_splits_backward(ct_pp_kind kind);  // I + W instead of B

// CT_OK when the generator can build (kind, pp, vpp, n_mb); else CT_ERR with one line saying what
// would work, e.g. "Interleaved1F1B needs micro-batches to be a multiple of pipeline_degree 4
// (got 6): use 4, 8, 12...".
ct_status ct_pp_validate(ct_pp_kind kind, int pp, int vpp, int n_mb);

// ------------------------------------------------------------------ generators

// Pure function (kind, pp, vpp, n_mb) -> lists[0 .. pp-1], one training list per rank, each
// initialised here (the caller frees them with ct_pp_lists_free). CT_ERR (lists untouched) when
// ct_pp_validate refuses.
ct_status ct_pp_generate(ct_pp_kind kind, int pp, int vpp, int n_mb, ct_schedule *lists);
// The same by name (ct_pp_kind_parse, then ct_pp_generate).
ct_status ct_pp_schedule_build(const char *name, int pp, int vpp, int n_mb, ct_schedule *lists);
// Forward-only lists (evaluation) for the stages placed as `placement`: each rank runs its stages
// in increasing order, every micro-batch of one before the next, then RESHARD.
ct_status ct_pp_generate_forward(ct_pp_placement placement, int pp, int vpp, int n_mb, ct_schedule *lists);
void ct_pp_lists_free(ct_schedule *lists, int pp);
// No pipeline: one stage (0), F0 B0 F1 B1 ... REDUCE_GRADS RESHARD (ct_schedule_accumulation).
void ct_pp_no_pipeline(ct_schedule *list, int n_mb, bool training);

// ------------------------------------------------------------------ CSV (schedule_csv.c)

// One row per rank, one action per cell in the text form of parallel/schedule.h:
//   0F0,0SEND_F0,0F1,...,REDUCE_GRADS,RESHARD
// Returns a malloc'd, NUL-terminated text (the caller frees it).
char *ct_pp_schedule_format_csv(const ct_schedule *lists, int pp);
ct_status ct_pp_schedule_write_csv(const char *path, const ct_schedule *lists, int pp);
// Reads pp rows into lists[0 .. pp-1] (initialised here; freed with ct_pp_lists_free). Blank lines
// and lines starting with '#' are skipped, empty cells ignored, spaces around cells trimmed.
// CT_ERR with "row R, column C" of the first cell that cannot be read, a row of only empty cells
// (a rank with nothing to do), or when the row count is not pp; lists are left empty then.
ct_status ct_pp_schedule_parse_csv(const char *text, int pp, ct_schedule *lists);
ct_status ct_pp_schedule_read_csv(const char *path, int pp, ct_schedule *lists);  // errors start with path

// ------------------------------------------------------------------ simulator (pipeline_sim.c)

// Duration of each action, in any time unit (the results are in the same unit).
typedef struct {
    double cost[CT_ACT_NKINDS];  // per action kind
    // When set, used instead of cost[] (e.g. measured durations per rank and stage).
    double (*fn)(void *ctx, int rank, const ct_action *a);
    void *ctx;
} ct_pp_costs;
ct_pp_costs ct_pp_costs_default(void);  // F 1, B 2, I 1, W 1, everything else 0

typedef struct {
    int pp;
    double makespan;       // end of the last action on any rank (all ranks start at 0)
    double bubble;         // mean over ranks of idle_frac
    double *busy;          // (pp) time in F, B, I, W
    double *idle_frac;     // (pp) (makespan - busy) / makespan
    int *peak_in_flight;   // (pp) most (stage, micro-batch) pairs holding activations on the rank at
                           // once, each from its first action there (forward or receive) to its last
    int *n_actions;        // (pp) lists[r].count
    double **start, **end; // (pp)[n_actions[r]] simulated start / end of every action
} ct_pp_sim_result;

// Runs all ranks' lists together in simulated time: each action takes its cost, a receive waits
// for its send. Checks, in this order, reporting the first problem with its rank, action index
// and text (e.g. "rank 1 action 0 (1RECV_F0): no rank sends it (want 0SEND_F0 on rank 0)"):
//   every action names a stage of this rank and a micro-batch < n_mb; SEND/RECV only between
//   stages on different ranks; each rank's list passes ct_schedule_check; every stage runs on its
//   rank; every receive has its send and every send its receive; a forward (backward) of a stage
//   whose neighbour is on another rank comes after the receive of its input (gradient); no
//   deadlock ("deadlock: rank 0 waits at 0RECV_B1, rank 1 waits at 1RECV_F2").
// stage_rank: (n_stages) the rank of each stage; costs NULL: ct_pp_costs_default(). The lists are
// training lists when any of them runs a backward (B, I or W): then every stage must run every
// backward; else forward-only (evaluation) lists. out is filled on CT_OK and zeroed on CT_ERR
// (ct_pp_sim_result_free is safe on both).
ct_status ct_pp_simulate(const ct_schedule *lists, int pp, const int *stage_rank, int n_stages, int n_mb,
                         const ct_pp_costs *costs, ct_pp_sim_result *out);
void ct_pp_sim_result_free(ct_pp_sim_result *r);
#endif
