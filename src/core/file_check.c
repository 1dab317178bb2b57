#include "core/file_check.h"

#include <errno.h>
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
    if (f < 0) return ct_set_error("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return ct_set_error("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ct_set_error("%s: not a regular file (%s)", path, kind(st.st_mode));
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        close(f);
        return ct_set_error("%s: %llu bytes, over the %llu-byte limit for a %s", path, (unsigned long long)st.st_size,
                            (unsigned long long)max_bytes, what);
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
        ct_set_error("%s: cannot open: %s", path, strerror(e));
    }
    return f;
}

ct_status ct_file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ct_set_error("%s: read failed at byte %llu: %s", path, (unsigned long long)(offset + done), strerror(errno));
        if (r == 0)
            return ct_set_error("%s: file ends at byte %llu, expected %llu bytes (truncated while in use?)", path,
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
        return ct_set_error("%s: out of memory for %llu bytes", path, (unsigned long long)size);
    }
    ct_status st = ct_file_pread(fd, path, buf, (size_t)size, 0);
    char extra;
    if (st == CT_OK && pread(fd, &extra, 1, (off_t)size) > 0)  // it grew: we would read half of it
        st = ct_set_error("%s: file grew while being read", path);
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
