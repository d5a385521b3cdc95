"""The vectorised text-table reader behind edge lists and rating logs, and generated node data."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from graphdist.data import load_graph
from graphdist.data import table as table_mod
from graphdist.data.table import read_table
from graphdist.errors import ConfigError, DataFormatError, SpecError


def _w(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_separators_comments_crlf_and_extra_columns(tmp_path):
    p = _w(tmp_path, "e.txt", b"# header\n0 1\r\n% note\n1\t2\n\n   3,4\n5 6 0.5\n7;8")
    t = read_table(p, 2)
    assert t.values.tolist() == [[0, 1], [1, 2], [3, 4], [5, 6], [7, 8]]
    assert [t.line_of(i) for i in range(5)] == [2, 4, 6, 7, 8]
    r = read_table(_w(tmp_path, "r.dat", b"1::10::3.5::99\n2::11::4::100\n"), 3, dtype=np.float64)
    assert r.values.tolist() == [[1, 10, 3.5], [2, 11, 4.0]]


@pytest.mark.parametrize("data, line, msg", [
    (b"0 1\n1 x\n", 2, "'x' is not an integer node id"),
    (b"0 1\n\n1 99999999999999999999\n", 3, "node id 99999999999999999999 is out of range"),
    (b"# c\n0 1\n1\n", 3, "expected at least 2 fields, got 1"),
    (b"0 1\n3 4 5\n6\n", 3, "expected at least 2 fields, got 1"),  # a long line cannot cover a short one
    (b"0 1\n1 2.5\n", 2, "'2.5' is not an integer node id"),
])
def test_bad_lines_are_named(tmp_path, data, line, msg):
    p = _w(tmp_path, "bad.txt", data)
    with pytest.raises(DataFormatError, match=rf"bad.txt:{line}: {msg}"):
        read_table(p, 2)


def test_line_numbers_across_blocks_and_gzip(tmp_path, monkeypatch):
    monkeypatch.setattr(table_mod, "BLOCK", 16)  # many tiny blocks
    lines = [f"{i} {i + 1}" for i in range(40)]
    lines[33] = "33 q"
    p = tmp_path / "g.txt.gz"
    with gzip.open(p, "wb") as f:
        f.write(("# top\n" + "\n".join(lines) + "\n").encode())
    with pytest.raises(DataFormatError, match=r"g.txt.gz:35: 'q'"):
        read_table(p, 2)
    lines[33] = "33 34"
    with gzip.open(p, "wb") as f:
        f.write(("# top\n" + "\n".join(lines)).encode())  # no final newline
    t = read_table(p, 2)
    assert t.values.shape == (40, 2) and t.values[-1].tolist() == [39, 40] and t.line_of(39) == 41


def test_negative_id_line_number(tmp_path):
    p = _w(tmp_path, "neg.txt", b"0 1\n2 3\n4 -5\n")
    with pytest.raises(DataFormatError, match=r"neg.txt:3: negative node id -5"):
        load_graph(f"edgelist:{p}")


def test_generated_node_data(tmp_path):
    p = _w(tmp_path, "g.txt", b"0 1\n1 2\n2 0\n2 3\n")
    g = load_graph(f"edgelist:{p},features=degree,labels=random:3")
    assert g.x.shape == (4, 2) and torch.allclose(g.x[3], torch.log1p(torch.tensor([1.0, 1.0])))
    assert int(g.y.max()) < 3 and g.train_mask is not None
    assert int(g.train_mask.sum() + g.val_mask.sum() + g.test_mask.sum()) == 4
    g = load_graph(f"edgelist:{p},features=random:8")
    assert g.x.shape == (4, 8) and g.y is None
    with pytest.raises(SpecError, match="random:F with a positive integer"):
        load_graph(f"edgelist:{p},features=random:0")


def test_training_without_node_data_names_the_option(tmp_path):
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.partition.layout import build_layout
    from graphdist.procgroup import DistContext
    p = _w(tmp_path, "g.txt", b"0 1\n1 2\n")
    g = load_graph(f"edgelist:{p}")
    lg = build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1)
    with pytest.raises(ConfigError, match="features=degree"):
        fit(GCNConfig(spec="x", epochs=1, progress=False), lg, {}, DistContext(0, 1, 0, "none", torch.device("cpu")))
    np.save(tmp_path / "y.npy", np.array([0, 1, 0]))  # the user's labels, but no split
    g = load_graph(f"edgelist:{p},features=degree,labels={tmp_path / 'y.npy'}")
    lg = build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1)
    with pytest.raises(ConfigError, match=r"has labels but no train/val/test split .* add ,train=0.1,val=0.1 to an "
                                          r"edgelist spec with labels=FILE .* an npz with train_mask"):
        fit(GCNConfig(spec="x", epochs=1, progress=False), lg, {}, DistContext(0, 1, 0, "none", torch.device("cpu")))


def test_an_edge_list_with_its_own_labels_gets_a_split_of_the_labelled_nodes(tmp_path):
    """``train=,val=`` draw a seeded random split of the nodes with a label (``-1``: none) from a
    labels file; they need one."""
    body = "".join(f"{i} {(i * 7 + 3) % 40}\n" for i in range(40))
    p = _w(tmp_path, "g.txt", body.encode())
    y = np.arange(40) % 3
    y[::4] = -1  # 10 unlabelled nodes
    np.save(tmp_path / "y.npy", y)
    spec = f"edgelist:{p},features=degree,labels={tmp_path / 'y.npy'},train=0.5,val=0.2"
    g = load_graph(spec)
    tr, va, te = (m.numpy() for m in (g.train_mask, g.val_mask, g.test_mask))
    assert (tr.sum(), va.sum(), te.sum()) == (15, 6, 9) and not (tr & va).any() and not (tr & te).any()
    assert ((tr | va | te) == (y >= 0)).all()
    assert (load_graph(spec).train_mask == g.train_mask).all()
    assert not (load_graph(spec + ",seed=1").train_mask == g.train_mask).all()
    with pytest.raises(SpecError, match=r"train=0.5,val=0 split the labels of a labels=FILE; give one \(a .npy, or a table of node id and label\)"):
        load_graph(f"edgelist:{p},features=degree,labels=random:3,train=0.5")


def test_a_header_line_is_skipped_whole_and_in_shards(tmp_path, monkeypatch):
    """``src,dst`` above numbers is column names, skipped (line numbers kept), also when the file
    is read in shards (the k-worker build: the header may be all of shard 0) and when comments
    fill the first block; words above words, or numbers above words, are still bad lines."""
    from graphdist.data.table import shard
    body = "".join(f"{i},{i + 1}\n" for i in range(10, 30))
    p = _w(tmp_path, "h.csv", ("# made by hand\nsrc,dst,weight\n" + body).encode())
    plain = _w(tmp_path, "p.csv", body.encode())
    t = read_table(p, 2)
    assert t.values.tolist() == read_table(plain, 2).values.tolist() and t.line_of(0) == 3
    for k in range(1, 12):
        parts = [read_table(p, 2, byte_range=shard(p, r, k)[:2]).values for r in range(k)]
        assert np.concatenate(parts).tolist() == t.values.tolist(), k
    monkeypatch.setattr(table_mod, "BLOCK", 8)  # the comment line is a block of its own
    assert read_table(p, 2).values.tolist() == t.values.tolist()
    g = load_graph(f"edgelist:{p}")
    assert g.node_ids.tolist() == list(range(10, 31))
    for data, line, msg in ((b"a b\nc d\n", 1, "'a' is not"), (b"1 2\nx y\n", 2, "'x' is not")):
        with pytest.raises(DataFormatError, match=rf"bad.txt:{line}: {msg}"):
            read_table(_w(tmp_path, "bad.txt", data), 2)


def _reference(data: bytes):
    """An edge list read by hand: the first two fields of every data line, the ids as written
    sorted by their UTF-8 bytes, the undirected edges without self-loops."""
    import re
    edges = []
    lines = data.decode("utf-8").splitlines()
    for ln in lines[1:] if lines[0].startswith("src") else lines:
        f = [t for t in re.split(r"::|[\s,;]+", ln) if t]
        if f and f[0][0] not in "#%":
            edges.append((f[0], f[1]))
    ids = sorted({x for e in edges for x in e}, key=lambda s: s.encode())
    return ids, {(a, b) for u, v in edges if u != v for a, b in ((u, v), (v, u))}


def test_word_ids_are_kept_as_written(tmp_path, monkeypatch, capsys):
    """An edge list whose ids are words (non-ASCII, URLs, one wider than 64 bytes, an integer
    beyond 2^62, zero-padded digits), the first word in a late block: every id as written, in
    UTF-8 order, the edges those of a reading by hand; a header above numbers is still skipped; an
    id that is not UTF-8 is refused naming its line."""
    rng = np.random.default_rng(3)
    words = ["alice", "Bob", "z\u00fcri", "\u6771\u4eac", "https://example.org/p?q=1", "007", "7",
             str(2**63 + 5), "w" * 90, "-3"]
    body = [f"{rng.integers(0, 50)}\t{rng.integers(0, 50)}" for _ in range(60)]
    body += [f"{rng.choice(words)},{rng.integers(0, 50)},0.5\r" for _ in range(20)]
    body += [f"{rng.choice(words)} {rng.choice(words)}" for _ in range(20)] + ["# end", "alice alice"]
    data = ("src,dst\n" + "\n".join(body) + "\n").encode("utf-8")
    p = _w(tmp_path, "w.csv", data)
    ids, edges = _reference(data)
    for block in (table_mod.BLOCK, 64):
        monkeypatch.setattr(table_mod, "BLOCK", block)
        g = load_graph(f"edgelist:{p}")
        assert g.node_ids.tolist() == ids and g.node_ids.dtype.kind == "U"
        src, dst = g.edge_index.numpy()
        assert {(ids[a], ids[b]) for a, b in zip(src, dst)} == edges and g.num_edges == len(edges)
    big = _w(tmp_path, "big.txt", f"1 2\n2 {2**62}\n".encode())
    assert load_graph(f"edgelist:{big}").node_ids.tolist() == ["1", "2", str(2**62)]
    assert "is read as an edge" not in capsys.readouterr().err
    head = _w(tmp_path, "head.csv", b"# people\nsource,target\nalice,bob\nbob,carol\n")
    assert load_graph(f"edgelist:{head}").node_ids.tolist() == ["alice", "bob", "carol", "source", "target"]
    assert ("the first line ('source', 'target') is read as an edge whose two nodes appear nowhere else: "
            "if it names the columns, comment it with #") in capsys.readouterr().err
    bad = _w(tmp_path, "bad.txt", b"alice bob\nbob \xff\xfe\n")
    with pytest.raises(DataFormatError, match=r"bad.txt:2: node id b'\\xff\\xfe' is not UTF-8 text"):
        load_graph(f"edgelist:{bad}")


@pytest.mark.parametrize("data, ids, edges", [
    (b"1 2\n1.5 2\ncarol dave\n", ["1", "1.5", "2", "carol", "dave"], 6),  # a word after a non-integer
    (b"alice bob\ncarol dave\n1.5 2\n", ["1.5", "2", "alice", "bob", "carol", "dave"], 6),
    (b"alice bob\n1 2\nalice 3\nbob 4\n", ["1", "2", "3", "4", "alice", "bob"], 8),  # not a header: alice recurs
    (b"src dst\n1 2\nalice 3\n", ["1", "2", "3", "alice"], 4),  # a header: src, dst nowhere else
])
def test_the_file_decides_words_not_the_order_of_its_lines(tmp_path, capsys, data, ids, edges):
    """Whether ids are read as text is decided by the whole file (a word anywhere), not by which
    bad field comes first; words above numbers are column names only where they appear nowhere
    else; the log says why the ids are text."""
    g = load_graph(f"edgelist:{_w(tmp_path, 'm.txt', data)}")
    assert g.node_ids.tolist() == ids and g.num_edges == edges
    assert "m.txt: node ids kept as the strings written (" in capsys.readouterr().err


def test_word_id_refusals_name_the_line(tmp_path, monkeypatch):
    """Numbers that are not integer ids, with no word anywhere, are refused wherever they are; a
    non-UTF-8 id names the first line it is on (as a destination too); ids too wide to hold are
    refused before they are made, with the numbers."""
    from graphdist import memory
    for data, msg in ((b"1 2\n1.5 2\n", r"m.txt:2: '1.5' is not an integer node id"),
                      (b"1 2\n3 4\n5 nan\n", r"m.txt:3: 'nan' is not an integer node id"),
                      (b"a \xff\nc d\n\xff e\n", r"m.txt:1: node id b'\\xff' is not UTF-8 text")):
        with pytest.raises(DataFormatError, match=msg):
            load_graph(f"edgelist:{_w(tmp_path, 'm.txt', data)}")
    long = _w(tmp_path, "m.txt", b"a b\nb c\n" + b"x" * 5000 + b" a\n")
    assert load_graph(f"edgelist:{long}").num_nodes == 4
    monkeypatch.setattr(memory, "available_bytes", lambda: 10_000)
    with pytest.raises(DataFormatError, match=r"m.txt:3: an id of 5,000 bytes: ids are held as wide as the longest, "
                                              r"so 6 ids need about 0.0 GiB, more than the 0.0 GiB available"):
        load_graph(f"edgelist:{long}")


def test_unique_bytes_is_numpys_unique(monkeypatch):
    """The hash-first unique of bytes ids gives numpy's ``unique(return_inverse=True)`` exactly
    (widths of one to three 8-byte words, non-ASCII, a prefix of another id), and falls back to it
    where two ids share a hash."""
    from graphdist import ids
    rng = np.random.default_rng(4)
    for w in (3, 8, 12, 24):
        alphabet = np.array(list(b"ab\xc3\xbc7_/"), dtype=np.uint8)
        raw = alphabet[rng.integers(0, alphabet.size, (40_000, w))]
        raw[rng.random((40_000, w)) < 0.2] = 0  # shorter ids: trailing bytes cut
        raw[:, 0] = alphabet[rng.integers(0, alphabet.size, 40_000)]
        tokens = np.ascontiguousarray(raw).view(f"S{w}").reshape(-1)
        want_u, want_inv = np.unique(tokens, return_inverse=True)
        got_u, got_inv = ids.unique_bytes(tokens)
        assert got_u.tolist() == want_u.tolist() and got_inv.tolist() == want_inv.reshape(-1).tolist(), w
    monkeypatch.setattr(ids, "word_hash", lambda t: np.zeros(t.size, dtype=np.uint64))  # every id collides
    got_u, got_inv = ids.unique_bytes(tokens)
    assert got_u.tolist() == want_u.tolist() and got_inv.tolist() == want_inv.reshape(-1).tolist()
