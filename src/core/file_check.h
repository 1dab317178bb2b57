// Opening and reading files that come from users: every reader (config/TOML, model files,
// tokenizers, token shards, corpus inputs) goes through here, so each refuses what is not a
// regular file before it can block (a FIFO without a writer) or read without end (/dev/zero),
// and a file over the reader's size limit before anything is allocated for it.
#ifndef CT_FILE_CHECK_H
#define CT_FILE_CHECK_H
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

// Opens path read-only if it is a regular file of at most max_bytes bytes (0: no limit); `what`
// names the kind of file in the size message ("config file"). The open itself cannot block
// (O_NONBLOCK, cleared again before returning). On success *fd and *size are set; on failure
// CT_ERR with one line "path: why" and nothing left open.
ct_status ct_file_open_regular(const char *path, const char *what, uint64_t max_bytes, int *fd, uint64_t *size);

// The whole of a regular file of at most max_bytes, in a malloc'd buffer with a NUL after its
// *len bytes (free with free()). A file that changes size while it is read is an error.
ct_status ct_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **text, size_t *len);

// Exactly n bytes at offset, retrying short reads. CT_ERR naming path when the file ends first
// (it was truncated since it was opened) or the read fails.
ct_status ct_file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset);
#endif
