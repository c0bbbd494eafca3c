/* Unit tests for models/mesh.c: the rank order written out again here (Megatron's and torchtitan's:
 * tp fastest, pp slowest),
 * every kind's groups a partition of the mesh whose members differ only in the kind's dimensions,
 * the communicator colours the runtime split by before the mesh owned them, and the simulator's
 * collectives over the mesh's groups. */
#include "testutil.h"

#include "../../models/comm.h"
#include "../../models/mesh.h"

static const int grid[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 3, 1}, {1, 1, 1, 4},
                              {2, 2, 2, 2}, {4, 2, 3, 2}, {3, 4, 2, 5}, {8, 1, 4, 3}, {1, 8, 1, 2}};

static long long closed_form(const mesh *m, mesh_coord c)
{
    return (((long long)c.stage * m->dp + c.replica) * m->cp + c.cp_rank) * m->tp + c.tp_rank;
}

static void test_rank_order_and_round_trip(void **state)
{
    (void)state;
    for (size_t g = 0; g < sizeof grid / sizeof *grid; g++) {
        mesh m = mesh_of(grid[g][0], grid[g][1], grid[g][2], grid[g][3]);
        assert_int_equal(mesh_size(&m), (long long)m.tp * m.cp * m.pp * m.dp);
        assert_int_equal(mesh_width(&m), m.tp * m.cp);
        for (long long r = 0; r < mesh_size(&m); r++) {
            mesh_coord c = mesh_place(&m, r);
            assert_true(c.tp_rank < m.tp && c.cp_rank < m.cp && c.stage < m.pp && c.replica < m.dp);
            assert_int_equal(closed_form(&m, c), r);
            assert_int_equal(mesh_rank(&m, c), r);
            int group = c.replica * m.pp + c.stage;
            assert_int_equal(mesh_group_index(&m, c), group);
            assert_int_equal(mesh_group_first(&m, group),
                             ((long long)c.stage * m.dp + c.replica) * m.tp * m.cp);
        }
    }
    mesh z = mesh_of(0, -1, 2, 0); /* degrees below 1 read as 1 */
    assert_int_equal(mesh_size(&z), 2);
}

/* Every kind's groups: a partition; members share the colour and differ only in the kind's
 * dimensions; member(key) has that key; sizes the product of the kind's degrees. */
static void test_groups_partition_the_mesh(void **state)
{
    (void)state;
    for (size_t g = 0; g < sizeof grid / sizeof *grid; g++) {
        mesh m = mesh_of(grid[g][0], grid[g][1], grid[g][2], grid[g][3]);
        int deg[4] = {m.tp, m.cp, m.pp, m.dp};
        long long n = mesh_size(&m);
        for (int k = 0; k < MESH_KINDS; k++) {
            int size = 1;
            for (int d = 0; d < 4; d++)
                if (mesh_kind_has(k, d)) size *= deg[d];
            assert_int_equal(mesh_groups(&m, k) * size, n);
            int *seen = calloc((size_t)n, sizeof *seen);
            for (long long r = 0; r < n; r++) {
                mesh_coord c = mesh_place(&m, r);
                mesh_group gr = mesh_group_of(&m, c, k);
                assert_int_equal(gr.size, size);
                assert_true(gr.colour >= 0 && gr.colour < mesh_groups(&m, k));
                assert_true(gr.key >= 0 && gr.key < size);
                assert_int_equal(mesh_member(&m, c, k, gr.key), r);
                for (int key = 0; key < size; key++) {
                    long long q = mesh_member(&m, c, k, key);
                    mesh_coord o = mesh_place(&m, q);
                    mesh_group og = mesh_group_of(&m, o, k);
                    assert_int_equal(og.colour, gr.colour);
                    assert_int_equal(og.key, key);
                    int same[4] = {o.tp_rank == c.tp_rank, o.cp_rank == c.cp_rank,
                                   o.stage == c.stage, o.replica == c.replica};
                    for (int d = 0; d < 4; d++)
                        if (!mesh_kind_has(k, d)) assert_true(same[d]);
                }
                /* colour numbers the group: a rank's group is counted once per member */
                seen[gr.colour]++;
            }
            for (long long i = 0; i < mesh_groups(&m, k); i++) assert_int_equal(seen[i], size);
            free(seen);
        }
    }
}

/* The MPI and NCCL splits (exec.c, exec_gpu.c, dprun.c's profile groups): each kind's colour
 * numbers its groups in the rank order of the GPUs outside them (stage, then replica, then cp,
 * then tp rank, slowest first), its key a member's place, written out. */
static void test_colours_as_the_runtime_split(void **state)
{
    (void)state;
    for (size_t g = 0; g < sizeof grid / sizeof *grid; g++) {
        mesh m = mesh_of(grid[g][0], grid[g][1], grid[g][2], grid[g][3]);
        int tp = m.tp, cp = m.cp;
        for (long long r = 0; r < mesh_size(&m); r++) {
            mesh_coord c = mesh_place(&m, r);
            int pipe = c.stage * m.dp + c.replica; /* the pipeline rank in GPU order */
            mesh_group t = mesh_group_of(&m, c, MESH_TP), q = mesh_group_of(&m, c, MESH_CP),
                       z = mesh_group_of(&m, c, MESH_DP_CP), p = mesh_group_of(&m, c, MESH_PP);
            assert_int_equal(t.colour, pipe * cp + c.cp_rank);
            assert_int_equal(t.key, c.tp_rank);
            assert_int_equal(q.colour, pipe * tp + c.tp_rank);
            assert_int_equal(q.key, c.cp_rank);
            assert_int_equal(z.colour, c.stage * tp + c.tp_rank);
            assert_int_equal(z.key, c.replica * cp + c.cp_rank);
            assert_int_equal(p.colour, (c.replica * cp + c.cp_rank) * tp + c.tp_rank);
            assert_int_equal(p.key, c.stage);
            if (m.pp == 1) /* dprun profile: consecutive ranks form the tp groups */
                assert_int_equal(t.colour, (int)(r / tp));
        }
    }
}

