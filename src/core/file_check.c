#include "core/file_check.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

ct_status ct_file_open_regular(const char *path, const char *what, uint64_t max_bytes, int *fd, uint64_t *size) {
    *fd = -1;
    *size = 0;
    // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, before fstat could
    // tell what it is. For a regular file the flag changes nothing, and it is cleared below.
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return ct_set_error_at(CT_E_IO, path, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return ct_set_error_at(CT_E_IO, path, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ct_set_error_at(CT_E_IO, path, "%s: not a regular file (%s)", path, kind(st.st_mode));
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        close(f);
        return ct_set_error_at(CT_E_DATA, path, "%s: %llu bytes, over the %llu-byte limit for a %s", path,
                               (unsigned long long)st.st_size, (unsigned long long)max_bytes, what);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    *size = (uint64_t)st.st_size;
    return CT_OK;
}

FILE *ct_file_fopen_read(const char *path, const char *what, uint64_t max_bytes) {
    int fd;
    uint64_t size;
    if (ct_file_open_regular(path, what, max_bytes, &fd, &size) != CT_OK) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        ct_set_error_at(CT_E_IO, path, "%s: cannot open: %s", path, strerror(e));
    }
    return f;
}

// Why a name cannot be written: "" when it can (absent, or a regular file).
static const char *unwritable(const struct stat *st) { return S_ISREG(st->st_mode) ? "" : kind(st->st_mode); }

static ct_status refuse_write(const char *path, const char *what, const char *is) {
    return ct_set_error_at(
        CT_E_IO, path, "%s: not a regular file (%s): the %s cannot be written there; remove it or choose another path",
        path, is, what);
}

ct_status ct_file_open_write(const char *path, const char *what, int flags, int *fd) {
    *fd = -1;
    bool nofollow = flags & CT_FILE_WRITE_NOFOLLOW, excl = flags & CT_FILE_WRITE_EXCL;
    // Look first, so a device is never opened at all (opening one can have effects of its own).
    struct stat st;
    if (!excl && (nofollow ? lstat(path, &st) : stat(path, &st)) == 0) {
        ct_status s = CT_OK;
        int e = 0;
        if (S_ISLNK(st.st_mode))
            e = ELOOP,
            s = ct_set_error_at(CT_E_IO, path, "%s: a symbolic link where ctitan writes its own %s: remove the link",
                                path, what);
        else if (*unwritable(&st))
            e = S_ISDIR(st.st_mode) ? EISDIR : ENXIO, s = refuse_write(path, what, unwritable(&st));
        if (s != CT_OK) {
            errno = e;
            return s;
        }
    }
    int o = O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC;
    o |= excl ? O_EXCL : (flags & CT_FILE_WRITE_APPEND) ? O_APPEND : O_TRUNC;
    if (nofollow) o |= O_NOFOLLOW;
    int f = open(path, o, 0644);
    if (f < 0) {
        int e = errno;
        ct_status s;
        if (e == ENXIO) s = refuse_write(path, what, "a FIFO");  // a FIFO with no reader
        else if (e == EISDIR) s = refuse_write(path, what, "a directory");
        else if (e == ELOOP && nofollow)
            s = ct_set_error_at(CT_E_IO, path, "%s: a symbolic link where ctitan writes its own %s: remove the link",
                                path, what);
        else s = ct_set_error_at(CT_E_IO, path, "%s: cannot write the %s: %s", path, what, strerror(e));
        errno = e;
        return s;
    }
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        ct_status s = ct_set_error_at(CT_E_IO, path, "%s: cannot stat: %s", path, strerror(e));
        errno = e;
        return s;
    }
    if (*unwritable(&st)) {  // it became one between the look and the open
        close(f);
        ct_status s = refuse_write(path, what, unwritable(&st));
        errno = ENXIO;
        return s;
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return CT_OK;
}

FILE *ct_file_fopen_write(const char *path, const char *what, int flags) {
    int fd;
    if (ct_file_open_write(path, what, flags, &fd) != CT_OK) return NULL;
    FILE *f = fdopen(fd, (flags & CT_FILE_WRITE_APPEND) ? "ab" : "wb");
    if (!f) {
        int e = errno;
        close(fd);
        ct_set_error_at(CT_E_IO, path, "%s: cannot write the %s: %s", path, what, strerror(e));
        errno = e;
    }
    return f;
}

ct_status ct_file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return ct_set_error_at(CT_E_IO, path, "%s: read failed at byte %llu: %s", path,
                                   (unsigned long long)(offset + done), strerror(errno));
        if (r == 0)
            return ct_set_error_at(CT_E_DATA, path,
                                   "%s: file ends at byte %llu, expected %llu bytes (truncated while in use?)", path,
                                   (unsigned long long)(offset + done), (unsigned long long)(offset + n));
        done += (size_t)r;
    }
    return CT_OK;
}

ct_status ct_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    if (ct_file_open_regular(path, what, max_bytes, &fd, &size) != CT_OK) return CT_ERR;
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return ct_set_error_at(CT_E_MEMORY, path, "%s: out of memory for %llu bytes", path, (unsigned long long)size);
    }
    ct_status st = ct_file_pread(fd, path, buf, (size_t)size, 0);
    char extra;
    if (st == CT_OK && pread(fd, &extra, 1, (off_t)size) > 0)  // it grew: we would read half of it
        st = ct_set_error_at(CT_E_DATA, path, "%s: file grew while being read", path);
    close(fd);
    if (st != CT_OK) {
        free(buf);
        return CT_ERR;
    }
    buf[size] = 0;
    *text = buf;
    *len = (size_t)size;
    return CT_OK;
}
