"""`graphdist partition SPEC --assignment FILE`: an artifact from a partition computed elsewhere,
and the memory check that stops a run that would not fit before it starts."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from graphdist.cli import main
from graphdist.data import load_graph
from graphdist.partition.artifact import read_artifact
from graphdist.partition.parts import load_part
from graphdist.partition.layout import build_layout
from partitioners import partition, quality

SPEC = "sbm:nodes=300,classes=3,avg_degree=6,features=4,seed=1"


@pytest.fixture(scope="module")
def given():
    g = load_graph(SPEC)
    return g, partition(g, 3, method="ldg", seed=2).numpy()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphdist: error: "), err
    return err


@pytest.mark.parametrize("fmt", ["npy", "txt"])
def test_artifact_from_a_given_assignment(given, tmp_path, fmt, capsys):
    g, a = given
    f = tmp_path / f"parts.{fmt}"
    if fmt == "npy":
        np.save(f, a.astype(np.int32))  # any integer type
    else:
        f.write_text("# from elsewhere\n" + "\n".join(map(str, a)) + "\n")
    out = tmp_path / "art"
    assert main(["partition", SPEC, "--assignment", str(f), "--out", str(out)]) == 0
    assert f"given by {f} (k=3)" in capsys.readouterr().out
    meta, got = read_artifact(out)
    assert np.array_equal(got.numpy(), a) and meta["k"] == 3 and meta["method"] == "given"
    assert meta["params"]["assignment"] == str(f)
    assert meta["quality"] == json.loads(json.dumps(quality(g, torch.from_numpy(a), k=3)))
    for r in range(3):  # the parts are the plans of that very assignment
        want, lg = build_layout(g, torch.from_numpy(a), r, 3), load_part(out, r)
        assert torch.equal(lg.owned, want.owned) and torch.equal(lg.indices, want.indices)
        assert torch.equal(lg.send_idx, want.send_idx) and torch.equal(lg.x, want.x)


def test_parts_flag_sets_k_and_the_hint_names_the_file(given, tmp_path, capsys):
    g, a = given
    f = tmp_path / "a.npy"
    np.save(f, a)
    out = tmp_path / "art"
    assert main(["partition", SPEC, "--assignment", str(f), "--parts", "5", "--out", str(out)]) == 0
    meta, _ = read_artifact(out)
    assert meta["k"] == 5 and meta["parts"]["owned_nodes"][3:] == [0, 0]
    meta_path = out / "meta.json"
    m = json.loads(meta_path.read_text())
    m["format_version"] = 0
    meta_path.write_text(json.dumps(m))
    assert main(["quality", str(out)]) == 2
    assert f"graphdist partition {SPEC} --assignment {f} --parts 5 --out {out}" in _one_line(capsys)


@pytest.mark.parametrize("write, extra, match", [
    (lambda f, a: np.save(f.with_suffix(".npy"), a[:-1]), [], r"a\.npy: has 299 part ids but the graph has 300 nodes"),
    (lambda f, a: f.with_suffix(".txt").write_text("\n".join(map(str, a[:-1])) + "\n"), [],
     r"a\.txt: has 299 part ids"),
    (lambda f, a: np.save(f.with_suffix(".npy"), np.r_[a[:7], -1, a[8:]]), [], r"a\.npy: entry 7: negative part id -1"),
    (lambda f, a: f.with_suffix(".txt").write_text("\n".join(map(str, np.r_[a[:7], -2, a[8:]])) + "\n"), [],
     r"a\.txt:8: negative part id -2"),
    (lambda f, a: f.with_suffix(".txt").write_text("\n".join(map(str, a)) + "\n"), ["--parts", "2"],
     r"a\.txt:\d+: part id 2 is out of range for --parts 2 \(ids must be 0\.\.1\)"),
    (lambda f, a: np.save(f.with_suffix(".npy"), a), ["--parts", "2"], r"a\.npy: entry \d+: part id 2 is out of range"),
    (lambda f, a: f.with_suffix(".txt").write_text("0\n1\nx1\n" + "\n".join(map(str, a[3:])) + "\n"), [],
     r"a\.txt:3: .*'x1'"),
    (lambda f, a: np.save(f.with_suffix(".npy"), np.r_[a[:4], 1.5, a[5:]].astype(float)), [],
     r"a\.npy: entry 4 is 1\.5, not an integer part id"),
    (lambda f, a: np.save(f.with_suffix(".npy"), a.reshape(100, 3)), [], r"a\.npy: has shape \[100, 3\]"),
    (lambda f, a: f.with_suffix(".npy").write_bytes(b"not an array"), [], r"a\.npy: not a readable \.npy array"),
    (lambda f, a: None, [], r"--assignment .*a\.npy: cannot read \(No such file or directory\)"),
])
def test_bad_assignments_are_one_line_errors(given, tmp_path, capsys, write, extra, match):
    _, a = given
    f = tmp_path / "a"
    write(f, a)
    path = next((p for p in tmp_path.iterdir() if p.stem == "a"), f.with_suffix(".npy"))
    out = tmp_path / "art"
    assert main(["partition", SPEC, "--assignment", str(path), *extra, "--out", str(out)]) == 2
    import re
    err = _one_line(capsys)
    assert re.search(match, err), err
    assert not out.exists()


def test_parts_is_required_without_an_assignment(tmp_path, capsys):
    assert main(["partition", SPEC, "--out", str(tmp_path / "art")]) == 2
    assert "--parts K is required (or give --assignment FILE)" in _one_line(capsys)


def test_a_run_that_would_not_fit_stops_before_partitioning(tmp_path, capsys, monkeypatch):
    import graphdist.memory as memory
    import graphdist.partition.budget as budget
    import partitioners
    from graphdist.partition.budget import estimate
    g = load_graph(SPEC)
    need = estimate(g, "metis", 4)
    assert need > budget.graph_bytes(g) > 0
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    called = []
    monkeypatch.setattr(partitioners, "partition", lambda *a, **k: called.append(1))
    out = tmp_path / "art"
    assert main(["partition", SPEC, "--parts", "4", "--method", "metis", "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert f"needs about {need / 2**30:.1f} GiB of memory, and {(need - 1) / 2**30:.1f} GiB is available" in err
    assert "--method metis at k=4" in err and not called and not out.exists()
    # the machine has room but this process's own limit (ulimit -d / -v) has not
    monkeypatch.setattr(memory, "available_bytes", lambda: 4 * need)
    monkeypatch.setattr(memory, "process_ceiling", lambda: need - 1)
    assert main(["partition", SPEC, "--parts", "4", "--method", "metis", "--out", str(out)]) == 2
    assert f"and {(need - 1) / 2**30:.1f} GiB is available" in _one_line(capsys) and not called
    monkeypatch.undo()
    monkeypatch.setattr(memory, "available_bytes", lambda: need)  # exactly enough: it runs
    assert main(["partition", SPEC, "--parts", "4", "--method", "metis", "--out", str(out)]) == 0


def test_estimate_grows_with_the_graph_and_the_method():
    from graphdist.partition.budget import estimate
    small, big = load_graph(SPEC), load_graph("sbm:nodes=3000,classes=3,avg_degree=6,features=4,seed=1")
    for m in ("metis", "kaminpar", "auto", "fennel"):
        assert estimate(big, m, 4) > estimate(small, m, 4)
    assert estimate(big, "auto", 4) > estimate(big, "given", 4) > estimate(small, "given", 4)


def test_the_estimate_follows_where_metis_keeps_its_levels(monkeypatch):
    """METIS (alone or as auto's start) on disk: the estimate takes the on-disk per-edge
    coefficient, exactly, for the backend's own choice."""
    from graphdist.memory import PROCESS_BYTES
    from graphdist.partition.budget import PER_EDGE, WRITE_PER_EDGE, dense_bytes, estimate, graph_bytes
    from partitioners import metis
    g = load_graph("sbm:nodes=3000,classes=3,avg_degree=6,features=4,seed=1")
    monkeypatch.setattr(metis, "scratch_dir", lambda: "/var/tmp")  # a folder on disk, whatever /tmp is here
    if metis.metis_levels(g.num_nodes, g.num_edges, available=0) != "ondisk":
        pytest.skip("no METIS 5.2 build (cmeel-metis) with the ONDISK option")
    est = {}
    for on in (False, True):
        monkeypatch.setattr(metis, "metis_ondisk", lambda nnz, available=None, on=on: on)
        assert metis.metis_levels(g.num_nodes, g.num_edges) == ("ondisk" if on else "memory")
        est[on] = {m: estimate(g, m, 4) for m in ("metis", "auto")}
    e, base = g.num_edges, PROCESS_BYTES + graph_bytes(g)  # features of 4: none spilled
    assert dense_bytes(g.num_nodes, 4, "metis") == (0, 5 * g.num_nodes * 4)  # METIS: no N x k array
    assert est[False]["metis"] == base + PER_EDGE["metis32"] * e
    # on disk METIS needs less than the quality and parts step after it, which then decides
    assert metis.METIS_BYTES_PER_EDGE["ondisk"] < WRITE_PER_EDGE
    assert est[True]["metis"] == base + WRITE_PER_EDGE * e + 5 * g.num_nodes * 4
    assert est[False]["auto"] - est[True]["auto"] == (PER_EDGE["auto"] - PER_EDGE["auto_ondisk"]) * e


def test_n_by_k_arrays_are_counted_only_while_dense():
    """The partition check counts each N x k array as the partitioners allocate it: dense (a fixed
    number of bytes per cell) only up to its cap of cells, and nothing past it (the sparse form is
    sized by the edges). At papers100M's size and k = 256 no N x k term is left, where 16 bytes per
    node and part asked 424 GiB."""
    from types import SimpleNamespace

    from graphdist.memory import PROCESS_BYTES
    from graphdist.partition.budget import PER_EDGE, WRITE_PER_EDGE, dense_bytes, estimate
    from partitioners.cover import DENSE_RANK_CELLS
    from partitioners.quality import DENSE_PAIR_CELLS
    from partitioners.refine import DENSE_PIN_CELLS
    assert (DENSE_RANK_CELLS, DENSE_PIN_CELLS, DENSE_PAIR_CELLS) == (2**25, 2**25, 2**28)
    n = 2**20
    # k = 16: 2^24 cells, all three dense: pin counts 16 B (refining methods), rank 5 B, pairs 1 B
    assert dense_bytes(n, 16, "fennel") == (16 * 2**24, 5 * 2**24)
    assert dense_bytes(n, 16, "auto") == (16 * 2**24, 5 * 2**24)
    assert dense_bytes(n, 16, "kaminpar") == (0, 5 * 2**24)
    # k = 32: exactly at the caps of 2^25 cells, still dense
    assert dense_bytes(n, 32, "fennel") == (16 * 2**25, 5 * 2**25)
    # k = 64: 2^26 cells, pins and ranks sorted instead; the bool bitmap of pairs is still dense
    assert dense_bytes(n, 64, "fennel") == (0, 2**26)
    assert dense_bytes(n, 256, "fennel") == (0, 2**28) and dense_bytes(n, 257, "fennel") == (0, 0)
    papers = SimpleNamespace(num_nodes=111_059_956, num_edges=3_231_371_744)
    need = estimate(papers, "fennel", 256)
    assert dense_bytes(papers.num_nodes, 256, "fennel") == (0, 0)
    assert need == PROCESS_BYTES + max(PER_EDGE["fennel"], WRITE_PER_EDGE) * papers.num_edges
    assert need == estimate(papers, "fennel", 1024)  # k no longer adds anything
    assert need < 97 * 2**30  # the old 16 * N * k term alone was 424 GiB
