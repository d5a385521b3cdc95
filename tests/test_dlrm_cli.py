"""train-dlrm's command line as a user reads it (issue 16, item 8): the help is plain text, and
the Criteo bad-line error suggests ``--skip-bad-lines`` only where the command accepts it
(train-dlrm and data info), one line, exit 2."""
from __future__ import annotations

import json
import re

import pytest

from graphdist.cli import build_parser, main

REST = re.compile(r"``|:(?:class|func|mod|meth|attr|data|exc|obj|ref):`")


def _helps(parser, prog="graphdist"):
    """``{prog: help text}`` of ``parser`` and every subcommand under it."""
    import argparse
    out = {prog: parser.format_help()}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                out.update(_helps(sp, f"{prog} {name}"))
    return out


def test_every_help_is_plain_text_without_rest_markup():
    helps = _helps(build_parser())
    assert "graphdist train-dlrm" in helps and "graphdist data info" in helps
    bad = {prog: sorted({m.group(0) for m in REST.finditer(h)}) for prog, h in helps.items() if REST.search(h)}
    assert not bad, f"reST markup in --help: {bad}"


def test_train_dlrm_help_shows_the_examples(capsys):
    assert main(["train-dlrm", "--help"]) == 0
    out = capsys.readouterr().out
    assert "graphdist train-dlrm criteo-synth: --nproc 2 --sharding row_wise" in out
    assert "--skip-bad-lines" in out and "``" not in out


def _line(label="1", fields=26):
    return "\t".join([label, *["1"] * 13, *["0000000a"] * fields]) + "\n"


@pytest.fixture
def short_line_file(tmp_path):
    """Criteo TSV whose 3rd of 60 lines has 39 fields (one categorical missing)."""
    p = tmp_path / "day.txt"
    p.write_text("".join(_line(str(i % 2)) if i != 2 else _line("1", 25) for i in range(60)))
    return str(p)



@pytest.mark.parametrize("argv", [["data", "info"], ["train-dlrm", "--steps", "1", "--batch-size", "8",
                                                     "--no-progress"]])
def test_bad_line_suggests_a_flag_the_command_accepts(short_line_file, capsys, argv, restore_dist_env):
    cmd = [argv[0], *argv[1:2]] if argv[0] == "data" else argv
    rest = argv[2:] if argv[0] == "data" else []
    assert main([*cmd, f"criteo:{short_line_file}", *rest]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"graphdist: error: {short_line_file}:3: expected 40 tab-separated fields, got 39 "
                   "(use --skip-bad-lines to skip such lines)"], err
    # what it suggests works on the same command
    assert main([*cmd, f"criteo:{short_line_file}", *rest, "--skip-bad-lines"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if argv[0] == "data":
        rows = dict(ln.split("  ", 1) for ln in out.splitlines())
        assert rows["rows"].strip() == "59" and rows["bad lines skipped"].strip() == "1"
    else:
        assert out.strip().splitlines()[-1].startswith("auc ")


def test_data_info_skip_bad_lines_json_counts_them(short_line_file, capsys):
    assert main(["data", "info", f"criteo:{short_line_file}", "--skip-bad-lines", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows"] == 59 and s["bad_lines"] == 1


def test_data_info_skip_bad_lines_is_for_criteo_only(capsys):
    assert main(["data", "info", "criteo-synth:rows=200,scale=0.001", "--skip-bad-lines"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "graphdist: error: --skip-bad-lines applies to criteo: and clicks: specs only, not criteo-synth:"]
