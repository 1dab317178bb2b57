// Replacing the dataset in prepare's output folder as one step (see prepare_swap.h).
#include "data/prepare_swap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/failpoint.h"
#include "core/fs.h"
#include "core/strlist.h"
#include "data/shard.h"

// The staging folders an earlier ctitan made inside DIR (its shards were swapped in one rename at
// a time, so a kill could leave shards in them).
#define LEGACY_NEW ".prepare-new-"
#define LEGACY_OLD ".prepare-old-"

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

// train_NNN.bin / val_NNN.bin: exactly the names prepare writes (and so may replace).
static bool is_shard_name(const char *name) {
    int num, len = 0;
    char split[8];
    return sscanf(name, "%5[a-z]_%d.bin%n", split, &num, &len) == 2 && len == (int)strlen(name) &&
           (!strcmp(split, "train") || !strcmp(split, "val"));
}

// A temporary link ct_fs_switch_link left when killed between its two steps: NAME.tmp-PID, NAME
// being .current or a shard name.
static bool is_switch_tmp(const char *name) {
    const char *t = strstr(name, ".tmp-");
    if (!t || t == name || (size_t)(t - name) >= 64) return false;
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(t - name), name);
    return !strcmp(head, CT_DATASET_CURRENT) || is_shard_name(head);
}

// ---- names -------------------------------------------------------------------------------------

// The entries of a folder (all, or only shard names), sorted. Listed before anything is changed,
// so renames and removals in the folder cannot disturb the walk.
static ct_status list_names(const char *dir, bool shards_only, ct_strlist *out) {
    *out = (ct_strlist){0};
    DIR *d = opendir(dir);
    if (!d) return ct_set_error("%s: cannot read folder: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (shards_only && !is_shard_name(e->d_name)) continue;
        ct_strlist_push(out, e->d_name);
    }
    closedir(d);
    ct_strlist_sort(out);
    return CT_OK;
}

// ---- the folder's state -----------------------------------------------------------------------

// Deletes a folder of shards (a staging folder, an old dataset): its shard-named files, then the
// folder, which stays if anything else is in it.
static void remove_shard_folder(const char *dir) {
    ct_strlist l;
    if (list_names(dir, true, &l) != CT_OK) return;
    for (int i = 0; i < l.n; i++) {
        char path[PATH_MAX + 256];  // (shard names are short: a longer path is not one of ours)
        if (snprintf(path, sizeof path, "%s/%s", dir, l.v[i]) < (int)sizeof path) unlink(path);
    }
    ct_strlist_free(&l);
    rmdir(dir);
}

// The name .current links to, into target, when it names a folder of shards beside it.
static bool current_target(const char *dir, char *target, size_t n) {
    char link[PATH_MAX + 32], folder[PATH_MAX];
    snprintf(link, sizeof link, "%s/" CT_DATASET_CURRENT, dir);
    struct stat st;
    if (lstat(link, &st) != 0 || !S_ISLNK(st.st_mode) || ct_shard_dataset_folder(dir, folder, sizeof folder) != CT_OK)
        return false;
    snprintf(target, n, "%s", folder + strlen(dir) + 1);
    return true;
}

// What a shard name at the top of DIR links to: the file of that name in the current folder.
static void link_text(const char *name, char *buf, size_t n) { snprintf(buf, n, CT_DATASET_CURRENT "/%s", name); }

static bool is_our_link(const char *path, const char *name) {
    char want[300], got[300];
    link_text(name, want, sizeof want);
    ssize_t k = readlink(path, got, sizeof got - 1);
    if (k < 0) return false;
    got[k] = 0;
    return !strcmp(got, want);
}

// Puts DIR's entries right for the dataset in folder `target` (NULL: none is current yet):
//  - with a current folder: each of its shard names a link through .current, every other
//    shard-named file or link removed, every other folder of shards removed (the old dataset,
//    a killed prepare's staging, an earlier ctitan's leftovers);
//  - without one: the links and staging folders a prepare killed before its switch left (they
//    hold no dataset anyone reads); the shards DIR itself holds, and an earlier ctitan's
//    leftovers, stay, for they may be the only copy of the dataset.
// `switched`: called right after a switch (the failpoints are those of the commit's steps).
static ct_status tidy(const char *dir, const char *target, bool switched) {
    ct_strlist top, cur = {0};
    if (list_names(dir, false, &top) != CT_OK) return CT_ERR;
    char cur_dir[PATH_MAX + 32];
    if (target) {
        snprintf(cur_dir, sizeof cur_dir, "%s/%s", dir, target);
        if (list_names(cur_dir, true, &cur) != CT_OK) {
            ct_strlist_free(&top);
            return CT_ERR;
        }
    }
    ct_status st = CT_OK;
    // Shard names first: from here on each resolves to the current dataset or to nothing.
    for (int i = 0; i < cur.n && st == CT_OK; i++) {
        char path[PATH_MAX + 256], text[300];
        snprintf(path, sizeof path, "%s/%s", dir, cur.v[i]);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && is_our_link(path, cur.v[i])) continue;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) continue;  // not ours to replace
        link_text(cur.v[i], text, sizeof text);
        st = ct_fs_switch_link(path, text);
        if (switched) ct_failpoint("prepare.mid_tidy", 0);
    }
    for (int i = 0; i < top.n && st == CT_OK; i++) {
        const char *e = top.v[i];
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !is_shard_name(e)) continue;
        if (target && !ct_strlist_has_sorted(&cur, e) && (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode))) {
            if (unlink(path) != 0) st = ct_set_error("%s: cannot remove: %s", path, strerror(errno));
            if (switched) ct_failpoint("prepare.mid_tidy", 0);
        } else if (!target && S_ISLNK(sb.st_mode) && is_our_link(path, e)) {
            unlink(path);  // made by a prepare killed before its switch: it resolves to nothing
        }
    }
    if (st == CT_OK && switched) ct_failpoint("prepare.before_remove_old", 0);
    for (int i = 0; i < top.n && st == CT_OK; i++) {
        const char *e = top.v[i];
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e);
        struct stat sb;
        if (lstat(path, &sb) != 0) continue;
        if (is_switch_tmp(e) && S_ISLNK(sb.st_mode)) unlink(path);
        if (!S_ISDIR(sb.st_mode) || (target && !strcmp(e, target))) continue;
        if (starts_with(e, CT_DATASET_SHARDS_PREFIX) || (target && (starts_with(e, LEGACY_NEW) || starts_with(e, LEGACY_OLD))))
            remove_shard_folder(path);
    }
    ct_strlist_free(&top);
    ct_strlist_free(&cur);
    return st;
}

