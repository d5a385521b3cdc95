"""Stale halos (``--halo-staleness 1``, PipeGCN): parity with an independent single-process
reference, staleness 0 is today's exact training, resume is exact, runs repeat (at k = 2: k = 4
adds no case the k = 2 runs do not cover), bad values."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.cli import main
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=0"
FEAT, HID, C, LAYERS, EPOCHS = 8, 16, 3, 3, 8


def _graph():
    from graphdist.data import load_graph
    return load_graph(SPEC)


# ------------------------------------------------------------------ single-process reference
class _StaleProp(torch.autograd.Function):
    """``A_in z + A_cut z_prev`` forward, ``A_in^T g + A_cut^T g_prev`` backward: the cut's rows
    and gradients from the previous epoch (the current ones in the first)."""

    @staticmethod
    def forward(ctx, z, a_in, a_cut, mem, i):
        ctx.a_in, ctx.a_cut, ctx.mem, ctx.i = a_in, a_cut, mem, i
        zp = mem.get(("z", i), z.detach())
        mem[("z", i)] = z.detach().clone()
        return a_in @ z + a_cut @ zp

    @staticmethod
    def backward(ctx, g):
        gp = ctx.mem.get(("g", ctx.i), g)
        ctx.mem[("g", ctx.i)] = g.clone()
        return ctx.a_in.t() @ g + ctx.a_cut.t() @ gp, None, None, None, None


def reference_losses(graph, a, state, epochs=EPOCHS, *, stale=False, keep=None):
    """A 3-layer GCN on the whole graph (dense PyG ``gcn_norm`` matrix, dropout 0, Kipf's Adam
    groups). ``stale``: every cut edge carries the previous epoch's rows and gradients (layer 0
    propagates the unchanging features). ``keep(epoch) -> [N] bool``: boundary sampling, cut
    edges from dropped sources removed, kept ones scaled by 1 / rate (keep returns the rate too)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    n = graph.num_nodes
    ei, w = gcn_norm(graph.edge_index, None, n, add_self_loops=True)
    adj = torch.zeros(n, n, dtype=torch.float64)
    adj.index_put_((ei[1], ei[0]), w.double(), accumulate=True)  # out[dst] += w x[src]
    cut = a[:, None] != a[None, :]
    a_in, a_cut = (adj * ~cut).float(), (adj * cut).float()
    params = [state[f"convs.{i}.{k}"].clone().requires_grad_(True) for i in range(LAYERS) for k in ("weight", "bias")]
    opt = torch.optim.Adam([{"params": params[:2], "weight_decay": 5e-4}, {"params": params[2:], "weight_decay": 0.0}],
                           lr=0.01)
    mem, losses, tm = {}, [], graph.train_mask
    for epoch in range(1, epochs + 1):
        opt.zero_grad()
        ai, ac = a_in, a_cut
        if keep is not None:
            kept, rate = keep(epoch)
            ac = a_cut * (kept.float() / rate)[None, :]
        h = graph.x
        for i in range(LAYERS):
            wt, b = params[2 * i], params[2 * i + 1]
            if i == 0:
                h = ((ai + ac) @ h) @ wt.t() + b
            elif stale:
                h = _StaleProp.apply(h @ wt.t(), ai, ac, mem, i) + b
            else:
                h = (ai + ac) @ (h @ wt.t()) + b
            if i < LAYERS - 1:
                h = F.relu(h)
        loss = F.cross_entropy(h[tm], graph.y[tm])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def initial_state(seed=0):
    from graphdist.gnn.models import GNN
    torch.manual_seed(seed)
    return GNN("gcn", FEAT, HID, C, LAYERS, dropout=0.0).state_dict()


# ------------------------------------------------------------------ distributed side
BASE = dict(model="gcn", layers=LAYERS, hidden=HID, dropout=0.0, epochs=EPOCHS, seed=0)
REPEAT = dict(hidden=8, epochs=6, seed=4, dropout=0.5, halo_staleness=1)
REPEATS = [REPEAT, REPEAT, dict(REPEAT, staleness_smoothing=0.5), dict(REPEAT, staleness_smoothing=0.5),
           dict(REPEAT, halo_bits=8)]


def _fit_job(rank, ws, graph, a, runs, root=None):
    """``runs`` (lists of config fields) fitted in turn; with ``root`` also the resume case."""
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    out = [fit(GCNConfig(spec="t", progress=False, **kw), lg, {}, ctx)["losses"] for kw in runs]
    return out if root is None else (out, _resume_case(lg, ctx, root))


