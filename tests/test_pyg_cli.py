"""``train-gcn --model`` with PyG layers: every built-in model through the CLI at k = 2 equals the
k = 1 run (keyed dropout on: graphdist draws the masks), a user's MODULE:CLASS, the per-layer
halo report, quantised halos, resume bit for bit, and bad specs as one line (exit 2)."""
from __future__ import annotations

import json

import torch.nn.functional as F
from torch import nn

from graphdist.cli import main
from graphdist.testing import run_ranks

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
        from torch_geometric.nn import APPNP
        self.conv2 = APPNP(K=3, alpha=0.1)


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
CASES["gat-mvc-bits"] = _argv("gat", "--halo", "mvc", "--halo-bits", "8")  # k = 2 only
CASES["gin-bits"] = _argv("gin", "--halo-bits", "8", "--eval-halo-bits", "8")  # k = 2 only


def _cli_job(rank, ws, cases, root):
    """Each case through ``graphdist.cli.main`` on this rank (as under torchrun); a run destroys
    the process group at its end, so the next one gets a fresh group from its own file store."""
    import torch.distributed as dist
    codes = {}
    for i, (name, argv) in enumerate(cases.items()):
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{root}/store{i}", rank=rank, world_size=ws)
        codes[name] = main(argv + ["--report", f"{root}/{name}-k{ws}.json"])
    return codes


def _report(path):
    return json.loads(open(path).read())


def _close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b))


def test_every_model_at_k2_equals_k1_and_reports_halo_per_layer(tmp_path):
    root = str(tmp_path)
    for name, argv in CASES.items():
        if "bits" not in name:
            assert main(argv + ["--report", f"{root}/{name}-k1.json"]) == 0, name
    assert set(run_ranks(_cli_job, 2, args=(CASES, root), timeout=300)[0].values()) == {0}
    for name in CASES:
        two = _report(f"{root}/{name}-k2.json")
        assert two["world_size"] == 2 and two["comm/halo_bytes_per_epoch"] > 0, name
        if "bits" in name:
            continue
        one = _report(f"{root}/{name}-k1.json")
        assert one["world_size"] == 1 and two["config"]["model"] == one["config"]["model"]
        assert _close(two["losses"], one["losses"]), (name, one["losses"], two["losses"])
        assert two["test_acc"] == one["test_acc"], name
    # the halo mode each layer ran, and why: mvc only where the aggregation is a fixed linear map
    modes = lambda name: [(d["layer"], d["class"], d["halo"]) for d in _report(f"{root}/{name}-k2.json")["halo/layers"]]  # noqa: E731
    assert modes("gin") == [("convs.0", "GINConv", "mvc"), ("convs.1", "GINConv", "mvc")]  # --halo mvc: the default
    assert modes("gin-plain") == [("convs.0", "GINConv", "plain"), ("convs.1", "GINConv", "plain")]
    assert modes("gcn2-mvc") == [(f"convs.{i}", "GCN2Conv", "mvc") for i in range(3)]
    assert modes("sage-max")[0][2] == "plain" and "aggr='max'" in _report(f"{root}/sage-max-k2.json")["halo/layers"][0]["why"]
    gat = _report(f"{root}/gat-mvc-bits-k2.json")["halo/layers"]
    assert [d["halo"] for d in gat] == ["plain", "plain"] and "not a fixed linear map" in gat[0]["why"]
    assert modes("user") == [("conv1", "SAGEConv", "mvc"), ("conv2", "GraphConv", "plain")]
    assert _report(f"{root}/gin-k2.json")["comm/halo_bytes_per_epoch"] < \
        _report(f"{root}/gin-plain-k2.json")["comm/halo_bytes_per_epoch"]
    # quantised halos: per-layer rounding error in both directions, evaluation exact unless asked
    for name in ("gat-mvc-bits", "gin-bits"):
        rep = _report(f"{root}/{name}-k2.json")
        err = rep["comm/halo_rel_error"]
        assert len(err["forward"]) == 2 and all(0 < e < 0.05 for e in err["forward"]), (name, err)
        assert err["backward"][1] is not None and 0 < err["backward"][1] < 0.05, (name, err)
    exact = _report(f"{root}/gat-k2.json")
    assert _report(f"{root}/gat-mvc-bits-k2.json")["losses"] != exact["losses"]
    assert abs(_report(f"{root}/gat-mvc-bits-k2.json")["losses"][0] - exact["losses"][0]) < 0.05
    assert exact["comm/halo_rel_error"] is None


def _resume_job(rank, ws, root):
    import torch.distributed as dist
    runs = {"full": ["--epochs", "4", "--checkpoint-dir", f"{root}/full"],
            "cut": ["--epochs", "2", "--checkpoint-dir", f"{root}/cut"],
            "resumed": ["--epochs", "4", "--checkpoint-dir", f"{root}/cut", "--resume"]}
    out = {}
    for i, (name, extra) in enumerate(runs.items()):
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{root}/store{i}", rank=rank, world_size=ws)
        code = main(BASE + ["--model", "gat", "--checkpoint-every", "2", *extra, "--report", f"{root}/{name}.json"])
        out[name] = code
    return out


def test_resume_of_a_pyg_model_continues_bit_for_bit_at_k2(tmp_path):
    root = str(tmp_path)
    assert set(run_ranks(_resume_job, 2, args=(root,), timeout=240)[0].values()) == {0}
    full, cut, resumed = (_report(f"{root}/{n}.json") for n in ("full", "cut", "resumed"))
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
    "tests.test_pyg_cli:NonLocal": ("layer conv2 (APPNP) is not local: it propagates K hops", []),
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
