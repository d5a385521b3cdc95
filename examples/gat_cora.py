"""PyG's GAT on Cora, trained on k ranks with graphdist. The model is PyG's own example model,
written for one device; the lines marked ``# graphdist`` are all that distributing it takes.

    torchrun --nproc-per-node 2 examples/gat_cora.py planetoid:planetoid/Cora
    python examples/gat_cora.py                        # one process, the same code

DATA is any graph spec (``sbm:...``, ``planetoid:ROOT/NAME``, ...) or a partition artifact
directory written by ``graphdist partition ... --parts K`` (K = the number of ranks).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

import graphdist.gnn.pyg as gd  # graphdist


class GAT(torch.nn.Module):
    def __init__(self, in_channels, hidden, out_channels, heads, dropout):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, hidden, heads, dropout=dropout)
        self.conv2 = GATConv(hidden * heads, out_channels, heads=1, concat=False, dropout=dropout)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", nargs="?", default="planetoid:planetoid/Cora")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dropout", type=float, default=0.6)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", default="metis", help="partitioner for a spec partitioned in-process")
    p.add_argument("--halo", default="plain", choices=["plain", "mvc"])
    p.add_argument("--bits", type=int, default=32, choices=[32, 16, 8, 4, 2])
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--out", default=None, help="write the last epoch's predictions here (Parquet, keyed by the "
                                               "input's node ids, as graphdist infer writes them)")
    return p.parse_args()


def main():
    args = parse_args()
    part = gd.load_part(args.data, method=args.method, seed=args.seed)  # graphdist: this rank's part
    x = part.x / part.x.sum(1, keepdim=True).clamp(min=1)  # row-normalised features
    torch.manual_seed(args.seed)
    model = GAT(part.num_features, args.hidden, part.num_classes, args.heads, args.dropout).to(part.device)
    gd.distribute(model, part, halo=args.halo, bits=args.bits)  # graphdist: wrap the GATConv layers
    torch.manual_seed(1000 * args.seed + part.rank)  # dropout: each rank its own stream
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    best_val, test_at_best = -1.0, 0.0
    for epoch in range(1, args.epochs + 1):
        model.train()
        opt.zero_grad()
        out = model(x, part.edge_index)
        loss = gd.cross_entropy(out, part.y, part.train_mask)  # graphdist: the whole graph's loss
        loss.backward()
        gd.sync_grads(model)  # graphdist: gradients summed over the ranks
        opt.step()
        model.eval()
        with torch.no_grad():
            out = model(x, part.edge_index)
        val = gd.accuracy(out, part.y, part.val_mask)  # graphdist: accuracy over all ranks' nodes
        test = gd.accuracy(out, part.y, part.test_mask)
        if val > best_val:
            best_val, test_at_best = val, test
        if part.rank == 0 and (epoch % args.log_every == 0 or epoch == args.epochs):
            print(f"epoch {epoch:4d}  loss {loss.item():.7f}  val {val:.4f}  test {test:.4f}", flush=True)
    if part.rank == 0:
        modes = ", ".join(f"{n} {v['halo']}" for n, v in gd.summary(model).items())
        print(f"test accuracy {test_at_best:.4f} at the best validation accuracy {best_val:.4f}; "
              f"{part.world_size} rank(s); halo: {modes}", flush=True)
    if args.out:
        gd.write_predictions(part, out, args.out)  # graphdist: every rank its own nodes' rows


if __name__ == "__main__":
    gd.main(main)  # graphdist: user errors as one line (exit 2)
