#include "mesh.h"

#include <stdio.h>

enum { DIMS = 4 }; /* tp, cp, dp, pp: fastest first (mesh.h) */
enum { BIT_TP = 1u << 0, BIT_CP = 1u << 1, BIT_DP = 1u << 2, BIT_PP = 1u << 3 };

/* The dimensions each kind's groups span, a bit per dimension in the order above. */
static const unsigned kind_dims[MESH_KINDS] = {
    [MESH_TP] = BIT_TP,
    [MESH_CP] = BIT_CP,
    [MESH_PP] = BIT_PP,
    [MESH_DP] = BIT_DP,
    [MESH_DP_CP] = BIT_CP | BIT_DP,
    [MESH_TP_CP] = BIT_TP | BIT_CP,
};

static int at_least_1(int x) { return x > 0 ? x : 1; }

static void degrees(const mesh *m, int d[DIMS])
{
    d[0] = at_least_1(m->tp), d[1] = at_least_1(m->cp), d[2] = at_least_1(m->dp),
    d[3] = at_least_1(m->pp);
}

static void coords(mesh_coord c, const int d[DIMS], int x[DIMS])
{
    int v[DIMS] = {c.tp_rank, c.cp_rank, c.replica, c.stage};
    for (int i = 0; i < DIMS; i++) x[i] = ((v[i] % d[i]) + d[i]) % d[i];
}

/* The coordinates of the dimensions in (in_mask 1) or outside (0) mask, flattened fastest first. */
static long long flatten(const int x[DIMS], const int d[DIMS], unsigned mask, int in_mask)
{
    long long r = 0;
    for (int i = DIMS - 1; i >= 0; i--)
        if (((mask >> i) & 1u) == (unsigned)in_mask) r = r * d[i] + x[i];
    return r;
}

mesh mesh_of(int tp, int cp, int pp, int dp)
{
    mesh m = {at_least_1(tp), at_least_1(cp), at_least_1(pp), at_least_1(dp)};
    return m;
}

long long mesh_size(const mesh *m)
{
    int d[DIMS];
    degrees(m, d);
    return (long long)d[0] * d[1] * d[2] * d[3];
}

int mesh_width(const mesh *m) { return at_least_1(m->tp) * at_least_1(m->cp); }

long long mesh_rank(const mesh *m, mesh_coord c)
{
    int d[DIMS], x[DIMS];
    degrees(m, d);
    coords(c, d, x);
    return flatten(x, d, 0xFu, 1);
}

mesh_coord mesh_place(const mesh *m, long long r)
{
    int d[DIMS], x[DIMS];
    degrees(m, d);
    for (int i = 0; i < DIMS; i++) x[i] = (int)(r % d[i]), r /= d[i];
    mesh_coord c = {x[0], x[1], x[3], x[2]};
    return c;
}

int mesh_group_index(const mesh *m, mesh_coord c)
{
    int d[DIMS], x[DIMS];
    degrees(m, d);
    coords(c, d, x);
    return x[2] * d[3] + x[3]; /* replica * pp + stage */
}

long long mesh_group_first(const mesh *m, int group)
{
    int pp = at_least_1(m->pp);
    mesh_coord c = {0, 0, group % pp, group / pp};
    return mesh_rank(m, c);
}

long long mesh_groups(const mesh *m, mesh_kind k)
{
    int d[DIMS];
    degrees(m, d);
    long long n = 1;
    for (int i = 0; i < DIMS; i++)
        if (!((kind_dims[k] >> i) & 1u)) n *= d[i];
    return n;
}

mesh_group mesh_group_of(const mesh *m, mesh_coord c, mesh_kind k)
{
    int d[DIMS], x[DIMS];
    degrees(m, d);
    coords(c, d, x);
    mesh_group g = {(int)flatten(x, d, kind_dims[k], 0), (int)flatten(x, d, kind_dims[k], 1),
                    (int)(mesh_size(m) / mesh_groups(m, k))};
    return g;
}

long long mesh_member(const mesh *m, mesh_coord c, mesh_kind k, int key)
{
    int d[DIMS], x[DIMS];
    degrees(m, d);
    coords(c, d, x);
    for (int i = 0; i < DIMS; i++) /* the key's digits replace the group's own dimensions */
        if ((kind_dims[k] >> i) & 1u) x[i] = key % d[i], key /= d[i];
    return flatten(x, d, 0xFu, 1);
}

int mesh_kind_has(mesh_kind k, int which)
{
    static const unsigned bit[DIMS] = {BIT_TP, BIT_CP, BIT_PP, BIT_DP}; /* which's numbering */
    return which >= 0 && which < DIMS && (kind_dims[k] & bit[which]) != 0;
}

dp_status mesh_check_model(const model_spec *m, const mesh *l, const char *degree, dp_err *err)
{
    int tp = at_least_1(l->tp);
    const struct {
        const char *what;
        int n;
    } parts[] = {{"attention heads", m->heads},
                 {"key/value heads", model_kv_heads(m)},
                 {"MLP width (ffn)", m->ffn}};
    int n_parts = (int)(sizeof parts / sizeof *parts), best = 1;
    for (int d = 1; d <= tp; d++) {
        int all = 1;
        for (int k = 0; k < n_parts; k++) all &= parts[k].n % d == 0;
        if (all) best = d;
    }
    for (int k = 0; tp > 1 && k < n_parts; k++)
        if (parts[k].n % tp)
            return dp_fail(err, DP_ERR_INVALID, "%s %d does not divide the %d %s of %s: each of "
                           "the %d tensor-parallel GPUs holds %s\nhint: %s %d", degree, tp,
                           parts[k].n, parts[k].what, m->name, tp,
                           k < 2 ? "whole heads" : "an equal share of it", degree, best);
    return DP_OK;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

int mesh_experts_span_replicas(const mesh *m, int ep, int etp)
{
    return at_least_1(ep) * at_least_1(etp) > mesh_width(m);
}

int mesh_token_multiple(const mesh *l, int seq_parallel)
{
    int tp = at_least_1(l->tp), cp = at_least_1(l->cp);
    int ring = cp > 1 ? 2 * cp : 1, sp = seq_parallel && tp > 1 ? cp * tp : 1;
    return ring / gcd(ring, sp) * sp;
}
