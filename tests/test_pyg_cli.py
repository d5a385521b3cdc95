"""``train-gcn --model`` with PyG layers: every built-in model through the CLI at k = 2 equals the
k = 1 run (keyed dropout on: graphdist draws the masks), a user's MODULE:CLASS, the per-layer
halo report, quantised halos, resume bit for bit, and bad specs as one line (exit 2)."""
from __future__ import annotations

import json

import pytest
import torch.nn.functional as F
from torch import nn

from graphdist.cli import main
from graphdist.testing import run_ranks
from tests.conftest import once_per_run

SPEC = "sbm:nodes=120,classes=3,avg_degree=5,homophily=0.8,features=6,seed=2"
BASE = ["train-gcn", SPEC, "--hidden", "4", "--epochs", "3", "--no-progress", "--seed", "1"]
MODELS = ("gat", "gatv2", "gin", "gcn2", "sage-max", "transformer")
USER = "tests.test_pyg_cli:TinyNet"


class TinyNet(nn.Module):
    """A user's model as the README documents it: built as cls(in, hidden, out, layers, dropout),
    called as forward(x, edge_index); its dropout is torch's own."""

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__()
        from torch_geometric.nn import GraphConv, SAGEConv
        self.dropout = dropout
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = GraphConv(hidden, out_channels, aggr="max")

    def forward(self, x, edge_index):
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


class NonLocal(TinyNet):
    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__(in_channels, hidden, out_channels, num_layers, dropout)
        from torch_geometric.nn import GraphNorm
        self.norm = GraphNorm(hidden)  # whole-graph statistics


class BadSignature(nn.Module):
    def __init__(self, channels):
        super().__init__()


class WrongShape(TinyNet):
    def forward(self, x, edge_index):
        return super().forward(x, edge_index)[:, :1]


def not_a_class():
    return None


def _argv(model, *extra):
    return BASE + ["--model", model, *extra]


CASES = {m: _argv(m) for m in MODELS}
CASES["gcn2-mvc"] = _argv("gcn2", "--halo", "mvc", "--layers", "3")
CASES["gin-plain"] = _argv("gin", "--halo", "plain", "--dropout", "0")
CASES["user"] = _argv(USER, "--dropout", "0")
K2_ONLY = {  # quantised halos need k >= 2; resume: a run cut after epoch 2, resumed to 4
    "gat-mvc-bits": _argv("gat", "--halo", "mvc", "--halo-bits", "8"),
    "gin-bits": _argv("gin", "--halo-bits", "8", "--eval-halo-bits", "8"),
    "full": _argv("gat", "--epochs", "4", "--checkpoint-every", "2", "--checkpoint-dir", "{root}/full"),
    "cut": _argv("gat", "--epochs", "2", "--checkpoint-every", "2", "--checkpoint-dir", "{root}/cut"),
    "resumed": _argv("gat", "--epochs", "4", "--checkpoint-every", "2", "--checkpoint-dir", "{root}/cut", "--resume"),
}


def _cli_job(rank, ws, cases, root):
    """Each case through ``graphdist.cli.main`` on this rank (as under torchrun); a run destroys
    the process group at its end, so the next one gets a fresh group from its own file store."""
    import torch.distributed as dist
    codes = {}
    for i, (name, argv) in enumerate(cases.items()):
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{root}/store{i}", rank=rank, world_size=ws)
        codes[name] = main([a.format(root=root) for a in argv] + ["--report", f"{root}/{name}-k{ws}.json"])
    dist.init_process_group("gloo", init_method=f"file://{root}/store-api", rank=rank, world_size=ws)
    return codes, _eval_bits_check()


def _eval_bits_check():
    """``distribute(bits=8, eval_bits=32)`` (what --eval-halo-bits 32 asks for): in evaluation
    mode every layer, plain (GAT) or mvc (GIN), gives the 32-bit model's rows bit for bit; in
    training mode the rows are rounded."""
    import copy

    import torch
    from torch_geometric.nn import GATConv, GINConv

    import graphdist.gnn.pyg as gd
    part = gd.load_part(SPEC)
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": GATConv(part.num_features, 4, heads=2), "b": GINConv(nn.Linear(8, 3))})
    ref = copy.deepcopy(model)

    def fwd(m):
        return m["b"](F.elu(m["a"](part.x, part.edge_index)), part.edge_index)
    gd.distribute(model, part, halo="mvc", bits=8, eval_bits=32)
    gd.distribute(ref, part, halo="mvc")
    out = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        ref.train(mode == "train")
        with torch.no_grad():
            out[mode] = (fwd(model), fwd(ref))
    return {"eval_equal": torch.equal(*out["eval"]), "train_equal": torch.equal(*out["train"]),
            "train_close": torch.allclose(*out["train"], atol=0.1),
            "modes": [d["halo"] for d in gd.halo_layers(model)]}


