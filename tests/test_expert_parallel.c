// Expert parallelism's set-up: the settings refused with one line naming what to change (a dense
// model, experts the degree does not divide, a degree that does not divide the data-sharding
// group), the parameter table's ep slices (each rank's experts, their global rows, the dense
// tensors whole), and the mesh's groups at 4 ranks: ep groups of neighbouring fsdp ranks, expert
// shard groups across them. The numbers a layout computes are tests/test_parity_moe.c's.
#include <string.h>

#include "comm/mesh.h"
#include "core/config.h"
#include "model/model.h"
#include "model/params.h"
#include "mpi_test.h"

static ct_config moe_config(int ep) {
    ct_config c;
    ct_config_defaults(&c);
    const char *kv[][2] = {{"model.name", "llama3_moe"}, {"model.dim", "32"},        {"model.n_layers", "2"},
                           {"model.n_heads", "4"},       {"model.vocab_size", "64"}, {"model.ffn_hidden_dim", "16"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(ct_config_set(&c, kv[i][0], kv[i][1]) == CT_OK, "%s: %s", kv[i][0], ct_last_error());
    char v[16];
    snprintf(v, sizeof v, "%d", ep);
    CHECK(ct_config_set(&c, "parallelism.expert_parallel_degree", v) == CT_OK, "%s", ct_last_error());
    return c;
}

static void refused(ct_config *c, const char *words) {
    ct_model_config m;
    CHECK(ct_model_config_from(&m, c) == CT_ERR, "accepted");
    CHECK(strstr(ct_last_error(), "parallelism.expert_parallel_degree") && strstr(ct_last_error(), words) &&
              !strchr(ct_last_error(), '\n'),
          "message: %s", ct_last_error());
}

static void dense_model_refused(void) {
    ct_config c = moe_config(2);
    CHECK(ct_config_set(&c, "model.name", "llama3") == CT_OK, "%s", ct_last_error());
    refused(&c, "no experts");
}

// The debug flavor has 8 experts: 3 does not divide them, 16 is more than there are.
static void experts_not_divided_refused(void) {
    ct_config c = moe_config(3);
    refused(&c, "8 experts");
    c = moe_config(16);
    refused(&c, "8 experts");
}

// Rank r of ep 4 holds experts [2r, 2r + 2) of 8: rows [2r·rows/8, ...) of each expert tensor,
// whose elements map to those global rows; everything else is whole.
static void table_slices(void) {
    ct_config c = moe_config(4);
    ct_model_config m;
    CHECK(ct_model_config_from(&m, &c) == CT_OK, "%s", ct_last_error());
    ct_param_table whole, part;
    ct_param_table_build(&whole, &m);
    for (int r = 0; r < 4; r++) {
        ct_param_table_build_local(&part, &m, 0, 1, r, 4);
        CHECK(part.count == whole.count, "rank %d: %d tensors, expected %d", r, part.count, whole.count);
        for (int i = 0; i < part.count && i < whole.count; i++) {
            const ct_param *p = &part.params[i], *w = &whole.params[i];
            bool expert = strstr(w->name, "moe.experts.") != NULL;
            CHECK(p->expert == expert, "%s: expert flag %d", p->name, p->expert);
            long rows = expert ? w->shape[0] / 4 : w->shape[0];
            CHECK(p->shape[0] == rows && p->shape[1] == w->shape[1], "rank %d %s: (%ld, %ld), expected (%ld, %ld)", r,
                  p->name, p->shape[0], p->shape[1], rows, w->shape[1]);
            if (!expert) continue;
            CHECK(p->tp_dim == 0 && p->tp_start == r * rows, "rank %d %s: slice %d from %ld", r, p->name, p->tp_dim,
                  p->tp_start);
            long last = p->numel - 1;
            CHECK(ct_param_global_index(p, 0) == r * rows * w->shape[1] &&
                      ct_param_global_index(p, last) == (r + 1) * rows * w->shape[1] - 1,
                  "rank %d %s: elements map to [%ld, %ld]", r, p->name, ct_param_global_index(p, 0),
                  ct_param_global_index(p, last));
        }
        // A block's experts are its last tensors (FSDP shards them as one part of the group).
        for (int g = 1; g < part.n_groups - 1; g++) {
            bool seen = false;
            for (int i = part.group_first[g]; i < part.group_first[g + 1]; i++) {
                CHECK(!seen || part.params[i].expert, "group %d: %s after the experts", g, part.params[i].name);
                seen = seen || part.params[i].expert;
            }
            CHECK(seen, "group %d has no expert tensors", g);
        }
        ct_param_table_free(&part);
    }
    ct_param_table_free(&whole);
}

// 4 ranks, dp_shard 4: ep 2 groups fsdp ranks {0, 1} and {2, 3}; the experts' shard groups are
// {0, 2} and {1, 3}. ep 3 is refused by name before any group is made.
static void mesh_groups(void) {
    ct_group world;
    CHECK(ct_comm_group_world(&world, 30) == CT_OK, "%s", ct_last_error());
    ct_mesh_layout want = {{1, 1, -1, 1, 1}};
    ct_mesh mesh;
    CHECK(ct_mesh_create(&world, &want, &mesh) == CT_OK, "%s", ct_last_error());
    CHECK(ct_mesh_create_experts(&mesh, 3) == CT_ERR, "ep 3 of 4 accepted");
    CHECK(strstr(ct_last_error(), "parallelism.expert_parallel_degree 3") && strstr(ct_last_error(), "= 4"), "%s",
          ct_last_error());
    CHECK(ct_mesh_create_experts(&mesh, 2) == CT_OK, "%s", ct_last_error());
    int me = world.rank;
    CHECK(mesh.ep.size == 2 && mesh.ep.rank == me % 2, "rank %d: ep rank %d of %d", me, mesh.ep.rank, mesh.ep.size);
    CHECK(mesh.expert_shard.size == 2 && mesh.expert_shard.rank == me / 2, "rank %d: expert shard rank %d of %d", me,
          mesh.expert_shard.rank, mesh.expert_shard.size);
    // Who is in each: the world ranks gathered over the group.
    int32_t mine = me, peers[2];
    ct_comm_all_gather(&mesh.ep, &mine, peers, 1, CT_I32);
    CHECK(peers[0] == me / 2 * 2 && peers[1] == me / 2 * 2 + 1, "rank %d: ep group {%d, %d}", me, peers[0], peers[1]);
    ct_comm_all_gather(&mesh.expert_shard, &mine, peers, 1, CT_I32);
    CHECK(peers[0] == me % 2 && peers[1] == me % 2 + 2, "rank %d: expert shard group {%d, %d}", me, peers[0], peers[1]);
    ct_mesh_free(&mesh);
    ct_comm_group_free(&world);
}

int main(int argc, char **argv) {
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(dense_model_refused);
        CT_RUN(experts_not_divided_refused);
        CT_RUN(table_slices);
        const int nps[1] = {4};
        ct_mpi_test_spawn_each(argv[0], nps, NULL, 1, 120);
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    CT_MPI_RUN(mesh_groups);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
