"""Every dataset spec kind loads what it should; hand-checkable graphs."""
from __future__ import annotations

import gzip
import subprocess
import sys

import numpy as np
import pytest
import torch

from graphdist.data import Graph, csr_from_coo, load_graph
from tests.conftest import REPO, planetoid


def test_from_edges_csr_layout_is_destination_rows():
    # 0->1, 0->2, 2->1 directed: row 1 holds sources {0, 2}, row 2 holds {0}
    g = Graph.from_edges([0, 0, 2, 2], [1, 2, 1, 1], 3, symmetrize=False)
    assert g.indptr.tolist() == [0, 0, 2, 3]
    assert g.indices.tolist() == [0, 2, 0]
    assert g.num_edges == 3  # duplicate 2->1 removed
    assert g.edge_index.tolist() == [[0, 2, 0], [1, 1, 2]]
    assert g.in_degree().tolist() == [0, 2, 1]
    assert g.out_degree().tolist() == [2, 0, 1]


def test_symmetrize_and_self_loops():
    g = Graph.from_edges([0, 1, 1], [1, 1, 2], 3)
    assert g.num_edges == 4  # 0-1, 1-2 both ways; 1->1 dropped
    assert (g.indices == g.dst_of_edges()).sum() == 0
    g2 = Graph.from_edges([0, 1, 1], [1, 1, 2], 3, self_loops=True)
    assert g2.num_edges == 5


def test_csr_from_coo_rectangular():
    indptr, indices = csr_from_coo(torch.tensor([1, 0, 1]), torch.tensor([7, 3, 5]), 2, num_cols=8)
    assert indptr.tolist() == [0, 1, 3] and indices.tolist() == [3, 5, 7]


def test_pyg_roundtrip_and_fingerprint():
    g = load_graph("sbm:nodes=300,classes=3,avg_degree=6,features=4,seed=1")
    h = Graph.from_pyg(g.to_pyg())
    assert torch.equal(h.indptr, g.indptr) and torch.equal(h.indices, g.indices)
    assert h.fingerprint == g.fingerprint
    assert load_graph("sbm:nodes=300,classes=3,avg_degree=6,features=4,seed=2").fingerprint != g.fingerprint


def test_sbm_shape_and_homophily():
    g = load_graph("sbm:nodes=2000,classes=4,avg_degree=10,homophily=0.9,features=8,seed=0")
    assert g.num_nodes == 2000 and g.num_features == 8 and g.num_classes == 4
    assert abs(g.num_edges / g.num_nodes - 10) < 0.5
    src, dst = g.edge_index
    same = (g.y[src] == g.y[dst]).float().mean().item()
    assert 0.85 < same < 0.95
    assert int(g.train_mask.sum() + g.val_mask.sum() + g.test_mask.sum()) == 2000
    assert not (g.train_mask & g.test_mask).any()
    # undirected: A == A^T
    a = g.to_scipy()
    assert (a != a.T).nnz == 0


def test_rmat_properties():
    g = load_graph("rmat:scale=10,edge_factor=8,seed=3")
    assert g.num_nodes == 1024
    a = g.to_scipy()
    assert (a != a.T).nnz == 0 and a.diagonal().sum() == 0
    assert g.num_edges <= 2 * 8 * 1024
    deg = g.in_degree().float()
    assert deg.max() > 8 * deg.mean()  # power-law: hubs far above the mean
    assert load_graph("rmat:scale=10,edge_factor=8,seed=3").fingerprint == g.fingerprint


def test_planetoid_cora(cora_dir):
    g = load_graph(f"planetoid:{cora_dir}")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == (140, 500, 1000)


@pytest.mark.parametrize("name, shape, split", [("CiteSeer", (3327, 9104, 3703, 6), (120, 500, 1000)),
                                                 ("PubMed", (19717, 88648, 500, 3), (60, 500, 1000))])
def test_planetoid_citeseer_pubmed_match_the_card(name, shape, split):
    g = load_graph(f"planetoid:{planetoid(name)}")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == shape
    assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == split


def test_fetch_planetoid_refuses_a_name_the_wheel_lacks():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_planetoid.py"), "--names", "CiteSeer,Cora"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "fetch_planetoid: --names: 'Cora' is not in the wheel; choose from CiteSeer, PubMed"


def test_snap_gnutella(gnutella):
    g = load_graph(f"edgelist:{gnutella}")
    assert (g.num_nodes, g.num_edges) == (26518, 130738)
    d = load_graph(f"edgelist:{gnutella},directed=1")
    assert (d.num_nodes, d.num_edges) == (26518, 65369)


def test_snap_facebook(facebook):
    g = load_graph(f"edgelist:{facebook}")
    assert (g.num_nodes, g.num_edges) == (4039, 2 * 88234)


def test_edgelist_remap_comments_crlf_commas(tmp_path):
    f = tmp_path / "g.txt"
    f.write_bytes(b"# header\r\n% other comment\r\n10,30\r\n30\t50\r\n\r\n50 10 0.5\r\n")
    g = load_graph(f"edgelist:{f}")
    # ids 10, 30, 50 -> 0, 1, 2 in ascending order; triangle, both directions
    assert g.num_nodes == 3 and g.num_edges == 6
    assert g.indices[g.indptr[0]:g.indptr[1]].tolist() == [1, 2]
    d = load_graph(f"edgelist:{f},directed=1")
    assert d.edge_index.tolist() == [[2, 0, 1], [0, 1, 2]]  # 50->10, 10->30, 30->50


