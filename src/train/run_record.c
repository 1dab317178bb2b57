#include "train/run_record.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/file_check.h"
#include "core/toml.h"
#include "core/version.h"
#include "core/fs.h"

// <job.dump_folder>/run.toml: which run wrote the folder. A new run (not one resumed from its
// checkpoint) refuses a folder another run wrote, unless job.overwrite.
ct_status ct_run_record_claim(const ct_config *cfg, int ranks, int resumed_from_step) {
    char path[CT_STR + 16];
    snprintf(path, sizeof path, "%s/run.toml", cfg->dump_folder);
    ct_toml_value *prev = ct_toml_parse_file(path);
    if (prev && resumed_from_step == 0 && !cfg->overwrite) {
        const ct_toml_value *id = ct_toml_get(prev, "run_id"), *at = ct_toml_get(prev, "started");
        ct_status st = ct_set_error("job.dump_folder %s holds the outputs of run %s (started %s): choose another folder, "
                                    "or pass --job.overwrite true to replace them (its metrics are kept aside)",
                                    cfg->dump_folder, id && id->type == CT_TOML_STRING ? id->s : "?",
                                    at && at->type == CT_TOML_STRING ? at->s : "?");
        ct_toml_free(prev);
        return st;
    }
    ct_toml_free(prev);
    if (ct_fs_make_dirs(cfg->dump_folder)) return CT_ERR;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char started[64], id[96];
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%S%z", &tm);
    snprintf(id, sizeof id, "%04d%02d%02d-%02d%02d%02d-%05d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (int)getpid() % 100000);
    FILE *f = ct_file_fopen_write(path, "run record", CT_FILE_WRITE_NOFOLLOW);
    if (!f) return CT_ERR;
    fprintf(f, "# written by ctitan train: which run these outputs belong to\n");
    fprintf(f, "run_id = \"%s\"\nstarted = \"%s\"\nctitan_version = \"%s\"\nranks = %d\nresumed_from_step = %d\n", id,
            started, ct_version(), ranks, resumed_from_step);
    bool ok = fflush(f) == 0 && !ferror(f);
    if (fclose(f) || !ok) return ct_set_error("cannot write %s: %s", path, strerror(errno));
    return CT_OK;
}

// <job.dump_folder>/config.toml: the configuration this run trains with, after every override.
ct_status ct_run_record_write_config(const ct_config *cfg) {
    char path[CT_STR + 16];
    snprintf(path, sizeof path, "%s/config.toml", cfg->dump_folder);
    FILE *f = ct_file_fopen_write(path, "effective config", CT_FILE_WRITE_NOFOLLOW);
    if (!f) return CT_ERR;
    ct_config_write_toml(cfg, f);
    bool ok = fflush(f) == 0 && !ferror(f);
    if (fclose(f) || !ok) return ct_set_error("cannot write %s: %s", path, strerror(errno));
    return CT_OK;
}
