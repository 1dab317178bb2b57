// The distributed checkpoint on disk: the files, their checksums and how a rank finds the
// global elements it needs in them. No MPI here: train/checkpoint.c runs the collective part
// (who writes when, the commit, the agreement on the outcome).
//
// A checkpoint is one folder per step under the checkpoint folder:
//
//   step-20/
//     rank-00000.safetensors   one per writing rank: its pieces (below)
//     rank-00001.safetensors
//     ...
//     config.toml              the run's effective configuration
//     manifest.toml            written last: the training state and every file's size + CRC-32
//
// It is written as step-20.tmp/ and renamed to step-20/ once the manifest is on disk, so a
// folder without a manifest, or still named .tmp, is never taken for a checkpoint; nor is a
// step folder that is a symbolic link, or whose manifest holds another step than its name.
//
// A piece is the elements of one parameter that one rank holds and owns (among identical
// copies, the one at coordinate 0 of each replicated dimension writes): three 1-D F32 tensors
// `NAME`, `NAME.exp_avg`, `NAME.exp_avg_sq` (the AdamW moments; absent in a model-only
// checkpoint) and, in the file's metadata under key NAME, its shard descriptor
// "rows cols tp_dim tp_start tp_count flat_begin flat_count". The descriptor says which global
// elements the piece holds, so any other layout can read any range from it (resharding).
#ifndef CT_DCP_H
#define CT_DCP_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/shard_desc.h"
#include "model/model.h"

#define CT_DCP_FORMAT "ctitan-checkpoint"
#define CT_DCP_VERSION 1
enum { CT_DCP_NAME = 96 };

// The tensors of a piece.
typedef enum { CT_DCP_PARAM = 0, CT_DCP_EXP_AVG, CT_DCP_EXP_AVG_SQ, CT_DCP_NKINDS } ct_dcp_kind;
const char *ct_dcp_kind_suffix(ct_dcp_kind k);  // "", ".exp_avg", ".exp_avg_sq"

// One piece to write: the data pointers must stay valid until the file is written.
typedef struct {
    const char *name;                  // the parameter's TorchTitan name
    ct_shard_desc desc;                // which global elements (desc.flat_count of them)
    const float *data[CT_DCP_NKINDS];  // (flat_count) each; [1], [2] NULL in a model-only file
} ct_dcp_piece;

typedef struct {
    char name[64];    // file name inside the step folder
    uint64_t bytes;
    uint32_t crc32;   // zlib's CRC-32 of the whole file
} ct_dcp_file;

// What a checkpoint holds besides the tensors: enough to continue exactly where it stopped.
typedef struct {
    int step;                 // optimizer steps done (= the learning-rate schedule's position)
    long optimizer_step;      // AdamW's own step count (bias correction)
    bool model_only;          // no AdamW moments: can start a run, cannot resume one
    int world_size;           // ranks that wrote it
    char layout[128];         // their layout, for messages
    long long seed;
    uint64_t data_epoch;      // the data loader: epochs done and windows (global samples)
    uint64_t data_position;   // consumed in this one, by all data-parallel ranks together
    int seq_len;              // the window length the position counts in
    ct_model_config model;    // dims the tensors belong to (as in a model file)
    int n_files;
    ct_dcp_file *files;       // (n_files) rank files and config.toml
} ct_dcp_manifest;

// ---- writing ---------------------------------------------------------------------------------
// Writes one rank's pieces to path (via path.tmp, renamed), syncs it to disk and returns its size
// and CRC-32 in *out (out->name is left to the caller). with_optimizer: also the moments.
ct_status ct_dcp_write_pieces(const char *path, const ct_dcp_piece *pieces, int n, bool with_optimizer,
                              ct_dcp_file *out);
// Size and CRC-32 of a file on disk, read with read() (a file truncated under us is an error,
// not a SIGBUS); fsync it too when sync.
ct_status ct_dcp_file_checksum(const char *path, bool sync, ct_dcp_file *out);
// Writes dir/manifest.toml (synced). The manifest is the last thing a checkpoint gets.
ct_status ct_dcp_write_manifest(const char *dir, const ct_dcp_manifest *m);
// Reads dir/manifest.toml; files is malloc'd (ct_dcp_manifest_free). Errors name the file.
ct_status ct_dcp_read_manifest(const char *dir, ct_dcp_manifest *m);
void ct_dcp_manifest_free(ct_dcp_manifest *m);
// Checks file f of the manifest in dir: present, same size, same CRC-32. The error names it.
ct_status ct_dcp_verify_file(const char *dir, const ct_dcp_file *f);

// ---- the checkpoint folder (dcp_folder.c) ---------------------------------------------------------
// A checkpoint is a real folder step-N directly in the checkpoint folder whose manifest says step
// N. Nothing here follows a symbolic link inside the checkpoint folder, and nothing removes more
// than the regular files of a real step folder and the folder itself: a step folder that is a
// link, or holds a link or a subfolder, is refused by name and left as it is.
// dir/step-N (out must hold CT_DCP_PATH bytes); the .tmp twin adds ".tmp".
enum { CT_DCP_PATH = 1200 };
void ct_dcp_step_dir(const char *folder, int step, char *out);
// The step dir's manifest holds; -1 when it has none or it cannot be read.
int ct_dcp_manifest_step(const char *dir);
// Complete checkpoints (real folders step-N holding a manifest), ascending by the manifest's step.
// Returns how many (at most cap, in steps); 0 when the folder does not exist. *incomplete (if
// not NULL) counts real step-N folders without a manifest and step-N.tmp folders. Skipped, with
// one line each on report (if not NULL) and counted in *skipped (if not NULL): a step folder that
// is a symbolic link, and one whose manifest says another step (a copy from another run). A
// manifest that cannot be read keeps its name's step, so that loading it fails with the
// manifest's own error.
int ct_dcp_list_steps(const char *folder, int *steps, int cap, int *incomplete, int *skipped, FILE *report);
// Removes real step-N.tmp folders and real step-N folders without a manifest (a save that died);
// returns how many were removed. One that cannot be removed (it holds a link) is left, with one
// line on report (if not NULL); a link is left silently (ct_dcp_list_steps reports it).
int ct_dcp_remove_incomplete(const char *folder, FILE *report);
// Removes one step folder: its regular files, then the folder, all relative to descriptors (the
// folder opened with O_NOFOLLOW and checked to be the one looked at), so nothing outside it is
// touched even when a link is swapped in. A missing folder is no error; a link, or a folder
// holding anything but regular files, is CT_ERR naming it, with nothing removed.
ct_status ct_dcp_remove_dir(const char *dir);

// ---- reading (resharding) ----------------------------------------------------------------------
typedef struct ct_dcp_reader ct_dcp_reader;
// Opens the rank files the manifest lists in dir and indexes their pieces. Does not verify the
// checksums (ct_dcp_verify_file does, once per file, shared among the readers by the caller).
ct_dcp_reader *ct_dcp_open(const char *dir, const ct_dcp_manifest *m);
void ct_dcp_close(ct_dcp_reader *r);
// Fills dst (want->flat_count floats) with the elements `want` describes of tensor `name`'s
// kind, gathered from every piece that holds some of them. CT_ERR naming the tensor when the
// global shapes differ, or some element is in no piece (a model-only checkpoint asked for moments,
// a missing rank file; the message names the first such element) or in two.
ct_status ct_dcp_read(const ct_dcp_reader *r, const char *name, ct_dcp_kind kind, const ct_shard_desc *want,
                      float *dst);
#endif
