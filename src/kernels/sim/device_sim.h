// The test device, "cpu_sim" (internal to src/kernels): the cpu kernels, run on memory the host
// can reach only while a backend call runs. Its kernel table (ct_kernels_sim) is generated from
// kernels/backend.h by scripts/sim_table.sh: every member opens the device memory, calls the cpu
// table's member of the same name (the kernel set chosen at start-up) and closes it again, so no
// member can be forgotten when the table grows.
#ifndef CT_KERNELS_SIM_DEVICE_SIM_H
#define CT_KERNELS_SIM_DEVICE_SIM_H
#include <stdbool.h>

#include "kernels/backend.h"

extern const ct_kernels ct_kernels_sim;

// Installs the device's allocator and access guard in core/memory (idempotent);
// ct_kernels_get("cpu_sim") calls it before returning the table.
void ct_sim_backend_init(void);
// Opens / closes the device memory for the host (nesting; any thread): what every member of the
// table does around its cpu call, and core/memory's access guard.
void ct_sim_open(void);
void ct_sim_close(void);
// Whether the device closes its memory with protection keys (else with mprotect), and whether p
// points into its address range (tests).
bool ct_sim_uses_protection_keys(void);
bool ct_sim_is_device_pointer(const void *p);
// Device-to-host copies (the table's copy_to_host) since start-up, every thread: how a test holds
// the trainer to its one read of the step's scalars. The table's copy_to_host counts itself.
void ct_sim_count_host_read(void);
long ct_sim_host_reads(void);
#endif