def _report(path):
    return json.loads(open(path).read())


def _close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b))


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """``report(name, k)`` of every case: k = 1 in this process, k = 2 on 2 gloo ranks (once per
    test run, shared by the xdist workers)."""
    root, api = once_per_run(tmp_path_factory, "pyg_cli", _run_cases)
    report = lambda name, k=2: _report(f"{root}/{name}-k{k}.json")  # noqa: E731
    report.api = api
    return report


def _run_cases(folder):
    root = str(folder)
    for name, argv in CASES.items():
        assert main(argv + ["--report", f"{root}/{name}-k1.json"]) == 0, name
    out = run_ranks(_cli_job, 2, args=({**CASES, **K2_ONLY}, root), timeout=420)
    codes = out[0][0]
    assert codes == {name: 0 for name in {**CASES, **K2_ONLY}}, codes
    return root, [o[1] for o in out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_model_at_k2_equals_k1(runs, name):
    one, two = runs(name, 1), runs(name)
    assert one["world_size"] == 1 and two["world_size"] == 2 and two["config"]["model"] == one["config"]["model"]
    assert two["comm/halo_bytes_per_epoch"] > 0 and one["comm/halo_bytes_per_epoch"] == 0
    assert _close(two["losses"], one["losses"]), (one["losses"], two["losses"])  # dropout 0.5 unless 0
    assert two["test_acc"] == one["test_acc"] and two["val_acc"] == one["val_acc"]
    assert [d["layer"] for d in two["halo/layers"]] == [d["layer"] for d in one["halo/layers"]]


def test_the_report_names_each_layers_halo_mode_and_why(runs):
    """mvc only where the aggregation is a fixed linear map; the others fall back to plain."""
    def modes(name):
        return [(d["layer"], d["class"], d["halo"]) for d in runs(name)["halo/layers"]]
    assert modes("gin") == [("convs.0", "GINConv", "mvc"), ("convs.1", "GINConv", "mvc")]  # --halo mvc: the default
    assert modes("gin-plain") == [("convs.0", "GINConv", "plain"), ("convs.1", "GINConv", "plain")]
    assert modes("gcn2-mvc") == [(f"convs.{i}", "GCN2Conv", "mvc") for i in range(3)]
    assert modes("user") == [("conv1", "SAGEConv", "mvc"), ("conv2", "GraphConv", "plain")]
    assert "aggr='max'" in runs("user")["halo/layers"][1]["why"]
    sage = runs("sage-max")["halo/layers"]
    assert [d["halo"] for d in sage] == ["plain", "plain"] and "aggr='max'" in sage[0]["why"]
    gat = runs("gat")["halo/layers"]
    assert [d["halo"] for d in gat] == ["plain", "plain"] and "not a fixed linear map" in gat[0]["why"]
    assert runs("gin-plain")["halo/layers"][0]["why"] == "halo plain asked for"
    assert runs("gin")["comm/halo_bytes_per_epoch"] < runs("gin-plain")["comm/halo_bytes_per_epoch"]


def test_quantised_halos_report_rounding_error_per_layer(runs):
    for name in ("gat-mvc-bits", "gin-bits"):
        rep = runs(name)
        assert (rep["comm/halo_bits"], rep["comm/eval_halo_bits"]) == ((8, 32) if name == "gat-mvc-bits" else (8, 8))
        err = rep["comm/halo_rel_error"]
        assert len(err["forward"]) == 2 and all(e is not None and 0 < e < 0.05 for e in err["forward"]), (name, err)
        assert err["backward"][1] is not None and 0 < err["backward"][1] < 0.05, (name, err)
    exact, rounded = runs("gat"), runs("gat-mvc-bits")
    assert rounded["losses"] != exact["losses"] and abs(rounded["losses"][0] - exact["losses"][0]) < 0.05
    assert exact["comm/halo_rel_error"] is None
    # 8-bit rows in flight (training) against 32-bit ones: fewer bytes
    assert runs("gin-bits")["comm/halo_bytes_per_epoch"] < runs("gin")["comm/halo_bytes_per_epoch"]


def test_eval_bits_give_exact_rows_in_evaluation_mode(runs):
    for check in runs.api:  # each rank
        assert check == {"eval_equal": True, "train_equal": False, "train_close": True, "modes": ["plain", "mvc"]}


def test_resume_of_a_pyg_model_continues_bit_for_bit_at_k2(runs):
    full, cut, resumed = runs("full"), runs("cut"), runs("resumed")
    assert len(cut["losses"]) == 2 and cut["losses"] == full["losses"][:2]
    assert resumed["losses"] == full["losses"] and resumed["val_acc"] == full["val_acc"]  # dropout on (0.5)


def test_resume_with_torch_dropout_and_a_changed_model(tmp_path, capsys):
    """A user's model whose dropout is torch's own resumes exactly too (its generator is seeded
    per epoch); resuming with another --model is refused in one line."""
    d, argv = str(tmp_path), _argv(USER, "--checkpoint-every", "2")
    assert main(argv + ["--epochs", "4", "--checkpoint-dir", f"{d}/full", "--report", f"{d}/full.json"]) == 0
    assert main(argv + ["--epochs", "2", "--checkpoint-dir", f"{d}/cut"]) == 0
    assert main(argv + ["--epochs", "4", "--checkpoint-dir", f"{d}/cut", "--resume", "--report", f"{d}/res.json"]) == 0
    full, res = _report(f"{d}/full.json"), _report(f"{d}/res.json")
    assert res["losses"] == full["losses"] and len(set(full["losses"])) == 4
    capsys.readouterr()
    assert main(_argv("gin", "--epochs", "4", "--checkpoint-dir", f"{d}/cut", "--resume")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--model {USER} -> gin" in err[0], err


BAD = {
    "nosuch": ("--model 'nosuch': choose gcn, sage, gat, gatv2, gin, gcn2, sage-max, transformer or give MODULE:CLASS",
               []),
    "no_such_module_xyz:Net": ("cannot import module 'no_such_module_xyz' (ModuleNotFoundError", []),
    "tests.test_pyg_cli:Missing": ("module 'tests.test_pyg_cli' has no attribute 'Missing'", []),
    "tests.test_pyg_cli:not_a_class": ("not_a_class is not a torch.nn.Module class", []),
    "tests.test_pyg_cli:BadSignature": ("BadSignature must be built as cls(in_channels, hidden, out_channels, "
                                        "num_layers, dropout)", []),
    "tests.test_pyg_cli:NonLocal": ("layer norm (GraphNorm) is not local: it normalises with statistics of the "
                                    "whole graph", []),
    "tests.test_pyg_cli:WrongShape": ("forward(x, edge_index) must return logits [120, 3]", []),
    "gat": ("--batch-norm applies to --model gcn|sage only", ["--batch-norm"]),
    "gin": ("--label-rate applies to --model gcn|sage only", ["--label-rate", "0.5"]),
}


def test_bad_model_specs_are_one_line(capsys):
    for spec, (words, extra) in BAD.items():
        capsys.readouterr()
        assert main(_argv(spec, *extra)) == 2, spec
        err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
        assert len(err) == 1 and words in err[0], (spec, err)


def test_builtin_models_do_not_import_pyg():
    """gcn / sage still run graphdist's own layers: that path does not even import PyG."""
    import subprocess
    import sys
    code = ("import sys; from graphdist.cli import main; "
            f"rc = main({BASE + ['--model', 'sage']!r}); "
            "assert rc == 0; assert 'torch_geometric' not in sys.modules, 'PyG imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_command_checks_a_pyg_model_name_without_importing_pyg():
    """``--model gat`` is checked by name where the command starts (its workers import PyG to
    build the model); the names are the built-in models' own, and a wrong one is still refused."""
    import subprocess
    import sys

    from graphdist.gnn.config import PYG_MODELS
    from graphdist.gnn.pyg.models import BUILTIN
    assert PYG_MODELS == tuple(BUILTIN)
    code = ("import sys; from graphdist.gnn.config import GCNConfig\n"
            "for m in ('gat', 'transformer'): GCNConfig(spec='sbm:', model=m).validate()\n"
            "assert 'torch_geometric' not in sys.modules, 'PyG imported'\n"
            "try:\n    GCNConfig(spec='sbm:', model='gatt').validate()\nexcept Exception as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--model 'gatt': choose gcn, sage, gat, gatv2" in r.stdout, r.stdout
