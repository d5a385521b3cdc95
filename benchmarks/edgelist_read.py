"""Edge-list reading speed: graphdist's table reader vs the same numpy readers used bare.

    python benchmarks/edgelist_read.py [--edges 30000000] [--file PATH] [--json out.json]

Writes (once, under /tmp unless ``--file`` names an existing file) a tab-separated edge list with
a ``#`` header and ``--edges`` random edges over 4M ids, then times, side by side in one run:

* ``read_table``: :func:`graphdist.data.table.read_table` (what ``edgelist:`` uses: comment and
  separator handling, a per-line field check, file:line errors),
* ``fromstring``: ``np.fromstring(text, sep=" ")`` on the file's bytes (no per-line checks: a
  short line shifts every later value silently),
* ``loadtxt``: ``np.loadtxt(path, usecols=(0, 1))`` (numpy's C reader, the previous path),
* ``load_graph``: the whole ``edgelist:`` load (read, id remap, symmetrise, CSR) for reference.

Prints MB/s for each and the ratio of read_table to the bare reader.

    python benchmarks/edgelist_read.py --words [--edges 5000000] [--rounds 3] [--json out.json]

instead loads the same graph written twice, its ids as integers and as words (``user_1234567``),
with ``graphdist data info`` in a child process per load, the two alternated for ``--rounds``:
median seconds and peak RSS of each, and their ratios (what word ids cost a user).
"""
from __future__ import annotations

import json
import os

import numpy as np

import harness


def _write(path: str, edges: int) -> None:
    rng = np.random.default_rng(0)
    with open(path + ".tmp", "w") as f:
        f.write("# random edge list for benchmarks/edgelist_read.py\n")
        for lo in range(0, edges, 5_000_000):
            a = rng.integers(0, 4_000_000, (min(5_000_000, edges - lo), 2))
            np.savetxt(f, a, fmt="%d", delimiter="\t")
    os.replace(path + ".tmp", path)


def _words(path: str, out: str) -> None:
    """``path``'s edges with every id ``i`` written ``user_i``."""
    with open(path, "rb") as src, open(out + ".tmp", "wb") as f:
        for line in src:
            f.write(line if line.startswith(b"#") else b"user_" + line.replace(b"\t", b"\tuser_"))
    os.replace(out + ".tmp", out)


def _words_run(path: str, rounds: int) -> dict:
    import statistics
    words = path[:-4] + ".words.txt"
    if not os.path.exists(words):
        print(f"writing {words} ...", flush=True)
        _words(path, words)
    got = {"int64": [], "words": []}
    for r in range(rounds):
        for kind, f in (("int64", path), ("words", words))[::1 if r % 2 == 0 else -1]:
            run = harness.time_v(harness.graphdist_cmd("data", "info", f"edgelist:{f}", "--json"), 3600)
            assert run.rc == 0, run.stderr[-2000:]
            got[kind].append((run.wall_s, run.peak_rss_kib))
            print(f"{kind:<6} {run.wall_s:7.1f} s  peak {run.peak_rss_kib / 2**20:5.2f} GiB", flush=True)
    res = {"file": path, "words_file": words, "rounds": rounds}
    for kind, runs in got.items():
        res[f"{kind}/load_s"] = statistics.median(w for w, _ in runs)
        res[f"{kind}/peak_gib"] = round(statistics.median(m for _, m in runs) / 2**20, 2)
    res["ratio_words_vs_int64/load_s"] = round(res["words/load_s"] / res["int64/load_s"], 2)
    res["ratio_words_vs_int64/peak"] = round(res["words/peak_gib"] / res["int64/peak_gib"], 2)
    return res


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--edges", type=int, default=30_000_000)
    p.add_argument("--file", default=None, help="an existing edge list to read instead")
    p.add_argument("--skip-loadtxt", action="store_true", help="leave out the slow np.loadtxt run")
    p.add_argument("--words", action="store_true", help="load the graph with integer and with word ids instead")
    p.add_argument("--rounds", type=int, default=3, help="--words: alternated loads of each")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    path = a.file or f"/tmp/graphdist_edges_{a.edges}.txt"
    if not os.path.exists(path):
        print(f"writing {path} ...", flush=True)
        _write(path, a.edges)
    if a.words:
        res = _words_run(path, a.rounds)
        print(json.dumps(res))
        harness.write_json(a.json, res)
        return res
    mb = os.path.getsize(path) / 1e6
    from graphdist.data import load_graph
    from graphdist.data.table import read_table

    def bare():
        raw = open(path, "rb").read()
        np.fromstring(raw[raw.index(b"\n") + 1:], dtype=np.int64, sep=" ")

    res = {"file": path, "mb": round(mb, 1)}
    runs = [("read_table", lambda: read_table(path, 2)), ("fromstring", bare)]
    if not a.skip_loadtxt:
        runs.append(("loadtxt", lambda: np.loadtxt(path, dtype=np.int64, usecols=(0, 1))))
    runs.append(("load_graph", lambda: load_graph(f"edgelist:{path}")))
    for name, fn in runs:
        s = harness.timed(fn)
        res[f"{name}/s"] = round(s, 2)
        res[f"{name}/mb_per_s"] = round(mb / s, 1)
        print(f"{name:<11} {s:7.2f} s  {mb / s:7.1f} MB/s", flush=True)
    res["ratio_read_table_vs_fromstring"] = round(res["read_table/mb_per_s"] / res["fromstring/mb_per_s"], 3)
    print(json.dumps(res))
    harness.write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
