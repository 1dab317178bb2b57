// The checkpoint folder's step folders: which of them are this run's checkpoints, and removing
// the ones that go (interrupted saves, pruned checkpoints, a step saved again).
//
// Only what a save wrote is ever removed: regular files inside a real folder step-N or step-N.tmp
// directly under the checkpoint folder. A step folder that is a symbolic link (an operator's link
// to a copied tree, a link to ..), or one holding a link or a subfolder, is refused by name and
// left as it is. Removal works relative to file descriptors -- the checkpoint folder opened once,
// the step folder opened with O_NOFOLLOW and checked to be the same device and inode that was
// looked at -- so a link swapped in between the look and the deletion cannot redirect it. The
// checkpoint folder itself may be a link (to a bigger disk): that is where the run was told to
// write.
//
// The step a checkpoint holds is its manifest's. A step folder whose manifest names another step
// (step-50 copied from a run that saved it at step 10) is not this run's step 50: it is reported
// and skipped, so it is never the latest, never resumed from by that name and never pruned.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/dcp.h"

void ct_dcp_step_dir(const char *folder, int step, char *out) { snprintf(out, CT_DCP_PATH, "%s/step-%d", folder, step); }

// "step-N" -> N (and *tmp false), "step-N.tmp" -> N (and *tmp true); -1 for anything else. N is
// written as ct_dcp_step_dir writes it (no sign, no leading zero), so each step has one folder
// name and the name a step maps back to is the folder that was listed.
static int parse_step_name(const char *name, bool *tmp) {
    if (strncmp(name, "step-", 5)) return -1;
    const char *p = name + 5;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
    long step = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((step = step * 10 + (*p - '0')) > INT_MAX) return -1;
    *tmp = !strcmp(p, ".tmp");
    if (*p && !*tmp) return -1;
    return (int)step;
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

// A regular manifest.toml (not a link) in the real folder `name` under folder fd dfd.
static bool has_manifest(int dfd, const char *name) {
    char path[CT_DCP_PATH];
    snprintf(path, sizeof path, "%s/manifest.toml", name);
    struct stat sb;
    return fstatat(dfd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

int ct_dcp_manifest_step(const char *dir) {
    ct_dcp_manifest m;
    if (ct_dcp_read_manifest(dir, &m)) return -1;
    int step = m.step;
    ct_dcp_manifest_free(&m);
    return step;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// The folder opened for reading its entries by descriptor; *dfd is the descriptor to look them up
// with (owned by the DIR). NULL when it cannot be opened.
static DIR *open_folder(const char *folder, int *dfd) {
    int fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return NULL;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return NULL;
    }
    *dfd = fd;
    return d;
}

int ct_dcp_list_steps(const char *folder, int *steps, int cap, int *incomplete, int *skipped, FILE *report) {
    int n = 0, bad = 0, passed_over = 0, dfd = -1;
    DIR *d = open_folder(folder, &dfd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        bool tmp;
        int s = parse_step_name(e->d_name, &tmp);
        struct stat sb;
        if (s < 0 || fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW)) continue;
        if (S_ISLNK(sb.st_mode)) {
            passed_over++;
            if (report)
                fprintf(report,
                        "checkpoint: %s/%s is a symbolic link: skipped (never resumed from, pruned or removed; "
                        "a checkpoint is a real folder in %s, so move the link out of it)\n",
                        folder, e->d_name, folder);
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) continue;  // a file named like a step: not a checkpoint, not ours
        if (tmp || !has_manifest(dfd, e->d_name)) {
            bad++;
            continue;
        }
        // An unreadable manifest keeps the name's step: picked as the latest, it is refused at
        // loading with the manifest's own error, never silently passed over.
        char dir[CT_DCP_PATH];
        snprintf(dir, sizeof dir, "%s/%s", folder, e->d_name);
        int held = ct_dcp_manifest_step(dir);
        if (held >= 0 && held != s) {
            passed_over++;
            if (report)
                fprintf(report,
                        "checkpoint: %s holds step %d (its manifest), not %d as its name says: skipped (never the "
                        "latest, never pruned; a copy from another run? move it out of %s)\n",
                        dir, held, s, folder);
            continue;
        }
        if (n < cap) steps[n++] = s;
    }
    if (d) closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_int);
    if (incomplete) *incomplete = bad;
    if (skipped) *skipped = passed_over;
    return n;
}

// Every entry of the step folder open as fd must be a regular file (not a link, not a folder);
// with unlink, each is removed (relative to fd: never through a link). shown: the folder's path,
// for messages.
static ct_status check_or_unlink_files(int fd, const char *shown, bool unlink) {
    int fd2 = dup(fd);
    DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
    if (!d) {
        if (fd2 >= 0) close(fd2);
        return ct_set_error("%s: %s", shown, strerror(errno));
    }
    rewinddir(d);  // a dup shares the offset the previous pass left at the end
    ct_status st = CT_OK;
    struct dirent *e;
    while (st == CT_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat sb;
        if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW)) {
            if (errno != ENOENT) st = ct_set_error("%s/%s: %s", shown, e->d_name, strerror(errno));
            continue;
        }
        if (S_ISLNK(sb.st_mode))
            st = ct_set_error("%s/%s is a symbolic link: %s not removed (a save writes regular files only; move "
                              "the link out)",
                              shown, e->d_name, shown);
        else if (!S_ISREG(sb.st_mode))
            st = ct_set_error("%s/%s is not a regular file: %s not removed (a save writes regular files only; move "
                              "it out)",
                              shown, e->d_name, shown);
        else if (unlink && unlinkat(fd, e->d_name, 0) && errno != ENOENT)
            st = ct_set_error("%s/%s: %s", shown, e->d_name, strerror(errno));
    }
    closedir(d);
    return st;
}

