"""``graphdist plan --model`` for PyG models against real k = 2 runs: the halo exchanges per
forward of each layer and the halo bytes per epoch that ``plan`` predicts (built before any
communication: the model probed in one process) equal what ``train-gcn`` at k = 2 reports
(``halo/layers[i].exchanges``, ``comm/halo_bytes_per_epoch``), for multi-hop layers (APPNP's 10
propagations pre-aggregated under mvc at 8 bits, TAGConv's 3 per layer exchanged plain,
ChebConv's K - 1 with the whole graph's Laplacian) and a built-in model (one exchange per layer)."""
from __future__ import annotations

import json

import pytest
import torch.nn.functional as F
from torch import nn

from graphdist.cli import main
from graphdist.gnn.plan import PlanConfig, plan
from tests.cli_ranks import run_cli
from tests.conftest import once_per_run

SPEC = "sbm:nodes=60,classes=3,avg_degree=4,homophily=0.8,features=5,seed=3"
APPNP = "graphdist.gnn.pyg.models:APPNPNet"
TAG = "graphdist.gnn.pyg.models:TAGNet"
CHEB = "tests.test_pyg_plan:ChebNet"


class ChebNet(nn.Module):
    """PyG's citation Cheb model: ChebConv(K=3) (2 propagations, the whole graph's Laplacian),
    ReLU, ChebConv(K=2) (1 propagation)."""

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__()
        from torch_geometric.nn import ChebConv
        self.dropout = dropout
        self.c1, self.c2 = ChebConv(in_channels, hidden, K=3), ChebConv(hidden, out_channels, K=2)

    def forward(self, x, edge_index):
        h = F.relu(self.c1(F.dropout(x, self.dropout, self.training), edge_index))
        return self.c2(F.dropout(h, self.dropout, self.training), edge_index)


CASES = {  # name: (model, extra flags, exchanges per layer)
    "appnp-mvc-8bit": (APPNP, ["--halo", "mvc", "--halo-bits", "8", "--eval-halo-bits", "16"], [10]),
    "tag-mvc": (TAG, ["--halo", "mvc"], [3, 3]),
    "cheb": (CHEB, ["--halo", "plain"], [2, 1]),
    "gat": ("gat", ["--halo", "mvc"], [1, 1]),
}
FLAGS = ["--hidden", "4", "--layers", "2", "--seed", "1"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """One epoch of every case at k = 2 on one partition artifact: ``(artifact, {name: report})``
    (once per test run, shared by the xdist workers)."""
    return once_per_run(tmp_path_factory, "pyg_plan_runs", _train)


def _train(root):
    art = root / "parts"
    assert main(["partition", SPEC, "--parts", "2", "--method", "metis", "--out", str(art)]) == 0
    argvs = [["train-gcn", "--partition", str(art), "--model", model, *extra, *FLAGS, "--epochs", "1",
              "--no-progress", "--report", str(root / f"{name}.json")] for name, (model, extra, _) in CASES.items()]
    for code, printed in run_cli(argvs, world_size=2):
        assert code == 0, printed
    return art, {name: json.loads((root / f"{name}.json").read_text()) for name in CASES}


def _config(art, model, extra) -> PlanConfig:
    fields = {"model": model, "hidden": 4, "layers": 2, "seed": 1}
    for flag, value in zip(extra[::2], extra[1::2]):
        name = flag[2:].replace("-", "_")
        fields[name] = int(value) if value.isdigit() else value
    return PlanConfig(partition=str(art), **fields)


@pytest.mark.parametrize("name", list(CASES))
def test_plan_counts_the_exchanges_and_bytes_of_a_real_run(runs, name):
    art, reports = runs
    model, extra, per_layer = CASES[name]
    rep, got = reports[name], plan(_config(art, model, extra))
    assert [d["exchanges"] for d in rep["halo/layers"]] == per_layer  # the run's own count
    assert [d["exchanges"] for d in got["halo/layers"]] == per_layer
    assert [d["halo"] for d in got["halo/layers"]] == [d["halo"] for d in rep["halo/layers"]]
    assert got["comm/halo_exchanges_per_forward"] == sum(per_layer)
    assert rep["comm/halo_bytes_per_epoch"] > 0
    assert got["comm/halo_bytes_per_epoch"] == rep["comm/halo_bytes_per_epoch"]
    assert sum(r["halo_bytes_sent_per_epoch"] for r in got["ranks"]) == got["comm/halo_bytes_per_epoch"]
    assert sum(r["halo_bytes_received_per_epoch"] for r in got["ranks"]) == got["comm/halo_bytes_per_epoch"]
    assert got["mem/peak_bytes"] is None and got["fits"] is None and "not modelled" in got["plan/not_modelled"]


def test_the_text_report_says_what_is_not_modelled(runs, capsys):
    art, _ = runs
    assert main(["plan", "--partition", str(art), "--model", APPNP, *FLAGS, "--halo", "plain"]) == 0
    out = capsys.readouterr().out
    assert "halo exchanges per forward: 10" in out and "prop (APPNP, hops, plain): 10 exchanges" in out
    assert "memory and epoch time are not modelled for a PyG model" in out
    assert main(["plan", "--partition", str(art), "--model", "gat", "--hosts", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--hosts applies to --model gcn|sage only" in err[0]
