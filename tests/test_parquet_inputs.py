"""Parquet inputs (:mod:`graphdist.data.parquet`): an edge list, its labels and features tables
and a rating log written by pandas/pyarrow read as the same graph (the same fingerprint, ids,
classes, features) as the text files they were written from, which the text readers' own tests
check by hand; bad columns refused in one line naming file, row and column."""
from __future__ import annotations

import numpy as np
import pytest

from graphdist.data import load_graph
from graphdist.errors import DataFormatError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

KINDS = ["Rule Learning", "Theory", "Neural Networks"]


@pytest.fixture
def files(tmp_path):
    """The same graph as text files and as Parquet files (several row groups, the ids of one
    column dictionary-encoded as pandas writes a category)."""
    rng = np.random.default_rng(0)
    names = np.array([f"n{i:02d}" for i in range(40)] + ["z\u00fcri", "https://example.org/a?b=1"])
    e = rng.integers(0, names.size, (150, 2))
    e = e[e[:, 0] != e[:, 1]]
    (tmp_path / "g.txt").write_text("".join(f"{names[a]} {names[b]}\n" for a, b in e), encoding="utf-8")
    src = pa.DictionaryArray.from_arrays(pa.array(e[:, 0], pa.int32()), pa.array(names))
    pq.write_table(pa.table({"src": src, "dst": pa.array(names[e[:, 1]]), "w": rng.random(len(e))}),
                   tmp_path / "g.parquet", row_group_size=40)
    nodes = np.unique(names[e])
    has = rng.random(nodes.size) < 0.8
    lab = np.array(KINDS)[rng.integers(0, 3, nodes.size)]
    (tmp_path / "y.csv").write_text("node,kind\n" + "".join(f"{n},{k}\n" for n, k, h in zip(nodes, lab, has) if h))
    pq.write_table(pa.table({"node": nodes, "kind": pa.array([k if h else None for k, h in zip(lab, has)])}),
                   tmp_path / "y.parquet")
    x = rng.standard_normal((nodes.size, 3)).round(4)
    (tmp_path / "x.csv").write_text("".join(f"{n}," + ",".join(map(str, r)) + "\n" for n, r in zip(nodes, x)))
    order = rng.permutation(nodes.size)
    pq.write_table(pa.table({"node": nodes[order], "a": x[order, 0], "b": x[order, 1], "c": x[order, 2]}),
                   tmp_path / "x.parquet")
    return tmp_path


def test_a_parquet_graph_is_the_text_graph(files):
    d = files
    opts = ",labels={d}/y.{s},features={d}/x.{s},train=0.5,val=0.2"
    text = load_graph(f"edgelist:{d / 'g.txt'}" + opts.format(d=d, s="csv"))
    par = load_graph(f"edgelist:{d / 'g.parquet'}" + opts.format(d=d, s="parquet"))
    assert par.fingerprint == text.fingerprint
    assert par.node_ids.tolist() == text.node_ids.tolist()
    assert par.class_names.tolist() == text.class_names.tolist() == sorted(KINDS)
    assert par.y.tolist() == text.y.tolist() and (par.y == -1).any()
    np.testing.assert_array_equal(par.x.numpy(), text.x.numpy())


def test_features_from_an_outputs_list_column_and_integer_ids(tmp_path):
    """An ``infer`` output's ``embedding`` (a fixed-size list column keyed by ``node_id``) reads
    back as features; integer ids stay integers, and ids of 2^62 or more are kept as strings, as
    the text reader keeps them."""
    pq.write_table(pa.table({"s": [30, 7, 1000], "t": [7, 1000, 30]}), tmp_path / "g.parquet")
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 2)
    pq.write_table(pa.table({"node_id": [1000, 7, 30], "embedding": emb}), tmp_path / "e.parquet")
    g = load_graph(f"edgelist:{tmp_path / 'g.parquet'},features={tmp_path / 'e.parquet'},labels=random:2")
    assert g.node_ids.tolist() == [7, 30, 1000]
    assert g.x.tolist() == [[2, 3], [4, 5], [0, 1]]
    big = 2**62 + 1
    pq.write_table(pa.table({"s": [big, 7], "t": [7, 8]}), tmp_path / "b.parquet")
    (tmp_path / "b.txt").write_text(f"{big} 7\n7 8\n")
    a, b = (load_graph(f"edgelist:{tmp_path / n}") for n in ("b.parquet", "b.txt"))
    assert a.node_ids.tolist() == b.node_ids.tolist() == sorted([str(big), "7", "8"])


