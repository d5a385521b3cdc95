"""Bring your own PyG model: a model written for one device, trained on a graph split over k ranks.

    import graphdist.gnn.pyg as gd

    part = gd.load_part("planetoid:planetoid/Cora")   # this rank's part (path in the data home)
    model = gd.distribute(MyGAT(...), part)           # wraps every MessagePassing layer
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    for epoch in range(200):
        opt.zero_grad()
        out = model(part.x, part.edge_index)          # owned rows in, owned rows out
        loss = gd.cross_entropy(out, part.y, part.train_mask)   # the whole graph's loss
        loss.backward()
        gd.sync_grads(model)                          # gradients summed over the ranks
        opt.step()
    acc = gd.accuracy(model(part.x, part.edge_index), part.y, part.test_mask)
    gd.write_predictions(part, model(part.x, part.edge_index), "pred")  # Parquet, keyed by your ids

Run it with ``torchrun --nproc-per-node K script.py``. A rank holds every in-edge of the nodes
it owns, so every layer whose output at a node depends only on that node's row and its
in-neighbours' rows sees exactly what it sees on the whole graph once the halo rows are there
(``distribute``); a layer that propagates several times gets the halo again before each
propagation (:mod:`graphdist.gnn.pyg.hops`). Layers that read further in one propagation
(global attention, graph-level norms) are refused (:mod:`graphdist.gnn.pyg.rules`).

    part.py    Part (owned rows, local edge_index, exchanger, the input's ids), load_part
    outputs.py write_predictions: node_id, pred, logits as infer writes them
    rules.py   which layers are local and how each is called; register_local
    wrap.py    distribute, DistConv, GlobalBatchNorm1d
    report.py  summary, halo_layers (mode and why per layer), traffic, set_step, rel_error
    models.py  train-gcn --model: the built-in PyG models, MODULE:CLASS, KeyedDropout
    net.py     PygNet: a distributed PyG model in train-gcn's epoch
    train.py   sync_grads, cross_entropy, accuracy, all_sum, main
    sync.py    reset_parameters re-broadcast, the ranks' weights check, seed
    hops.py    multi-hop layers (halo per propagate), gcn_norm / get_laplacian of the whole graph
    idioms.py  random_split (by global id), normalize_features (the whole graph's)
    splits.py  a split drawn on each part (k times the nodes), said once
    traced.py  the halo exchange under torch.jit.trace (SummaryWriter.add_graph): one opaque op
"""
from graphdist.gnn.models import keyed_dropout
from graphdist.gnn.pyg.models import KeyedDropout
from graphdist.gnn.pyg.outputs import write_predictions
from graphdist.gnn.pyg.part import Part, load_part
from graphdist.gnn.pyg.rules import RULES, LayerRule, register_local
from graphdist.gnn.pyg.train import accuracy, all_sum, cross_entropy, main, nll_loss, sync_grads
from graphdist.gnn.pyg.report import halo_layers, set_step, summary, traffic
from graphdist.gnn.pyg.sync import check_weights, seed
from graphdist.gnn.pyg.idioms import normalize_features, random_split
from graphdist.gnn.pyg.rows import halo_rows
from graphdist.gnn.pyg.wrap import DistConv, GlobalBatchNorm1d, distribute
from graphdist.keyed import key32

__all__ = ["Part", "load_part", "distribute", "DistConv", "GlobalBatchNorm1d", "register_local", "RULES",
           "LayerRule", "sync_grads", "cross_entropy", "nll_loss", "accuracy", "all_sum", "summary", "traffic", "set_step",
           "halo_rows", "halo_layers", "keyed_dropout", "KeyedDropout", "key32", "main", "seed", "check_weights",
           "random_split", "normalize_features", "write_predictions"]
