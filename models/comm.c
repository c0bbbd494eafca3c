#include "comm.h"

double comm_act_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                      int dec_len)
{
    double unit = (double)COMM_ACT_ELEM_BYTES * mbs * m->hidden;
    if (m->arch == ARCH_GPT) return unit * enc_len;
    int enc_stages = stages / 2;
    if (stages == 1 || stage < enc_stages - 1) return unit * enc_len; /* encoder → encoder */
    if (stage == enc_stages - 1) return unit * enc_len;               /* encoder output */
    return unit * ((double)dec_len + enc_len);                        /* decoder + encoder out */
}

int64_t comm_transfer_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                            int dec_len)
{
    return (int64_t)(comm_act_bytes(m, stage, stages, mbs, enc_len, dec_len) + 0.5);
}

static int same_node(const cluster_spec *c, int a, int b)
{
    return a / c->gpus_per_node == b / c->gpus_per_node;
}

double comm_p2p_ms(const cluster_spec *c, int rank_a, int rank_b, double bytes)
{
    int intra = same_node(c, rank_a, rank_b);
    double gbit = intra ? c->intra_gbit : c->inter_gbit;
    double lat_us = intra ? c->intra_latency_us : c->inter_latency_us;
    return lat_us / 1e3 + bytes * 8 / (gbit * 1e9) * 1e3;
}

double comm_allreduce_ms(const cluster_spec *c, int n, int spans_nodes, double bytes)
{
    if (n <= 1) return 0;
    double gbit = spans_nodes ? c->inter_gbit : c->intra_gbit;
    double lat_us = spans_nodes ? c->inter_latency_us : c->intra_latency_us;
    return 2.0 * (n - 1) * lat_us / 1e3 + 2.0 * (n - 1) / n * bytes * 8 / (gbit * 1e9) * 1e3;
}

double comm_allgather_ms(const cluster_spec *c, int n, int spans_nodes, double bytes)
{
    return comm_allreduce_ms(c, n, spans_nodes, bytes) / 2;
}

int comm_dp_spans_nodes(const cluster_spec *c, int pp, int dp, int tp, int stage)
{
    int first = stage * tp, last = ((dp - 1) * pp + stage + 1) * tp - 1;
    return first / c->gpus_per_node != last / c->gpus_per_node;
}

int comm_tp_spans_nodes(const cluster_spec *c, int tp)
{
    return tp > c->gpus_per_node;
}

zero_comm comm_zero(const cluster_spec *c, int zero, int dp, int spans_nodes, double bytes)
{
    zero_comm z = {0, 0, 0};
    if (dp <= 1) return z;
    double gather = comm_allgather_ms(c, dp, spans_nodes, bytes); /* = a reduce-scatter */
    if (zero <= 1) z.iter_ms = comm_allreduce_ms(c, dp, spans_nodes, bytes);
    if (zero == 2) z.bwd_ms = gather, z.iter_ms = gather;
    if (zero >= 3) z.fwd_ms = gather, z.bwd_ms = 2 * gather;
    return z;
}
