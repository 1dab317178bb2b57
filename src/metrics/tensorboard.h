// TensorBoard event files: scalars a run reports, in the format TensorBoard (and anything built on
// its event_file_loader) reads -- `tensorboard --logdir <folder>`.
//
// File: <folder>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>. TensorBoard takes every
// file whose name holds "tfevents"; the pid and a per-process counter n (bumped until the name is
// free: the file is created with O_EXCL) keep two ranks, two writers of one process or two runs in
// the same second from ever sharing a file.
//
// Format: a sequence of TFRecords, each
//     u64 length (little-endian) | u32 masked CRC-32C of those 8 bytes | data[length] | u32 masked CRC-32C of data
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (so a CRC of data that holds CRCs is not
// trivially related to them). Each data is one serialized `tensorflow.Event` protocol buffer; the
// first is Event{wall_time, step 0, file_version "brain.Event:2"}, which readers check for.
//
// The protocol buffers are encoded by hand (tensorboard.c), not through protobuf / protobuf-c:
// three messages and six fields are all a scalar needs, and a generated-code dependency (and
// its build step) for them would outweigh the ~40 lines that write them. The fields, numbered
// as in tensorflow/core/util/event.proto and summary.proto:
//     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//     Summary { repeated Value value = 1; }
//     Value   { string tag = 1; float simple_value = 2; }
// TensorBoard's scalar dashboard shows Values with simple_value (it migrates them to its scalar
// plugin on load), so nothing else is written.
#ifndef CT_TENSORBOARD_H
#define CT_TENSORBOARD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

enum { CT_TB_MAX_TAG = 1024 };  // bytes of a tag; longer ones are refused, not cut

typedef struct {
    FILE *f;                  // NULL: not open (never opened, closed, or the open failed)
    char path[1280];          // of the event file
    bool failed;              // a write failed: the file may end in a partial record, so nothing more is written
    long long records;        // written so far, the file_version record included
} ct_tb_writer;

// Creates `folder` (mkdir -p) and a new event file in it, and writes the file_version record.
// On error *w is left closed and the message names the folder or file.
ct_status ct_tb_open(ct_tb_writer *w, const char *folder);

// Appends one Event{wall_time, step, summary{value{tag, simple_value = (float)value}}}.
// wall_time: Unix seconds (ct_tb_wall_time(): the current time); TensorBoard plots "relative" and "wall"
// against it. A NaN or Inf value is written as such (TensorBoard shows it). The tag must be 1 to
// CT_TB_MAX_TAG bytes of UTF-8 without control characters: TensorBoard's reader rejects a
// whole file over one record whose string is not UTF-8, so a bad tag is refused here instead.
// Buffered: the record reaches the file at the latest on ct_tb_flush / ct_tb_close.
ct_status ct_tb_add_scalar(ct_tb_writer *w, const char *tag, int64_t step, double value, double wall_time);

// Hands what is buffered to the file system, so a running TensorBoard sees it.
ct_status ct_tb_flush(ct_tb_writer *w);

// Flushes and closes; closing a writer that is not open is a no-op. *w is closed afterwards
// whatever the outcome.
ct_status ct_tb_close(ct_tb_writer *w);

// Unix time in seconds (CLOCK_REALTIME), as TensorBoard's wall_time wants it.
double ct_tb_wall_time(void);

// ---- CRC-32C (Castagnoli), the checksum of TFRecords ----------------------------------------
// Reflected polynomial 0x82F63B78 (0x1EDC6F41 bit-reversed), initial value and final xor
// 0xFFFFFFFF: CRC-32C("123456789") = 0xE3069283. `crc` continues a previous result (0 to start),
// so ct_crc32c(ct_crc32c(0, a, n), b, m) is the CRC of a followed by b.

// Uses the SSE4.2 crc32 instruction when the CPU has it, the table otherwise.
uint32_t ct_crc32c(uint32_t crc, const void *data, size_t n);
// The byte-at-a-time table version alone (the fallback).
uint32_t ct_crc32c_table(uint32_t crc, const void *data, size_t n);
// The SSE4.2 version alone: false (and *out untouched) where this CPU or build has none.
bool ct_crc32c_sse42(uint32_t crc, const void *data, size_t n, uint32_t *out);
// The TFRecord mask of a CRC.
uint32_t ct_crc32c_mask(uint32_t crc);
#endif
