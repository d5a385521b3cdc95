"""``--halo auto``: the exact mode with the lower predicted epoch time, resolved before anything
is built, recorded in the report, equal to the same run with that mode given; and the wire width
per layer and direction under ``--halo-error``, chosen after a calibrating first epoch."""
from __future__ import annotations

import json
import pytest

from graphdist.gnn.auto import choose_bits
from graphdist.gnn.plan import PlanConfig, plan
from graphdist.exchange.quant import row_bytes
from tests.cli_ranks import run_cli

SPEC = "sbm:nodes=3000,classes=4,avg_degree=12,features=32,seed=0"
RUN = ["train-gcn", SPEC, "--parts", "2", "--method", "metis", "--hidden", "16", "--epochs", "3", "--no-progress"]


def _train(tmp_path, name, flags):
    """``graphdist train-gcn ... --nproc 2`` on two ranks forked as torchrun's workers (no launcher)."""
    rep = tmp_path / f"{name}.json"
    [(code, text)] = run_cli([RUN + ["--nproc", "2", "--report", str(rep), *flags]], 2)
    assert code == 0, text[-3000:]
    return json.loads(rep.read_text()), text


def test_auto_picks_a_mode_and_trains_as_that_mode(tmp_path):
    # a slow modelled link: bytes decide, and mvc moves fewer of them on this graph
    auto, err = _train(tmp_path, "auto", ["--halo", "auto", "--link-gbps", "0.05", "--halo-error", "0"])
    choice = auto["comm/halo_auto"]
    assert set(choice["modes"]) == {"plain", "mvc"} and choice["link"].startswith("given")
    b = {m: d["comm/halo_bytes_per_epoch"] for m, d in choice["modes"].items()}
    assert b["mvc"] < b["plain"]
    assert choice["chosen"] == auto["comm/halo"] == "mvc"
    assert "--halo auto: mvc" in err
    # the prediction's bytes are the trainer's own count of the chosen mode
    assert b["mvc"] == auto["comm/halo_bytes_per_epoch"]
    # the chosen mode given by hand: the same run, bit for bit
    fixed, _ = _train(tmp_path, "mvc", ["--halo", "mvc", "--link-gbps", "0.05"])
    assert fixed["losses"] == auto["losses"] and fixed["comm/halo_auto"] is None


def test_auto_on_a_measured_link(tmp_path):
    auto, _ = _train(tmp_path, "auto", ["--halo", "auto", "--halo-error", "0"])
    choice = auto["comm/halo_auto"]
    assert choice["link"] == "measured at start-up" and choice["link_bytes_per_s"] > 0
    assert choice["link_latency_s"] >= 0
    fastest = min(choice["modes"], key=lambda m: (choice["modes"][m]["time/epoch_s"], m != "mvc"))
    assert auto["comm/halo"] == choice["chosen"] == fastest
    assert choice["modes"][fastest]["comm/halo_bytes_per_epoch"] == auto["comm/halo_bytes_per_epoch"]


def test_plan_auto_is_the_fastest_exact_mode_of_its_table(monkeypatch):
    import functools

    from graphdist.gnn import plan_time
    for name in ("codec_rates", "measured_rates"):  # this machine's rates, timed once for both plans
        monkeypatch.setattr(plan_time, name, functools.cache(getattr(plan_time, name)))
    base = dict(spec=SPEC, parts=2, method="metis", hidden=16, spmm_rate=1e9)
    chosen = {}
    for gbps in (0.05, 1000.0):
        out = plan(PlanConfig(halo="auto", link_gbps=gbps, **base))
        exact = [c for c in out["comm/choices"] if c["exact"]]
        assert out["comm/halo"] == exact[0]["comm/halo"]
        assert out["comm/halo_bytes_per_epoch"] == exact[0]["comm/halo_bytes_per_epoch"]
        chosen[gbps] = out["comm/halo"]
    assert chosen[0.05] == "mvc"


def _calib(rows, width, norm2, err2, secs=(0.0,) * 4, hidden=0.0):
    """One rank's calibration record: rows sent and received, width, squared norm, err^2 at
    16..2, seconds to encode and decode at 16..2 (0: not timed), compute between post and wait."""
    return [rows, rows, width, norm2, *err2, *secs, hidden]