def test_edgelist_features_labels(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("5 7\n7 9\n")
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
    np.save(tmp_path / "y.npy", np.array([2, 0, 1]))
    g = load_graph(f"edgelist:{f},features={tmp_path / 'x.npy'},labels={tmp_path / 'y.npy'}")
    assert g.x.tolist() == [[0, 1], [2, 3], [4, 5]] and g.y.tolist() == [2, 0, 1]


def test_npz_edge_index_and_csr(tmp_path):
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=np.array([[0, 1, 2], [1, 2, 0]]), x=np.ones((3, 2), np.float32),
             y=np.array([0, 1, 0]), train_mask=np.array([True, False, False]))
    g = load_graph(f"npz:{p}")
    assert g.num_nodes == 3 and g.num_edges == 3 and g.train_mask.tolist() == [True, False, False]
    assert load_graph(f"npz:{p},symmetrize=1").num_edges == 6
    q = tmp_path / "c.npz"
    np.savez(q, indptr=g.indptr.numpy(), indices=g.indices.numpy())
    h = load_graph(f"npz:{q}")
    assert torch.equal(h.indices, g.indices) and torch.equal(h.indptr, g.indptr)


def _gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def _make_ogb(root):
    _gz(root / "raw" / "edge.csv.gz", "0,1\n1,2\n3,0\n")
    _gz(root / "raw" / "num-node-list.csv.gz", "4\n")
    _gz(root / "raw" / "node-feat.csv.gz", "0.5,1\n1,2\n2,3\n3,4.5\n")
    _gz(root / "raw" / "node-label.csv.gz", "1\n0\n2\n1\n")
    for part, ids in (("train", "0\n1\n"), ("valid", "2\n"), ("test", "3\n")):
        _gz(root / "split" / "time" / f"{part}.csv.gz", ids)


def test_ogb_layout(tmp_path):
    root = tmp_path / "ogbn_tiny"
    _make_ogb(root)
    g = load_graph(f"ogb:{root}")
    assert g.num_nodes == 4 and g.num_edges == 6 and g.num_features == 2
    assert g.y.tolist() == [1, 0, 2, 1]
    assert g.train_mask.tolist() == [True, True, False, False] and g.test_mask.tolist() == [False, False, False, True]
    assert load_graph(f"ogb:{root},directed=1").num_edges == 3


def test_data_home_env(tmp_path, monkeypatch):
    (tmp_path / "snapish").mkdir()
    (tmp_path / "snapish" / "e.txt").write_text("0 1\n")
    monkeypatch.setenv("GRAPHDIST_DATA", str(tmp_path))
    assert load_graph("edgelist:snapish/e.txt").num_nodes == 2


def test_the_users_data_home_adds_to_the_repositorys(tmp_path, monkeypatch):
    """``$GRAPHDIST_DATA`` is searched first, then ``<repo>/datasets``: files fetched into the
    repository's data home stay found (they were hidden), and the user's copy of a path wins."""
    from graphdist.errors import MissingFileError
    from graphdist.specs import data_homes, resolve_path
    repo_home = data_homes()[-1]
    mine, other = tmp_path / "mine", tmp_path / "other"
    for d in (mine, other):
        (d / "planetoid").mkdir(parents=True)
    monkeypatch.setenv("GRAPHDIST_DATA", f"{mine}:{other}")
    assert data_homes() == [mine, other, repo_home]
    assert resolve_path("planetoid/README.md", what="card") == repo_home / "planetoid" / "README.md"
    (other / "planetoid" / "README.md").write_text("x")
    assert resolve_path("planetoid/README.md", what="card") == other / "planetoid" / "README.md"
    with pytest.raises(MissingFileError, match=f"data home {mine}, {other}, {repo_home}"):
        resolve_path("planetoid/none.txt", what="file")


@pytest.mark.parametrize("name", ["Cora", "CiteSeer", "PubMed"])
def test_planetoid_reader_equals_pygs_own(name):
    """graphdist reads the Planetoid files itself (no torch_geometric import in a rank): the
    graph PyG's read_planetoid_data gives, feature for feature, label for label, edge for edge."""
    from torch_geometric.io import read_planetoid_data
    root = planetoid(name)
    g = load_graph(f"planetoid:{root}")
    ref = Graph.from_pyg(read_planetoid_data(str(root / "raw"), name.lower()))
    assert torch.equal(g.indptr, ref.indptr) and torch.equal(g.indices, ref.indices)
    for k in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(g, k), getattr(ref, k)), k
    assert g.fingerprint == ref.fingerprint


def test_loading_planetoid_imports_neither_torch_geometric_nor_dynamo(cora_dir):
    code = (f"import sys; from graphdist.data import load_graph; load_graph('planetoid:{cora_dir}'); "
            "print(sorted(m for m in ('torch_geometric', 'torch._dynamo') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr[-2000:])
