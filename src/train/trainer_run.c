// The run around the steps (ct_trainer_run): the dump folder claimed and the effective settings
// written (train/run_record.h), steps with their validation, checkpoints and metrics, stops on
// non-finite values and signals, the final export (train/run_export.h).
#include "train/trainer.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <string.h>

#include "core/failpoint.h"
#include "core/fs.h"
#include "core/trace.h"
#include "train/pipeline_trace.h"
#include "train/precision.h"
#include "train/run_export.h"
#include "train/run_record.h"

// A NaN / Inf loss or gradient norm, and skipping was not asked for: stop with one line, saving
// nothing (the parameters are those of the last good step, but the run has diverged).
static int stop_nonfinite(ct_trainer *t) {
    ct_checkpoint_finish(&t->ckpt);  // a save already in flight holds good state: let it complete
    if (t->is_logger) {
        const char *what = isfinite(t->last.loss) ? "the gradient norm" : "the loss";
        double v = isfinite(t->last.loss) ? t->last.grad_norm : t->last.loss;
        char last[CT_DCP_PATH + 64] = "none";
        if (t->ckpt.last_saved_step >= 0) ct_dcp_step_dir(t->ckpt.folder, t->ckpt.last_saved_step, last);
        fprintf(stderr,
                "train: step %d: %s is %s: training stopped, nothing saved (last complete checkpoint: %s); "
                "--training.skip_nonfinite_steps true skips such steps instead\n",
                t->step, what, isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", last);
    }
    return 1;
}

// Whether step t->step ends with a checkpoint: every checkpoint.interval steps and the last.
static bool save_due(const ct_trainer *t) {
    return t->ckpt.enabled && (t->step % t->cfg.ckpt_interval == 0 || t->step == t->cfg.steps);
}

// After a stop signal: the state saved (when checkpointing is on) and one line.
static int stop_on_signal(ct_trainer *t) {
    int sig = t->ckpt.stop_signal;
    const char *name = sig == SIGINT    ? "SIGINT"
                       : sig == SIGTERM ? "SIGTERM"
                       : sig == SIGUSR1 ? "SIGUSR1"
                                        : "a stop signal";
    if (!t->ckpt.enabled) {
        ct_status st = ct_checkpoint_finish(&t->ckpt);
        if (t->is_logger)
            printf("train: stopped by %s after step %d (checkpoint.enable is off: nothing saved)\n", name, t->step);
        return st ? 1 : 0;
    }
    // The last interval's save may already be this step's.
    ct_status st = ct_checkpoint_finish(&t->ckpt);
    if (st == CT_OK && !save_due(t)) st = ct_checkpoint_save(&t->ckpt, false);
    if (st == CT_OK) st = ct_checkpoint_finish(&t->ckpt);
    if (st) {
        if (t->is_logger) fprintf(stderr, "train: stopped by %s after step %d, but the save failed: %s\n", name, t->step,
                                  ct_last_error());
        return 1;
    }
    if (t->is_logger)
        printf("train: stopped by %s after step %d; checkpoint saved in %s (run the same command to resume)\n", name,
               t->step, t->ckpt.folder);
    return 0;
}

// The start-up line on stop signals: how long a stop may take to finish its step and save.
static void say_signal_grace(const ct_trainer *t) {
    char how[160];
    if (t->cfg.ckpt_signal_grace > 0)
        snprintf(how, sizeof how, "checkpoint.signal_grace_seconds");
    else
        snprintf(how, sizeof how, "checkpoint.signal_grace_seconds 0: %d s, or 3 x the last save's time once longer",
                 CT_SIGNAL_GRACE_MIN);
    printf("checkpoint: SIGINT, SIGTERM or SIGUSR1 finishes the step in flight and saves within %d s (%s); a second "
           "signal ends at once\n",
           ct_checkpoint_grace(), how);
}

int ct_trainer_run(ct_trainer *t) {
    const ct_config *c = &t->cfg;
    if (t->ckpt.nothing_left) {
        if (t->is_logger) {
            char dir[CT_DCP_PATH];
            ct_dcp_step_dir(t->ckpt.folder, t->step, dir);
            printf("train: nothing left to do: %s is at step %d, training.steps is %d (to train on, raise "
                   "--training.steps)\n",
                   dir, t->step, c->steps);
        }
        return 0;
    }
    // A resumed run continues its metrics: lines of steps after the checkpoint (a run that went on
    // past its last save before it died) are dropped, then new ones appended.
    // Rank 0 alone writes metrics and the effective configuration; every rank learns whether it
    // could (a read-only dump folder must stop the job, not leave the others in a collective).
    ct_status opened = t->is_logger ? ct_run_record_claim(c, t->world.size, t->step) : CT_OK;
    if (opened == CT_OK) opened = ct_metrics_open(&t->log, c->dump_folder, c->steps, !t->is_logger, t->step, c->progress);
    if (opened == CT_OK && t->is_logger) opened = ct_run_record_write_config(c);
    if (opened == CT_OK && c->enable_tensorboard) {
        char tb[2 * CT_STR + 2];
        snprintf(tb, sizeof tb, "%s/%s", c->dump_folder, c->tb_folder);
        opened = ct_metrics_enable_tensorboard(&t->log, tb);
        if (opened == CT_OK && t->is_logger) printf("metrics: TensorBoard events in %s (tensorboard --logdir %s)\n", tb, tb);
    }
    if (ct_comm_agree(&t->world, opened)) {
        if (t->is_logger) fprintf(stderr, "train: %s\n", ct_last_error());
        return 1;
    }
    ct_checkpoint_set_grace(c->ckpt_signal_grace > 0 ? c->ckpt_signal_grace : CT_SIGNAL_GRACE_MIN);
    ct_checkpoint_catch_signals(t->world.size > 1 ? t->world.rank : -1);
    if (t->is_logger && t->ckpt.enabled) say_signal_grace(t);
    if (t->is_logger) {
        char layout[128];
        ct_mesh_layout_format(&t->mesh.layout, layout, sizeof layout);
        char kernels[160] = "";
        if (t->kernel_set >= 0) {
            int lo = t->kernel_set_best_lo, hi = t->kernel_set_best_hi;
            char best[96];
            if (lo == hi)
                snprintf(best, sizeof best, "the CPU%s run%s up to %s", t->world.size > 1 ? "s" : "",
                         t->world.size > 1 ? "" : "s", ct_kernel_set_name(hi));
            else
                snprintf(best, sizeof best, "the CPUs run up to %s on some ranks, %s on others", ct_kernel_set_name(lo),
                         ct_kernel_set_name(hi));
            snprintf(kernels, sizeof kernels, "; cpu kernels %s%s (%s)", ct_kernel_set_name(t->kernel_set),
                     t->world.size > 1 ? " on every rank" : "", best);
        }
        printf("ranks %d: %s; %d OpenMP thread%s per rank%s\n", t->world.size, layout, omp_get_max_threads(),
               omp_get_max_threads() == 1 ? "" : "s", kernels);
        printf("model %s: %.2fM parameters (dim %d, layers %d, heads %d/%d kv, ffn %d, vocab %d); "
               "batch %d x %d x accum %d per rank; %.1f MFLOP/token; peak %.1f GFLOP/s per rank (%s)\n",
               t->model.flavor, ct_model_num_params(&t->model) / 1e6, t->model.dim, t->model.n_layers,
               t->model.n_heads, t->model.n_kv_heads, t->model.ffn_hidden, t->model.vocab_size,
               c->micro_batch_size, c->seq_len, c->gradient_accumulation_steps, t->flops_per_token / 1e6,
               t->peak.flops / 1e9, t->peak.how);
        char prec[512];
        ct_precision_describe(&t->prec, c, t->k, t->model.n_layers, prec, sizeof prec);
        printf("%s\n", prec);
    }
    if (t->val_data && t->step == 0) {
        double v = ct_trainer_validate(t);
        if (t->is_logger) printf("validation loss before training: %.4f\n", v);
    }
    while (t->step < c->steps) {
        ct_profiler_step_begin(&t->prof, t->step);  // profiling: every profile_freq-th step is recorded
        ct_trainer_step(t);
        if (t->step == c->steps)  // before validation reuses the executor
            ct_pp_trace_write_step(c, &t->mesh.dim[CT_MESH_PP], t->is_logger, &t->train_schedule, &t->exec, t->n_mb,
                                   t->step);
        bool val_now = t->val_data && (t->step % c->val_freq == 0 || t->step == c->steps);
        if (val_now) t->last.val_loss = ct_trainer_validate(t);
        if (t->step % c->log_freq == 0 || t->step == c->steps || t->step == 1 || val_now)
            ct_metrics_log(&t->log, &t->last);
        if (t->nonfinite && !c->skip_nonfinite) return stop_nonfinite(t);
        bool stop;
        ct_status st = ct_checkpoint_poll(&t->ckpt, &stop);
        if (st == CT_OK && save_due(t))
            st = ct_checkpoint_save(&t->ckpt, t->step == c->steps && c->ckpt_last_save_model_only);
        if (st) {
            if (t->is_logger) fprintf(stderr, "train: %s\n", ct_last_error());
            return 1;
        }
        ct_profiler_step_end(&t->prof, t->step);  // profiling: traces, and the memory snapshot after the first step
        ct_failpoint_pace("train.step_end");  // crash tests: a window of the same length on any machine
        if (stop) return stop_on_signal(t);
    }
    if (ct_checkpoint_finish(&t->ckpt)) {
        if (t->is_logger) fprintf(stderr, "train: %s\n", ct_last_error());
        return 1;
    }
    if (t->peak.raised) {
        if (t->is_logger)
            printf("metrics: a step ran at %.1f GFLOP/s per rank, above the peak measured at start-up: the peak is now "
                   "that (MFU at most 100%%)\n",
                   t->peak.flops / 1e9);
        ct_peak_save(&t->peak, t->world.rank);
    }
    char path[CT_STR + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", c->dump_folder);
    if (ct_trainer_export(t, path)) {
        if (t->is_logger) fprintf(stderr, "train: %s\n", ct_last_error());
        return 1;
    }
    if (t->is_logger) printf("model saved to %s (%s)\n", path, ct_cfg_precision_name(c->ckpt_export_dtype));
    if (c->ckpt_last_save_in_hf && ct_run_export_hf(&t->world, c, t->model.vocab_size, path)) {
        if (t->is_logger) fprintf(stderr, "train: checkpoint.last_save_in_hf: %s\n", ct_last_error());
        return 1;
    }
    return 0;
}
