"""The models of PyG's citation benchmark (GCN, GAT, Cheb, SGC, ARMA, APPNP) and PyG's TAGConv
example, trained on k ranks with graphdist in the benchmark's protocol: ``--runs`` runs, each
starting with ``model.reset_parameters()``, Adam, early stopping on the validation loss, the
test accuracy at the best validation loss. The model classes are written for one device, as
PyG's; the lines marked ``# graphdist`` are all that distributing the script takes.

    torchrun --standalone --nproc-per-node 2 examples/citation.py planetoid:planetoid/Cora --model appnp
    python examples/citation.py planetoid:planetoid/Cora --model appnp      # one process

``--random-splits`` draws the benchmark's random split (20 per class, 500, 1000) per run, by
global node id (the same split on any number of ranks).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn import Linear
from torch_geometric.nn import APPNP, ARMAConv, ChebConv, GATConv, GCNConv, SGConv, TAGConv

import graphdist.gnn.pyg as gd  # graphdist


class GCN(torch.nn.Module):
    def __init__(self, f_in, classes, a):
        super().__init__()
        self.dropout = a.dropout
        self.conv1, self.conv2 = GCNConv(f_in, a.hidden), GCNConv(a.hidden, classes)

    def reset_parameters(self):
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(F.dropout(x, self.dropout, self.training), edge_index))
        return F.log_softmax(self.conv2(F.dropout(x, self.dropout, self.training), edge_index), dim=1)


class GAT(GCN):
    def __init__(self, f_in, classes, a):
        torch.nn.Module.__init__(self)
        self.dropout = a.dropout
        self.conv1 = GATConv(f_in, a.hidden, heads=a.heads, dropout=a.dropout)
        self.conv2 = GATConv(a.hidden * a.heads, classes, heads=1, concat=False, dropout=a.dropout)

    def forward(self, x, edge_index):
        x = F.elu(self.conv1(F.dropout(x, self.dropout, self.training), edge_index))
        return F.log_softmax(self.conv2(F.dropout(x, self.dropout, self.training), edge_index), dim=1)


class Cheb(GCN):
    def __init__(self, f_in, classes, a):
        torch.nn.Module.__init__(self)
        self.dropout = a.dropout
        self.conv1, self.conv2 = ChebConv(f_in, a.hidden, a.K), ChebConv(a.hidden, classes, a.K)


class TAG(GCN):
    def __init__(self, f_in, classes, a):
        torch.nn.Module.__init__(self)
        self.dropout = a.dropout
        self.conv1, self.conv2 = TAGConv(f_in, a.hidden, K=a.K), TAGConv(a.hidden, classes, K=a.K)


class ARMA(GCN):
    def __init__(self, f_in, classes, a):
        torch.nn.Module.__init__(self)
        self.dropout = a.dropout
        self.conv1 = ARMAConv(f_in, a.hidden, a.stacks, 1, shared_weights=True, dropout=a.dropout)
        self.conv2 = ARMAConv(a.hidden, classes, a.stacks, 1, shared_weights=True, dropout=a.dropout, act=lambda x: x)


class SGC(torch.nn.Module):
    def __init__(self, f_in, classes, a):
        super().__init__()
        self.conv = SGConv(f_in, classes, K=a.K)

    def reset_parameters(self):
        self.conv.reset_parameters()

    def forward(self, x, edge_index):
        return F.log_softmax(self.conv(x, edge_index), dim=1)


class APPNPNet(torch.nn.Module):
    def __init__(self, f_in, classes, a):
        super().__init__()
        self.dropout = a.dropout
        self.lin1, self.lin2 = Linear(f_in, a.hidden), Linear(a.hidden, classes)
        self.prop = APPNP(a.K, a.alpha)

    def reset_parameters(self):
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()

    def forward(self, x, edge_index):
        x = F.relu(self.lin1(F.dropout(x, self.dropout, self.training)))
        x = self.lin2(F.dropout(x, self.dropout, self.training))
        return F.log_softmax(self.prop(x, edge_index), dim=1)


MODELS = {"gcn": GCN, "gat": GAT, "cheb": Cheb, "tag": TAG, "arma": ARMA, "sgc": SGC, "appnp": APPNPNet}
DEFAULTS = {  # PyG's benchmark/citation settings (Cora); TAGConv: PyG's examples/tagcn.py
    "gcn": dict(hidden=16), "gat": dict(hidden=8, lr=0.005, dropout=0.6, early_stopping=100),
    "cheb": dict(hidden=16, K=3), "tag": dict(hidden=16, K=3, early_stopping=0), "arma": dict(hidden=16),
    "sgc": dict(K=3, lr=0.2, epochs=100, early_stopping=0), "appnp": dict(hidden=64, K=10),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", nargs="?", default="planetoid:planetoid/Cora")
    p.add_argument("--model", default="appnp", choices=sorted(MODELS))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="run r uses seed + r")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--early-stopping", type=int, default=10)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--K", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--stacks", type=int, default=2)
    p.add_argument("--random-splits", action="store_true")
    p.add_argument("--method", default="metis", help="partitioner for a spec partitioned in-process")
    a = p.parse_args(argv)
    given = {k for k in vars(a) if f"--{k.replace('_', '-')}" in (argv or __import__("sys").argv)}
    for k, v in DEFAULTS[a.model].items():
        if k not in given:
            setattr(a, k, v)
    return a


def main(argv=None):
    a = parse_args(argv)
    part = gd.load_part(a.data, method=a.method)  # graphdist: this rank's part
    x = gd.normalize_features(part.x)  # graphdist: T.NormalizeFeatures of the whole graph
    model = MODELS[a.model](part.num_features, part.num_classes, a)
    gd.distribute(model, part)  # graphdist
    accs = []
    for run in range(a.runs):
        gd.seed(a.seed + run)  # graphdist: torch.manual_seed, one stream per rank
        if a.random_splits:
            gd.random_split(part, 20, 500, 1000, seed=a.seed + run)  # graphdist: by global node id
        model.reset_parameters()
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
        best_val, test_acc, history = float("inf"), 0.0, []
        for epoch in range(1, a.epochs + 1):
            model.train()
            opt.zero_grad()
            out = model(x, part.edge_index)
            gd.cross_entropy(out, part.y, part.train_mask).backward()  # graphdist: the whole graph's loss
            gd.sync_grads(model)  # graphdist
            opt.step()
            model.eval()
            with torch.no_grad():
                out = model(x, part.edge_index)
            val_loss = float(gd.cross_entropy(out, part.y, part.val_mask))  # graphdist
            if val_loss < best_val:
                best_val, test_acc = val_loss, gd.accuracy(out, part.y, part.test_mask)  # graphdist
            history.append(val_loss)
            if a.early_stopping > 0 and epoch > a.epochs // 2:
                if val_loss > torch.tensor(history[-(a.early_stopping + 1):-1]).mean().item():
                    break
        accs.append(test_acc)
        if part.rank == 0:
            print(f"run {run}  seed {a.seed + run}  epochs {epoch}  val loss {best_val:.4f}  test {test_acc:.4f}",
                  flush=True)
    if part.rank == 0:
        t = torch.tensor(accs)
        print(f"{a.model} test accuracy {float(t.mean()):.4f} +- {float(t.std()) if len(accs) > 1 else 0.0:.4f} "
              f"over {a.runs} run(s); {part.world_size} rank(s)", flush=True)


if __name__ == "__main__":
    gd.main(main)  # graphdist: user errors as one line (exit 2)
