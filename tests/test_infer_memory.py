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


def test_the_first_way_that_fits_every_machine_and_process_limit():
    """fits.choose, for all ranks in one process: a machine's ranks share its room, each rank
    has its own process limit, and the first way (fewest rounds) that fits both is taken."""
    from graphdist.fits import choose, shortfall
    two = [{"needs": [10, 6, 4], "machine": "a", "room": 13, "ceiling": None} for _ in range(2)]
    assert choose(two, "a") == 1  # 2 x 10 > 13, 2 x 6 <= 13
    assert choose([{**e, "room": 7} for e in two], "a") is None  # 2 x 4 > 7: the last way's line is raised
    assert "(8.00 GiB for the 2 rank(s)" in shortfall("x", "fix", [{**e, "need": 4 << 30, "room": 7 << 30}
                                                                   for e in two], "a")
    apart = [{**two[0], "machine": "a"}, {**two[1], "machine": "b"}]
    assert choose(apart, "a") == 0  # one rank a machine: 10 <= 13 on each
    capped = [{**apart[0], "ceiling": 5}, apart[1]]
    assert choose(capped, "b") == 2  # rank 0's own limit: 6 > 5 >= 4


def _rounds_job(rank, world_size, spec):
    """Each rank's inference need in 1, 2, 4 rounds, then the rounds check_infer_fits takes
    with the rank's process limit (ulimit -d) set between the 2- and the 4-round needs."""
    import resource

    import torch

    from graphdist.data import load_graph
    from graphdist.gnn.config import GCNConfig
    from graphdist.gnn.infer_memory import check_infer_fits, infer_memory
    from graphdist.gnn.stats import part_stats
    from graphdist.memory import resident_bytes
    from graphdist.partition.layout import build_layout
    from partitioners.sysmem import proc_status_bytes
    graph = load_graph(spec)
    part = torch.randint(0, world_size, (graph.num_nodes,), generator=torch.Generator().manual_seed(0))
    lg = build_layout(graph, part, rank, world_size)
    cfg = GCNConfig(layers=3, hidden=512, halo="plain", halo_rounds=0)
    ps = part_stats(lg)
    needs = [infer_memory(ps, GCNConfig(layers=3, hidden=512, halo="plain", halo_rounds=r), lg.x.shape[1], 4,
                          world_size, 512)["peak_bytes"] for r in (1, 2, 4)]
    target = (needs[1] + needs[2]) // 2
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (proc_status_bytes("VmData")["VmData"] + target - resident_bytes(), hard))
    try:
        chosen, figures = check_infer_fits(cfg, lg, 4, 512, torch.device("cpu"))
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    return needs, chosen, figures["need_bytes_per_rank"]


def test_infer_takes_the_fewest_halo_rounds_that_fit_its_process_limit():
    """A rank's halo buffers shrink with the rounds (20k halo rows x 512 floats a layer); with each
    rank's process limit between its 2- and 4-round needs, every rank takes 4 rounds (the same choice, from the gathered needs)."""
    from graphdist.testing import run_ranks
    spec = "sbm:nodes=40000,classes=4,avg_degree=10,homophily=0.8,features=64,seed=3"
    out = run_ranks(_rounds_job, 2, args=(spec,), timeout=180)
    for needs, chosen, per_rank in out:
        # two rounds hold two slices (one arriving while one is summed): the whole's buffers, then less
        assert needs[0] >= needs[1] > needs[2] and needs[1] - needs[2] > 16 << 20, needs
        assert chosen == 4
        assert per_rank == [o[0][2] for o in out]  # the 4-round need of every rank


def test_pattern_symmetry_by_hash_equals_the_transpose_check():
    """stats.pattern_symmetric (no transpose built, rows in chunks) says what comparing the owned
    block with its transpose says, with halo columns (>= n) in the rows, for every chunk size."""
    import numpy as np
    import scipy.sparse as sp

    from graphdist.gnn.stats import pattern_symmetric
    rng = np.random.default_rng(0)
    seen = set()
    for trial in range(40):
        n, halo = int(rng.integers(3, 120)), int(rng.integers(0, 30))
        m = sp.random(n, n, density=0.06, random_state=trial, format="csr")
        if trial % 2:
            m = m + m.T  # symmetric
        own = (m != 0).astype(np.int8).tocsr()
        h = sp.random(n, max(halo, 1), density=0.1 if halo else 0.0, random_state=trial + 99, format="csr")
        full = sp.hstack([own, (h != 0).astype(np.int8)]).tocsr()  # [owned | halo] columns, as a part's CSR
        full.sort_indices()
        want = (own != own.T).nnz == 0
        seen.add(want)
        for chunk in (1, 7, 1 << 22):
            assert pattern_symmetric(full.indptr, full.indices, n, chunk=chunk) == want, (trial, chunk)
    assert seen == {True, False}
