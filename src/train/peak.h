// The peak MFU divides by, and how it was found. Precedence: metrics.peak_tflops (the user's
// number); the metrics.device table (h100 / h200 / a100 dense bf16); else this machine's
// matmul rate in the run's compute dtype, measured at start-up as the best of several runs on
// every rank (the largest wins) and kept in a calibration file, which holds the best rate ever
// measured for (CPU model, threads per rank, ranks on the node, dtype). A start-up under load
// therefore cannot lower the peak, and a step that ever runs faster than the peak (which a true
// peak forbids) raises it, and the file with it: a measured peak never gives MFU above 100%.
//
// The calibration file: $CTITAN_CALIBRATION, else $XDG_CACHE_HOME/ctitan/peaks.toml, else
// ~/.cache/ctitan/peaks.toml; lines `"<key>" = <GFLOP/s>`. Unwritable: the run goes on without.
#ifndef CT_TRAIN_PEAK_H
#define CT_TRAIN_PEAK_H
#include "core/error.h"
#include <stdbool.h>

#include "comm/comm.h"
#include "core/config.h"
#include "kernels/backend.h"

typedef struct {
    double flops;           // FLOP/s per rank; 0 = unknown (MFU not reported)
    bool measured;          // from this machine (may be raised by a faster step)
    bool raised;            // a step ran faster than the measured peak
    char key[256];          // the calibration key (measured peaks)
    char file[1024];        // the calibration file ("" when none could be named)
    char how[1536];         // for the log: where the number comes from
} ct_peak;

// Finds the peak (collective over world when measured: every rank measures, the largest
// wins). compute_bf16: the matmuls run in bf16 (else fp32). CT_ERR when metrics.device names a
// GPU whose hardware profile cannot be read.
ct_status ct_peak_init(ct_peak *p, const ct_config *cfg, const ct_kernels *k, bool compute_bf16, ct_group *world,
                  int ranks_on_node);

// A step achieved `flops` per rank: a measured peak below it is raised to it (and stored by
// rank `rank` == 0 when the run ends, ct_peak_save). Returns the MFU, at most 1 for a measured peak.
double ct_peak_mfu(ct_peak *p, double flops);
void ct_peak_save(const ct_peak *p, int rank);

// The calibration file's value for key (0 when absent or unreadable), and an update of it
// (kept only when larger). Plain functions of the file, for tests.
double ct_peak_lookup(const char *file, const char *key);
ct_status ct_peak_store(const char *file, const char *key, double gflops);
#endif
