// Fuzz target: a Hugging Face config.json (ct_hf_load_config, checkpoint/hf_config.c, through
// core/json.c), what `ctitan convert` and a run from an HF directory read first and size the
// model from. The input is written as <folder>/config.json.
//
// Properties beyond "no crash, no leak, no UB": an accepted config is one ctitan can build --
// positive dims, head_dim = dim / n_heads and even, n_kv_heads dividing n_heads, and a
// parameter registry that builds -- and the config.json ctitan writes for it reads back to the
// same model.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hf_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[1024], path[1200], out[1024];
    snprintf(dir, sizeof dir, "%s/in", ct_fuzz_tmpdir());
    mkdir(dir, 0755);
    ct_fuzz_write("in/config.json", data, size, path, sizeof path);

    ct_model_config m;
    int tied = -1;
    if (ct_hf_config_read(dir, &m, &tied) != CT_OK) return 0;
    ct_fuzz_check(tied == 0 || tied == 1, "tied %d", tied);
    ct_fuzz_check(m.dim > 0 && m.n_layers > 0 && m.n_heads > 0 && m.n_kv_heads > 0 && m.ffn_hidden > 0 &&
                      m.vocab_size > 0 && m.max_seq_len >= 0,
                  "dims %d %d %d %d %d %d %d", m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden,
                  m.vocab_size, m.max_seq_len);
    ct_fuzz_check(m.head_dim * m.n_heads == m.dim && m.head_dim % 2 == 0 && m.n_heads % m.n_kv_heads == 0,
                  "head_dim %d, %d heads, %d kv heads, dim %d", m.head_dim, m.n_heads, m.n_kv_heads, m.dim);
    ct_fuzz_check(isfinite(m.norm_eps) && m.norm_eps > 0 && isfinite(m.rope_theta) && m.rope_theta > 0,
                  "norm_eps %g rope_theta %g", m.norm_eps, m.rope_theta);
    ct_param_table t;
    ct_param_table_build(&t, &m);  // within check_limits: the counts fit
    ct_fuzz_check(t.count > 0, "%d parameters", t.count);
    ct_param_table_free(&t);

    snprintf(out, sizeof out, "%s/out", ct_fuzz_tmpdir());
    mkdir(out, 0755);
    ct_fuzz_check(ct_hf_config_write(out, &m, CT_F32, NULL) == CT_OK, "write: %s", ct_last_error());
    ct_model_config m2;
    int tied2;
    ct_fuzz_check(ct_hf_config_read(out, &m2, &tied2) == CT_OK, "the written config.json does not read: %s",
                  ct_last_error());
    ct_fuzz_check(!strcmp(m.flavor, m2.flavor) && m.dim == m2.dim && m.n_layers == m2.n_layers &&
                      m.n_heads == m2.n_heads && m.n_kv_heads == m2.n_kv_heads && m.head_dim == m2.head_dim &&
                      m.ffn_hidden == m2.ffn_hidden && m.vocab_size == m2.vocab_size &&
                      m.max_seq_len == m2.max_seq_len && m.rope_scaling == m2.rope_scaling &&
                      m.norm_eps == m2.norm_eps && m.rope_theta == m2.rope_theta,
                  "the model changed in a write and read ('%s' -> '%s')", m.flavor, m2.flavor);
    return 0;
}
