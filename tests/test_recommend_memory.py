"""``graphdist recommend``'s and a recommender ``export``'s memory check (issue 45): a rank whose
process limit (``ulimit -d``) leaves no room for its part's propagation and ranking stops before
the table is read, in one line with the numbers and nothing written; with room it runs, and its
estimate is within 15% of the peak it measured."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import once_per_run

SPEC = "rec-synth:users=20000,items=1000,avg_items=5,seed=0"
ROOT = Path(__file__).resolve().parents[1]


def _runs(root: Path) -> str:
    from graphdist.cli import main
    assert main(["partition", SPEC, "--parts", "1", "--out", str(root / "art")]) == 0
    assert main(["train-rec", "--partition", str(root / "art"), "--dim", "512", "--steps", "1", "--epochs", "1",
                 "--checkpoint-dir", str(root / "ck"), "--no-progress"]) == 0
    return str(root)


LIMITED = """
import resource, sys
from graphdist.cli import main
from partitioners.sysmem import proc_status_bytes
root, out = sys.argv[1], sys.argv[2]
open(out + "-one.txt", "w").write("0\\n")  # every module recommend uses imported, the Parquet writer loaded
assert main(["recommend", "--partition", root + "/art", "--checkpoint-dir", root + "/ck", "--out", out + "-one",
             "--top-k", "20", "--users", out + "-one.txt"]) == 0
for cmd, room in (("recommend", 32 << 20), ("export", 32 << 20), ("recommend", 2 << 30)):
    resource.setrlimit(resource.RLIMIT_DATA, (proc_status_bytes("VmData")["VmData"] + room, resource.RLIM_INFINITY))
    args = ["--top-k", "20", "--report", f"{out}-{room}.json"] if cmd == "recommend" else []
    code = main([cmd, "--partition", root + "/art", "--checkpoint-dir", root + "/ck", "--out", f"{out}-{cmd}-{room}",
                 *args])
    print("exit", code, flush=True)
"""


def test_recommend_refuses_a_part_over_its_process_limit_and_estimates_the_peak(tmp_path_factory, tmp_path):
    root = once_per_run(tmp_path_factory, "recommend-memory", _runs)
    r = subprocess.run([sys.executable, "-c", LIMITED, str(root), str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("exit")] == ["exit 2", "exit 2", "exit 0"], (
        r.stdout + r.stderr)
    err = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(err) == 2 and "Traceback" not in r.stderr, r.stderr
    assert "recommend (top 20 for 20,000 users on this rank) needs about" in err[0], err[0]
    assert "export of the recommender's vectors needs about" in err[1], err[1]
    for line in err:
        assert "GiB per rank, and a rank may hold only" in line and "(its process memory limit, ulimit -d / -v)" in line
    assert not list(tmp_path.glob(f"o-*-{32 << 20}"))  # refused before anything was written
    rep = json.loads((tmp_path / f"o-{2 << 30}.json").read_text())
    est, peak = rep["mem/estimate_bytes_per_rank"][0], rep["mem/peak_bytes_per_rank"][0]
    assert abs(est - peak) <= 0.15 * peak, (est, peak)
