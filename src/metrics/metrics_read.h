// Reading a metrics.jsonl back (the file metrics.c appends to): the loss curves `ctitan plot`
// draws. One JSON object per line; each gives a training-loss point (step, loss) and, where
// present, a validation-loss point (step, val_loss). A null or absent value (a non-finite loss
// is written as null) is a gap, not an error; blank lines are skipped.
#ifndef CT_METRICS_READ_H
#define CT_METRICS_READ_H
#include "core/error.h"

typedef struct {
    int n, vn;                // training-loss / validation-loss points
    double *x, *y, *vx, *vy;  // (n) / (vn): step (strictly increasing), loss; finite
    double tok_sum;           // sum over lines of tokens_per_s * step_seconds (tokens of one step)
    int tok_lines;            // the lines that gave both (positive)
    long lines;               // non-blank lines read
    int cap, vcap;            // allocated points (the reader's)
} ct_metrics_losses;

// Reads path into *out (zeroed first). CT_ERR with one line naming the file (and the line): not
// a regular file, a line that is not a JSON object, no whole "step", a step not after the one
// before (two runs joined in one file), a loss that is not a number, no loss values at all.
// *out is freed and zeroed on CT_ERR.
ct_status ct_metrics_read_losses(const char *path, ct_metrics_losses *out);
void ct_metrics_losses_free(ct_metrics_losses *l);
#endif