// ---- the three steps --------------------------------------------------------------------------

ct_status ct_prep_swap_begin(ct_prep_swap *s, const char *dir) {
    s->staging[0] = 0;
    s->lock_fd = -1;
    s->committed = false;
    if (snprintf(s->dir, sizeof s->dir, "%s", dir) >= (int)sizeof s->dir - 64)
        return ct_set_error("%.60s...: path too long", dir);
    if ((s->lock_fd = ct_fs_lock_dir(dir, "data prepare")) < 0) return CT_ERR;
    char target[256];
    bool has = current_target(dir, target, sizeof target);
    ct_status st = tidy(dir, has ? target : NULL, false);
    snprintf(s->staging, sizeof s->staging, "%s/" CT_DATASET_SHARDS_PREFIX "XXXXXX", dir);
    if (st == CT_OK && !mkdtemp(s->staging)) st = ct_set_error("%s: cannot create a folder: %s", dir, strerror(errno));
    if (st != CT_OK) {
        s->staging[0] = 0;
        ct_prep_swap_end(s);
    }
    return st;
}

// fsync of every staged shard and of the folder, so the dataset .current will name is on disk
// before it is named (a power cut after the switch finds whole files).
static ct_status sync_staged(const char *staging, const ct_strlist *staged) {
    for (int i = 0; i < staged->n; i++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", staging, staged->v[i]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        bool ok = fd >= 0 && fsync(fd) == 0;
        int err = errno;
        if (fd >= 0) close(fd);
        if (!ok) return ct_set_error("%s: cannot sync: %s", path, strerror(err));
    }
    return ct_fs_sync_dir(staging);
}

// The shard count of DIR's dataset now: the current folder's, or DIR's own shard files.
static int count_old(const char *dir) {
    char target[256], folder[PATH_MAX + 32];
    bool has = current_target(dir, target, sizeof target);
    if (has && snprintf(folder, sizeof folder, "%s/%s", dir, target) >= (int)sizeof folder) return 0;  // no such path
    ct_strlist l;
    if (list_names(has ? folder : dir, true, &l) != CT_OK) return 0;
    int n = 0;
    for (int i = 0; i < l.n; i++) {
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", has ? folder : dir, l.v[i]);
        struct stat sb;
        n += lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    ct_strlist_free(&l);
    return n;
}

ct_status ct_prep_swap_commit(ct_prep_swap *s, int *replaced) {
    *replaced = 0;
    ct_strlist staged;
    if (list_names(s->staging, true, &staged) != CT_OK) return CT_ERR;
    ct_status st = sync_staged(s->staging, &staged);
    if (st == CT_OK) *replaced = count_old(s->dir);
    // The links of names DIR lacks: through .current they resolve to nothing until the switch.
    // A name DIR has (an old link, an earlier ctitan's shard file) is put right after it.
    if (st == CT_OK) ct_failpoint("prepare.before_links", 0);
    for (int i = 0; i < staged.n && st == CT_OK; i++) {
        char path[PATH_MAX + 256], text[300];
        snprintf(path, sizeof path, "%s/%s", s->dir, staged.v[i]);
        struct stat sb;
        if (lstat(path, &sb) == 0) continue;
        link_text(staged.v[i], text, sizeof text);
        if (symlink(text, path) != 0) st = ct_set_error("cannot create link %s: %s", path, strerror(errno));
        ct_failpoint("prepare.mid_links", 0);
    }
    ct_strlist_free(&staged);
    const char *target = strrchr(s->staging, '/') + 1;
    char link[PATH_MAX + 32];
    snprintf(link, sizeof link, "%s/" CT_DATASET_CURRENT, s->dir);
    if (st == CT_OK) ct_failpoint("prepare.before_switch", 0);
    if (st == CT_OK) st = ct_fs_switch_link(link, target);  // the new dataset replaces the old here
    if (st != CT_OK) return st;
    s->committed = true;
    ct_failpoint("prepare.after_switch", 0);
    st = ct_fs_sync_dir(s->dir);
    if (st == CT_OK) st = tidy(s->dir, target, true);
    if (st == CT_OK) st = ct_fs_sync_dir(s->dir);
    return st;
}

void ct_prep_swap_end(ct_prep_swap *s) {
    if (!s->committed && s->staging[0]) remove_shard_folder(s->staging);
    s->staging[0] = 0;
    if (s->lock_fd >= 0) close(s->lock_fd);
    s->lock_fd = -1;
}
