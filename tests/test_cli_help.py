"""What a new user meets first: every command describes itself, and the commands that take a
dataset spec list the spec kinds of their domain; ``--resume`` without a checkpoint refuses in
one line and creates nothing."""
from __future__ import annotations

import argparse

import pytest

from graphdist.cli import build_parser, main


def _sub(name: str) -> argparse.ArgumentParser:
    p = build_parser()
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("name, kinds", [("partition", ["sbm:", "edgelist:FILE"]), ("compare", ["rmat:"]),
                                         ("quality", []), ("demo", []), ("train-gcn", ["planetoid:ROOT/NAME"]),
                                         ("train-rec", ["ratings:FILE", "rec-synth:"]),
                                         ("train-dlrm", ["criteo:PATH", "criteo-synth:"])])
def test_every_command_has_a_description_and_lists_its_spec_kinds(name, kinds):
    p = _sub(name)
    assert p.description and len(p.description) > 40, name
    text = p.format_help()
    for k in kinds:
        assert f"\n  {k}" in text, (name, k)
    if name in ("train-rec", "train-dlrm"):  # a ratings or clicks command lists its own kinds only
        assert "\n  sbm:" not in text


@pytest.mark.parametrize("cmd", ["train-gcn", "train-rec"])
def test_resume_without_a_checkpoint_creates_nothing(tmp_path, capsys, cmd):
    spec = "sbm:nodes=200,classes=2,avg_degree=4,features=4" if cmd == "train-gcn" else "rec-synth:users=50,items=30"
    ck = tmp_path / "never" / "ck"
    assert main([cmd, spec, "--checkpoint-dir", str(ck), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"graphdist: error: --resume: no checkpoint in {ck} (does not exist)"]
    assert not (tmp_path / "never").exists()
    ck.mkdir(parents=True)
    assert main([cmd, spec, "--checkpoint-dir", str(ck), "--resume", "--no-progress"]) == 2
    assert "(has no 'latest' file)" in capsys.readouterr().err


def test_data_info_lists_every_spec_kind():
    from graphdist.specs import KINDS
    p = _sub("data")
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    text = action.choices["info"].format_help()
    assert all(f"\n  {name}:" in text for name in KINDS), text
