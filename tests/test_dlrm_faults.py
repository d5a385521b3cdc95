"""train-dlrm under failures, as a user meets them: Ctrl-C / SIGTERM (one line, exit 130 / 143,
resumable, SIGTERM checkpoints first), a rank that dies or fails with a local error (the peer
names it), unwritable outputs (exit 2 before any work), a report that cannot be written (the
summary was printed first), and a warning for an epoch of a few steps.

Faults are injected from here only: run as a script, this file is a ``graphdist`` entry point
whose rank RANK dies (``die``: ``os._exit(3)``, like a killed node) or raises (``raise``: a bug
in that rank) after step STEP, through the public ``callbacks`` of
:func:`embeddings.trainer.train`::

    python -m tests.test_dlrm_faults die|raise RANK STEP train-dlrm SPEC ...
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_ranks import run_cli

SPEC = "criteo-synth:rows=4000,scale=0.0005,seed=1"
SMALL = ["--batch-size", "64", "--embedding-dim", "8", "--dense-arch", "16", "--over-arch", "16",
         "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ROOT = Path(__file__).resolve().parents[1]


def _start(args):
    return subprocess.Popen([sys.executable, "-m", "graphdist", "train-dlrm", SPEC, *SMALL, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=ENV)


def _wait_for(path: Path, p, timeout: float = 240.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if p.poll() is not None:
            pytest.fail(f"job ended early ({p.returncode}): {p.communicate()[1][-3000:]}")
        if time.monotonic() - t0 > timeout:
            os.killpg(p.pid, signal.SIGKILL)
            pytest.fail(f"{path} did not appear within {timeout:.0f}s")
        time.sleep(0.2)


def _finish(p, timeout: float = 240.0):
    try:
        return p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("graphdist:")]


# one end-to-end signal test for train-dlrm (the loop is shared: SIGINT and the 1D layout are covered
# by train-gcn's signal tests and DLRM's own resume tests)
@pytest.mark.parametrize("sig, code, groups", [(signal.SIGTERM, 143, 2)], ids=["SIGTERM-2d"])
def test_signal_stops_after_a_step_with_one_line_and_resumes(tmp_path, sig, code, groups):
    ck = tmp_path / "ck"
    p = _start(["--nproc", "2", "--sparse-groups", str(groups), "--steps", "1000000",
                "--checkpoint-dir", str(ck), "--checkpoint-every", "20"])
    _wait_for(ck / "latest", p)
    os.killpg(p.pid, sig)  # as a terminal's Ctrl-C (SIGINT) or a scheduler's preemption (SIGTERM)
    _, err = _finish(p)
    assert p.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = _lines(err)
    name = signal.Signals(sig).name
    assert len(lines) == 1, err[-3000:]
    m = re.fullmatch(rf"graphdist: interrupted: {name} after step (\d+) of 1000000; latest checkpoint "
                     r"(\S+); continue with --resume", lines[0])
    assert m, lines[0]
    step, snap = int(m.group(1)), Path(m.group(2))
    assert snap.is_dir() and (ck / "latest").read_text().strip() == snap.name
    if sig == signal.SIGTERM:  # preemption: the stopping step itself is checkpointed
        assert snap.name == f"step_{step:08d}"
    done = int(snap.name.split("_")[1])
    rep = tmp_path / "r.json"
    # the resume on two ranks forked as torchrun's workers (the launcher's part ended above)
    [(rc, text)] = run_cli([["train-dlrm", SPEC, *SMALL, "--nproc", "2", "--sparse-groups", str(groups), "--steps",
                             str(done + 3), "--checkpoint-dir", str(ck), "--resume", "--report", str(rep)]], 2)
    assert rc == 0, text[-3000:]
    assert len(json.loads(rep.read_text())["losses"]) == done + 3


def _agent_store():
    """A TCPStore held by the test as torchrun's agent holds its own; ranks connect as clients."""
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def _ranks(mode: str, rank: int, step: int):
    """Two ranks as an external torchrun starts them; rank ``rank`` fails after step ``step``."""
    store = _agent_store()
    # as a module from the repository root: a script's own folder (tests/) would be sys.path[0]
    cmd = [sys.executable, "-m", "tests.test_dlrm_faults", mode, str(rank), str(step), "train-dlrm", SPEC,
           *SMALL, "--steps", "400"]
    procs = []
    for r in range(2):
        env = dict(ENV, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=ROOT))
    out = []
    try:
        for p in procs:
            out.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return procs, out


def test_dead_rank_is_named_by_its_peer():
    procs, out = _ranks("die", 1, 5)
    assert procs[1].returncode == 3
    assert procs[0].returncode == 2, out[0][1][-3000:]
    lines = [ln for ln in out[0][1].splitlines() if ln.startswith("graphdist: error:")]
    assert len(lines) == 1 and "rank 0: collective failed during step 6 of 400" in lines[0], out[0][1][-3000:]
    assert "rank 1 stopped responding" in lines[0], lines[0]


