// The one way ctitan makes folders, writes a file whole or not at all, moves a name, and makes a
// folder's entries durable. Every failure is one line that names the path to change.
#ifndef CT_FS_H
#define CT_FS_H
#include <limits.h>
#include <stdio.h>

#include "core/error.h"

// mkdir -p: every missing level of path is created (0755, umask applied); levels that exist as
// folders, or links to folders, are kept. A level that is a file is refused:
// "cannot create folder a/f/run: a/f is not a folder".
ct_status ct_fs_make_dirs(const char *path);

// rename(from, to), with an error naming both.
ct_status ct_fs_rename(const char *from, const char *to);

// Makes `link` a symbolic link to `target` in one rename(2): whoever resolves `link` finds its old
// target or the new one, never no link. The link is made under a temporary name beside it
// (link.tmp-PID) and renamed over `link`, replacing a file or link there (a folder there is
// refused, by name). A crash between the two steps leaves only the temporary link behind.
ct_status ct_fs_switch_link(const char *link, const char *target);

// Takes an exclusive lock on a folder (flock on the folder itself) for as long as the returned
// descriptor stays open; `who` names the holder in the error: "data/shards: another data prepare
// is writing this folder; wait for it to end". Returns the descriptor, or -1 with the error set.
// The lock goes with the process however it ends, so a killed holder leaves none behind.
int ct_fs_lock_dir(const char *dir, const char *who);

// fsync of a folder, so that a rename or a new file in it survives a power cut. A file system that
// cannot sync a folder (tmpfs, some network mounts) is not an error.
ct_status ct_fs_sync_dir(const char *dir);

// ---- atomic write -------------------------------------------------------------------------------
// A reader of path sees its old content or the whole new one, never a part: the bytes go to a
// temporary file in the same folder (so the rename cannot cross file systems), which is flushed,
// fsynced and then renamed over path.
//
//   ct_fs_atomic a;
//   FILE *f = ct_fs_atomic_open(&a, path, "metrics log", 0);
//   if (!f) return CT_ERR;
//   fprintf(f, ...);
//   return ct_fs_atomic_commit(&a);        // or ct_fs_atomic_abort(&a) to give up

enum {
    CT_FS_SYNC_FOLDER = 1,       // also fsync path's folder after the rename (checkpoint files:
                                 // the new name itself must survive a power cut)
    CT_FS_TEMP_PER_PROCESS = 2,  // temporary name path.PID.tmp rather than path.tmp, for a file
                                 // that several processes may rewrite at once
};

typedef struct {
    FILE *f;  // writes go here between open and commit; NULL once committed or aborted
    int flags;
    char path[PATH_MAX];
    char tmp[PATH_MAX + 32];
} ct_fs_atomic;

// Creates the temporary file beside path (a symbolic link under its name is refused, not
// followed); `what` names the kind of file in an error ("metrics log"). Returns a->f, or NULL
// with the error naming the path (too long, or the reason the temporary file cannot be made).
FILE *ct_fs_atomic_open(ct_fs_atomic *a, const char *path, const char *what, int flags);

// Checks every write made through a->f, flushes, fsyncs and closes it, and renames it to path. On
// any failure the temporary file is removed, path keeps what it held, and the error names path.
ct_status ct_fs_atomic_commit(ct_fs_atomic *a);

// Closes and removes the temporary file: the caller gives up, path keeps what it held. Does
// nothing once committed or aborted.
void ct_fs_atomic_abort(ct_fs_atomic *a);
#endif
