"""``graphdist partition edgelist:FILE --assignment A --nproc K``: K ranks build the artifact
together, and it is byte for byte the one one process writes from the same assignment."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from graphdist.cli import main
from graphdist.data import load_graph
from graphdist.partition.artifact import read_artifact
from graphdist.partition.parts import load_part
from graphdist.testing import RankFailure, run_ranks

N_IDS = 10_000


def _edge_file(d: Path, seed: int = 0) -> tuple[Path, int]:
    """An edge list as users have them: comments, blank lines, repeated edges, self-loops, ids
    with gaps, no newline at the end. Returns the file and its number of distinct nodes."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(N_IDS, 240, replace=False)
    e = rng.integers(0, 240, (1500, 2))
    e[::50, 1] = e[::50, 0]          # self-loops
    e = np.concatenate([e, e[:40]])  # repeats
    lines = ["# an edge list", ""]
    for i, (u, v) in enumerate(e):
        lines.append(f"{ids[u]}\t{ids[v]}" if i % 3 else f"{ids[u]} {ids[v]}")
        if i % 200 == 0:
            lines.append("# more")
    path = d / "g.txt"
    path.write_text("\n".join(lines))
    return path, int(np.unique(ids[e]).size)


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("build")
    path, n = _edge_file(d)
    rng = np.random.default_rng(1)
    np.save(d / "x.npy", rng.standard_normal((n, 5)))          # float64: the loader casts it
    np.save(d / "x1.npy", rng.standard_normal(n).astype(np.float32))  # one feature, 1-D
    np.save(d / "y.npy", rng.integers(0, 3, n))
    for k in (2, 3, 4):
        np.save(d / f"a{k}.npy", rng.integers(0, k, n))
    ids = load_graph(f"edgelist:{path}").node_ids  # labels keyed by the file's ids, in reverse, a tenth left out
    (d / "y.csv").write_text("node\tlabel\n" + "".join(f"{i}\t{c}\n" for i, c in zip(list(ids)[::-1], rng.integers(0, 3, n))
                                                       if c or i % 10))
    kinds = np.array(["Rule Learning", "Theory", "Neural Networks"])  # class names, read whole
    (d / "yn.csv").write_text("node,label\n" + "".join(f"{i},{kinds[c]}\n" for i, c in zip(list(ids)[::-1], rng.integers(0, 3, n))
                                                      if c or i % 10))
    np.save(d / "yn.npy", kinds[rng.integers(0, 3, n)])
    return d


VARIANTS = [  # (name, spec options)
    ("files", "features={d}/x.npy,labels={d}/y.npy"),
    ("degree-directed", "features=degree,labels={d}/y.npy,directed=true"),
    ("one-feature-loops", "features={d}/x1.npy,self_loops=true"),
    ("bare", ""),
    ("split", "features={d}/x.npy,labels={d}/y.npy,train=0.3,val=0.2,seed=4"),
    ("labels-by-id", "features=degree,labels={d}/y.csv,train=0.3,val=0.2,seed=4"),
    ("names-by-id", "features=degree,labels={d}/yn.csv,train=0.3,val=0.2,seed=4"),
    ("names-npy", "features=degree,labels={d}/yn.npy"),
]
NAMED = ["Neural Networks", "Rule Learning", "Theory"]


def _spec(d: Path, opts: str) -> str:
    return f"edgelist:{d / 'g.txt'}" + (f",{opts.format(d=d)}" if opts else "")


def _build_all(rank, world, d, jobs):
    """On every rank: build each job's artifact in this one process group, with the fingerprint
    streamed in blocks of 97 edges, so rows of every rank interleave across many blocks (the CLI
    test builds with the default block, larger than its graph)."""
    from graphdist.partition import build
    from graphdist.partition.build import build_artifact
    build.BLOCK_EDGES = 97
    from graphdist.partition.tools import PartitionConfig
    return [build_artifact(PartitionConfig(spec=spec, assignment=a, out=out, nproc=world)) for spec, a, out in jobs]


def _same_artifact(one: Path, many: Path) -> None:
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in many.iterdir())
    for name in names:
        if name != "meta.json":
            assert (one / name).read_bytes() == (many / name).read_bytes(), name
    m1, m2 = (json.loads((p / "meta.json").read_text()) for p in (one, many))
    assert m1["time"].pop("written_utc") and m2["time"].pop("written_utc")
    assert m1 == m2
    assert list(m1) == list(m2)  # the same keys in the same order


