// The checkpointer (train/checkpoint.h) over a training state it meets only through
// ct_train_state: tensors no model registry names ("experts.*", "router.*"), laid out as this
// test chooses, saved and resumed with their moments and the run's position, then loaded into a
// differently sharded store. A model with other parameters therefore needs no checkpoint change.
// One process (MPI for the checkpointer's agreements).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "test.h"
#include "train/checkpoint.h"

// Two global tensors, their values per kind written out here: the truth every load must give.
enum { ER = 6, EC = 5, RR = 4, NE = ER * EC, NR = RR };
static float truth_e[CT_DCP_NKINDS][NE], truth_r[CT_DCP_NKINDS][NR];

static char root[] = "/tmp/ct_test_train_state_XXXXXX";
static ct_group world;
static ct_mesh mesh;  // one process: every coordinate 0, every degree 1
static ct_config cfg;
static ct_model_config model;

// A state over caller-made buffers: the loader, step and optimizer step live in `run`.
typedef struct {
    ct_param params[2];
    ct_param_shard shards[2];
    ct_param_store store;
    float *tensors[CT_DCP_NKINDS];
    int step;
    long optimizer_step;
    ct_loader *data;
    ct_train_state state;
} run;

static void run_free(run *r) {
    for (int k = 0; k < CT_DCP_NKINDS; k++) free(r->tensors[k]);
    if (r->data) ct_loader_free(r->data);
}

// The store: shard i holds descs[i] of the tensor named names[i], at offsets[i] of a numel buffer.
static void run_make(run *r, const char *names[2], const ct_shard_desc descs[2], const long offsets[2], long numel) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 2; i++) {
        snprintf(r->params[i].name, sizeof r->params[i].name, "%s", names[i]);
        r->shards[i] = (ct_param_shard){.param = &r->params[i], .desc = descs[i], .offset = offsets[i]};
    }
    for (int k = 0; k < CT_DCP_NKINDS; k++) r->tensors[k] = calloc((size_t)numel, sizeof(float));
    r->store = (ct_param_store){.params = r->tensors[0], .numel = numel, .shards = r->shards, .count = 2};
    ct_loader_config lc = {.source = "synthetic", .split = "train", .seq_len = cfg.seq_len, .global_batch = 2,
                           .dp_rank = 0, .dp_size = 1, .seed = 5, .vocab_size = (uint32_t)model.vocab_size};
    r->data = ct_loader_open(&lc);
    CHECK(r->data, "%s", ct_last_error());
    r->state = (ct_train_state){
        .k = ct_kernels_get("cpu"),
        .world = &world,
        .mesh = &mesh,
        .store = &r->store,
        .tensors = {r->tensors[0], r->tensors[1], r->tensors[2]},
        .step = &r->step,
        .optimizer_step = &r->optimizer_step,
        .data = r->data,
        .seed = cfg.seed,
        .model = &model,
    };
}

// Both tensors whole, router first: the layout the saving run has.
static void run_make_whole(run *r) {
    const char *names[2] = {"router.weight", "experts.3.w_in.weight"};
    ct_shard_desc d[2] = {ct_shard_desc_make(RR, 1, -1, 0, 0), ct_shard_desc_make(ER, EC, -1, 0, 0)};
    long off[2] = {0, NR};
    run_make(r, names, d, off, NR + NE);
}

static void advance_data(ct_loader *l, int batches) {
    int32_t in[2 * 64], tg[2 * 64];
    for (int i = 0; i < batches; i++) ct_loader_next_batch(l, in, tg);
}

