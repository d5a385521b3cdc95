"""The features' buffers kept between passes (:class:`graphdist.gnn.models.Reused`): the built-in
model's dropped-out features, a PyG model's (:class:`graphdist.gnn.pyg.models.KeyedDropout`) and
the features with their halo rows (:func:`graphdist.gnn.pyg.rows.halo_rows`). Each pass writes the
values a fresh tensor would hold into the same memory, and never over a tensor that a caller or a
pending backward still holds (then it makes a fresh one)."""
from __future__ import annotations

import pytest
import torch

from graphdist.exchange.spmm import SparseAdj
from graphdist.gnn.models import GNN, keyed_dropout
from graphdist.gnn.pyg.models import KeyedDropout
from graphdist.testing import run_ranks


def _adj(n: int) -> SparseAdj:
    """A path 0 - 1 - ... - n-1 with self loops, symmetric-normalised (CSR by destination)."""
    a = torch.eye(n) + torch.diag(torch.ones(n - 1), 1) + torch.diag(torch.ones(n - 1), -1)
    d = a.sum(1).rsqrt()
    csr = (d[:, None] * a * d[None, :]).to_sparse_csr()
    return SparseAdj(csr.crow_indices(), csr.col_indices(), csr.values(), n, n)


def _passes(model: GNN, x, adj, ids, steps: int):
    outs, grads, ptrs = [], [], []
    for step in range(steps):
        model.zero_grad()
        out = model(x, adj, ids=ids, step=step)
        out.square().sum().backward()
        outs.append(out.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        buf = model._dropped._buf
        ptrs.append(None if buf is None else buf.data_ptr())
    return outs, grads, ptrs


@pytest.mark.parametrize("kind,f_in,hidden,kept", [("gcn", 12, 4, True), ("gcn", 4, 12, False),
                                                    ("sage", 4, 12, True)])
def test_the_models_dropped_features_are_written_over_with_the_values_of_a_fresh_tensor(kind, f_in, hidden, kept,
                                                                                          monkeypatch):
    n = 9
    x, adj, ids = torch.randn(n, f_in), _adj(n), torch.arange(100, 100 + n)
    torch.manual_seed(0)
    model = GNN(kind, f_in, hidden, 3, dropout=0.5)
    ref = GNN(kind, f_in, hidden, 3, dropout=0.5)
    ref.load_state_dict(model.state_dict())
    outs, grads, ptrs = _passes(model, x, adj, ids, 3)
    monkeypatch.setattr(GNN, "_keeps_dropped", lambda self, x, exchange: False)  # always a fresh tensor
    r_outs, r_grads, _ = _passes(ref, x, adj, ids, 3)
    for a, b in zip(outs, r_outs):
        assert torch.equal(a, b)
    for ga, gb in zip(grads, r_grads):
        assert all(torch.equal(a, b) for a, b in zip(ga, gb))
    if kept:  # one buffer, written over: its rows are the last pass's mask of x
        assert ptrs[0] is not None and len(set(ptrs)) == 1
        assert torch.equal(model._dropped._buf, keyed_dropout(x, 0.5, ids, model_key(model, 2)))
    else:  # propagated first: let go after the product, nothing kept
        assert ptrs == [None] * 3
    model.eval()
    with torch.no_grad():  # evaluation draws no mask and leaves the buffer alone
        before = None if model._dropped._buf is None else model._dropped._buf.clone()
        model(x, adj, ids=ids, step=9)
        assert (before is None) == (model._dropped._buf is None)
        assert before is None or torch.equal(before, model._dropped._buf)


def model_key(model: GNN, step: int) -> int:
    from graphdist.keyed import key32
    return key32(model.seed, step, 0)


def test_two_passes_before_a_backward_each_keep_their_own_features():
    n = 9
    x, adj, ids = torch.randn(n, 12), _adj(n), torch.arange(n)
    torch.manual_seed(0)
    model = GNN("gcn", 12, 4, 3, dropout=0.5)
    first = model(x, adj, ids=ids, step=0)  # its pending backward holds the dropped-out features
    second = model(x, adj, ids=ids, step=1)  # so this pass drops out into a fresh tensor
    (first.sum() + 2 * second.sum()).backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for step, c in ((0, 1.0), (1, 2.0)):  # one pass and its backward at a time
        (c * model(x, adj, ids=ids, step=step).sum()).backward()
    assert all(torch.equal(a, b) for a, b in zip(got, (p.grad for p in model.parameters())))


def test_a_pyg_models_features_are_dropped_into_one_buffer_once_the_last_is_let_go():
    ids = torch.arange(6)
    drop = KeyedDropout(ids, seed=3)
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    w = torch.randn(5, 2, requires_grad=True)
    a = drop(x, 0.5, 0)
    a_vals = a.clone()
    b = drop(y, 0.5, 0)  # another input of the same layer and shape while a is held: its own tensor
    assert b.data_ptr() != a.data_ptr() and torch.equal(a, a_vals)
    assert torch.equal(a, keyed_dropout(x, 0.5, ids, _pyg_key(drop, 0)))
    assert torch.equal(b, keyed_dropout(y, 0.5, ids, _pyg_key(drop, 0)))
    ptr = b.data_ptr()
    del a, b
    drop.step = 1
    loss = (drop(y, 0.5, 0) @ w).sum()  # nobody holds the last: written over
    assert drop._kept[0]._buf.data_ptr() == ptr
    pending = drop(y, 0.5, 0)  # the graph of loss still holds it: a fresh tensor
    assert pending.data_ptr() != ptr
    loss.backward()
    assert torch.equal(w.grad, keyed_dropout(y, 0.5, ids, _pyg_key(drop, 0)).sum(0)[:, None].expand(5, 2))
    h = torch.randn(6, 5, requires_grad=True)  # a hidden layer's input: a new tensor, as before
    assert drop(h, 0.5, 1).requires_grad


def _pyg_key(drop: KeyedDropout, layer: int) -> int:
    from graphdist.keyed import key32
    return key32(drop.seed, drop.step, layer)


def _halo_rows_job(rank, ws):
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.gnn.pyg.rows import _HaloRows, _kept, halo_rows
    ex = HaloExchanger(torch.tensor([0, 2]), [0, 2], [0, 2], mode="plain") if rank == 0 else \
        HaloExchanger(torch.tensor([1, 3]), [2, 0], [2, 0], mode="plain")
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3) + 100 * rank
    out = {}
    first = halo_rows(x, ex)
    out["first"] = first.clone()
    out["ref"] = _HaloRows.apply(x, ex)  # the autograd path's rows
    held = halo_rows(x * 3, ex)  # the first is still held: its own tensor
    out["held_apart"] = held.data_ptr() != first.data_ptr() and torch.equal(out["first"], first)
    ptr = held.data_ptr()
    del first, held
    second = halo_rows(x * 2, ex)  # nobody holds the last: written over
    out["same_buffer"] = second.data_ptr() == ptr
    out["second"] = second.clone()
    with torch.no_grad():  # an evaluation borrows the training's buffer once it is let go
        ptr = second.data_ptr()
        del second
        ev = halo_rows(x, ex)
        out["eval_borrows"] = ev.data_ptr() == ptr and torch.equal(ev, out["first"])
        wide = torch.cat([x, x], 1)  # another shape: a fresh tensor, the kept buffer stays
        w = halo_rows(wide, ex)
        out["eval_fresh"] = w.data_ptr() != ptr and _kept[ex]._buf.data_ptr() == ptr
        del ev, w
        ex2 = HaloExchanger(ex.send_idx, ex.send_counts, ex.recv_counts, mode="plain")
        halo_rows(x, ex2)  # no training pass before: nothing kept (a forward alone holds nothing)
        out["infer_keeps_nothing"] = ex2 not in _kept
    first = halo_rows(x, ex)
    h = x.clone().requires_grad_()
    g = halo_rows(h, ex)
    out["grad_path_new"] = g.data_ptr() != first.data_ptr() and g.requires_grad
    g.sum().backward()
    out["grad"] = h.grad.clone()
    return out


