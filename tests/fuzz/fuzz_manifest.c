// Fuzz target: the distributed checkpoint's manifest (ct_dcp_read_manifest, checkpoint/dcp.c),
// the file a resume trusts for the training state, the model's dimensions and every rank
// file's name, size and CRC-32. The input is written as <folder>/manifest.toml.
//
// Properties beyond "no crash, no leak, no UB": every file name accepted is a plain name inside
// the step folder (no '/', not "." or ".."); and a manifest that reads writes out
// (ct_dcp_write_manifest) and reads back to the same contents.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/dcp.h"
#include "fuzz_util.h"

static int same_double(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[1024], path[1200], out[1024];
    snprintf(dir, sizeof dir, "%s/step-1", ct_fuzz_tmpdir());
    mkdir(dir, 0755);
    ct_fuzz_write("step-1/manifest.toml", data, size, path, sizeof path);

    ct_dcp_manifest m;
    if (ct_dcp_read_manifest(dir, &m) != CT_OK) return 0;
    ct_fuzz_check(m.n_files >= 1 && m.files, "%d files", m.n_files);
    for (int i = 0; i < m.n_files; i++) {
        const char *name = m.files[i].name;
        ct_fuzz_check(name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, ".."),
                      "file name '%s' is not a plain name", name);
        ct_dcp_verify_file(dir, &m.files[i]);  // absent here: an error naming it, nothing more
    }
    ct_dcp_reader *r = ct_dcp_open(dir, &m);  // the rank files are absent: refused
    if (r) ct_dcp_close(r);

    snprintf(out, sizeof out, "%s/rewritten", ct_fuzz_tmpdir());
    mkdir(out, 0755);
    ct_fuzz_check(ct_dcp_write_manifest(out, &m) == CT_OK, "write: %s", ct_last_error());
    ct_dcp_manifest m2;
    ct_fuzz_check(ct_dcp_read_manifest(out, &m2) == CT_OK, "the written manifest does not read: %s", ct_last_error());
    const ct_model_config *a = &m.model, *b = &m2.model;
    ct_fuzz_check(m.step == m2.step && m.optimizer_step == m2.optimizer_step && m.model_only == m2.model_only &&
                      m.world_size == m2.world_size && !strcmp(m.layout, m2.layout) && m.seed == m2.seed &&
                      m.data_epoch == m2.data_epoch && m.data_position == m2.data_position && m.seq_len == m2.seq_len,
                  "the training state changed in a write and read");
    ct_fuzz_check(!strcmp(a->flavor, b->flavor) && a->dim == b->dim && a->n_layers == b->n_layers &&
                      a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads && a->ffn_hidden == b->ffn_hidden &&
                      a->vocab_size == b->vocab_size && a->rope_scaling == b->rope_scaling &&
                      a->max_seq_len == b->max_seq_len && same_double(a->norm_eps, b->norm_eps) &&
                      same_double(a->rope_theta, b->rope_theta),
                  "the model changed in a write and read");
    ct_fuzz_check(m.n_files == m2.n_files, "%d files, then %d", m.n_files, m2.n_files);
    for (int i = 0; i < m.n_files; i++)
        ct_fuzz_check(!strcmp(m.files[i].name, m2.files[i].name) && m.files[i].bytes == m2.files[i].bytes &&
                          m.files[i].crc32 == m2.files[i].crc32,
                      "file %d changed in a write and read", i);
    ct_dcp_manifest_free(&m2);
    ct_dcp_manifest_free(&m);
    return 0;
}
