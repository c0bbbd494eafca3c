#include "comm.h"

#include <math.h>

#include "placement.h"

double comm_act_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                      int dec_len)
{
    return COMM_ACT_ELEM_BYTES * placement_act_elems(m, stage, stages, mbs, enc_len, dec_len);
}

int64_t comm_transfer_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                            int dec_len)
{
    return (int64_t)(comm_act_bytes(m, stage, stages, mbs, enc_len, dec_len) + 0.5);
}

static int node_of(const cluster_spec *c, long long gpu)
{
    return (int)(gpu / c->gpus_per_node);
}

double comm_p2p_ms(const cluster_spec *c, int gpu_a, int gpu_b, double bytes)
{
    comm_group g = comm_group_flat(2, node_of(c, gpu_a) != node_of(c, gpu_b));
    double lat_us = g.spans_nodes ? c->inter_latency_us : c->intra_latency_us;
    return lat_us / 1e3 + bytes / (comm_busbw_gbps(c, COLL_SEND_RECV, &g) * 1e9) * 1e3;
}

comm_group comm_group_flat(int n, int spans_nodes)
{
    comm_group g = {n, spans_nodes, 1, spans_nodes ? 1 : n};
    return g;
}

comm_group comm_strided_group(const cluster_spec *c, int n, int stride)
{
    int gpn = c->gpus_per_node > 0 ? c->gpus_per_node : 1, st = stride > 0 ? stride : 1;
    comm_group g = comm_group_flat(n, (long long)n * st > gpn);
    if (g.spans_nodes) {
        double members = st < gpn ? (double)(gpn / st) : 1; /* of one group on a node */
        g.nics = fmin(members, c->nics_per_node * members / gpn);
        g.per_node = (int)members;
    }
    return g;
}

comm_group comm_mesh_group(const cluster_spec *c, const mesh *m, mesh_kind k)
{
    mesh_coord first = {0, 0, 0, 0};
    long long size = mesh_size(m) / mesh_groups(m, k);
    long long stride = size > 1 ? mesh_member(m, first, k, 1) - mesh_member(m, first, k, 0) : 1;
    return comm_strided_group(c, (int)size, (int)stride);
}

/* The rank of member j of the group at offset o of stage `stage`: the GPU at index o + j x stride
 * of the stage's GPUs flattened in mesh.h's order (tp fastest, then cp, then the replicas). */
static long long stage_member(const mesh *m, int stage, int stride, int o, int j)
{
    int f = o + j * stride, tp = m->tp, cp = m->cp;
    mesh_coord x = {f % tp, (f / tp) % cp, stage, f / (tp * cp)};
    return mesh_rank(m, x);
}

/* The offset (0 .. stride - 1) of the GPU at x's group within its stage. */
static int stage_offset(const mesh *m, mesh_coord x, int stride)
{
    return ((x.replica * m->cp + x.cp_rank) * m->tp + x.tp_rank) % stride;
}

/* Whether the group at offset o of stage `stage` crosses nodes: its members' ranks rise with j,
 * so its first and last give its nodes. */
static int group_crosses(const cluster_spec *c, const mesh *m, int stage, int size, int stride,
                         int o)
{
    return node_of(c, stage_member(m, stage, stride, o, 0)) !=
           node_of(c, stage_member(m, stage, stride, o, size - 1));
}

comm_group comm_stage_group(const cluster_spec *c, const mesh *layout, int size, int stride,
                            int stage)
{
    mesh one = mesh_of(layout->tp, layout->cp, layout->pp, layout->dp), *m = &one;
    comm_group g = comm_group_flat(size, 0);
    long long total = mesh_size(m);
    int most = 0; /* the most members a crossing group has on one node */
    for (int o = 0; o < stride; o++) { /* each group of the stage */
        if (!group_crosses(c, m, stage, size, stride, o)) continue;
        double worst = INFINITY;
        for (int j = 0; j < size;) { /* node by node along the group */
            int node = node_of(c, stage_member(m, stage, stride, o, j)), members = 0;
            for (; j < size && node_of(c, stage_member(m, stage, stride, o, j)) == node; j++)
                members++;
            most = members > most ? members : most;
            int crossing = 0; /* the node's GPUs whose groups cross too (every stage's) */
            long long lo = (long long)node * c->gpus_per_node;
            for (long long y = lo; y < lo + c->gpus_per_node && y < total; y++) {
                mesh_coord x = mesh_place(m, y);
                crossing += group_crosses(c, m, x.stage, size, stride, stage_offset(m, x, stride));
            }
            double share = members * fmin(1, (double)c->nics_per_node / crossing);
            worst = fmin(worst, share);
        }
        g.nics = g.spans_nodes ? fmin(g.nics, worst) : worst;
        g.spans_nodes = 1;
    }
    if (g.spans_nodes) g.per_node = most;
    return g;
}

