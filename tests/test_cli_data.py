"""``graphdist --help`` and ``graphdist data info``."""
from __future__ import annotations

import json
import subprocess
import sys

from graphdist.cli import main


def test_help_lists_every_command():
    r = subprocess.run([sys.executable, "-m", "graphdist", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    listed = {ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("    ") and ln.split()}
    assert {"data", "demo", "partition", "quality", "compare", "train-gcn", "train-dlrm"} <= listed, r.stdout


def test_data_info_reports_the_generated_graph(capsys):
    from graphdist.data import load_graph
    spec = "sbm:nodes=500,classes=2,avg_degree=4,features=3"
    assert main(["data", "info", spec]) == 0
    rows = dict(ln.split(None, 1) if not ln.startswith(("edges", "in-degree", "split")) else
                (ln[:24].strip(), ln[24:].strip()) for ln in capsys.readouterr().out.splitlines())
    g = load_graph(spec)
    assert rows["nodes"] == "500" and rows["features"] == "3" and rows["classes"] == "2"
    assert rows["edges (directed)"] == f"{g.num_edges:,}" and rows["fingerprint"] == g.fingerprint
    assert rows["split train/val/test"] == "50 / 50 / 400"


def test_data_info_click_logs(capsys):
    assert main(["data", "info", "criteo-synth:rows=200,scale=0.001", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows"] == 200 and s["dense_features"] == 13 and s["sparse_features"] == 26
    assert len(s["table_rows"]) == 26 and min(s["table_rows"]) == 4 and 0.0 < s["click_rate"] < 1.0


def test_data_info_json(capsys, cora_dir):
    assert main(["data", "info", f"planetoid:{cora_dir}", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["nodes"] == 2708 and s["edges"] == 10556 and s["classes"] == 7 and s["features"] == 1433
    assert s["train"] == 140 and s["degree_max"] == 168 and len(s["fingerprint"]) == 16


def test_data_info_says_what_it_writes_and_takes_the_cache_dir_for_criteo(tmp_path, capsys):
    """``data info --help`` names the one thing it writes (a criteo: spec's binary cache); the cache
    goes where --cache-dir says, as train-dlrm's; the flag is refused for other kinds."""
    r = subprocess.run([sys.executable, "-m", "graphdist", "data", "info", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "--cache-dir DIR" in r.stdout
    assert "nothing is written" not in r.stdout and "binary cache a criteo: spec is read through" in r.stdout
    tsv = tmp_path / "day_0.txt"
    tsv.write_text("".join(f"{i % 2}\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["68fd1e64"] * 26) + "\n"
                           for i in range(5)))
    cache = tmp_path / "cache"
    assert main(["data", "info", f"criteo:{tsv}", "--cache-dir", str(cache), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 5
    assert sorted(p.name for p in (cache / "day_0.txt.graphdist-cache").iterdir()) == [
        "dense.npy", "labels.npy", "meta.json", "skipped.npy", "sparse.npy"]
    assert main(["data", "info", "sbm:nodes=50", "--cache-dir", str(cache)]) == 2
    assert "--cache-dir applies to criteo: and clicks: specs only, not sbm:" in capsys.readouterr().err


def test_data_info_says_what_the_ids_are(tmp_path, capsys):
    """The ids the outputs will be keyed by: the index, int64 with the first and last, or the
    strings as written (a long one shortened), for graphs and for a rating log's users and items."""
    cases = [("edgelist", "g.txt", "30 7\n7 1000\n", {"node ids": "int64: 7, ..., 1,000"}),
             ("edgelist", "w.txt", f"bob alice\nalice {'u' * 50}\n",
              {"node ids": f"strings as written: 'alice', ..., '{'u' * 37}...'"}),
             ("ratings", "r.txt", "A2 B1 5\nA1 7 4\nA1 B1 3\nA2 7 1\n",
              {"user ids": "strings as written: 'A1', ..., 'A2'", "item ids": "strings as written: '7', ..., 'B1'"})]
    for kind, name, text, want in cases:
        (tmp_path / name).write_text(text)
        assert main(["data", "info", f"{kind}:{tmp_path / name}" + (",test=0.5" if kind == "ratings" else "")]) == 0
        rows = {ln[:8]: ln[8:].strip() for ln in capsys.readouterr().out.splitlines()}
        assert {k: rows[k] for k in want} == want, rows
    assert main(["data", "info", "sbm:nodes=50", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["node_ids"] == "index" and s["node_ids_range"] == "the index (0 .. N-1)"


def test_data_info_names_the_classes(tmp_path, capsys):
    """Labels written as names: the classes row names them in their order (four, then the last)."""
    (tmp_path / "g.txt").write_text("".join(f"n{i} n{i + 1}\n" for i in range(8)))
    for labels, want in ((["spam", "ham", "spam"], "2 named 'ham', 'spam'"),
                         ([f"k{i}" for i in range(7)], "7 named 'k0', 'k1', 'k2', 'k3', ..., 'k6'"),
                         (["0", "2"], "3")):
        (tmp_path / "y.csv").write_text("".join(f"n{i},{c}\n" for i, c in enumerate(labels)))
        assert main(["data", "info", f"edgelist:{tmp_path / 'g.txt'},features=degree,labels={tmp_path / 'y.csv'}"]) == 0
        rows = {ln[:24].strip(): ln[24:].strip() for ln in capsys.readouterr().out.splitlines()}
        assert rows["classes"] == want
