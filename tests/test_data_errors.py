"""Bad input: one GraphdistError with the file and line; the CLI says one line and exits 2."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from graphdist.cli import main
from graphdist.data import load_graph
from graphdist.errors import DataFormatError, MissingFileError, SpecError


def test_malformed_line_reports_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("# c\n0 1\n1 2.5\n2 3\n")
    with pytest.raises(DataFormatError, match=r"bad.txt:3: '2.5' is not an integer"):
        load_graph(f"edgelist:{f}")


def test_too_few_fields(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("0 1\n\n7\n")
    with pytest.raises(DataFormatError, match=r"bad.txt:3: expected at least 2 fields, got 1"):
        load_graph(f"edgelist:{f}")


def test_negative_id(tmp_path):
    f = tmp_path / "neg.txt"
    f.write_text("0 1\r\n1 -4\r\n")
    with pytest.raises(DataFormatError, match=r"neg.txt:2: negative node id -4"):
        load_graph(f"edgelist:{f}")


def test_npz_out_of_range(tmp_path):
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=np.array([[0, 1], [1, 5]]), x=np.zeros((3, 2), np.float32))
    with pytest.raises(DataFormatError, match="target node id 5 out of range for 3 nodes"):
        load_graph(f"npz:{p}")
    np.savez(p, edge_index=np.array([[0, -1], [1, 2]]), num_nodes=3)
    with pytest.raises(DataFormatError, match="source node id -1 out of range"):
        load_graph(f"npz:{p}")


def test_feature_and_label_count_mismatch(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("0 1\n1 2\n")
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(2, np.int64))
    with pytest.raises(DataFormatError, match="x.npy: has 4 rows but g.txt has 3 distinct nodes"):
        load_graph(f"edgelist:{f},features={tmp_path / 'x.npy'}")
    with pytest.raises(DataFormatError, match="has 2 labels but g.txt has 3"):
        load_graph(f"edgelist:{f},labels={tmp_path / 'y.npy'}")
    p = tmp_path / "g.npz"
    np.savez(p, edge_index=np.array([[0], [1]]), x=np.zeros((2, 2), np.float32), y=np.zeros(5))
    with pytest.raises(DataFormatError, match="y has 5 rows but the graph has 2 nodes"):
        load_graph(f"npz:{p}")


def test_missing_files(tmp_path, monkeypatch):
    import graphdist.specs
    monkeypatch.setattr(graphdist.specs, "data_homes", lambda: [tmp_path / "no-home"])  # no complete copy elsewhere
    with pytest.raises(MissingFileError, match="edge list .*nope.txt.* not found"):
        load_graph(f"edgelist:{tmp_path / 'nope.txt'}")
    (tmp_path / "Cora" / "raw").mkdir(parents=True)
    (tmp_path / "Cora" / "raw" / "ind.cora.x").write_bytes(b"")
    with pytest.raises(MissingFileError, match=r"lacks ind.cora.tx, .*ind.cora.test.index; copy the raw files"):
        load_graph(f"planetoid:{tmp_path / 'Cora'}")
    (tmp_path / "ogb" / "raw").mkdir(parents=True)
    with pytest.raises(MissingFileError, match="edge.csv.gz is missing"):
        load_graph(f"ogb:{tmp_path / 'ogb'}")


@pytest.mark.parametrize("spec,msg", [
    ("sbm", "must look like KIND:ARGS"),
    ("graphml:foo.xml", "unknown dataset kind 'graphml'"),
    ("sbm:nodes=10,colour=3", r"unknown argument 'colour' \(allowed: .*avg_degree"),
    ("sbm:nodes=ten", "nodes='ten' is not a valid int"),
    ("sbm:nodes=10,homophily=1.5", "homophily=1.5 must be in"),
    ("rmat:scale=0", "scale=0 must be in 1..32"),
    ("edgelist:", "needs a path"),
])
def test_bad_specs(spec, msg):
    with pytest.raises(SpecError, match=msg):
        load_graph(spec)


@pytest.mark.parametrize("make_spec, cls, msg", [
    (lambda d: "sbm:bogus=1", SpecError, "unknown argument 'bogus'"),
    (lambda d: f"edgelist:{d / 'missing.txt'}", MissingFileError, "not found"),
    (lambda d: f"npz:{d / 'bad.npz'}", DataFormatError, "bad.npz: not a readable .npz archive"),
])
def test_every_error_class_is_one_cli_line(tmp_path, capsys, make_spec, cls, msg):
    """Each class the loaders raise really comes out of them, and the CLI prints it as one line."""
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    spec = make_spec(tmp_path)
    with pytest.raises(cls, match=msg):
        load_graph(spec)
    assert main(["data", "info", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphdist: error: ") and msg in err


def test_cli_bad_input_exit_2_one_line(tmp_path, capsys):
    f = tmp_path / "bad.txt"
    f.write_text("0 1\n1 2 \n3 4.5\n")
    assert main(["data", "info", f"edgelist:{f}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.txt:3" in err and "Traceback" not in err


def test_cli_subprocess_no_traceback():
    r = subprocess.run([sys.executable, "-m", "graphdist", "data", "info", "nosuchkind:x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "unknown dataset kind" in r.stderr
    r = subprocess.run([sys.executable, "-m", "graphdist", "data", "info", "--bogus"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0


def _partial_planetoid(home, name, src=None, skip=("allx",)):
    """``home/planetoid/NAME/raw`` with every file but ``skip`` (copied from ``src``, else empty)."""
    from graphdist.data.planetoid import PLANETOID_SUFFIXES
    raw = home / "planetoid" / name / "raw"
    raw.mkdir(parents=True)
    for s in PLANETOID_SUFFIXES:
        if s not in skip:
            f = f"ind.{name.lower()}.{s}"
            (raw / f).write_bytes((src / "raw" / f).read_bytes() if src is not None else b"")
    return raw.parent


def test_a_pubmed_folder_lacking_allx_names_the_fetch_script_not_the_authors_repository(tmp_path, monkeypatch):
    """kimiyoung/planetoid has no ind.pubmed.allx (datasets/planetoid/README.md): the error names
    scripts/fetch_planetoid.py, which writes all 8 files, with this data home as --dest."""
    import graphdist.specs
    monkeypatch.setattr(graphdist.specs, "data_homes", lambda: [tmp_path])  # no other home with a copy
    _partial_planetoid(tmp_path, "PubMed")
    with pytest.raises(MissingFileError) as e:
        load_graph("planetoid:planetoid/PubMed")
    msg = str(e.value)
    assert "lacks ind.pubmed.allx;" in msg and "kimiyoung" not in msg, msg
    assert f"scripts/fetch_planetoid.py --names PubMed --dest {tmp_path}" in msg, msg
    (tmp_path / "elsewhere" / "PubMed" / "raw").mkdir(parents=True)
    with pytest.raises(MissingFileError, match=r"--names PubMed --dest DIR \(it writes DIR/planetoid/PubMed/raw/\)"):
        load_graph(f"planetoid:{tmp_path / 'elsewhere' / 'PubMed'}")


def test_a_folder_lacking_a_file_reads_the_complete_copy_in_another_data_home(tmp_path, monkeypatch, cora_dir, capsys):
    """$GRAPHDIST_DATA's planetoid/Cora lacks ind.cora.allx; another data home has all 8 files:
    the graph is read from there (the same fingerprint), saying so in one line."""
    import graphdist.specs
    mine, full = tmp_path / "mine", tmp_path / "full"
    _partial_planetoid(mine, "Cora", src=cora_dir)
    _partial_planetoid(full, "Cora", src=cora_dir, skip=())
    monkeypatch.setattr(graphdist.specs, "data_homes", lambda: [mine, full])
    g = load_graph("planetoid:planetoid/Cora")
    assert g.fingerprint == load_graph(f"planetoid:{cora_dir}").fingerprint and g.num_nodes == 2708
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"planetoid: {mine / 'planetoid' / 'Cora' / 'raw'} lacks ind.cora.allx; reading the complete copy "
                   f"in {full / 'planetoid' / 'Cora'}"], err


def test_a_path_left_without_its_folder_names_the_one_found_in_the_data_home(tmp_path, monkeypatch):
    """`edgelist:g.txt` where the data home has snap/g.txt (the README writes planetoid:planetoid/Cora;
    a user writes planetoid:Cora): the line names the path to write instead of how to get the data."""
    import graphdist.specs
    home = tmp_path / "home"
    (home / "snap").mkdir(parents=True)
    (home / "snap" / "g.txt").write_text("0 1\n")
    monkeypatch.setattr(graphdist.specs, "data_homes", lambda: [home])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingFileError) as e:
        load_graph("edgelist:g.txt")
    assert str(e.value) == (f"edge list 'g.txt' not found (also looked in the data home {home}); it is at "
                            "snap/g.txt in the data home: write snap/g.txt")
    assert load_graph("edgelist:snap/g.txt").num_nodes == 2
    with pytest.raises(MissingFileError) as e:
        load_graph("planetoid:Cora")
    assert "kimiyoung" in str(e.value) and "write" not in str(e.value)  # nowhere: how to get it


def test_a_planetoid_file_naming_anything_but_arrays_is_refused_before_it_runs(tmp_path, cora_dir):
    """A Planetoid file is a pickle; graphdist's reader builds only what Cora, CiteSeer and PubMed
    hold: a file that would run a command says so in one line naming it, and nothing runs."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    root = _partial_planetoid(tmp_path, "Cora", src=cora_dir, skip=())
    (root / "raw" / "ind.cora.graph").write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(DataFormatError) as e:
        load_graph(f"planetoid:{root}")
    msg = str(e.value)
    assert msg.startswith(f"{root / 'raw' / 'ind.cora.graph'}: it names ") and "system" in msg and "\n" not in msg
    assert not (tmp_path / "ran").exists()


