"""What a ``train-gcn`` run decides before it builds anything (:mod:`graphdist.gnn.decide`): one
plain object, in the report as ``run/decisions``, and the same object from ``graphdist plan --json``
for the same inputs: the mode ``--halo auto`` picks, the exchange rounds, whether the input's halo
rows are held, and the reason for each. Decisions that rest on a measurement (the compute rates
of ``--halo auto``'s estimate, the free memory the rounds are checked against) agree in value;
their reasons carry the figures each side measured."""
from __future__ import annotations

import json

import pytest

from graphdist.cli import main
from tests.cli_ranks import run_cli
from tests.conftest import once_per_run

SPEC = "sbm:nodes=3000,classes=4,avg_degree=12,features=32,seed=0"
MEASURED = {"halo", "rounds"}  # their reasons carry figures measured at run time (rates, free memory)

CASES = {
    # a slow link: bytes decide the mode (mvc moves fewer rows here), not the measured compute rates
    "auto": ["--halo", "auto", "--link-gbps", "0.01", "--halo-error", "0"],
    "rounds-given": ["--halo", "plain", "--halo-rounds", "4", "--input-halo", "exchange"],
    "rounds-chosen": ["--halo", "mvc"],  # the fewest that fit, the input's rows held
    "not-held": ["--halo", "mvc", "--halo-bits", "8"],  # quantised rows: the input is exchanged
}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    def make(root):
        assert main(["partition", SPEC, "--parts", "2", "--method", "metis", "--out", str(root / "p2")]) == 0
        return root / "p2"
    return once_per_run(tmp_path_factory, "decisions_artifact", make)


def _run(tmp_path, art, flags) -> dict:
    rep = tmp_path / "r.json"
    [(code, text)] = run_cli([["train-gcn", "--partition", str(art), "--hidden", "16", "--epochs", "1",
                               "--no-progress", "--report", str(rep), *flags]], 2)
    assert code == 0, text[-3000:]
    return json.loads(rep.read_text())["run/decisions"]


def _plan(capsys, art, flags) -> dict:
    assert main(["plan", "--partition", str(art), "--hidden", "16", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["run/decisions"]


def _choices(dec: dict) -> dict:
    return {k: v for k, v in dec.items() if k not in ("memory", "estimates")}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_prints_the_decisions_the_run_takes(artifact, tmp_path, capsys, case):
    ran, planned = _run(tmp_path, artifact, CASES[case]), _plan(capsys, artifact, CASES[case])
    assert _choices(ran).keys() == _choices(planned).keys()
    for name, c in _choices(ran).items():
        p = planned[name]
        assert (c["asked"], c["value"]) == (p["asked"], p["value"]), (name, c, p)
        if name not in MEASURED:
            assert c["why"] == p["why"], (name, c, p)
    want = {"auto": ("mvc", 1, "resident"), "rounds-given": ("plain", 4, "exchange"),
            "rounds-chosen": ("mvc", 1, "resident"), "not-held": ("mvc", 1, "exchange")}[case]
    assert (ran["halo"]["value"], ran["rounds"]["value"], ran["input_halo"]["value"]) == want
    if case == "auto":
        assert ran["estimates"]["link"] == planned["estimates"]["link"]  # given: the same link
        modes = ran["estimates"]["modes"]
        assert modes["mvc"]["comm/halo_bytes_per_epoch"] < modes["plain"]["comm/halo_bytes_per_epoch"]
    if case == "not-held":
        assert ran["input_halo"]["why"] == "--halo-bits 8 quantises the exchanged rows"