def test_choose_bits_takes_the_fastest_width_within_the_budget():
    # relative errors sqrt(err2 / norm2): 16 bit 1e-4, 8 bit 0.005, 4 bit 0.08, 2 bit 0.4
    err2 = [1e-8, 2.5e-5, 6.4e-3, 0.16]
    ranks = [{("forward", 0): _calib(1000, 16, 0.5, [e / 2 for e in err2]),
              ("backward", 0): _calib(1000, 16, 0.5, [e / 2 for e in err2])},
             {("forward", 0): _calib(3000, 16, 0.5, [e / 2 for e in err2]),
              ("backward", 0): _calib(3000, 16, 0.5, [e / 2 for e in err2])}]
    fast_codec = {16: 1e12, 8: 1e12, 4: 1e12, 2: 1e12}
    slow = choose_bits(ranks, 0.01, 1e6, fast_codec, 1)   # a slow link: the narrowest width the budget allows
    assert slow["forward"] == slow["backward"] == [8]
    ex = {e["direction"]: e for e in slow["exchanges"]}["forward"]
    assert ex["expected_rel_error"] == pytest.approx(0.005)
    # the slowest rank (3000 rows each way: its link carries 6000) sets the time; codec time is
    # the values it encodes and decodes
    assert ex["seconds"] == pytest.approx(6000 * row_bytes(16, 8) / 1e6 + 6000 * 16 / 1e12)
    assert ex["seconds_at_32"] == pytest.approx(6000 * 64 / 1e6)
    assert choose_bits(ranks, 0.1, 1e6, fast_codec, 1)["forward"] == [4]
    assert choose_bits(ranks, 0.0, 1e6, fast_codec, 1)["forward"] == [32]   # no budget: exact
    # a fast link and a slow codec: encoding costs more than the bytes it saves
    fast = choose_bits(ranks, 0.5, 1e12, {16: 1e6, 8: 1e6, 4: 1e6, 2: 1e6}, 1)
    assert fast["forward"] == fast["backward"] == [32]
    # timed codecs and the compute that hides the transfer: 3000 rows each way at 1e6 B/s are
    # 0.384 s at 32 bits; hidden 0.3 s leaves 0.084 s, and 16 and 8 bits (0.216 and 0.12 s on the
    # wire) are hidden but cost 0.1 s of codec: 32 bits wins; with 0.02 s of codec at 16 bits and
    # 0.01 s at 8, 8 bits wins (0.01 s)
    timed = [{("forward", 0): _calib(3000, 16, 0.5, [e / 2 for e in err2], (0.1,) * 4, hidden=0.3)}]
    got = choose_bits(timed, 0.01, 1e6, fast_codec, 1)
    assert got["forward"] == [32] and got["exchanges"][0]["seconds"] == pytest.approx(0.384 - 0.3)
    timed[0][("forward", 0)][8:12] = [0.02, 0.01, 0.01, 0.01]
    got = choose_bits(timed, 0.01, 1e6, fast_codec, 1)
    assert got["forward"] == [8] and got["exchanges"][0]["seconds"] == pytest.approx(0.01)
    # a layer that sent nothing keeps 32 bits; errors are per direction
    one = [{("forward", 1): _calib(10, 4, 1.0, [0.0, 1e-6, 1e-2, 1.0])}]
    got = choose_bits(one, 0.01, 1e6, fast_codec, 2)
    assert got["forward"] == [32, 8] and got["backward"] == [32, 32]


# a link so slow (2 Mbit/s) that the bytes decide the widths, not the timed codec or a stall of
# the compute that hides the transfer on a loaded box: the choice is the same on every run
AUTO = ["--halo", "auto", "--link-gbps", "0.002", "--halo-error", "0.01"]


def test_auto_bits_calibrate_send_fewer_bytes_within_the_budget_and_resume(tmp_path):
    ck = tmp_path / "ck"
    auto, err = _train(tmp_path, "bits", AUTO + ["--epochs", "4", "--checkpoint-dir", str(ck), "--checkpoint-every",
                                                 "1", "--keep-checkpoints", "4"])
    bits = auto["comm/halo_auto"]["bits"]
    assert min(bits["forward"] + bits["backward"]) < 32, bits
    assert "--halo auto: bits forward" in err
    # the first epoch is exact (calibration): the same loss as the exact run of that mode
    exact, _ = _train(tmp_path, "exact", ["--halo", auto["comm/halo"], "--link-gbps", "0.002", "--epochs", "4"])
    assert auto["losses"][0] == exact["losses"][0] and auto["losses"][1:] != exact["losses"][1:]
    # later epochs move fewer bytes, and the measured error of each exchange is within the budget
    assert auto["comm/halo_bytes_per_epoch"] < exact["comm/halo_bytes_per_epoch"]
    for d in ("forward", "backward"):
        for layer, e in enumerate(auto["comm/halo_rel_error"][d]):
            if bits[d][layer] < 32 and e is not None:
                assert e <= 0.01, (d, layer, e)
    assert f"bits {'/'.join(map(str, bits['forward']))} forward" in err and ", lossy: rows rounded" in err
    # comm/halo_bits is what the run sent, not the 32 of --halo-bits
    every = set(bits["forward"] + bits["backward"])
    assert auto["comm/halo_bits"] == (every.pop() if len(every) == 1 else
                                      {"forward": bits["forward"], "backward": bits["backward"]})
    # resumed from the unbroken run's own snapshot after epoch 2, the run keeps the mode and widths
    # that snapshot recorded (chosen by timing, so never measured again, whatever the load now):
    # the unbroken run's widths and losses, bit for bit
    import shutil
    again = tmp_path / "again"
    again.mkdir()
    shutil.copytree(ck / "step_00000002", again / "step_00000002")
    (again / "latest").write_text("step_00000002")
    resumed, _ = _train(tmp_path, "rest", AUTO + ["--epochs", "4", "--checkpoint-dir", str(again), "--resume"])
    assert resumed["losses"] == auto["losses"]
    assert resumed["comm/halo"] == auto["comm/halo"] and resumed["comm/halo_auto"]["bits"] == bits
    assert resumed["run/decisions"]["halo"]["why"] == "the mode the resumed checkpoint recorded"