def test_a_bare_path_is_answered_with_the_spec_to_write(tmp_path):
    """A new user's first try is the path alone: the one line names the spec for that path, by the
    command's kind of data; a path that does not exist gets no guess."""
    from graphdist.specs import parse_spec
    f, g, d = tmp_path / "g.txt", tmp_path / "g.npz", tmp_path / "Cora"
    f.write_text("0 1\n")
    g.write_bytes(b"")
    (d / "raw").mkdir(parents=True)
    o = tmp_path / "arxiv"
    (o / "raw").mkdir(parents=True)
    (o / "raw" / "edge.csv.gz").write_bytes(b"")
    cases = [(str(f), "graph", f"; for this file: edgelist:{f}"), (str(g), "graph", f"; for this file: npz:{g}"),
             (str(d), "graph", f"; for this folder: planetoid:{d}"), (str(o), "graph", f"; for this folder: ogb:{o}"), (str(f), "ratings", f"; for this file: ratings:{f}"),
             (str(f), "clicks", f"; for this file: criteo:{f}"),
             (str(f), None, f"; for this file: edgelist:{f} or criteo:{f} or ratings:{f}")]
    for text, domain, hint in cases:
        with pytest.raises(SpecError) as e:
            parse_spec(text, domain)
        assert str(e.value).endswith(hint) and "must look like KIND:ARGS" in str(e.value), (text, domain, str(e.value))
    with pytest.raises(SpecError) as e:
        parse_spec(str(tmp_path / "absent.txt"), "graph")
    assert str(e.value).endswith("rmat, sbm)"), str(e.value)
