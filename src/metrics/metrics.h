// What a training step reports: printed every log_freq steps (a progress bar with ETA when stdout
// is a terminal, plain lines otherwise) and appended to <dump_folder>/metrics.jsonl.
#ifndef CT_METRICS_H
#define CT_METRICS_H
#include <stdbool.h>
#include <stdio.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/memory.h"
#include "metrics/tensorboard.h"

typedef struct {
    int step;
    double loss;            // mean loss over the step's valid tokens (all ranks)
    double grad_norm;       // global norm before clipping
    double lr;
    double step_seconds;
    double tokens_per_s;    // whole job
    double tokens_per_s_rank;
    double tflops;          // achieved model TFLOP/s per rank
    double mfu;             // tflops / peak (0 when no peak is known)
    double val_loss;        // < 0: not measured this step
    double mem_peak_mib[CT_MEM_NCATEGORIES];
    int skipped_steps;      // steps skipped so far for a non-finite loss or norm (skip_nonfinite_steps)
    // Mixture of experts (moe_pairs > 0): the step's (token, expert) pairs over the job, and the
    // least and most loaded expert of any block as a fraction of its block's mean load (1: even).
    double moe_pairs, moe_load_min, moe_load_max;
    // The step's load-balancing loss (model.moe.aux_loss_coeff > 0; else 0), summed over the blocks,
    // beside loss (which is the language-model loss alone; the gradient is of their sum).
    double moe_aux_loss;
    // Communication of this step per mesh group (bytes this rank moved, seconds it waited),
    // for TensorBoard; the trainer fills it from comm's counters (metrics/ cannot include comm/).
    int n_comm;
    struct {
        char group[16];
        double bytes, wait_s;
    } comm[8];
    // A dataset blend (training.dataset "W1 PATH1 ..."): per dataset, its name (the path's last
    // part, as written) and the target tokens drawn from it so far by the whole job.
    int n_data;
    struct {
        char name[48];
        double tokens;
    } data[16];
} ct_step_metrics;

typedef struct {
    ct_tb_writer tb;        // TensorBoard event file (tb.f NULL: off)
    FILE *jsonl;
    char path[1100];        // of jsonl
    bool write_failed;      // said once; later lines are not attempted
    bool tty;
    bool quiet;             // ranks other than 0 log nothing
    int total_steps;
    int first_step;         // the step the run (re)started from, for the ETA
    int columns;            // the terminal's width (bar mode)
    double start;           // when the logger opened, for the ETA
} ct_metrics_logger;

// Opens <folder>/metrics.jsonl (creating the folder). quiet = true writes nothing. resume_step > 0
// (a run resumed from that step's checkpoint): keeps the lines up to that step and appends.
// A fresh run (resume_step 0) keeps a previous run's file as metrics-<its mtime>.jsonl.
// Each line: {"step", "loss", "grad_norm", ..., "time" (Unix seconds, last)}; a non-finite number is written as
// null, so every line is JSON. A failed write is said once on stderr, and the run goes on.
// progress: bar (redrawn in place, sized to the terminal), "lines" (one per log step: step/total,
// loss, tokens/s, ms/step, MFU, memory, ETA) or auto: the bar only when standard output is the
// user's terminal -- CTITAN_TTY when a launcher script says so, else a terminal not handed over
// by an MPI or Slurm launcher (mpirun gives every rank a pseudo-terminal of its own).
ct_status ct_metrics_open(ct_metrics_logger *lg, const char *folder, int total_steps, bool quiet, int resume_step,
                          ct_cfg_progress progress);
// metrics.enable_tensorboard: every logged step also goes to an event file in `folder` as
// scalars loss, grad_norm, lr, tokens_per_s, mfu, val_loss, memory/<category>_mib and
// comm/<group>/{bytes,wait_s} (metrics/tensorboard.h). Call after ct_metrics_open; nothing on a
// quiet logger.
ct_status ct_metrics_enable_tensorboard(ct_metrics_logger *lg, const char *folder);

// Whether "auto" would draw a bar here (see above).
bool ct_metrics_user_terminal(void);
void ct_metrics_log(ct_metrics_logger *lg, const ct_step_metrics *m);
void ct_metrics_close(ct_metrics_logger *lg);
#endif
