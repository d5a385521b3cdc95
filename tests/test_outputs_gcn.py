"""graphdist infer / export of train-gcn checkpoints (issue 45): the input's ids survive, k = 2
equals one process within 1e-5 (built-in and a user's PyG model), the exported PyG model
reproduces infer's logits in a fresh process that never imports graphdist, refusals in one line."""
from __future__ import annotations

import glob
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.cli_ranks import run_cli
from tests.conftest import once_per_run, planetoid

pq = pytest.importorskip("pyarrow.parquet")

SBM = "sbm:nodes=300,classes=3,avg_degree=6,homophily=0.8,features=6,seed=2"
USER = "tests.test_outputs_gcn:UserNet"


class UserNet(nn.Module):
    """A user's PyG model: cls(in, hidden, out, layers, dropout), forward(x, edge_index)."""

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__()
        from torch_geometric.nn import GCNConv, SAGEConv
        self.dropout = dropout
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, out_channels)

    def forward(self, x, edge_index):
        h = F.relu(self.conv1(F.dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(h, edge_index)


def table(out) -> dict:
    """An output folder as numpy arrays sorted by node_id."""
    t = pq.read_table(sorted(glob.glob(f"{out}/*.parquet"))).to_pydict()
    o = np.argsort(t["node_id"], kind="stable")
    return {k: np.asarray(v)[o] for k, v in t.items()}


def _ok(runs):
    for code, text in runs:
        assert code == 0, text
    return runs


def _cora(root):
    from tests.conftest import shared_file
    spec = f"planetoid:{shared_file('planetoid', 'Cora')}"
    ck = str(root / "ck")
    _ok(run_cli([["train-gcn", spec, "--epochs", "4", "--row-normalize", "--checkpoint-dir", ck, "--no-progress"],
                 ["infer", spec, "--checkpoint-dir", ck, "--out", str(root / "k2")],
                 ["infer", spec, "--checkpoint-dir", ck, "--out", str(root / "k2r4"), "--halo-rounds", "4",
                  "--report", str(root / "k2r4.json")]], world_size=2))
    _ok(run_cli([["infer", spec, "--checkpoint-dir", ck, "--out", str(root / "k1")],
                 ["export", "--checkpoint-dir", ck, "--out", str(root / "exp")]], world_size=1))
    return str(root)


def _user(root):
    ck = str(root / "ck")
    _ok(run_cli([["train-gcn", SBM, "--model", USER, "--epochs", "3", "--checkpoint-dir", ck, "--no-progress"],
                 ["infer", SBM, "--checkpoint-dir", ck, "--out", str(root / "k2"), "--layer", "1"]], world_size=2))
    _ok(run_cli([["infer", SBM, "--checkpoint-dir", ck, "--out", str(root / "k1"), "--layer", "1"],
                 ["export", "--checkpoint-dir", ck, "--out", str(root / "exp")]], world_size=1))
    return str(root)


@pytest.fixture
def cora_run(tmp_path_factory, cora_dir):
    from pathlib import Path
    return Path(once_per_run(tmp_path_factory, "outputs-cora", _cora))


def test_infer_k2_equals_one_process_and_reads_back_in_duckdb(cora_run):
    a, b = table(cora_run / "k2"), table(cora_run / "k1")
    assert a["node_id"].tolist() == list(range(2708)) == b["node_id"].tolist()  # Planetoid index
    assert np.abs(a["logits"] - b["logits"]).max() < 1e-5
    assert np.abs(a["embedding"] - b["embedding"]).max() < 1e-5 and a["embedding"].shape == (2708, 16)
    assert (a["pred"] == a["logits"].argmax(1)).all()
    r = table(cora_run / "k2r4")  # the halo rows in 4 all-to-alls of a slice each: the same outputs
    assert json.loads((cora_run / "k2r4.json").read_text())["comm/halo_rounds"] == 4
    assert np.abs(r["logits"] - b["logits"]).max() < 1e-5 and np.abs(r["embedding"] - b["embedding"]).max() < 1e-5
    man = json.loads((cora_run / "k2" / "_manifest.json").read_text())
    assert man["rows"] == 2708 and [p["file"] for p in man["parts"]] == ["part-00000.parquet", "part-00001.parquet"]
    assert man["columns"] == {"node_id": "int64", "pred": "int64", "logits": "list<float32>[7]",
                              "embedding": "list<float32>[16]"}
    import duckdb
    n, classes, top = duckdb.sql(f"SELECT count(*), count(DISTINCT pred), max(node_id) "
                                 f"FROM '{cora_run}/k2/*.parquet'").fetchall()[0]
    assert (n, top) == (2708, 2707) and classes > 1
    row = duckdb.sql(f"SELECT logits FROM '{cora_run}/k2/*.parquet' WHERE node_id = 5").fetchall()[0][0]
    assert np.allclose(row, a["logits"][5])


FRESH = """
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import model
from torch_geometric.io import read_planetoid_data
data = read_planetoid_data(sys.argv[2], sys.argv[3])
with torch.no_grad():
    out = model.build()(data.x, data.edge_index)
np.save(sys.argv[4], out.numpy())
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("graphdist", "partitioners", "embeddings"))))
"""


def _fresh(exp, root, name, tmp_path):
    """The exported model's logits on the raw Planetoid files, in a process without graphdist."""
    r = subprocess.run([sys.executable, "-c", FRESH, str(exp), str(root / "raw"), name.lower(),
                        str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []  # graphdist never imported
    return np.load(tmp_path / "out.npy")


def test_exported_model_in_fresh_process_reproduces_infer_cora(cora_run, cora_dir, tmp_path):
    spec = json.loads((cora_run / "exp" / "model.json").read_text())
    assert spec["preprocessing"]["row_normalize"] is True and spec["net"]["kind"] == "gcn"
    got = _fresh(cora_run / "exp", cora_dir, "Cora", tmp_path)
    assert np.abs(got - table(cora_run / "k2")["logits"]).max() < 1e-5


def test_other_graph_on_k2_equals_the_exported_model_on_a_graph_that_grew(cora_run, cora_dir, tmp_path):
    """``infer --other-graph``: Cora with 60 new unlabelled nodes (their own features and edges to
    old nodes), predicted on 2 ranks from the Cora checkpoint, equals the exported one-process PyG
    model on the same grown graph; the classes are the training's 7 though the graph has no labels."""
    import importlib.util

    from torch_geometric.io import read_planetoid_data
    data = read_planetoid_data(str(cora_dir / "raw"), "cora")
    rng = np.random.default_rng(11)
    n, new = data.num_nodes, 60
    x = torch.cat([data.x, torch.from_numpy((rng.random((new, data.x.shape[1])) < 0.01).astype(np.float32))])
    links = np.stack([np.arange(n, n + new).repeat(3), rng.integers(0, n + new, 3 * new)])
    links = links[:, links[0] != links[1]]
    ei = np.concatenate([data.edge_index.numpy(), links, links[::-1]], axis=1)
    np.savez(tmp_path / "grown.npz", edge_index=ei, x=x.numpy(), num_nodes=n + new)
    spec, ck = f"npz:{tmp_path / 'grown.npz'}", str(cora_run / "ck")
    _ok(run_cli([["infer", spec, "--checkpoint-dir", ck, "--out", str(tmp_path / "k2"), "--other-graph"]],
                world_size=2))
    got = table(tmp_path / "k2")
    assert got["node_id"].tolist() == list(range(n + new)) and got["logits"].shape == (n + new, 7)
    man = json.loads((tmp_path / "k2" / "_manifest.json").read_text())
    assert man["graph_fingerprint"] != man["fingerprint"]
    spec_ = importlib.util.spec_from_file_location("exported_cora", cora_run / "exp" / "model.py")
    exported = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(exported)
    with torch.no_grad():
        want = exported.build()(x, torch.from_numpy(ei)).numpy()
    assert np.abs(got["logits"] - want).max() < 1e-5


def test_exported_sage_with_batch_norm_reproduces_infer_citeseer(tmp_path):
    root = planetoid("CiteSeer")
    spec, ck = f"planetoid:{root}", str(tmp_path / "ck")
    _ok(run_cli([["train-gcn", spec, "--model", "sage", "--layers", "3", "--batch-norm", "--epochs", "3",
                  "--checkpoint-dir", ck, "--no-progress"],
                 ["infer", spec, "--checkpoint-dir", ck, "--out", str(tmp_path / "k1")],
                 ["export", "--checkpoint-dir", ck, "--out", str(tmp_path / "exp")]], world_size=1))
    a = table(tmp_path / "k1")
    assert a["embedding"].shape[1] == 16  # layer 2 of 3, the last hidden
    got = _fresh(tmp_path / "exp", root, "CiteSeer", tmp_path)
    assert np.abs(got - a["logits"]).max() < 1e-5


def test_user_pyg_model_k2_equals_one_process_and_exports_its_state_dict(tmp_path_factory):
    from pathlib import Path

    from graphdist.data import load_graph
    run = Path(once_per_run(tmp_path_factory, "outputs-user", _user))
    a, b = table(run / "k2"), table(run / "k1")
    assert a["node_id"].tolist() == list(range(300))
    assert np.abs(a["logits"] - b["logits"]).max() < 1e-5 and np.abs(a["embedding"] - b["embedding"]).max() < 1e-5
    spec = json.loads((run / "exp" / "model.json").read_text())
    assert spec["class"] == USER and spec["args"] == {"in_channels": 6, "hidden": 16, "out_channels": 3,
                                                      "num_layers": 2, "dropout": 0.5}
    net = UserNet(6, 16, 3, 2, 0.5)
    net.load_state_dict(torch.load(run / "exp" / "model.pt", weights_only=True), strict=True)
    g = load_graph(SBM)
    with torch.no_grad():  # an independent one-process forward: the user's class, PyG alone
        want = net.eval()(g.x, g.edge_index)
        emb = net.conv1(g.x, g.edge_index)
    assert np.abs(want.numpy() - a["logits"]).max() < 1e-5 and np.abs(emb.numpy() - a["embedding"]).max() < 1e-5
    sys.path.insert(0, str(run / "exp"))
    try:
        import model as exported
        with torch.no_grad():
            assert np.abs(exported.build()(g.x, g.edge_index).numpy() - a["logits"]).max() < 1e-5
    finally:
        sys.path.remove(str(run / "exp"))
        sys.modules.pop("model", None)


def test_halo_rounds_for_a_user_model_are_refused_in_one_line(tmp_path_factory, tmp_path):
    """A user's PyG model exchanges in one round (its layers are its own): --halo-rounds 2 is
    refused on every rank before the forward pass, nothing written."""
    from pathlib import Path
    run = Path(once_per_run(tmp_path_factory, "outputs-user", _user))
    (code, text), = run_cli([["infer", SBM, "--checkpoint-dir", str(run / "ck"), "--out", str(tmp_path / "o"),
                              "--halo-rounds", "2"]], world_size=2)
    lines = [ln for ln in text.splitlines() if "error" in ln]
    assert code == 2 and len(lines) == 1 and "Traceback" not in text, text
    assert "--halo-rounds applies to --model gcn|sage only" in lines[0] and USER in lines[0], lines[0]
    assert not (tmp_path / "o").exists()


WORDS = ["alice", "bob", "z\u00fcri", "\u6771\u4eac", "https://example.org/a?b=1", "42", "007", "x" * 70]


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_edge_list_ids_survive_artifact_and_k2(tmp_path, kind):
    """Non-contiguous ids, or words (non-ASCII, a URL, digit strings, one wider than the
    vectorised reader's 64 bytes): the artifact keeps each part's ids; infer writes them, at
    k = 2 from the artifact as from the file in one process."""
    from graphdist.cli import main
    ids = np.array([7, 1000, 55, 2**40 + 3, 12, 999999, 31, 400]) if kind == "int64" else np.array(WORDS)
    rng = np.random.default_rng(0)
    pairs = {(a.item(), b.item()) for a, b in rng.choice(ids, (30, 2)) if a != b}
    f = tmp_path / "g.txt"
    f.write_text("".join(f"{a} {b}\n" for a, b in sorted(pairs)), encoding="utf-8")
    spec = f"edgelist:{f},features=degree,labels=random:2"
    art, ck = tmp_path / "art", str(tmp_path / "ck")
    assert main(["partition", spec, "--parts", "2", "--out", str(art)]) == 0
    meta = json.loads((art / "meta.json").read_text())
    assert meta["ids"] == {"type": kind, "files": ["ids_00000.npy", "ids_00001.npy"]}
    both = np.concatenate([np.load(art / n) for n in meta["ids"]["files"]])
    assert sorted(both.tolist()) == sorted(set(ids.tolist()) & {x for p in pairs for x in p})
    _ok(run_cli([["train-gcn", "--partition", str(art), "--epochs", "3", "--checkpoint-dir", ck, "--no-progress"],
                 ["infer", "--partition", str(art), "--checkpoint-dir", ck, "--out", str(tmp_path / "k2")]],
                world_size=2))
    _ok(run_cli([["infer", spec, "--checkpoint-dir", ck, "--out", str(tmp_path / "k1")]], world_size=1))
    a, b = table(tmp_path / "k2"), table(tmp_path / "k1")
    assert a["node_id"].tolist() == b["node_id"].tolist() == sorted(both.tolist())
    assert np.abs(a["logits"] - b["logits"]).max() < 1e-5


def test_class_names_come_back_as_pred_and_equal_the_numbered_run(tmp_path):
    """Labels written as class names: infer's ``pred`` is the predicted class's name, the manifest
    and the export name the logits' columns, and the run equals one whose labels are the classes'
    places in ``sorted(names)`` written as integers (the same logits, to the bit)."""
    from graphdist.cli import main
    names = ["Rule Learning", "Theory", "Neural Networks"]
    rng = np.random.default_rng(5)
    g = tmp_path / "g.txt"
    g.write_text("".join(f"n{a} n{b}\n" for a, b in rng.integers(0, 40, (120, 2)) if a != b))
    cls = {f"n{i}": int(c) for i, c in enumerate(rng.integers(0, 3, 40))}
    (tmp_path / "named.csv").write_text("node,kind\n" + "".join(f"{i},{names[c]}\n" for i, c in cls.items()))
    order = sorted(names)
    (tmp_path / "ints.csv").write_text("".join(f"{i},{order.index(names[c])}\n" for i, c in cls.items()))
    runs = []
    for kind in ("named", "ints"):
        spec, ck = f"edgelist:{g},features=degree,labels={tmp_path / kind}.csv,train=0.5,val=0.2", str(tmp_path / f"ck-{kind}")
        runs += [["train-gcn", spec, "--parts", "2", "--epochs", "3", "--checkpoint-dir", ck, "--no-progress"],
                 ["infer", spec, "--checkpoint-dir", ck, "--out", str(tmp_path / f"out-{kind}")]]
    _ok(run_cli(runs, world_size=2))
    a, b = table(tmp_path / "out-named"), table(tmp_path / "out-ints")
    assert a["node_id"].tolist() == b["node_id"].tolist()
    np.testing.assert_array_equal(a["logits"], b["logits"])
    assert a["pred"].tolist() == [order[i] for i in b["pred"]] == [order[i] for i in a["logits"].argmax(1)]
    assert json.loads((tmp_path / "out-named" / "_manifest.json").read_text())["class_names"] == order
    assert "class_names" not in json.loads((tmp_path / "out-ints" / "_manifest.json").read_text())
    assert main(["export", "--checkpoint-dir", str(tmp_path / "ck-named"), "--out", str(tmp_path / "exp")]) == 0
    import importlib.util
    spec = importlib.util.spec_from_file_location("exported_named", tmp_path / "exp" / "model.py")
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    assert exported.CLASS_NAMES == order


def test_npz_node_ids(tmp_path):
    from graphdist.data import load_graph
    f = tmp_path / "g.npz"
    np.savez(f, edge_index=np.array([[0, 1, 2], [1, 2, 0]]), num_nodes=3, node_ids=np.array([30, 10, 20]))
    assert load_graph(f"npz:{f}").node_ids.tolist() == [30, 10, 20]
    assert load_graph(f"npz:{f}").fingerprint == load_graph(f"npz:{f}").fingerprint
    np.savez(f, edge_index=np.array([[0, 1], [1, 2]]), num_nodes=3, node_ids=np.array([1, 1, 2]))
    from graphdist.errors import DataFormatError
    with pytest.raises(DataFormatError, match="node_ids has repeated ids"):
        load_graph(f"npz:{f}")
    for given in (np.array(["b", "\u00e9", "a"]), np.array([b"b", "\u00e9".encode(), b"a"])):
        np.savez(f, edge_index=np.array([[0, 1], [1, 2]]), num_nodes=3, node_ids=given)
        assert load_graph(f"npz:{f}").node_ids.tolist() == ["b", "\u00e9", "a"]


def _one_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("graphdist: error:"), text
    return lines[0]


def test_refusals_name_both_sides(tmp_path_factory, tmp_path):
    from pathlib import Path

    from graphdist.cli import main
    run = Path(once_per_run(tmp_path_factory, "outputs-user", _user))
    ck = str(run / "ck")
    other = SBM.replace("seed=2", "seed=3")  # the same sizes, another graph
    features = SBM.replace("features=6", "features=5")
    codes = run_cli([["infer", other, "--checkpoint-dir", ck, "--out", str(tmp_path / "a")],
                     ["infer", features, "--checkpoint-dir", ck, "--out", str(tmp_path / "b"), "--other-graph"]],
                    world_size=1)
    assert codes[0][0] == 2 and "was trained on a graph with fingerprint" in _one_line(codes[0][1])
    assert ("(another graph); to predict for another graph with the training's features (one that grew, the next "
            "day's), add --other-graph") in _one_line(codes[0][1])
    assert codes[1][0] == 2
    assert "holds model.conv1.lin.weight [16, 6], but 3 classes and 5 features give [16, 5]" in _one_line(codes[1][1])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_builtin_class_count_and_out_refusals(cora_run, tmp_path, capsys):
    from graphdist.cli import main
    ck = str(cora_run / "ck")
    sbm = "sbm:nodes=200,classes=3,features=1432"
    code = run_cli([["infer", sbm, "--checkpoint-dir", ck, "--out", str(tmp_path / "x"), "--other-graph"]],
                   world_size=1)[0]
    assert code[0] == 2
    assert "was trained for 7 classes and 1433 features, but sbm:nodes=200,classes=3,features=1432 has 7 classes " \
           "and 1432 features" in _one_line(code[1])
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["infer", sbm, "--checkpoint-dir", ck, "--out", str(full)]) == 2
    assert main(["infer", sbm, "--checkpoint-dir", ck, "--out", str(afile / "out")]) == 2
    assert main(["export", "--checkpoint-dir", ck, "--out", str(full)]) == 2
    assert main(["infer", sbm, "--checkpoint-dir", str(tmp_path / "none"), "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4
    assert "full: exists and is not empty; add --overwrite" in err[0] and "afile is a file" in err[1]
    assert "exists and is not empty" in err[2] and "none: no such directory" in err[3]
    assert (full / "keep.txt").read_text() == "x"
    assert main(["export", "--checkpoint-dir", ck, "--out", str(full), "--overwrite"]) == 0
    assert sorted(p.name for p in full.iterdir()) == ["model.json", "model.pt", "model.py"]


def test_a_new_graphs_labels_are_renumbered_to_the_trainings_classes_by_name():
    """``--other-graph`` with a ``--label-rate`` model: the new graph numbers its names itself
    (sorted, here without 'ham'), the model knows the training's numbering."""
    from types import SimpleNamespace

    from graphdist.gnn.infer_checks import training_labels
    lg = SimpleNamespace(y=torch.tensor([0, 1, -1, 2, 1]), class_names=["eggs", "spam", "toast"])
    assert training_labels(lg, ["eggs", "ham", "spam"]).tolist() == [0, 2, -1, -1, 2]  # toast: unknown
    assert training_labels(lg, ["eggs", "spam", "toast"]) is lg.y and training_labels(lg, None) is lg.y