comm_group comm_dp_group(const cluster_spec *c, const mesh *m, int stage)
{
    return comm_stage_group(c, m, m->dp > 1 ? m->dp : 1, mesh_width(m), stage);
}

double comm_busbw_gbps(const cluster_spec *c, hw_coll k, const comm_group *g)
{
    double intra = c->intra_gbit / 8 * c->coll_eff[SCOPE_INTRA][k];
    if (!g->spans_nodes) return intra;
    return fmin(intra, c->inter_gbit / 8 * c->coll_eff[SCOPE_INTER][k] * g->nics);
}

double comm_busbw_factor(hw_coll k, int n)
{
    return k == COLL_ALL_REDUCE ? 2.0 * (n - 1) / n : k == COLL_SEND_RECV ? 1 : (double)(n - 1) / n;
}

double comm_tree_bw_share(double bytes)
{
    /* tuning.cc's treeCorrectionFactor, Simple protocol, by floor(log2(bytes / 64)), 64 B up */
    static const double correction[23] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                          .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9};
    int at = 0;
    while (at < 23 && bytes >= 128.0 * (double)(1LL << at)) at++; /* bytes / 64 >= 2^(at + 1) */
    return COMM_TREE_BW_SHARE * (bytes >= 64 && at < 23 ? correction[at] : 1);
}

comm_group comm_group_resized(comm_group g, int n)
{
    if (g.n > 0 && n != g.n && g.spans_nodes) {
        long long p = (long long)g.per_node * n / g.n;
        g.per_node = p < 1 ? 1 : p > n ? n : (int)p;
    } else if (!g.spans_nodes) {
        g.per_node = n;
    }
    g.n = n;
    return g;
}

double comm_coll_ms(const cluster_spec *c, hw_coll k, const comm_group *g, double bytes)
{
    int n = g->n;
    if (n <= 1) return 0;
    double factor = comm_busbw_factor(k, n);
    double steps = k == COLL_ALL_REDUCE ? 2.0 * (n - 1) : k == COLL_SEND_RECV ? 1 : n - 1;
    double lat_us = g->spans_nodes ? c->inter_latency_us : c->intra_latency_us;
    double ms = steps * lat_us / 1e3 + bytes * factor / (comm_busbw_gbps(c, k, g) * 1e9) * 1e3;
    if (k == COLL_ALL_REDUCE && !g->spans_nodes && c->gpu.nvls_eff > 0) {
        double nvls = COMM_NVLS_LATENCY_US / 1e3 +
                      bytes / (c->intra_gbit / 8 * c->gpu.nvls_eff * 1e9) * 1e3;
        ms = fmin(ms, nvls);
    }
    if (k == COLL_ALL_REDUCE && g->spans_nodes && c->nccl_tree && !c->gpu.comm_on_cores) {
        int p = g->per_node < 1 ? 1 : g->per_node > n ? n : g->per_node;
        int nodes = (n + p - 1) / p, depth = 0;
        while ((2 << depth) <= nodes) depth++; /* floor(log2 nodes) */
        double tree = 2 * ((p - 1) * c->intra_latency_us + depth * c->inter_latency_us) / 1e3 +
                      2 * bytes / (comm_busbw_gbps(c, k, g) * comm_tree_bw_share(bytes) * 1e9) * 1e3;
        ms = fmin(ms, tree);
    }
    return ms;
}

zero_comm comm_zero(const cluster_spec *c, int zero, const comm_group *g,
                    const comm_group *replicas, double bytes, double grad_bytes)
{
    zero_comm z = {0, 0, 0, 0};
    double across = zero >= 1 && replicas && replicas->n > 1 && g->n >= 1
                        ? comm_coll_ms(c, COLL_ALL_REDUCE, replicas, grad_bytes / g->n)
                        : 0;
    double gather = comm_coll_ms(c, COLL_ALL_GATHER, g, bytes);
    double scatter = comm_coll_ms(c, COLL_REDUCE_SCATTER, g, grad_bytes);
    if (zero == 0) z.iter_ms = z.grad_ms = comm_coll_ms(c, COLL_ALL_REDUCE, g, grad_bytes);
    if (zero == 1) z.grad_ms = scatter + across, z.iter_ms = scatter + across + gather;
    if (zero == 2) z.bwd_ms = scatter, z.grad_ms = across, z.iter_ms = across + gather;
    if (zero >= 3) z.fwd_ms = gather, z.bwd_ms = gather + scatter, z.iter_ms = z.grad_ms = across;
    return z;
}