// Removes the real folder `name` under the folder open as pfd, and the regular files in it.
// shown: its path, for messages. A missing folder is no error.
static ct_status remove_step_at(int pfd, const char *name, const char *shown) {
    struct stat seen, opened, now;
    if (fstatat(pfd, name, &seen, AT_SYMLINK_NOFOLLOW))
        return errno == ENOENT ? CT_OK : ct_set_error("%s: %s", shown, strerror(errno));
    if (S_ISLNK(seen.st_mode))
        return ct_set_error("%s is a symbolic link: not removed (only a real folder in the checkpoint folder is "
                            "removed; move the link out)",
                            shown);
    if (!S_ISDIR(seen.st_mode)) return ct_set_error("%s is not a folder: not removed (move it out)", shown);
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            return ct_set_error("%s became a symbolic link while being removed: not removed", shown);
        return errno == ENOENT ? CT_OK : ct_set_error("%s: %s", shown, strerror(errno));
    }
    ct_status st = CT_OK;
    if (fstat(fd, &opened) || !same_file(&seen, &opened))
        st = ct_set_error("%s was replaced while being removed: not removed", shown);
    // Every entry is checked before any is removed: a folder that is refused is left whole.
    if (st == CT_OK) st = check_or_unlink_files(fd, shown, false);
    // The manifest goes first: a removal cut short (a kill while pruning) leaves a folder without
    // one, which the next start removes as incomplete, never one that looks complete and is not.
    if (st == CT_OK && unlinkat(fd, "manifest.toml", 0) && errno != ENOENT)
        st = ct_set_error("%s/manifest.toml: %s", shown, strerror(errno));
    if (st == CT_OK) st = check_or_unlink_files(fd, shown, true);
    close(fd);
    if (st) return st;
    if (fstatat(pfd, name, &now, AT_SYMLINK_NOFOLLOW)) return errno == ENOENT ? CT_OK : ct_set_error("%s: %s", shown, strerror(errno));
    if (!same_file(&seen, &now)) return ct_set_error("%s was replaced while being removed: not removed", shown);
    if (unlinkat(pfd, name, AT_REMOVEDIR) && errno != ENOENT) return ct_set_error("%s: %s", shown, strerror(errno));
    return CT_OK;
}

ct_status ct_dcp_remove_dir(const char *dir) {
    char parent[CT_DCP_PATH], base[CT_DCP_PATH];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    snprintf(base, sizeof base, "%s", slash ? slash + 1 : parent);
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = 0;  // "/"
    else
        *slash = 0;
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        return ct_set_error("%s: not a step folder: not removed", dir);
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return errno == ENOENT ? CT_OK : ct_set_error_at(CT_E_IO, parent, "%s: %s", parent, strerror(errno));
    ct_status st = remove_step_at(pfd, base, dir);
    close(pfd);
    return st;
}

int ct_dcp_remove_incomplete(const char *folder, FILE *report) {
    int dfd = -1, removed = 0;
    DIR *d = open_folder(folder, &dfd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        bool tmp;
        struct stat sb;
        if (parse_step_name(e->d_name, &tmp) < 0 || fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW)) continue;
        // A link is not this run's to remove (ct_dcp_list_steps reports it); a file named like a
        // step is no save at all.
        if (!S_ISDIR(sb.st_mode) || (!tmp && has_manifest(dfd, e->d_name))) continue;
        char shown[CT_DCP_PATH];
        snprintf(shown, sizeof shown, "%s/%s", folder, e->d_name);
        if (remove_step_at(dfd, e->d_name, shown) == CT_OK)
            removed++;
        else if (report)
            fprintf(report, "checkpoint: interrupted save left in place: %s\n", ct_last_error());
    }
    if (d) closedir(d);
    return removed;
}
