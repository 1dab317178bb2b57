// The device a one-process command (eval, generate) runs a saved model on: its --device option
// (default: the environment's CTITAN_DEVICE, else cpu) and the model's weights placed there.
#ifndef CT_CLI_MODEL_DEVICE_H
#define CT_CLI_MODEL_DEVICE_H
#include "kernels/backend.h"

// The option's help text, for the commands' option tables.
#define CT_CLI_DEVICE_HELP "cpu | cuda | cpu_sim (CTITAN_DEVICE, else cpu)"

// The backend called `name` (NULL: the default above), or NULL after one line on stderr that
// starts with `cmd` and says which devices this build has.
const ct_kernels *ct_cli_device(const char *cmd, const char *name);

// The n floats of host block on k's device: block itself where the host reads the device's
// memory (the cpu), else a copy on the device (free it with ct_cli_weights_free).
float *ct_cli_weights_on(const ct_kernels *k, float *block, long n);
void ct_cli_weights_free(float *placed, const float *block);
#endif
