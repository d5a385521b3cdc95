"""GCN/SAGE on CUDA: one GPU and two GPUs (NCCL) against single-process PyG on the CPU, in both
halo modes, plus quantised-exchange and trainer smoke runs. Skipped without GPUs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks
from tests.conftest import requires_cuda
from tests.test_gcn_parity import C, FEAT, HID, METHODS, MODELS, assignment, init_state, make_graph, pyg_reference

requires_2_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def _forward_backward(lg, kind, state, dev, halo, bits=32):
    from graphdist import comm
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.gnn.models import GNN
    from graphdist.exchange.spmm import SparseAdj
    model = GNN(kind, FEAT, HID, C, 3, dropout=0.0).to(dev)
    model.load_state_dict(state)
    adj = SparseAdj.for_model(lg, kind, dev, halo=halo)
    ex = HaloExchanger.from_local_graph(lg, dev, halo=halo, bits=bits)
    out = model(lg.x.to(dev), adj, ex)
    n_train = float(comm.all_reduce_sum(lg.train_mask.sum().double().to(dev)))
    tm = lg.train_mask.to(dev)
    (F.cross_entropy(out[tm], lg.y.to(dev)[tm], reduction="sum") / n_train).backward()
    comm.all_reduce_grads(model.parameters())
    return lg.owned.numpy(), out.detach().cpu().numpy(), {k: p.grad.cpu().numpy() for k, p in model.named_parameters()}


def _close(a, b, tol=1e-5):
    return float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1e-6)


@requires_cuda
@pytest.mark.parametrize("kind", MODELS)
def test_one_gpu_equals_pyg(kind):
    graph = make_graph()
    state = init_state(kind)
    lg = build_layout(graph, torch.zeros(graph.num_nodes, dtype=torch.int64), 0, 1).reordered("rcm")
    owned, out, grads = _forward_backward(lg, kind, state, torch.device("cuda", 0), "mvc")
    ref, ref_grads = pyg_reference(graph, kind, state)
    logits = torch.zeros_like(ref)
    logits[torch.from_numpy(owned)] = torch.from_numpy(out)
    assert _close(logits, ref)
    for name, g in grads.items():
        assert _close(torch.from_numpy(g), ref_grads[name]), name


def _two_gpu_job(rank, ws, graph, assignments, states):
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    res = {}
    for method, a in assignments.items():
        lg = build_layout(graph, a, rank, ws)
        for kind in MODELS:
            for halo in ("plain", "mvc"):
                res[(method, kind, halo)] = _forward_backward(lg, kind, states[kind], dev, halo)
        res[(method, "q8")] = _forward_backward(lg, "gcn", states["gcn"], dev, "mvc", bits=8)[1]
    return res


@requires_cuda
@requires_2_gpus
def test_two_gpus_equal_pyg():
    graph = make_graph()
    assignments = {m: assignment(graph, 2, m) for m in METHODS}
    states = {kind: init_state(kind) for kind in MODELS}
    results = run_ranks(_two_gpu_job, 2, args=(graph, assignments, states), timeout=300, backend="nccl")
    for kind in MODELS:
        ref, ref_grads = pyg_reference(graph, kind, states[kind])
        for method in METHODS:
            for halo in ("plain", "mvc"):
                logits = torch.zeros_like(ref)
                for r in range(2):
                    owned, out, grads = results[r][(method, kind, halo)]
                    logits[torch.from_numpy(owned)] = torch.from_numpy(out)
                    for name, g in grads.items():
                        assert _close(torch.from_numpy(g), ref_grads[name]), (kind, method, halo, name)
                assert _close(logits, ref), (kind, method, halo)
    for method in METHODS:  # 8-bit rows: close, not equal
        exact = torch.cat([torch.from_numpy(results[r][(method, "gcn", "mvc")][1]) for r in range(2)])
        q8 = torch.cat([torch.from_numpy(results[r][(method, "q8")]) for r in range(2)])
        assert 0 < float((q8 - exact).norm() / exact.norm()) < 0.05


def _train_job(rank, ws, graph, a):
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cuda")
    lg = build_layout(graph, a, rank, ws)
    reps = {}
    for halo, bits in (("plain", 32), ("mvc", 32), ("mvc", 8)):
        cfg = GCNConfig(spec="t", model="gcn", layers=2, hidden=HID, dropout=0.5, epochs=10, seed=1,
                        progress=False, device="cuda", halo=halo, halo_bits=bits)
        rep = fit(cfg, lg, {}, ctx)
        reps[(halo, bits)] = (rep["losses"], rep["comm/halo_bytes_per_epoch"])
    return reps


@requires_cuda
@requires_2_gpus
def test_two_gpu_training_smoke():
    graph = make_graph()
    res = run_ranks(_train_job, 2, args=(graph, assignment(graph, 2, "metis")), timeout=300, backend="nccl")[0]
    plain, mvc, q8 = res[("plain", 32)], res[("mvc", 32)], res[("mvc", 8)]
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(mvc[0], plain[0]))  # exact mode
    assert mvc[1] < plain[1] and q8[1] < mvc[1]
    assert q8[0][-1] < q8[0][0]  # it learns