/* The simulator's groups are the mesh's: a tp group is tp consecutive GPUs, a cp ring cp GPUs tp
 * apart (comm_strided_group), and a data-parallel ring's GPUs those mesh_member lists. */
static void test_collectives_over_mesh_groups(void **state)
{
    (void)state;
    cluster_spec h100;
    assert_int_equal(cluster_resolve("dgx-h100", &h100, NULL), DP_OK);
    for (int tp = 1; tp <= 16; tp *= 2)
        for (int cp = 1; cp <= 16; cp *= 2) {
            mesh m = mesh_of(tp, cp, 1, 1);
            comm_group t = comm_mesh_group(&h100, &m, MESH_TP), c = comm_mesh_group(&h100, &m, MESH_CP);
            /* (a group of one has no stride: 1) */
            comm_group wt = comm_strided_group(&h100, tp, 1),
                       wc = comm_strided_group(&h100, cp, cp > 1 ? tp : 1);
            assert_int_equal(t.n, tp);
            assert_int_equal(c.n, cp);
            assert_int_equal(t.spans_nodes, wt.spans_nodes);
            assert_int_equal(c.spans_nodes, wc.spans_nodes);
            assert_near(t.nics, wt.nics, 1e-12);
            assert_near(c.nics, wc.nics, 1e-12);
        }
    /* a cp ring of 2 over 2 nodes (tp 8): its members on GPUs 0 and 8, as a dp ring of 2 replicas
     * of tp 8 is: the two must agree */
    mesh cp2 = mesh_of(8, 2, 1, 1), dp2 = mesh_of(8, 1, 1, 2);
    assert_near(comm_mesh_group(&h100, &cp2, MESH_CP).nics, comm_dp_group(&h100, &dp2, 0).nics,
                1e-12);
    mesh_coord o = {0, 0, 0, 0};
    assert_int_equal(mesh_member(&cp2, o, MESH_CP, 1), 8);
    assert_int_equal(mesh_member(&dp2, o, MESH_DP, 1), 8);
}

/* What tp needs of a model: whole heads, whole key/value heads, an equal share of the MLP width;
 * the hint is the largest tp dividing all three (brute force here). */
static void test_what_a_layout_needs_of_a_model(void **state)
{
    (void)state;
    const model_spec *llama = model_preset("llama3-8b"); /* 32 heads, 8 key/value, ffn 14336 */
    assert_non_null(llama);
    dp_err err = {0};
    for (int tp = 1; tp <= 8; tp *= 2) {
        mesh l = mesh_of(tp, 1, 1, 1);
        assert_int_equal(mesh_check_model(llama, &l, "--tp", &err), DP_OK);
    }
    mesh t16 = mesh_of(16, 1, 1, 1);
    assert_int_equal(mesh_check_model(llama, &t16, "--tp", &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--tp 16 does not divide the 8 key/value heads"));
    assert_non_null(strstr(err.msg, "hint: --tp 8"));
    model_spec odd = *llama;
    odd.ffn = 14336 + 4; /* divisible by 4, not 8 */
    mesh t8 = mesh_of(8, 1, 1, 1);
    assert_int_equal(mesh_check_model(&odd, &t8, "tp", &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tp 8 does not divide the 14340 MLP width (ffn)"));
    assert_non_null(strstr(err.msg, "hint: tp 4"));
    odd.vocab = 32001; /* padded by Megatron: not a layout rule */
    mesh t4 = mesh_of(4, 2, 2, 2);
    assert_int_equal(mesh_check_model(&odd, &t4, "tp", &err), DP_OK);
}

/* The padded length's multiple: the smallest L with 2 cp | L (cp > 1) and, under sequence
 * parallelism, tp | L / cp, found by counting up. */
static void test_token_multiple_by_brute_force(void **state)
{
    (void)state;
    for (int tp = 1; tp <= 8; tp++)
        for (int cp = 1; cp <= 8; cp++)
            for (int sp = 0; sp <= 1; sp++) {
                int want = 1;
                for (;; want++) {
                    int ring = cp == 1 || want % (2 * cp) == 0;
                    int split = !sp || tp == 1 || (want % cp == 0 && want / cp % tp == 0);
                    if (ring && split) break;
                }
                mesh l = mesh_of(tp, cp, 2, 2);
                assert_int_equal(mesh_token_multiple(&l, sp), want);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_order_and_round_trip),
        cmocka_unit_test(test_groups_partition_the_mesh),
        cmocka_unit_test(test_colours_as_the_runtime_split),
        cmocka_unit_test(test_collectives_over_mesh_groups),
        cmocka_unit_test(test_what_a_layout_needs_of_a_model),
        cmocka_unit_test(test_token_multiple_by_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