def _resume_case(lg, ctx, root):
    from graphdist.errors import ConfigError
    from graphdist.gnn.trainer import GCNConfig, fit
    out = []
    for name, extra in (("s", {}), ("gf", {"staleness_smoothing": 0.3})):
        base = dict(spec="t", hidden=8, dropout=0.5, epochs=8, seed=3, progress=False, checkpoint_every=3,
                    halo_staleness=1, **extra)
        full = fit(GCNConfig(**base, checkpoint_dir=f"{root}/{name}-full"), lg, {}, ctx)
        cut = fit(GCNConfig(**base, checkpoint_dir=f"{root}/{name}-cut"), lg, {}, ctx,
                  callbacks=[lambda epoch, hist: epoch == 5])  # the job "dies" after epoch 5
        resumed = fit(GCNConfig(**base, checkpoint_dir=f"{root}/{name}-cut", resume=True), lg, {}, ctx)
        out.append((full["losses"], cut["losses"], resumed["losses"]))
    try:
        fit(GCNConfig(**{**base, "halo_staleness": 0, "staleness_smoothing": 0.0, "link_gbps": 1.0},
                      checkpoint_dir=f"{root}/gf-cut", resume=True), lg, {}, ctx)
        refused = ""
    except ConfigError as e:
        refused = str(e)
    return out, refused


def _check_repeats(out):
    for r in out:
        assert r == out[0]  # every rank reports the same losses
    s1, s2, m1, m2, q = out[0]
    assert s1 == s2 and m1 == m2 and len(s1) == 6  # same seed and partition: same losses
    assert m1 != s1 and q != s1 and m1[0] == s1[0]  # smoothing starts from the fresh first epoch


def test_stale_training_at_k2(tmp_path):
    """Parity with the reference (plain and mvc), staleness 0 = exact, runs repeat, resume."""
    g = _graph()
    a = torch.arange(g.num_nodes) % 2  # a cut through every other edge: staleness matters
    runs = [dict(BASE, halo=h, halo_staleness=s) for h in ("plain", "mvc") for s in (0, 1)] + [BASE] + REPEATS
    res = run_ranks(_fit_job, 2, args=(g, a, runs, str(tmp_path)), timeout=240)
    state = initial_state()
    ref_exact, ref_stale = reference_losses(g, a, state), reference_losses(g, a, state, stale=True)
    _check_repeats([r[0][5:] for r in res])
    (exact_p, stale_p, exact_m, stale_m, default, *_), (resume, refused) = res[0]
    for exact, stale in ((exact_p, stale_p), (exact_m, stale_m)):
        assert exact == pytest.approx(ref_exact, rel=1e-4, abs=1e-6)
        assert stale == pytest.approx(ref_stale, rel=1e-4, abs=1e-6)
        assert stale[0] == pytest.approx(exact[0], rel=1e-6)  # the first epoch uses fresh rows
        assert all(abs(s - e) > 1e-5 for s, e in zip(stale[1:], exact[1:]))  # then stale ones
    assert exact_m == default  # --halo-staleness 0 is today's exact training, bit for bit
    for full, cut, resumed in resume:
        assert len(cut) == 5 and cut == full[:5]
        assert resumed == full  # the held rows of epoch 5 came back from the checkpoint
    assert "--halo-staleness 1 -> 0" in refused and "--staleness-smoothing 0.3 -> 0.0" in refused
    assert "--link-gbps" not in refused  # the link changes the time only


@pytest.mark.parametrize("argv, match", [
    (["--halo-staleness", "2"], "--halo-staleness"),
    (["--staleness-smoothing", "0.5"], "--staleness-smoothing smooths stale halo rows: it needs --halo-staleness 1"),
    (["--halo-staleness", "1", "--staleness-smoothing", "1.0"], "--staleness-smoothing must be in [0, 1)"),
])
def test_bad_staleness_is_one_line(argv, match, capsys):
    assert main(["train-gcn", SPEC, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err


def test_resume_onto_another_partition_of_the_same_k_leaves_the_held_rows(tmp_path):
    """The held halo rows are saved by rank: a resume onto another partition of the same graph
    and k (where loading them would be a shape error, or silently wrong rows) does not load them,
    and says so once; the same partition resumes with them."""
    import json

    from tests.cli_ranks import run_cli
    ck = str(tmp_path / "ck")
    run = ["train-gcn", SPEC, "--parts", "2", "--nproc", "2", "--halo-staleness", "1", "--no-progress",
           "--checkpoint-dir", ck]
    rep = tmp_path / "r.json"
    runs = run_cli([run + ["--method", "random", "--epochs", "3"],  # on two forked ranks, one after the other
                    run + ["--method", "metis", "--epochs", "4", "--resume", "--report", str(rep)],
                    run + ["--method", "metis", "--epochs", "5", "--resume"]], 2)  # the same partition resumes
    assert [code for code, _ in runs] == [0, 0, 0], runs[-1][1][-3000:]
    err = runs[1][1]
    assert err.count("the held halo rows belong to the old partition's cut") == 1, err
    was = json.loads(rep.read_text())["run/resharded_from"]
    assert was["world_size"] == 2 and isinstance(was["partition_id"], str)
    assert "the held halo rows" not in runs[2][1]