@pytest.mark.parametrize("k", [2, 4])
def test_k_ranks_write_the_one_process_artifact(graph_dir, tmp_path, k):
    d = graph_dir
    jobs, singles = [], []
    for name, opts in VARIANTS:
        spec, a = _spec(d, opts), str(d / f"a{k}.npy")
        one = tmp_path / f"one-{name}"
        assert main(["partition", spec, "--assignment", a, "--out", str(one)]) == 0
        singles.append(one)
        jobs.append((spec, a, str(tmp_path / f"many-{name}")))
    results = run_ranks(_build_all, k, (d, jobs), timeout=300)
    for (spec, a, out), one in zip(jobs, singles):
        _same_artifact(one, Path(out))
    for (name, _), one in zip(VARIANTS, singles):  # the names travel with every part
        assert [load_part(one, r).class_names for r in range(k)] == [NAMED if name.startswith("names") else None] * k
    meta, _ = read_artifact(singles[0])
    for r in results:  # every rank returns the summary
        assert [s["nodes"] for s in r] == [read_artifact(o)[0]["num_nodes"] for o in singles]
        assert r[0]["quality"] == meta["quality"] and r[0]["edges"] == meta["num_edges"]


def test_cli_builds_on_three_workers_and_the_artifact_stands_alone(graph_dir, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("g.txt", "x.npy", "y.npy", "a3.npy"):
        (src / name).write_bytes((graph_dir / name).read_bytes())
    spec = f"edgelist:{src / 'g.txt'},features={src / 'x.npy'},labels={src / 'y.npy'}"
    out, one = tmp_path / "p3", tmp_path / "one"
    assert main(["partition", spec, "--assignment", str(src / "a3.npy"), "--nproc", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert main(["partition", spec, "--assignment", str(src / "a3.npy"), "--out", str(one)]) == 0
    _same_artifact(one, out)
    meta, _ = read_artifact(out)
    assert f"({meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges)" in text
    assert "on 3 workers" in text and f"{meta['quality']['comm_volume']:,}" in text
    peak = re.search(r"peak RSS (\d+\.\d\d) GiB per worker \(max\)", text)
    assert peak and 0.05 < float(peak.group(1)) < 8, text  # a worker holds torch and a tiny graph
    x, y = np.load(src / "x.npy"), np.load(src / "y.npy")
    for p in src.iterdir():  # from now on each rank reads only its part file
        p.unlink()
    capsys.readouterr()
    assert main(["quality", str(out)]) == 0
    assert f"{meta['quality']['comm_volume']:,}" in capsys.readouterr().out
    owned = []
    for r in range(3):
        lg = load_part(out, r)
        ids = lg.owned.numpy()
        np.testing.assert_array_equal(lg.x.numpy(), x[ids].reshape(len(ids), -1).astype(np.float32))
        np.testing.assert_array_equal(lg.y.numpy(), y[ids])
        owned.append(ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(owned)), np.arange(meta["num_nodes"]))


def _fails(args, capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_requests_a_shard_build_cannot_serve(graph_dir, tmp_path, capsys):
    d, out = graph_dir, str(tmp_path / "o")
    base = ["partition", _spec(d, ""), "--nproc", "2", "--out", out]
    assert "add --assignment FILE" in _fails(base, capsys)
    assert "is a sbm spec" in _fails(["partition", "sbm:nodes=50", "--assignment", str(d / "a2.npy"),
                                      "--nproc", "2", "--out", out], capsys)
    gz = d / "g.txt.gz"
    gz.write_bytes(b"")
    assert "cannot be read in shards; gunzip" in _fails(
        ["partition", f"edgelist:{gz}", "--assignment", str(d / "a2.npy"), "--nproc", "2", "--out", out], capsys)
    msg = _fails(["partition", _spec(d, "features=random:8"), "--assignment", str(d / "a2.npy"),
                  "--nproc", "2", "--out", out], capsys)
    assert msg.startswith("graphdist: error: features=random:8") and "features=degree" in msg
    msg = _fails(["partition", _spec(d, "features={d}/y.csv"), "--assignment", str(d / "a2.npy"),
                  "--nproc", "2", "--out", out], capsys)
    assert msg == (f"graphdist: error: features={d}/y.csv: the k-worker build (--nproc) reads features from a .npy "
                   "(memory-mapped, each rank its own rows), not a table keyed by id, which every rank would read "
                   "whole: build without --nproc, or give the features as a .npy in the order of the sorted ids")
    assert "--nproc must be >= 1" in _fails(["partition", _spec(d, ""), "--assignment", str(d / "a2.npy"),
                                             "--nproc", "0", "--out", out], capsys)
    assert not Path(out).exists()


def test_errors_found_by_one_rank_are_reported_by_all(graph_dir, tmp_path, capfd):
    """A bad line in the last rank's shard, and a partition that does not match the world,
    are one line each, with the file's own line number (printed by the workers: capfd)."""
    d = graph_dir
    lines = (d / "g.txt").read_text().split("\n")
    for bad, what in (("12 -5", "negative node id -5"), ("12 5.5", "'5.5' is not an integer node id")):
        broken = list(lines)
        broken[len(lines) - 30] = bad
        f = tmp_path / "bad.txt"
        f.write_text("\n".join(broken))
        msg = _fails(["partition", f"edgelist:{f}", "--assignment", str(d / "a3.npy"), "--nproc", "3",
                      "--out", str(tmp_path / "o")], capfd)
        assert msg == f"graphdist: error: {f}:{len(lines) - 29}: {what}"
    msg = _fails(["partition", _spec(d, ""), "--assignment", str(d / "a3.npy"), "--nproc", "2",
                  "--out", str(tmp_path / "o")], capfd)
    assert "k=3 parts but 2 workers" in msg
    short = tmp_path / "short.npy"
    np.save(short, np.zeros(7, dtype=np.int64))
    with pytest.raises(RankFailure, match="has 7 part ids but the graph has"):
        run_ranks(_build_all, 2, (d, [(_spec(d, ""), str(short), str(tmp_path / "o"))]), timeout=120)
    assert not (tmp_path / "o").exists()
    x = np.load(d / "x.npy")
    row = int(np.flatnonzero(np.load(d / "a3.npy") == 2)[3])
    x[row, 1] = np.nan
    np.save(tmp_path / "xnan.npy", x)
    spec = _spec(d, f"features={tmp_path / 'xnan.npy'},labels={{d}}/y.npy")
    one = _fails(["partition", spec, "--out", str(tmp_path / "o1"), "--parts", "3"], capfd)
    assert main(["partition", spec, "--assignment", str(d / "a3.npy"), "--nproc", "3", "--out", str(tmp_path / "o")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert all(ln.startswith("[rank 0] build: ") for ln in err[:-1]), err  # (the build's own log lines)
    many = err[-1]
    assert one == many and f"xnan.npy: row {row} (node " in one and "holds a nan or an infinity" in one, (one, many)


def test_word_ids_build_the_one_process_artifact_and_errors_reach_every_rank(graph_dir, tmp_path, capfd):
    """Words only in the last rank's shard (the other ranks read numbers first): every rank reads
    again as words and the artifact, its id files included, is the one process's; a non-UTF-8
    id in the last shard is one line with the file's own line number."""
    d = graph_dir
    lines = (d / "g.txt").read_text().split("\n")
    words = ["alice", "z\u00fcri", "\u6771\u4eac", "https://example.org/" + "p" * 80]
    for i, w in enumerate(words):
        lines[len(lines) - 20 + 3 * i] = f"{w}\t{lines[len(lines) - 20 + 3 * i].split()[0]}"
    f = tmp_path / "words.txt"
    f.write_text("\n".join(lines), encoding="utf-8")
    g = load_graph(f"edgelist:{f}")
    n = g.num_nodes
    np.save(tmp_path / "a.npy", np.random.default_rng(5).integers(0, 3, n))
    (tmp_path / "y.tsv").write_text("".join(f"{i}\t{j % 3}\n" for j, i in enumerate(g.node_ids[::-1].tolist())))
    spec, a, one = f"edgelist:{f},features=degree,labels={tmp_path / 'y.tsv'}", str(tmp_path / "a.npy"), tmp_path / "one"
    assert main(["partition", spec, "--assignment", a, "--out", str(one)]) == 0
    # the same words, after a first shard with column names and a number that is no integer id
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("src dst\n" + "\n".join(lines[:5] + ["1.5 7"] + lines[5:]), encoding="utf-8")
    n2 = load_graph(f"edgelist:{mixed}").num_nodes
    np.save(tmp_path / "a2.npy", np.random.default_rng(6).integers(0, 3, n2))
    spec2, a2, one2 = f"edgelist:{mixed},features=degree", str(tmp_path / "a2.npy"), tmp_path / "one2"
    assert main(["partition", spec2, "--assignment", a2, "--out", str(one2)]) == 0
    run_ranks(_build_all, 3, (d, [(spec, a, str(tmp_path / "many")), (spec2, a2, str(tmp_path / "many2"))]),
              timeout=300)
    _same_artifact(one, tmp_path / "many")
    _same_artifact(one2, tmp_path / "many2")
    assert read_artifact(one)[0]["ids"]["type"] == "string"
    got = np.concatenate([np.load(one / f"ids_{r:05d}.npy") for r in range(3)])
    assert set(words) <= set(got.tolist()) and got.size == n
    got2 = set(np.concatenate([np.load(one2 / f"ids_{r:05d}.npy") for r in range(3)]).tolist())
    assert not {"src", "dst"} & got2 and got2 == set(got.tolist()) | {"1.5", "7"} and len(got2) == n2
    bad = tmp_path / "bad.txt"
    bad.write_bytes(f.read_bytes().replace(b"alice", b"al\xffce"))
    capfd.readouterr()
    msg = _fails(["partition", f"edgelist:{bad}", "--assignment", a, "--nproc", "3", "--out", str(tmp_path / "o")],
                 capfd)
    assert msg == f"graphdist: error: {bad}:{len(lines) - 19}: node id b'al\\xffce' is not UTF-8 text"


def test_k_ranks_refuse_what_one_process_refuses_with_the_same_line(graph_dir, tmp_path, capfd):
    """Files whose first problem is in one shard and whose decision needs another: column names
    above numbers with a number that is no integer id (no word in the file: refused), a word
    early and a short line late (text, then the short line), a negative id early and a number
    that is no integer id late (the bad field first, as one process reads then checks)."""
    d = graph_dir
    body = [ln for ln in (d / "g.txt").read_text().split("\n") if ln and not ln.startswith("#")][:60]
    cases = {"header.txt": ["src dst"] + body[:40] + ["2.5 3"] + body[40:],
             "short.txt": body[:2] + ["alice bob"] + body[2:40] + ["7"] + body[40:],
             "neg.txt": body[:3] + ["-4 5"] + body[3:45] + ["2.5 6"] + body[45:]}
    for name, lines in cases.items():
        f = tmp_path / name
        f.write_text("\n".join(lines) + "\n")
        a = str(d / "a3.npy")
        capfd.readouterr()
        one = _fails(["partition", f"edgelist:{f}", "--out", str(tmp_path / "o1"), "--parts", "3"], capfd)
        many = _fails(["partition", f"edgelist:{f}", "--assignment", a, "--nproc", "3", "--out", str(tmp_path / "o")],
                      capfd)
        assert one == many and f"{f}:" in one, (name, one, many)


def test_a_parquet_edge_list_builds_the_one_process_artifact(graph_dir, tmp_path):
    """The edge list and its labels as Parquet, in row groups the 3 workers share unevenly (one
    reads none): integer ids, and the same ids as a string column where only the last row group
    holds words (every rank then reads strings), with labels as class names."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    src, dst = load_graph(f"edgelist:{graph_dir / 'g.txt'},directed=true").edge_index.numpy()
    ids = np.asarray(load_graph(f"edgelist:{graph_dir / 'g.txt'}").node_ids)
    s, t = ids[src], ids[dst]
    pq.write_table(pa.table({"s": s, "t": t}), tmp_path / "ints.parquet", row_group_size=len(s) // 2 + 1)
    words = s.astype(str).astype(object)
    words[-3:] = ["alice", "z\u00fcri", "bob"]
    pq.write_table(pa.table({"s": words.astype(str), "t": t.astype(str)}), tmp_path / "words.parquet",
                   row_group_size=len(s) // 5 + 1)
    nodes = np.unique(np.concatenate([words.astype(str), t.astype(str)]))
    pq.write_table(pa.table({"node": nodes, "kind": np.array(NAMED)[np.arange(nodes.size) % 3]}), tmp_path / "y.parquet")
    jobs = []
    for name, opts in (("ints", "features=degree"), ("words", f"features=degree,labels={tmp_path / 'y.parquet'}")):
        spec = f"edgelist:{tmp_path / name}.parquet,{opts}"
        n = load_graph(spec).num_nodes
        np.save(tmp_path / f"a-{name}.npy", np.random.default_rng(7).integers(0, 3, n))
        a = str(tmp_path / f"a-{name}.npy")
        assert main(["partition", spec, "--assignment", a, "--out", str(tmp_path / f"one-{name}")]) == 0
        jobs.append((spec, a, str(tmp_path / f"many-{name}")))
    run_ranks(_build_all, 3, (graph_dir, jobs), timeout=300)
    for name in ("ints", "words"):
        _same_artifact(tmp_path / f"one-{name}", tmp_path / f"many-{name}")
    assert read_artifact(tmp_path / "one-ints")[0]["ids"]["type"] == "int64"
    assert read_artifact(tmp_path / "one-words")[0]["ids"]["type"] == "string"
    assert load_part(tmp_path / "many-words", 2).class_names == NAMED