def test_local_error_is_itself_and_named_by_its_peer():
    procs, out = _ranks("raise", 1, 5)
    err1 = out[1][1]
    assert procs[1].returncode == 1, err1[-3000:]
    assert "RuntimeError: injected fault on rank 1" in err1 and "Traceback" in err1  # a bug keeps its traceback
    assert "graphdist: error: rank 1 of 2 failed with RuntimeError" in err1
    assert procs[0].returncode == 2, out[0][1][-3000:]
    lines = [ln for ln in out[0][1].splitlines() if ln.startswith("graphdist: error:")]
    assert len(lines) == 1 and "rank 1 failed: RuntimeError: injected fault on rank 1" in lines[0], lines


# --report and --checkpoint-dir go through the same check_run_outputs as train-gcn's (tests/test_launch.py)
@pytest.mark.parametrize("flag, make", [("--cache-dir", lambda d: str(d / "f"))])
def test_unwritable_output_is_one_line_before_any_work(tmp_path, flag, make, capsys):
    """In this process (``graphdist``'s exit status is what ``main`` returns)."""
    from graphdist.cli import main
    (tmp_path / "f").write_text("a file where a directory is needed")
    # a billion rows: a run that generated them before checking its outputs would not end within the timeout
    code = main(["train-dlrm", "criteo-synth:rows=1000000000", "--nproc", "2", flag, make(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphdist: error: {flag} "), err[-2000:]


def _job_report_fails(rank, world, report):
    import contextlib
    import io
    from unittest import mock

    from embeddings.config import DLRMTrainConfig
    from embeddings.job import worker
    from graphdist.launch import guarded
    cfg = DLRMTrainConfig(spec="criteo-synth:rows=2000,scale=0.0005", batch_size=32, steps=3,
                          progress=False, print_plan=False, report=report)
    out, err = io.StringIO(), io.StringIO()

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    with mock.patch("graphdist.fileio.atomic_write_json", full), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        code = guarded(worker, cfg)
    return code, out.getvalue(), err.getvalue()


def test_report_write_failure_says_the_result_is_above(tmp_path):
    from graphdist.testing import run_ranks
    code, out, err = run_ranks(_job_report_fails, 1, (str(tmp_path / "r.json"),), timeout=240)[0]
    assert code == 2
    assert out.strip().splitlines()[-1].startswith("auc ")  # the summary, printed before the write
    lines = _lines(err)
    assert len(lines) == 1 and "No space left on device" in lines[0] and "the summary above is the result" in lines[0]


def test_an_epoch_of_few_steps_and_oversized_tables_warn(tmp_path):
    """One line each, before training: the few steps, and tables of 20,000 rows for 1,600
    training rows (the data's own sizes, 16,935 rows in all, draw no table warning: below)."""
    # one rank forked as a torchrun worker (no fresh interpreter); what it printed, both streams
    [(rc, out)] = run_cli([["train-dlrm", "criteo-synth:rows=2000,scale=0.0005", "--batch-size", "512",
                            "--no-progress", "--num-embeddings-per-feature", ",".join(["20000"] * 26)]], 1)
    assert rc == 0, out[-3000:]
    warn = [ln for ln in out.splitlines() if "one epoch is only" in ln]
    assert len(warn) == 1, out[-3000:]
    assert "one epoch is only 3 steps (1600 training rows / --batch-size 512)" in warn[0]
    assert "use --batch-size 32 or smaller for >= 50 steps per epoch (50 at 32)" in warn[0]
    tables = [ln for ln in out.splitlines() if "tables hold" in ln]
    assert len(tables) == 1, out[-3000:]
    assert tables[0].startswith("warning: the 26 tables hold 520,000 rows (") and "191x more rows" in tables[0]
    assert "steps 3" in out


def _distinct(train) -> int:
    """Distinct hashed ids per feature, summed: counted here from the arrays."""
    import numpy as np
    cat = np.asarray(train.cat)[:, :, 0].astype(np.int64) % np.asarray(train.num_embeddings)
    return sum(np.unique(cat[:, f]).size for f in range(cat.shape[1]))


def _suggested(msg: str) -> dict:
    """The sizes a table warning suggests, as DLRMTrainConfig fields."""
    import re
    one = re.search(r"--num-embeddings (\d+) would fit", msg)
    if one:
        return {"num_embeddings": int(one.group(1))}
    per = re.search(r"--num-embeddings-per-feature ([0-9,]+) ", msg)
    return {"num_embeddings_per_feature": [int(x) for x in per.group(1).split(",")]}


@pytest.mark.parametrize("spec,sizes,advice", [
    # 1,600 training rows, tables of 100,000: one size for all would still be far too large
    ("criteo-synth:rows=2000,scale=0.0005", [100_000] * 26, "num_embeddings_per_feature"),
    # 8,000 training rows, the data's own sizes (up to 101,312 rows): one size fits
    ("criteo-synth:rows=10000", None, "num_embeddings")])
def test_table_warning_names_the_sizes_the_bound_and_sizes_that_fit(spec, sizes, advice):
    from embeddings.build import ROWS_PER_USED_ROW, load_splits, table_warning
    from embeddings.config import DLRMTrainConfig
    cfg = DLRMTrainConfig(spec=spec, num_embeddings_per_feature=sizes)
    train, _ = load_splits(cfg)
    total, used = sum(train.num_embeddings), _distinct(train)
    msg = table_warning(cfg, train)
    assert total > ROWS_PER_USED_ROW * used and "\n" not in msg
    # rows x (16 weights + 1 row-wise AdaGrad float) x 4 B
    mib = total * 17 * 4 / 2**20
    assert msg.startswith(f"the 26 tables hold {total:,} rows ({mib:.1f} MiB of weights and optimizer state) but "
                          f"the {len(train):,} training rows touch only {used:,} of them (distinct ids, counted): "
                          f"{total / used:.0f}x more rows than the data uses;"), msg
    fit = DLRMTrainConfig(spec=spec, **_suggested(msg))
    assert advice in _suggested(msg)
    assert table_warning(fit, load_splits(fit)[0]) is None  # what it suggests draws no warning


def test_no_table_warning_for_tables_the_data_fills():
    from embeddings.build import ROWS_PER_USED_ROW, load_splits, table_warning
    from embeddings.config import DLRMTrainConfig
    sane = DLRMTrainConfig(spec="criteo-synth:rows=2000,scale=0.0005")  # 16,935 rows, 6x the distinct ids
    train, _ = load_splits(sane)
    assert sum(train.num_embeddings) == 16_935 and 16_935 < ROWS_PER_USED_ROW * _distinct(train)
    assert table_warning(sane, train) is None


def test_table_warning_on_many_rows_bounds_by_the_id_count():
    """More rows than the id statistics read: the bound is rows x ids per row, not counted."""
    import numpy as np

    from embeddings.build import table_warning
    from embeddings.config import DLRMTrainConfig
    from embeddings.data import ID_STATS_ROWS, ClickData
    n = ID_STATS_ROWS + 10_000
    data = ClickData(np.zeros((n, 13), np.float32), np.zeros((n, 26, 1), np.uint32), np.zeros(n, np.float32),
                     [40_000_000] + [1_000_000] * 25)
    msg = table_warning(DLRMTrainConfig(), data)
    assert msg.startswith("the 26 tables hold 65,000,000 rows (4.1 GiB of weights and optimizer state)")
    assert "but the 60,000 training rows can touch at most 1,560,000 of them (ids per row x rows): 42x" in msg
    assert msg.endswith("--num-embeddings 300000 would fit (26 x 300,000 rows: 5x the rows the data can touch, "
                        "and at least the busiest feature's 60,000 ids)")
    data.num_embeddings = [300_000] * 26
    assert table_warning(DLRMTrainConfig(), data) is None


@pytest.mark.parametrize("n,batch,world,best", [(8000, 256, 1, 160), (8000, 256, 4, 160), (8000, 256, 3, 159),
                                                (1600, 512, 2, 32), (3999, 512, 8, 72)])
def test_epoch_warning_names_the_batch_size_that_gives_50_steps(n, batch, world, best):
    """The advice is a smaller batch (the largest multiple of the world size with >= 50 steps per
    epoch), never more epochs; that batch size draws no warning, the next multiple up does."""
    from embeddings.build import MIN_STEPS_PER_EPOCH, epoch_warning
    from embeddings.config import DLRMTrainConfig
    msg = epoch_warning(DLRMTrainConfig(batch_size=batch), n, world)
    assert msg.startswith(f"one epoch is only {n // batch} steps ({n} training rows / --batch-size {batch})")
    assert f"use --batch-size {best} or smaller for >= 50 steps per epoch ({n // best} at {best})" in msg
    assert "more --epochs will not help: more passes over the same few rows overfit them" in msg and "\n" not in msg
    assert best % world == 0 and n // best >= MIN_STEPS_PER_EPOCH
    assert epoch_warning(DLRMTrainConfig(batch_size=best), n, world) is None
    assert epoch_warning(DLRMTrainConfig(batch_size=best + world), n, world) is not None


def test_epoch_warning_when_no_batch_size_gives_50_steps():
    from embeddings.build import epoch_warning
    from embeddings.config import DLRMTrainConfig
    msg = epoch_warning(DLRMTrainConfig(batch_size=40), 120, 4)
    assert "even --batch-size 4 (one row per rank) gives only 30 steps per epoch: use more training rows" in msg


def _main(argv: list[str]) -> int:
    mode, bad_rank, bad_step = argv[0], int(argv[1]), int(argv[2])
    from embeddings import trainer
    real = trainer.train

    def train(cfg, device=None, callbacks=()):
        from graphdist import comm
        rank = comm.world()[0]

        def fault(step, loss):
            if rank == bad_rank and step == bad_step:
                if mode == "die":
                    os._exit(3)
                raise RuntimeError(f"injected fault on rank {rank}")
        return real(cfg, device, callbacks=[*callbacks, fault])

    trainer.train = train
    from graphdist.cli import main
    return main(argv[3:])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
