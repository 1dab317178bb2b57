// The records a run leaves in its dump folder beside its outputs: run.toml (which run wrote the
// folder) and config.toml (the settings it trains with, after every override). Rank 0 writes them.
#ifndef CT_RUN_RECORD_H
#define CT_RUN_RECORD_H
#include "core/config.h"

// <job.dump_folder>/run.toml for a run of `ranks` ranks starting at resumed_from_step (0: a new
// run). A new run refuses a folder another run wrote, unless job.overwrite; CT_ERR names both.
ct_status ct_run_record_claim(const ct_config *cfg, int ranks, int resumed_from_step);
// <job.dump_folder>/config.toml: cfg as TOML.
ct_status ct_run_record_write_config(const ct_config *cfg);
#endif
