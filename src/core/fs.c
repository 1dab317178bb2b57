#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/failpoint.h"
#include "core/file_check.h"

// One level of ct_fs_make_dirs: level is path cut after one of its components.
static ct_status make_level(const char *path, const char *level) {
    if (mkdir(level, 0755) == 0) return CT_OK;
    int err = errno;
    struct stat sb;
    // EEXIST also covers a file or a dangling link under the name: only a folder will do.
    if (err == EEXIST && stat(level, &sb) == 0 && S_ISDIR(sb.st_mode)) return CT_OK;
    if (err == EEXIST) return ct_set_error("cannot create folder %s: %s is not a folder", path, level);
    return ct_set_error("cannot create folder %s: %s: %s", path, level, strerror(err));
}

ct_status ct_fs_make_dirs(const char *path) {
    if (!path || !*path) return ct_set_error("cannot create a folder with an empty name");
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf) return ct_set_error("cannot create folder %.60s...: path too long (%zu characters)", path, n);
    memcpy(buf, path, n + 1);
    // Each '/' after a component ends one level ("/" alone and repeated slashes end none).
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        if (buf[i - 1] == '/') continue;
        char c = buf[i];
        buf[i] = 0;
        ct_status st = make_level(path, buf);
        buf[i] = c;
        if (st) return st;
    }
    return CT_OK;
}

ct_status ct_fs_rename(const char *from, const char *to) {
    if (rename(from, to) == 0) return CT_OK;
    return ct_set_error("cannot rename %s to %s: %s", from, to, strerror(errno));
}

ct_status ct_fs_switch_link(const char *link, const char *target) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%d", link, (int)getpid()) >= (int)sizeof tmp)
        return ct_set_error("%.60s...: path too long", link);
    unlink(tmp);  // one a killed process of the same id left
    if (symlink(target, tmp) != 0) return ct_set_error("cannot create link %s: %s", tmp, strerror(errno));
    ct_failpoint("fs.switch_link", 0);  // crash tests: the temporary link made, not yet renamed
    if (rename(tmp, link) != 0) {
        int err = errno;
        unlink(tmp);
        return ct_set_error("cannot replace %s with a link to %s: %s", link, target, strerror(err));
    }
    return CT_OK;
}

int ct_fs_lock_dir(const char *dir, const char *who) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ct_set_error("%s: cannot open folder: %s", dir, strerror(errno)), -1;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) return ct_set_error("%s: another %s is writing this folder; wait for it to end", dir, who), -1;
    return ct_set_error("%s: cannot lock folder: %s", dir, strerror(err)), -1;
}

ct_status ct_fs_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ct_set_error("%s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc && err != EINVAL && err != EROFS) return ct_set_error("%s: fsync: %s", dir, strerror(err));
    return CT_OK;
}

// ---- atomic write -------------------------------------------------------------------------------

FILE *ct_fs_atomic_open(ct_fs_atomic *a, const char *path, const char *what, int flags) {
    a->f = NULL;
    a->flags = flags;
    a->path[0] = a->tmp[0] = 0;
    size_t n = strlen(path);
    if (n >= sizeof a->path) {
        ct_set_error("%.60s...: path too long (%zu characters)", path, n);
        return NULL;
    }
    memcpy(a->path, path, n + 1);
    if (flags & CT_FS_TEMP_PER_PROCESS) snprintf(a->tmp, sizeof a->tmp, "%s.%d.tmp", path, (int)getpid());
    else snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
    a->f = ct_file_fopen_write(a->tmp, what, CT_FILE_WRITE_NOFOLLOW);  // our own temporary name
    return a->f;
}

// The folder path lies in ("." for a bare name), into dir.
static void folder_of(const char *path, char *dir, size_t size) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, size, ".");
    else if (slash == path) snprintf(dir, size, "/");
    else snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

ct_status ct_fs_atomic_commit(ct_fs_atomic *a) {
    if (!a->f) return ct_set_error("%s: not open for an atomic write", a->path);
    FILE *f = a->f;
    a->f = NULL;
    errno = 0;
    bool ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(a->tmp);
        return ct_set_error("%s: write failed: %s", a->path, strerror(err ? err : EIO));
    }
    if (rename(a->tmp, a->path) != 0) {
        err = errno;
        unlink(a->tmp);
        return ct_set_error("%s: cannot rename from %s: %s", a->path, a->tmp, strerror(err));
    }
    if (a->flags & CT_FS_SYNC_FOLDER) {
        char dir[PATH_MAX];
        folder_of(a->path, dir, sizeof dir);
        return ct_fs_sync_dir(dir);
    }
    return CT_OK;
}

void ct_fs_atomic_abort(ct_fs_atomic *a) {
    if (!a->f) return;
    fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}