def test_halo_rows_of_the_features_go_into_one_buffer_with_the_autograd_paths_values():
    for rank, out in enumerate(run_ranks(_halo_rows_job, 2, timeout=120)):
        peer = 100 * (1 - rank)
        want = torch.arange(12, dtype=torch.float32).reshape(4, 3) + 100 * rank
        rows = torch.arange(12, dtype=torch.float32).reshape(4, 3)[[1, 3] if rank == 0 else [0, 2]] + peer
        assert torch.equal(out["first"], torch.cat([want, rows]))
        assert torch.equal(out["first"], out["ref"])
        assert out["held_apart"] and out["same_buffer"] and torch.equal(out["second"], 2 * out["first"])
        assert out["eval_borrows"] and out["eval_fresh"] and out["infer_keeps_nothing"]
        assert out["grad_path_new"]
        sent = [0, 2] if rank == 0 else [1, 3]  # each sent row's gradient comes home from the peer
        assert torch.equal(out["grad"], torch.ones(4, 3) + torch.zeros(4, 3).index_fill_(0, torch.tensor(sent), 1.0))


def test_a_trained_model_with_a_kept_buffer_still_pickles_and_copies():
    import copy
    import io
    n = 9
    x, adj, ids = torch.randn(n, 12), _adj(n), torch.arange(n)
    model = GNN("gcn", 12, 4, 3, dropout=0.5)
    out = model(x, adj, ids=ids, step=0)  # holds the kept buffer's view
    assert model._dropped._buf is not None
    buf = io.BytesIO()
    torch.save(model, buf)  # a whole module, as a user may save it (weights only: the scratch is left out)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded._dropped._buf is None and copy.deepcopy(model)._dropped._buf is None
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    del out
