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


def _pages() -> list:
    """README.md and every page of the docs site (``docs/**/*.md``) but the benchmark pages:
    the details page's commands write placeholders (``--layers L``) that tests/test_benchmarks.py
    fills and parses, and the history keeps superseded figures with the commands that made them."""
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    skip = {"benchmarks-details.md", "benchmarks-history.md"}
    return [repo / "README.md", *sorted(p for p in (repo / "docs").rglob("*.md")
                                        if "hooks" not in p.parts and p.name not in skip)]


def test_the_checks_read_the_readme_and_every_guide():
    names = {p.relative_to(p.parents[1]).as_posix() if p.parent.name == "guides" else p.name for p in _pages()}
    assert {"README.md", "guides/gcn.md", "guides/dlrm.md", "guides/recommender.md", "guides/pyg.md"} <= names, names


def _readme_commands(text: str | None = None) -> list[str]:
    """Every ``graphdist ...`` command the README and the docs pages show: lines of their fenced
    blocks (joined across backslash continuations, ``$ `` prompts dropped) and inline code spans."""
    import re
    if text is None:
        return [c for p in _pages() for c in _readme_commands(p.read_text())]
    out, in_block, cur = [], False, ""
    for ln in text.splitlines():
        if ln.startswith("```"):
            in_block, cur = not in_block, ""
            continue
        if in_block:
            cur += ln.rstrip("\\").strip() + " "
            if not ln.rstrip().endswith("\\"):
                cmd = cur.strip().removeprefix("$ ")
                cur = ""
                for part in cmd.split("&&"):
                    if part.strip().startswith("graphdist "):
                        out.append(part.strip())
        else:
            # in prose, a command with its arguments (not a mention such as `graphdist partition`)
            out += [m for m in re.findall(r"`(graphdist [^`]+)`", ln) if len(m.split()) >= 4]
    return out


def test_every_documented_command_parses_with_the_cli_flags():
    """A command in the README or the docs uses the CLI's own flags (one once named a benchmark
    script's ``--dataset``); placeholders such as SPEC, K or ``...`` are filled in before parsing."""
    import shlex
    cmds = _readme_commands()
    assert len(cmds) > 40
    fill = {"SPEC": "sbm:", "K": "2", "N": "2", "DIR": "d", "FILE": "f", "FILE.png": "f.png", "R.json": "r.json",
            "HOST:PORT": "h:1", "GIB": "1", "B": "8", "P": "0.5", "MIN:MAX": "1:2"}
    bad, parser = [], build_parser()  # parsing leaves a parser as it was: one serves every command
    for cmd in cmds:
        if "..." in cmd or "[" in cmd or "|" in cmd or "<" in cmd:
            continue  # a synopsis, not a command
        words = [fill.get(w, w) for w in shlex.split(cmd.split(" #")[0])[1:]]
        try:
            parser.parse_args(words)
        except SystemExit as e:
            if e.code:
                bad.append(cmd)
    assert bad == [], bad


def test_every_flag_the_docs_name_is_a_cli_flag():
    """A flag in the prose of the README or a docs page (`` `--flag ...` ``) is one of the CLI's,
    or belongs to the script the sentence names (listed here with it)."""
    import re
    scripts = {"--dest": "scripts/fetch_planetoid.py", "--bits": "examples/gat_cora.py",
               "--test": "scripts/install.sh", "--rdzv-": "torchrun's --rdzv-* family", "--local-addr": "torchrun's own flag",
               "--local-ranks-filter": "torchrun's flag, also python -m graphdist.gnn.pyg.run's",
               "--runs": "PyG's citation benchmark scripts", "--random": "PyG's --random_splits (citation benchmark)"}
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    flags = {o for sp in sub.choices.values() for a in sp._actions for o in a.option_strings}
    text = "\n".join(p.read_text() for p in _pages())
    named = set(re.findall(r"`(--[a-z0-9-]+)[^`]*`", text))
    assert len(named) > 50
    assert sorted(named - flags - set(scripts)) == []


def test_resume_takes_auto_and_max_restarts_a_count(tmp_path, capsys):
    from graphdist import config
    from graphdist.checkpoint import resuming
    from graphdist.gnn.config import GCNConfig
    p = _sub("train-gcn")
    ck = str(tmp_path / "ck")

    def cfg(*argv):
        return config.from_namespace(GCNConfig, p.parse_args(["sbm:", "--checkpoint-dir", ck, *argv]))
    assert (cfg().resume, cfg("--resume").resume, cfg("--resume", "auto").resume) == (False, True, "auto")
    assert cfg("--max-restarts", "2").nodes.max_restarts == 2
    assert not resuming(cfg("--resume", "auto"))  # nothing to continue from: a fresh start
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "latest").write_text("step_00000004\n")
    assert resuming(cfg("--resume", "auto")) and resuming(cfg("--resume")) and not resuming(cfg())
    assert main(["train-gcn", "sbm:", "--resume", "maybe"]) == 2
    assert main(["train-gcn", "sbm:nodes=50", "--max-restarts", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "argument --resume: invalid choice: 'maybe'" in err[0]
    assert err[1] == "graphdist: error: --max-restarts must be >= 0, got -1"


def test_a_flag_error_names_its_command_and_where_its_flags_are_listed(capsys):
    """An unknown flag is reported by argparse's top-level parser; the line names the (sub)command
    it was given to and the --help that lists that command's flags, in one line."""
    assert main(["train-gcn", "sbm:nodes=50", "--bogus", "1"]) == 2
    assert main(["data", "info", "sbm:nodes=50", "--nope"]) == 2
    assert main(["plan", "sbm:nodes=50", "--parts", "two"]) == 2
    assert main(["data"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["graphdist: error: train-gcn: unrecognized arguments: --bogus 1 (run graphdist train-gcn --help)",
                   "graphdist: error: data info: unrecognized arguments: --nope (run graphdist data info --help)",
                   "graphdist: error: plan: argument --parts: invalid int value: 'two' (run graphdist plan --help)",
                   "graphdist: error: data: the following arguments are required: SUBCOMMAND (run graphdist data --help)"]
    for cmd in (["train-gcn"], ["data", "info"], ["plan"], ["data"]):
        assert main([*cmd, "--help"]) == 0
