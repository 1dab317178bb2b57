// `ctitan checkpoint`: look at distributed checkpoints without training.
//   ctitan checkpoint list FOLDER     every complete checkpoint: step, writers, layout, size
//   ctitan checkpoint verify PATH     every file of every complete checkpoint in a checkpoint
//                                     folder (or of one step folder) against its manifest
// verify exits 0 only when everything verifies; one line per checkpoint, naming a bad file. Exit
// status: 0 every checkpoint verified; 1 a bad or unreadable checkpoint, or none; 3 every
// checkpoint checked verified but some step folder was skipped unchecked (a link, a copy from
// another run).
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/dcp.h"
#include "cli/commands.h"
#include "cli/options.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctitan checkpoint list FOLDER\n"
            "       ctitan checkpoint verify FOLDER|FOLDER/step-N\n"
            "  list    the complete checkpoints in FOLDER (a run's <job.dump_folder>/<checkpoint.folder>)\n"
            "  verify  size and CRC-32 of every file of every complete checkpoint against its manifest;\n"
            "          exit status 0 when all verify, 1 when one is bad (or there is none), 3 when all\n"
            "          that were checked verify but a step folder was skipped unchecked (a symbolic link,\n"
            "          a copy from another run whose manifest holds another step)\n");
}

// One step folder: "step-N: ok (W files, X MB)" or the first problem. Returns 1 when bad.
static int check_one(const char *dir, bool verify) {
    ct_dcp_manifest m;
    if (ct_dcp_read_manifest(dir, &m)) {
        printf("%s: BAD: %s\n", dir, ct_last_error());
        return 1;
    }
    double bytes = 0;
    int bad = 0;
    for (int i = 0; i < m.n_files; i++) {
        bytes += (double)m.files[i].bytes;
        if (verify && !bad && ct_dcp_verify_file(dir, &m.files[i])) {
            printf("%s: BAD: %s\n", dir, ct_last_error());
            bad = 1;
        }
    }
    if (!bad)
        printf("%s: %sstep %d, %d files, %.1f MB, saved by %d rank%s as %s%s\n", dir, verify ? "ok, " : "", m.step,
               m.n_files, bytes / 1e6, m.world_size, m.world_size == 1 ? "" : "s", m.layout,
               m.model_only ? " (weights only)" : "");
    ct_dcp_manifest_free(&m);
    return bad;
}

// Step folders whose manifest.toml is there but is not a regular file (a folder, a FIFO, a link):
// listing counts them with the saves that never finished, which would say "no manifest" of a
// folder that has one; each is named here with what its manifest is. Returns how many.
static int report_odd_manifests(const char *folder) {
    DIR *d = opendir(folder);
    int odd = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "step-", 5) || (len > 4 && !strcmp(e->d_name + len - 4, ".tmp"))) continue;
        char dir[CT_DCP_PATH], manifest[CT_DCP_PATH + 16];
        snprintf(dir, sizeof dir, "%s/%s", folder, e->d_name);
        snprintf(manifest, sizeof manifest, "%s/manifest.toml", dir);
        struct stat sb;
        if (lstat(dir, &sb) || !S_ISDIR(sb.st_mode)) continue;  // links and files: listing names those
        if (lstat(manifest, &sb) || S_ISREG(sb.st_mode)) continue;
        odd++;
        if (S_ISLNK(sb.st_mode))
            printf("%s: BAD: %s is a symbolic link (a checkpoint's files are regular files)\n", dir, manifest);
        else
            check_one(dir, false);  // the manifest's reader names what it is
    }
    if (d) closedir(d);
    return odd;
}

int ct_cmd_checkpoint(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 1 || (strcmp(argv[0], "list") && strcmp(argv[0], "verify"))) {
        usage(stderr);
        return 2;
    }
    // list / verify take no options but --help, and one FOLDER.
    const bool is_verify = !strcmp(argv[0], "verify");
    const char *pos[argc];
    int n_pos = 0;
    const ct_opt_spec spec = {
        is_verify ? "ctitan checkpoint verify" : "ctitan checkpoint list", is_verify ? "FOLDER|FOLDER/step-N" : "FOLDER",
        is_verify ? "Size and CRC-32 of every file of every complete checkpoint against its manifest. Exit status:\n"
                    "0 all verify; 1 one is bad, or there is none; 3 all that were checked verify, but a step\n"
                    "folder was skipped unchecked (a symbolic link, a copy from another run).\n"
                  : "The complete checkpoints in FOLDER (a run's <job.dump_folder>/<checkpoint.folder>).\n",
        NULL, 0, pos, &n_pos};
    int prc = ct_opt_parse(&spec, argc - 1, argv + 1);
    if (prc) return prc == CT_OPT_HELP ? 0 : 2;
    if (n_pos != 1) {
        fprintf(stderr, "%s: needs one FOLDER (%s --help)\n", spec.prog, spec.prog);
        return 2;
    }
    const char *path = pos[0];
    bool verify = is_verify;
    struct stat sb;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "ctitan checkpoint: %s is not a folder\n", path);
        return 1;
    }
    char manifest[CT_DCP_PATH + 32];
    snprintf(manifest, sizeof manifest, "%s/manifest.toml", path);
    if (stat(manifest, &sb) == 0) return check_one(path, verify);
    static int steps[65536];
    int incomplete = 0, skipped = 0, n = ct_dcp_list_steps(path, steps, 65536, &incomplete, &skipped, stdout);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char dir[CT_DCP_PATH];
        ct_dcp_step_dir(path, steps[i], dir);
        bad += check_one(dir, verify);
    }
    int odd = report_odd_manifests(path);
    incomplete -= odd;
    if (incomplete > 0)
        printf("%s: %d incomplete save%s (no manifest; never loaded)\n", path, incomplete, incomplete == 1 ? "" : "s");
    if (!n && !odd) {
        fprintf(stderr, "ctitan checkpoint: %s holds no complete checkpoint\n", path);
        return 1;
    }
    if (bad || odd) return 1;
    if (verify && skipped) {
        // Not a pass: something in the folder was not checked (each is named above).
        printf("%s: %d step folder%s skipped, not verified (exit status 3)\n", path, skipped, skipped == 1 ? "" : "s");
        return 3;
    }
    return 0;
}
