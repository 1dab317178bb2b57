// Opening and reading files that come from users or a run folder: every reader (config/TOML,
// model files, tokenizers, token shards, corpus inputs, checkpoint manifests and rank files,
// pipeline schedule CSVs, hardware profiles, Hugging Face JSON, metrics logs) goes through here,
// so each refuses what is not a regular file before it can block (a FIFO without a writer) or
// read without end (/dev/zero), and a file over the reader's size limit before anything is
// allocated for it. Links are followed: the checks are made on the opened descriptor (fstat),
// so a link to a device is refused as the device, and nothing can change between check and read.

#ifndef CT_FILE_CHECK_H
#define CT_FILE_CHECK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

// Size limits, by format (each reader names its own; these are the shared ones):
#define CT_FILE_TEXT_CONFIG_MAX (16ull << 20)  // TOML configs, manifests, profiles, schedule CSVs,
                                                // config.json: hand-written or tool-written text of
                                                // kilobytes; 16 MiB is 1000x that, still cheap to hold
#define CT_FILE_JSON_INDEX_MAX (64ull << 20)   // a safetensors index.json: one line per tensor;
                                                // the largest public models need a few MiB
#define CT_FILE_TOKENIZER_MAX (256ull << 20)   // a rank file holds one short line per token:
                                                // Llama 3's 128k ranks are 2.2 MB, so 256 MiB is room
                                                // for vocabularies far beyond any in use

// Opens path read-only if it is a regular file of at most max_bytes bytes (0: no limit); `what`
// names the kind of file in the size message ("config file"). The open itself cannot block
// (O_NONBLOCK, cleared again before returning). On success *fd and *size are set; on failure
// CT_ERR with one line "path: why" and nothing left open.
ct_status ct_file_open_regular(const char *path, const char *what, uint64_t max_bytes, int *fd, uint64_t *size);

// The whole of a regular file of at most max_bytes, in a malloc'd buffer with a NUL after its
// *len bytes (free with free()). A file that changes size while it is read is an error.
ct_status ct_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **text, size_t *len);

// ct_file_open_regular as a stdio stream for reading ("rb"); NULL with the same one-line error.
FILE *ct_file_fopen_read(const char *path, const char *what, uint64_t max_bytes);

// ---- writing -----------------------------------------------------------------------------------
// Every writer of a user-named or run-folder path (metrics logs, TensorBoard events, traces,
// memory snapshots, run.toml, schedule CSVs and SVGs, profiles, tokenizers, token shards,
// checkpoint and export files, and the temporary names written before a rename) opens it here,
// so a FIFO, a device or a folder in its place is refused in one line instead of blocking (a
// FIFO with no reader) or writing where nothing can read it back.
enum {
    CT_FILE_WRITE_TRUNC = 0,     // create or empty the file (fopen "w")
    CT_FILE_WRITE_APPEND = 1,    // create or append (fopen "a")
    CT_FILE_WRITE_EXCL = 2,      // create; an existing name of any kind fails with errno EEXIST
    CT_FILE_WRITE_NOFOLLOW = 4,  // the run owns the name: a symbolic link there is refused, not followed
};

// Opens path for writing (created 0644, umask applied) if it is, or becomes, a regular file;
// `what` names the kind of file in the message ("metrics log"). Nothing can block: an existing
// non-regular name is refused before it is opened, and the open itself is O_NONBLOCK (cleared
// again before returning), so a FIFO that appears in between is refused too. On success *fd is
// set; on failure CT_ERR with one line "path: why", nothing left open and errno that of the
// failing call (EEXIST for CT_FILE_WRITE_EXCL on a taken name).
ct_status ct_file_open_write(const char *path, const char *what, int flags, int *fd);

// ct_file_open_write as a stdio stream ("wb", or "ab" with CT_FILE_WRITE_APPEND); NULL with the
// same one-line error.
FILE *ct_file_fopen_write(const char *path, const char *what, int flags);

// Exactly n bytes at offset, retrying short reads. CT_ERR naming path when the file ends first
// (it was truncated since it was opened) or the read fails.
ct_status ct_file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset);
#endif
