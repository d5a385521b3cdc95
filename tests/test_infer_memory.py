"""``graphdist infer``'s memory check (issue 45): a rank whose process limit (``ulimit -d``) leaves
no room for its part's inference stops before the forward pass, in one line with the numbers; with
room it runs, and its estimate is within 15% of the peak it measured."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import once_per_run

TINY = "sbm:nodes=300,classes=3,avg_degree=6,homophily=0.8,features=6,seed=2"
SMALL = "sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.8,features=100,seed=0"
ROOT = Path(__file__).resolve().parents[1]


def _gd(*args) -> None:
    r = subprocess.run([sys.executable, "-m", "graphdist", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def _runs(root: Path) -> str:
    _gd("train-gcn", TINY, "--epochs", 1, "--hidden", 16, "--checkpoint-dir", root / "ck-tiny", "--no-progress")
    _gd("partition", SMALL, "--parts", 1, "--out", root / "art")
    _gd("train-gcn", "--partition", root / "art", "--epochs", 1, "--hidden", 512, "--checkpoint-dir", root / "ck",
        "--no-progress")
    return str(root)


LIMITED = """
import resource, sys
from graphdist.cli import main
from partitioners.sysmem import proc_status_bytes
root, out = sys.argv[1], sys.argv[2]
# every module infer uses imported, pyarrow's writer loaded (a tiny graph's run)
assert main(["infer", TINY, "--checkpoint-dir", root + "/ck-tiny", "--out", out + "-tiny"]) == 0
for room in (32 << 20, 2 << 30):  # too little for the part's inference (it loads in that), then enough
    resource.setrlimit(resource.RLIMIT_DATA, (proc_status_bytes("VmData")["VmData"] + room, resource.RLIM_INFINITY))
    code = main(["infer", "--partition", root + "/art", "--checkpoint-dir", root + "/ck", "--out", f"{out}-{room}",
                 "--report", f"{out}-{room}.json"])
    print("exit", code, flush=True)
"""


def test_infer_refuses_a_part_over_its_process_limit_and_estimates_the_peak(tmp_path_factory, tmp_path):
    root = once_per_run(tmp_path_factory, "infer-memory", _runs)
    code = f"TINY = {TINY!r}\n" + LIMITED
    r = subprocess.run([sys.executable, "-c", code, str(root), str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("exit")] == ["exit 2", "exit 0"], r.stdout + r.stderr
    err = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "inference of gcn 2x512 needs about" in err[0] and "GiB per rank, and a rank may hold only" in err[0]
    assert "(its process memory limit, ulimit -d / -v); use more ranks" in err[0], err[0]
    assert not (tmp_path / f"o-{32 << 20}").exists()  # refused before anything was written
    rep = json.loads((tmp_path / f"o-{2 << 30}.json").read_text())
    est, peak = rep["mem/estimate_bytes_per_rank"][0], rep["mem/peak_bytes_per_rank"][0]
    assert abs(est - peak) <= 0.15 * peak, (est, peak)
