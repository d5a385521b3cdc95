"""``edgelist:`` node data keyed by the edge list's own ids (``labels=L.csv``, ``features=F.csv``):
each row lands on its node whatever order the file has, checked against a hand-built lookup on
tiny graphs; bad rows refused in one line naming file, line and id."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from graphdist.data import load_graph
from graphdist.errors import DataFormatError


@pytest.fixture
def words(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("alice bob\nbob carol\ncarol dave\ndave alice\n")
    return p


def _ids(g):
    return [str(i) for i in g.node_ids]


def test_labels_by_word_id_in_any_order_with_a_header_and_missing_nodes(words, tmp_path):
    lab = tmp_path / "labels.csv"
    lab.write_text("node,label\r\n# carol has no label\r\ndave,1\r\nalice,0\r\nbob,2\r\n")
    g = load_graph(f"edgelist:{words},features=degree,labels={lab},train=0.5,val=0")
    by_id = dict(zip(_ids(g), g.y.tolist()))
    assert by_id == {"alice": 0, "bob": 2, "carol": -1, "dave": 1}
    tr, te = g.train_mask.numpy(), g.test_mask.numpy()
    assert tr.sum() == 2 and te.sum() == 1 and not (tr | te)[_ids(g).index("carol")]


def test_labels_by_integer_id_match_as_numbers(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("10 20\n20 30\n30 7\n")
    lab = tmp_path / "y.tsv.gz"
    lab.write_bytes(gzip.compress(b"030\t1\n7\t0\n10\t3\n20\t2\n"))
    g = load_graph(f"edgelist:{p},features=degree,labels={lab},train=0.5,val=0.25")
    assert dict(zip(g.node_ids.tolist(), g.y.tolist())) == {7: 0, 10: 3, 20: 2, 30: 1}


def test_features_by_id(words, tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("id f0 f1\ncarol 3 0.5\nalice 1 0\ndave 4 -1\nbob 2 2.5\n")
    g = load_graph(f"edgelist:{words},features={f},labels=random:2")
    x = dict(zip(_ids(g), g.x.tolist()))
    assert x == {"alice": [1, 0], "bob": [2, 2.5], "carol": [3, 0.5], "dave": [4, -1]}


@pytest.mark.parametrize("text,says", [
    ("alice,0\nbob,1\nzed,1\n", ":3: 1 of its 3 ids are not nodes of g.txt: 'zed'"),
    ("alice,0\nbob,1\nalice,1\n", ":3: node 'alice' has two rows (lines 1 and 3)"),
    ("alice,0\nbob,nan\n", ":2: label 'nan' is not an integer class (0, 1, ...; -1: none)"),
    ("alice,0\nbob,1.5\n", ":2: label '1.5' is not an integer class (0, 1, ...; -1: none)"),
    ("alice,0\nbob,-2\n", ":2: label -2 is not a class (0, 1, ...; -1: none)"),
    ("alice,0\nbob\n", ":2: expected at least 2 fields, got 1: 'bob'"),
    # labels that are class names
    ("alice Rule Learning\nbob Theory\n", ":1: more than 2 fields separated by spaces: a class name is the second "
                                          "field, and one with a space in it needs commas or tabs between the "
                                          "fields ('node,Rule Learning')"),
    ("alice,spam\nzed,ham\n", ":2: 1 of its 2 ids are not nodes of g.txt: 'zed'"),
    ("alice,spam\nbob,ham\nalice,ham\n", ":3: node 'alice' has two rows (lines 1 and 3)"),
    ("alice,spam\nbob\n", ":2: expected at least 2 fields, got 1: 'bob'"),
])
def test_bad_labels_are_refused_naming_the_line(words, tmp_path, text, says):
    lab = tmp_path / "l.csv"
    lab.write_text(text)
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features=degree,labels={lab},train=0.5,val=0")
    assert str(e.value) == f"{lab}{says}"


def test_features_must_cover_every_node(words, tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("alice 1 2\nbob 3 4\n")
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features={f},labels=random:2")
    assert str(e.value) == f"{f}: 2 of the 4 nodes of g.txt have no row of features (first: 'carol', 'dave'): every node needs one"
    f.write_text("alice 1 2\nbob 3\ncarol 1 1\ndave 0 0\n")
    with pytest.raises(DataFormatError, match=r"x.csv:2: expected at least 3 fields, got 2"):
        load_graph(f"edgelist:{words},features={f},labels=random:2")
    f.write_text("alice 1 x\nbob 3 1\ncarol 1 1\ndave 0 0\n")
    with pytest.raises(DataFormatError, match=r"x.csv:1: feature 'x' is not a number"):
        load_graph(f"edgelist:{words},features={f},labels=random:2")


def test_a_missing_feature_value_is_refused_not_trained_to_a_nan_loss(words, tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("alice 1 2\nbob 3 nan\ncarol 1 1\ndave 0 0\n")
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features={f},labels=random:2")
    assert str(e.value) == (f"{f}:2: feature nan of node 'bob' is not a finite number: fill missing values before "
                            "training (a nan trains to a nan loss)")
    x = np.ones((4, 2), dtype=np.float32)
    x[3, 1] = np.inf
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features={tmp_path / 'x.npy'},labels=random:2")
    assert str(e.value) == (f"{tmp_path / 'x.npy'}: row 3 (node 'dave') holds a nan or an infinity: fill missing "
                            "values before training (a nan trains to a nan loss)")


def test_an_npz_with_a_nan_feature_is_refused(tmp_path):
    x = np.zeros((3, 2), dtype=np.float32)
    x[1, 0] = np.nan
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=np.array([[0, 1], [1, 2]]), x=x, y=np.array([0, 1, 0]),
             node_ids=np.array(["a", "b", "c"]))
    with pytest.raises(DataFormatError) as e:
        load_graph(f"npz:{p}")
    assert str(e.value) == (f"{p} (x): row 1 (node 'b') holds a nan or an infinity: fill missing values before "
                            "training (a nan trains to a nan loss)")


# ------------------------------------------------------------------ labels that are class names
def _named(g):
    return {i: (None if c < 0 else str(g.class_names[c])) for i, c in zip(_ids(g), g.y.tolist())}


def test_class_names_are_read_whole_and_numbered_in_sorted_order(words, tmp_path):
    """Names with a space or a quoted comma, a header, a node left out, any row order: each node
    gets its name back through ``class_names[y]``, the classes numbered as ``sorted()`` does."""
    lab = tmp_path / "kinds.csv"
    lab.write_text('node,kind\n# carol: none\ndave,Theory\nalice,"Rule Learning, applied"\r\nbob,Neural Networks\n')
    g = load_graph(f"edgelist:{words},features=degree,labels={lab},train=0.5,val=0")
    assert g.class_names.tolist() == sorted(["Theory", "Rule Learning, applied", "Neural Networks"])
    assert _named(g) == {"alice": "Rule Learning, applied", "bob": "Neural Networks", "carol": None, "dave": "Theory"}
    assert g.num_classes == 3 and g.summary()["class_names"] == g.class_names.tolist()


def test_a_name_on_the_first_line_is_data_and_a_number_among_names_is_a_name(words, tmp_path):
    lab = tmp_path / "l.tsv"
    lab.write_text("alice\tspam\nbob\t3\n")  # no column names: alice is a node
    g = load_graph(f"edgelist:{words},features=degree,labels={lab}")
    assert _named(g) == {"alice": "spam", "bob": "3", "carol": None, "dave": None}
    lab.write_text("alice spam\n")  # one row of data, spaces between the fields
    assert _named(load_graph(f"edgelist:{words},features=degree,labels={lab}"))["alice"] == "spam"


def test_integer_labels_keep_their_numbers_and_no_names(words, tmp_path):
    lab = tmp_path / "l.csv"
    lab.write_text("node,label\nalice,2\nbob,0\n")
    g = load_graph(f"edgelist:{words},features=degree,labels={lab}")
    assert g.class_names is None and dict(zip(_ids(g), g.y.tolist()))["alice"] == 2


def test_names_in_a_npy_and_an_npz_and_fractions_refused(words, tmp_path):
    ids = ["alice", "bob", "carol", "dave"]  # the loader's order (sorted)
    np.save(tmp_path / "y.npy", np.array(["b", "a", "", "c"]))  # carol: no label
    g = load_graph(f"edgelist:{words},features=degree,labels={tmp_path / 'y.npy'}")
    assert g.class_names.tolist() == ["a", "b", "c"] and g.y.tolist() == [1, 0, -1, 2] and _ids(g) == ids
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=np.array([[0, 1], [1, 2]]), x=np.eye(3, dtype=np.float32), y=np.array([b"z", b"y", b"z"]))
    g = load_graph(f"npz:{p}")
    assert g.class_names.tolist() == ["y", "z"] and g.y.tolist() == [1, 0, 1]
    np.save(tmp_path / "y.npy", np.array([0.0, 1.5, 1.0, 0.0]))
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features=degree,labels={tmp_path / 'y.npy'}")
    assert str(e.value) == (f"{tmp_path / 'y.npy'}: label 1.5 of row 1 is not an integer class (0, 1, ...; -1: none) "
                            "or a class name")


def test_an_empty_label_is_no_label_as_pandas_writes_it(words, tmp_path):
    """``df.to_csv()`` of a label column with missing values: integers as ``1.0``, a missing one
    as an empty field; names likewise."""
    lab = tmp_path / "l.csv"
    lab.write_text("node,label\nalice,1.0\nbob,\ncarol,0.0\n")
    g = load_graph(f"edgelist:{words},features=degree,labels={lab}")
    assert g.class_names is None and dict(zip(_ids(g), g.y.tolist())) == {"alice": 1, "bob": -1, "carol": 0, "dave": -1}
    lab.write_text("node,label\nalice,spam\nbob,\ncarol,ham\n")
    assert _named(load_graph(f"edgelist:{words},features=degree,labels={lab}")) == \
        {"alice": "spam", "bob": None, "carol": "ham", "dave": None}
    lab.write_text("node,label\nalice,1\nbob,\ncarol,0.5\n")
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{words},features=degree,labels={lab}")
    assert str(e.value) == f"{lab}:4: label '0.5' is not an integer class (0, 1, ...; -1: none)"


def test_a_features_row_of_a_node_without_edges_is_a_node(words, tmp_path, capsys):
    """A node the edge list cannot hold (no edges) joins the graph from its features row, numbered
    among the others by its id, with no edges; it may have a label; rank 0 says how many."""
    f = tmp_path / "x.csv"
    f.write_text("alice 1\nbob 2\ncarol 3\ndave 4\nbea 5\nzoe 6\n")
    lab = tmp_path / "l.csv"
    lab.write_text("zoe,1\nalice,0\n")
    g = load_graph(f"edgelist:{words},features={f},labels={lab}")
    assert _ids(g) == ["alice", "bea", "bob", "carol", "dave", "zoe"]
    assert dict(zip(_ids(g), g.x[:, 0].tolist())) == {"alice": 1, "bea": 5, "bob": 2, "carol": 3, "dave": 4, "zoe": 6}
    assert dict(zip(_ids(g), g.in_degree().tolist())) == {"alice": 2, "bea": 0, "bob": 2, "carol": 2, "dave": 2, "zoe": 0}
    edges = {(_ids(g)[s], _ids(g)[d]) for s, d in g.edge_index.t().tolist()}
    assert edges == {(a, b) for a, b in [("alice", "bob"), ("bob", "carol"), ("carol", "dave"), ("dave", "alice")]} | \
        {(b, a) for a, b in [("alice", "bob"), ("bob", "carol"), ("carol", "dave"), ("dave", "alice")]}
    assert dict(zip(_ids(g), g.y.tolist()))["zoe"] == 1
    assert "x.csv: 2 node(s) without edges in g.txt (first: 'bea', 'zoe')" in capsys.readouterr().err
    p = tmp_path / "n.txt"
    p.write_text("10 20\n20 30\n")
    (tmp_path / "xn.csv").write_text("10 1\n20 2\n30 3\n007 4\n")  # integer ids: 007 is the node 7
    g = load_graph(f"edgelist:{p},features={tmp_path / 'xn.csv'}")
    assert g.node_ids.tolist() == [7, 10, 20, 30] and g.x[:, 0].tolist() == [4, 1, 2, 3]


def test_pandas_numbered_column_names_are_not_a_node(words, tmp_path):
    """``pd.DataFrame(x, index=ids).to_csv(f, index_label="node")``: a first line ``node,0,1`` is
    column names, not an isolated node 'node' with features 0 and 1."""
    f = tmp_path / "x.csv"
    f.write_text("node,0,1\nalice,1,2\nbob,3,4\ncarol,5,6\ndave,7,8\n")
    g = load_graph(f"edgelist:{words},features={f},labels=random:2")
    assert _ids(g) == ["alice", "bob", "carol", "dave"] and g.x.tolist()[0] == [1, 2]


def test_an_edge_lists_unread_columns_are_named(tmp_path, capsys):
    """A weight column (text or Parquet) is not read: said on rank 0, not passed over in silence."""
    p = tmp_path / "w.txt"
    p.write_text("src dst weight\n1 2 0.5\n2 3 2.0\n")
    load_graph(f"edgelist:{p}")
    assert (f"{p}: 1 column(s) past the source and destination (a weight?) not read: the graph is trained "
            "unweighted, each edge once") in capsys.readouterr().err
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3], "w": [0.5, 2.0], "ts": [7, 8]}), tmp_path / "w.parquet")
    load_graph(f"edgelist:{tmp_path / 'w.parquet'}")
    assert "2 column(s) past the source and destination ('w', 'ts') not read" in capsys.readouterr().err
    p.write_text("1 2\n2 3\n")
    load_graph(f"edgelist:{p}")
    assert "not read" not in capsys.readouterr().err
