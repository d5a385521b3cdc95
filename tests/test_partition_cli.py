"""`graphdist partition / quality / compare` and the partition artifact."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from graphdist.partition.artifact import FORMAT_VERSION, check_artifact, read_artifact, write_artifact
from graphdist.cli import main
from graphdist.data import load_graph
from graphdist.errors import ArtifactError
from partitioners import QUALITY_KEYS

SPEC = "sbm:nodes=400,classes=4,avg_degree=6,features=3,seed=5"
OTHER = "sbm:nodes=400,classes=4,avg_degree=6,features=3,seed=6"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("art") / "p4"
    assert main(["partition", SPEC, "--parts", "4", "--method", "ldg", "--seed", "1", "--out", str(out)]) == 0
    return out


def test_partition_writes_a_complete_artifact(artifact):
    files = {p.name for p in artifact.iterdir()}
    assert {"meta.json", "assignment.npy"} <= files
    meta, a = read_artifact(artifact)
    g = load_graph(SPEC)
    assert meta["fingerprint"] == g.fingerprint and meta["k"] == 4 and meta["num_nodes"] == 400
    assert meta["method"] == "ldg" and meta["params"]["seed"] == 1
    assert a.dtype == torch.int64 and a.shape == (400,) and int(a.max()) < 4
    assert np.load(artifact / "assignment.npy").dtype == np.int64
    assert set(QUALITY_KEYS) <= set(meta["quality"])
    assert meta["time"]["partition_s"] >= 0
    check_artifact(meta, g, 4)  # no error
    art = read_artifact(artifact)  # also readable like the meta dict
    assert art["k"] == 4 and art.get("method") == "ldg"
    # per-rank files, summarised in meta.json from the plans themselves
    parts = meta["parts"]
    assert parts["files"] == [f"part_{r:05d}.pt" for r in range(4)] and set(parts["files"]) <= files
    assert parts["owned_nodes"] == np.bincount(a.numpy(), minlength=4).tolist()
    src, dst = g.edge_index.numpy()
    an = a.numpy()
    halo = [len({j for j, i in zip(src, dst) if an[i] == p and an[j] != p}) for p in range(4)]
    assert parts["halo_rows"] == halo and meta["quality"]["comm_volume"] == sum(halo)
    assert sum(parts["moved_rows"]) == meta["quality"]["moved_rows"] < sum(halo)
    assert max(parts["moved_rows"]) == meta["quality"]["moved_max_recv"]
    assert set(meta["sha256"]) == {"assignment.npy"} | set(parts["files"])


def test_same_seed_same_artifact(artifact, tmp_path):
    out = tmp_path / "again"
    assert main(["partition", SPEC, "--parts", "4", "--method", "ldg", "--seed", "1", "--out", str(out)]) == 0
    assert torch.equal(read_artifact(out)[1], read_artifact(artifact)[1])


def test_quality_table_and_json(artifact, capsys):
    assert main(["quality", str(artifact)]) == 0
    out = capsys.readouterr().out
    assert "halo volume" in out and "edge imb" in out and "ldg" in out
    assert "moved rows" in out
    assert main(["quality", str(artifact), "--json", "--feature-dim", "64"]) == 0
    q = json.loads(capsys.readouterr().out)
    assert set(q) == set(QUALITY_KEYS) | {"bytes_per_layer"}
    # the figures describe the assignment on disk: halo rows counted here from its edges
    g, a = load_graph(SPEC), np.load(artifact / "assignment.npy")
    src, dst = g.edge_index.numpy()
    pairs = {(j, a[i]) for j, i in zip(src, dst) if a[j] != a[i]}
    assert q["comm_volume"] == len(pairs) and q["bytes_per_layer"] == len(pairs) * 64 * 4
    assert q["edge_cut"] == int((a[src] != a[dst]).sum())


def test_compare_table_json_and_plot(tmp_path, capsys):
    js, png = tmp_path / "c.json", tmp_path / "c.png"
    rc = main(["compare", SPEC, "--parts", "2,4", "--methods", "random,ldg,metis,auto",
               "--json", str(js), "--plot", str(png), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    for m in ("random", "ldg", "metis", "auto"):
        assert m in out
    rep = json.loads(js.read_text())
    assert [(r["k"], r["method"]) for r in rep["results"]] == [
        (k, m) for k in (2, 4) for m in ("random", "ldg", "metis", "auto")]
    for r in rep["results"]:
        assert set(QUALITY_KEYS) <= set(r) and r["time_s"] >= 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, match", [
    (["partition", SPEC, "--parts", "0", "--out", "X"], "--parts 0 must be between 1 and the number of nodes N=400"),
    (["partition", SPEC, "--parts", "401", "--out", "X"], "--parts 401"),
    (["partition", SPEC, "--parts", "2", "--method", "magic", "--out", "X"], "invalid choice: 'magic'"),
    (["compare", SPEC, "--parts", "2,x"], "--parts: expected comma-separated integers"),
    (["compare", SPEC, "--parts", "2", "--methods", "ldg,nope"], "unknown partition method 'nope'"),
    (["quality", "NOPE_DIR"], "partition artifact not found"),
])
def test_bad_input_exit_2(argv, match, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphdist: error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "X").exists()


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_corrupt_artifacts_are_rejected(artifact, tmp_path, capsys):
    short = _copy(artifact, tmp_path / "short")
    np.save(short / "assignment.npy", np.zeros(399, dtype=np.int64))
    assert main(["quality", str(short)]) == 2
    assert "399 entries but the graph has 400 nodes" in capsys.readouterr().err

    big = _copy(artifact, tmp_path / "big")
    a = np.load(big / "assignment.npy")
    a[7] = 4
    np.save(big / "assignment.npy", a)
    with pytest.raises(ArtifactError, match="part id 4 >= k=4"):
        read_artifact(big)

    half = _copy(artifact, tmp_path / "half")
    (half / "meta.json").unlink()
    with pytest.raises(ArtifactError, match="incomplete"):
        read_artifact(half)


def test_replaced_files_and_old_formats_are_refused(artifact, tmp_path, capsys):
    # a valid but different assignment: the cached figures would be stale, so quality refuses
    other = _copy(artifact, tmp_path / "other")
    a = np.load(other / "assignment.npy")
    np.save(other / "assignment.npy", np.roll(a, 1))
    assert main(["quality", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "assignment.npy was changed after partitioning" in err
    assert f"graphdist partition {SPEC} --parts 4 --method ldg --out {other}" in err
    # a replaced part file: quality and the rank loading it refuse
    from graphdist.partition.parts import load_part
    swapped = _copy(artifact, tmp_path / "swapped")
    import shutil
    shutil.copy(swapped / "part_00001.pt", swapped / "part_00002.pt")
    assert main(["quality", str(swapped)]) == 2
    assert "part_00002.pt was changed after partitioning" in capsys.readouterr().err
    with pytest.raises(ArtifactError, match="part_00002.pt was changed"):
        load_part(swapped, 2)
    assert load_part(swapped, 1).rank == 1
    # an artifact of the previous format (int64 part files) says how to rebuild it
    old = _copy(artifact, tmp_path / "old")
    meta = json.loads((old / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION - 1
    (old / "meta.json").write_text(json.dumps(meta))
    for argv in (["quality", str(old)], ["train-gcn", "--partition", str(old)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"format {FORMAT_VERSION - 1}, this graphdist reads format {FORMAT_VERSION}" in err
        assert f"rebuild it with: graphdist partition {SPEC} --parts 4 --method ldg --out {old}" in err


def test_fingerprint_and_k_mismatch_name_both_values(artifact):
    meta, _ = read_artifact(artifact)
    other = load_graph(OTHER)
    with pytest.raises(ArtifactError) as ei:
        check_artifact(meta, other)
    assert meta["fingerprint"] in str(ei.value) and other.fingerprint in str(ei.value)
    with pytest.raises(ArtifactError, match="k=4 parts but 8 were requested"):
        check_artifact(meta, k=8)


def test_killed_write_leaves_old_artifact_intact(artifact, tmp_path, monkeypatch):
    out = _copy(artifact, tmp_path / "keep")
    before = read_artifact(out)[1]
    g = load_graph(SPEC)
    import graphdist.partition.artifact as artifact_module

    def boom(*a, **kw):
        raise KeyboardInterrupt  # like a kill in the middle of writing part files

    monkeypatch.setattr(artifact_module, "write_parts", boom)
    with pytest.raises(KeyboardInterrupt):
        write_artifact(out, g, torch.zeros(400, dtype=torch.int64), method="x", params={}, quality={},
                       seconds=0.0, k=4)
    assert torch.equal(read_artifact(out)[1], before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # no temp dirs left behind
    with pytest.raises(KeyboardInterrupt):
        write_artifact(tmp_path / "fresh", g, torch.zeros(400, dtype=torch.int64), method="x",
                       params={}, quality={}, seconds=0.0, k=4)
    assert not (tmp_path / "fresh").exists()


def test_overwrite_swaps_and_refuses_foreign_dirs(artifact, tmp_path):
    out = _copy(artifact, tmp_path / "over")
    g = load_graph(SPEC)
    write_artifact(out, g, torch.ones(400, dtype=torch.int64), method="x", params={}, quality={},
                   seconds=0.0, k=2)
    assert read_artifact(out)[0]["k"] == 2 and int(read_artifact(out)[1].sum()) == 400
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="not a partition artifact"):
        write_artifact(foreign, g, torch.zeros(400, dtype=torch.int64), method="x", params={},
                       quality={}, seconds=0.0, k=1)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_subprocess_one_line_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "graphdist", "partition", SPEC, "--parts", "0", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("graphdist: error: ")
    assert "--parts 0" in r.stderr