def test_a_parquet_rating_log_is_the_csv_one(tmp_path):
    """user, item, rating, and a Parquet timestamp (microseconds) for the temporal split."""
    from graphdist.rec.data import load_ratings
    rng = np.random.default_rng(1)
    n = 400
    u, i = rng.integers(1, 30, n), rng.integers(1, 50, n)
    r, t = rng.integers(1, 6, n), rng.permutation(n) + 1_100_000_000
    (tmp_path / "r.csv").write_text("userId,movieId,rating,timestamp\n" +
                                    "".join(f"{a},{b},{c},{s}\n" for a, b, c, s in zip(u, i, r, t)))
    ts = pa.array(t * 1_000_000, pa.timestamp("us"))
    pq.write_table(pa.table({"userId": [f"{v}" for v in u], "movieId": i, "rating": r.astype(float), "ts": ts}),
                   tmp_path / "r.parquet")
    a = load_ratings(f"ratings:{tmp_path / 'r.parquet'},split=temporal,min_rating=3")
    b = load_ratings(f"ratings:{tmp_path / 'r.csv'},split=temporal,min_rating=3")
    assert a.item_ids.tolist() == b.item_ids.tolist()
    assert a.user_ids.tolist() == b.user_ids.tolist()  # a string column of integers: integers, as in text
    assert a.graph.fingerprint == b.graph.fingerprint
    assert a.train.shape == b.train.shape and a.test.shape == b.test.shape
    assert a.test.tolist() == b.test.tolist() and a.train.tolist() == b.train.tolist()


@pytest.mark.parametrize("table,says", [
    ({"node": ["n00", None], "a": [1.0, 2.0]}, "row 1: column 'node' is null (a node id is needed)"),
    ({"node": ["n00", "n01"], "a": [1.0, None]}, "row 1: feature 'a' of node 'n01' is null: fill missing values "
                                                 "before training (a nan trains to a nan loss)"),
    ({"node": ["n00", "n01"], "a": [1.0, float("nan")]}, "row 1: feature nan of node 'n01' is not a finite "
                                                         "number: fill missing values before training (a nan "
                                                         "trains to a nan loss)"),
    ({"node": ["n00", "zed"], "a": [1.0, 2.0]}, "1 of the 3 nodes of g.parquet have no row of features (first: "
                                                "'n01'): every node needs one"),  # zed: a node without edges
    ({"node": ["n00", "n00"], "a": [1.0, 2.0]}, "row 1: node 'n00' has two rows (0 and 1)"),
    ({"node": ["n00", "n01"], "a": ["x", "y"]}, "column 'a' is string: features are numbers (or one list "
                                                "column of numbers)"),
    ({"node": ["n00", "n01"], "v": [[1.0, 2.0], [3.0]]}, "row 1: column 'v' holds 1 numbers, row 0 holds 2: every "
                                                         "row needs as many"),
])
def test_bad_feature_tables_are_refused_naming_row_and_column(tmp_path, table, says):
    pq.write_table(pa.table({"s": ["n00", "n01"], "t": ["n01", "n00"]}), tmp_path / "g.parquet")
    pq.write_table(pa.table(table), tmp_path / "x.parquet")
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{tmp_path / 'g.parquet'},features={tmp_path / 'x.parquet'}")
    assert str(e.value) == f"{tmp_path / 'x.parquet'}: {says}"


def test_a_cut_parquet_file_and_words_for_integer_nodes_are_refused(tmp_path):
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3]}), tmp_path / "g.parquet")
    whole = (tmp_path / "g.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])  # a download that stopped
    with pytest.raises(DataFormatError, match=r"cut\.parquet: not a readable Parquet file \("):
        load_graph(f"edgelist:{tmp_path / 'cut.parquet'}")
    pq.write_table(pa.table({"node": ["1", "03"], "y": [0, 1]}), tmp_path / "y.parquet")  # numbers as strings
    g = load_graph(f"edgelist:{tmp_path / 'g.parquet'},labels={tmp_path / 'y.parquet'},features=degree")
    assert g.y.tolist() == [0, -1, 1]
    pq.write_table(pa.table({"node": ["1", "two"], "y": [0, 1]}), tmp_path / "y.parquet")
    with pytest.raises(DataFormatError) as e:
        load_graph(f"edgelist:{tmp_path / 'g.parquet'},labels={tmp_path / 'y.parquet'},features=degree")
    assert str(e.value) == f"{tmp_path / 'y.parquet'}: column 'node' holds words but the nodes of g.parquet are integers"


def test_a_nan_label_is_no_label_as_pandas_writes_it(tmp_path):
    """pandas keeps an integer label column with a missing value as float64 with nan."""
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"s": [1, 2, 3], "t": [2, 3, 1]}).to_parquet(tmp_path / "g.parquet")
    pd.DataFrame({"node": [1, 2, 3], "label": [1, None, 0]}).to_parquet(tmp_path / "y.parquet")
    g = load_graph(f"edgelist:{tmp_path / 'g.parquet'},labels={tmp_path / 'y.parquet'},features=degree")
    assert g.y.tolist() == [1, -1, 0] and g.class_names is None