static void test_save_then_resume_restores_everything(void) {
    run a;
    run_make_whole(&a);
    for (int k = 0; k < CT_DCP_NKINDS; k++) {
        memcpy(a.tensors[k], truth_r[k], sizeof truth_r[k]);
        memcpy(a.tensors[k] + NR, truth_e[k], sizeof truth_e[k]);
    }
    a.step = 7;
    a.optimizer_step = 6;  // one step skipped as non-finite
    advance_data(a.data, 3);
    ct_loader_state data_at = ct_loader_get_state(a.data);
    ct_checkpointer c;
    ct_checkpoint_init(&c, &cfg, &a.state);
    CHECK(ct_checkpoint_save(&c, false) == CT_OK, "save: %s", ct_last_error());
    ct_checkpoint_free(&c);
    run_free(&a);

    run b;  // a new process's fresh state
    run_make_whole(&b);
    advance_data(b.data, 1);
    ct_checkpoint_init(&c, &cfg, &b.state);
    bool resumed = false;
    CHECK(ct_checkpoint_resume(&c, &resumed) == CT_OK, "resume: %s", ct_last_error());
    CHECK(resumed, "no checkpoint found in %s", c.folder);
    CHECK(b.step == 7 && b.optimizer_step == 6, "step %d, optimizer step %ld", b.step, b.optimizer_step);
    ct_loader_state got = ct_loader_get_state(b.data);
    CHECK(got.epoch == data_at.epoch && got.position == data_at.position, "data at (%ld, %ld), saved at (%ld, %ld)",
          (long)got.epoch, (long)got.position, (long)data_at.epoch, (long)data_at.position);
    for (int k = 0; k < CT_DCP_NKINDS; k++) {
        CHECK(!memcmp(b.tensors[k], truth_r[k], sizeof truth_r[k]), "router%s differs", ct_dcp_kind_suffix(k));
        CHECK(!memcmp(b.tensors[k] + NR, truth_e[k], sizeof truth_e[k]), "experts%s differs", ct_dcp_kind_suffix(k));
    }
    ct_checkpoint_free(&c);
    run_free(&b);
}

// The same checkpoint into a store that holds a flat range of the experts' tensor first and the
// router after it: each element from its global index, the moments untouched (weights only).
static void test_load_weights_reshards(void) {
    const long lo = 7, n = 12;  // experts elements [7, 19)
    const char *names[2] = {"experts.3.w_in.weight", "router.weight"};
    ct_shard_desc d[2] = {ct_shard_desc_make(ER, EC, -1, 0, 0), ct_shard_desc_make(RR, 1, -1, 0, 0)};
    d[0].flat_begin = lo;
    d[0].flat_count = n;
    long off[2] = {0, n};
    run r;
    run_make(&r, names, d, off, n + NR);
    ct_checkpointer c;
    ct_checkpoint_init(&c, &cfg, &r.state);
    char dir[CT_DCP_PATH];
    ct_dcp_step_dir(c.folder, 7, dir);
    CHECK(ct_checkpoint_load_weights(&c, dir) == CT_OK, "%s", ct_last_error());
    CHECK(!memcmp(r.tensors[0], truth_e[0] + lo, (size_t)n * sizeof(float)), "experts [%ld, %ld) differ", lo, lo + n);
    CHECK(!memcmp(r.tensors[0] + n, truth_r[0], sizeof truth_r[0]), "router differs");
    for (long i = 0; i < n + NR; i++) CHECK(r.tensors[1][i] == 0 && r.tensors[2][i] == 0, "moment %ld loaded", i);
    CHECK(r.step == 0, "weights alone moved the step to %d", r.step);
    ct_checkpoint_free(&c);
    run_free(&r);
}

int main(int argc, char **argv) {
    if (ct_comm_init(&argc, &argv) || ct_comm_group_world(&world, 30)) {
        printf("FAIL comm: %s\n", ct_last_error());
        return 1;
    }
    if (!mkdtemp(root)) {
        printf("FAIL mkdtemp %s\n", root);
        return 1;
    }
    for (int d = 0; d < CT_MESH_NDIMS; d++) mesh.layout.degree[d] = 1;
    ct_config_defaults(&cfg);
    cfg.seq_len = 16;
    cfg.steps = 100;
    cfg.ckpt_enable = true;
    snprintf(cfg.dump_folder, sizeof cfg.dump_folder, "%s", root);
    if (ct_model_config_from(&model, &cfg)) {
        printf("FAIL model: %s\n", ct_last_error());
        return 1;
    }
    for (int k = 0; k < CT_DCP_NKINDS; k++) {
        for (int i = 0; i < NE; i++) truth_e[k][i] = 1000.0f * (float)k + (float)i + 0.25f;
        for (int i = 0; i < NR; i++) truth_r[k][i] = -1000.0f * (float)k - (float)i - 0.5f;
    }
    CT_RUN(test_save_then_resume_restores_everything);
    CT_RUN(test_load_weights_reshards);
    char cmd[sizeof root + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) printf("note: could not remove %s\n", root);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
