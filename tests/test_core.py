"""The shared core: typed configs -> flags, the one spec grammar, CSR helpers, checkpoints."""
from __future__ import annotations

import argparse
import os
import warnings
from dataclasses import dataclass, field
from typing import Literal

import pytest
import torch

from graphdist import config
from graphdist.errors import ConfigError, MissingFileError, SpecError


@dataclass
class _Inner:
    width: int = 16
    """inner width"""
    sizes: list[int] = field(default_factory=lambda: [4, 2])
    """layer sizes"""


@dataclass
class _Cfg:
    spec: str = field(default="", metadata={"positional": True, "metavar": "SPEC"})
    """the data"""
    mode: Literal["a", "b"] = "a"
    """which mode"""
    rate: float = 0.5
    """a rate"""
    quiet: bool = False
    """say less"""
    progress: bool = True
    """a progress bar"""
    auto: bool | None = None
    """decided automatically"""
    timeout_s: float = field(default=3.0, metadata={"flag": "--timeout"})
    """seconds"""
    epochs: int = field(default=1, metadata={"group": "len"})
    """epochs"""
    steps: int | None = field(default=None, metadata={"group": "len"})
    """steps"""
    hidden: str = field(default="x", metadata={"cli": False})
    """not a flag"""
    inner: _Inner = field(default_factory=_Inner)
    """nested"""


def _parse(argv):
    p = argparse.ArgumentParser(exit_on_error=False)
    config.add_arguments(p, _Cfg)
    return p, config.from_namespace(_Cfg, p.parse_args(argv))


def test_flags_come_from_fields_with_docs_types_and_choices():
    p, cfg = _parse(["data", "--mode", "b", "--quiet", "--no-progress", "--no-auto", "--timeout", "7",
                     "--sizes", "8,4,2", "--width", "3", "--steps", "5"])
    assert cfg == _Cfg(spec="data", mode="b", quiet=True, progress=False, auto=False, timeout_s=7.0,
                       steps=5, inner=_Inner(width=3, sizes=[8, 4, 2]))
    text = p.format_help()
    assert "which mode (default: a)" in text and "--timeout" in text and "--hidden" not in text
    assert "turn off: a progress bar" in text and "layer sizes (default: 4,2)" in text
    _, d = _parse(["data"])
    assert d == _Cfg(spec="data")  # nothing else given: exactly the dataclass defaults
    with pytest.raises(argparse.ArgumentError):
        _parse(["data", "--mode", "c"])
    with pytest.raises(argparse.ArgumentError):
        _parse(["data", "--sizes", "8,x"])


def test_field_docs_of_top_level_nested_and_local_classes():
    """Each field's help is the string after it, wherever the class is written: at the top of a
    module, inside another class, or in a function (whose class the module's top does not hold)."""
    class Holder:
        @dataclass
        class Local:
            a: int = 1
            """the a"""
            b: str = "x"
    assert config.field_docs(_Inner) == {"width": "inner width", "sizes": "layer sizes"}
    assert config.field_docs(Holder.Local) == {"a": "the a"}
    assert config.field_docs(_Cfg)["timeout_s"] == "seconds"


def test_mutually_exclusive_group():
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        _parse(["data", "--epochs", "2", "--steps", "3"])


def test_json_round_trip_and_choices_check():
    cfg = _Cfg(spec="s", mode="b", inner=_Inner(width=5))
    assert config.from_json(_Cfg, config.to_json(cfg)) == cfg
    config.check_choices(cfg)
    with pytest.raises(ConfigError, match="--mode must be one of a, b, got 'z'"):
        config.check_choices(_Cfg(mode="z"))
    with pytest.raises(ValueError, match="unknown config keys"):
        config.from_dict(_Cfg, {"nope": 1})


def test_every_command_builds_its_parser():
    from graphdist.cli import build_parser
    from graphdist.cli import main
    build_parser()
    assert main(["train-gcn", "--help"]) == 0 and main(["train-dlrm", "--help"]) == 0


def test_spec_grammar():
    from graphdist.specs import parse_spec
    s = parse_spec("sbm:nodes=1e3,homophily=0.5")
    assert s.options["nodes"] == 1000 and s.options["homophily"] == 0.5 and s.path is None
    s = parse_spec("criteo-synth:")
    assert s.kind.domain == "clicks" and s.options["rows"] == 100_000
    with pytest.raises(SpecError, match="unknown argument 'bogus'"):
        parse_spec("sbm:bogus=1")
    with pytest.raises(SpecError, match="nodes='x' is not a valid int"):
        parse_spec("sbm:nodes=x")
    with pytest.raises(SpecError, match="is clicks data, but this command needs graph data"):
        parse_spec("criteo-synth:", "graph")
    with pytest.raises(SpecError, match="must look like KIND:ARGS"):
        parse_spec("sbm")


def test_spec_paths_may_hold_commas_and_resolve_in_the_data_home(tmp_path, monkeypatch):
    from graphdist.specs import parse_spec
    f = tmp_path / "a,b.txt"
    f.write_text("0 1\n")
    s = parse_spec(f"edgelist:{f},directed=1")
    assert s.path == f and s.options["directed"] is True
    monkeypatch.setenv("GRAPHDIST_DATA", str(tmp_path))
    assert parse_spec("edgelist:a,b.txt").path == tmp_path / "a,b.txt"
    with pytest.raises(MissingFileError, match="edge list 'nope.txt' not found"):
        parse_spec("edgelist:nope.txt")


def test_index2ptr_matches_pyg():
    from torch_geometric.index import index2ptr as pyg_i2p
    from torch_geometric.index import ptr2index as pyg_p2i

    from graphdist.sparse import coo_to_csr, index2ptr, lex_order, ptr2index
    rows = torch.tensor([0, 0, 2, 2, 2, 5])
    assert torch.equal(index2ptr(rows, 7), pyg_i2p(rows, 7))
    ptr = index2ptr(rows, 7)
    assert torch.equal(ptr2index(ptr), pyg_p2i(ptr)) and torch.equal(ptr2index(ptr), rows)
    ip, cols, vals = coo_to_csr(torch.tensor([1, 0, 1]), torch.tensor([0, 2, 1]), torch.tensor([1., 2., 3.]), 2, 3)
    assert ip.tolist() == [0, 1, 3] and cols.tolist() == [2, 0, 1] and vals.tolist() == [2., 1., 3.]
    big = 2**40  # the fused key would overflow int64: two stable sorts instead
    major, minor = torch.tensor([3, 1, 3, 1]), torch.tensor([big - 1, 5, 2, big - 2])
    assert lex_order(major, minor, 2**40).tolist() == [1, 3, 2, 0]


def test_index2ptr_widens_past_2_31_entries(monkeypatch):
    """int32 row ids give an int32 pointer only while the entry count fits: past 2^31 entries the
    pointer's last values would wrap. (2^31 + 1 ids as a zero-stride view: no 8 GiB array.)"""
    from graphdist import sparse
    seen = {}
    monkeypatch.setattr(torch, "_convert_indices_from_coo_to_csr",
                        lambda index, size, out_int32: seen.setdefault("narrow", []).append(out_int32))
    for n in (2**31 - 2, 2**31 + 1):
        sparse.index2ptr(torch.zeros((), dtype=torch.int32).expand(n), 1)
    sparse.index2ptr(torch.zeros(3, dtype=torch.int64), 1)
    assert seen["narrow"] == [True, False, False]


def test_checkpointer_keeps_the_newest_and_is_atomic(tmp_path):
    from graphdist.checkpoint import Checkpointer
    ck = Checkpointer(tmp_path / "ck", keep=2)
    assert ck.latest() is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP notes that it runs without a process group
        for step in (1, 2, 3):
            ck.save(step, {"w": torch.arange(3.0) * step}, {"note": f"s{step}"})
        assert sorted(os.listdir(tmp_path / "ck")) == ["latest", "step_00000002", "step_00000003"]
        state = {"w": torch.zeros(3)}
        meta = ck.load(ck.latest(), state)
    assert meta == {"step": 3, "world_size": 1, "note": "s3"} and state["w"].tolist() == [0.0, 3.0, 6.0]
    (tmp_path / "ck" / "latest").write_text("step_00000009\n")
    with pytest.raises(Exception, match="not a complete snapshot"):
        ck.latest()


def test_peak_rss_is_this_process_not_the_one_that_started_it():
    """The kernel carries ``ru_maxrss`` over fork and exec, so a job started from a large process
    (a pytest run, a notebook) would report that process's size as its own peak."""
    import json
    import subprocess
    import sys
    big = bytearray(400 * 2**20)
    big[::4096] = b"\1" * len(big[::4096])  # 400 MiB resident in this process
    code = ("import json, resource; from graphdist.memory import peak_rss_bytes; "
            "print(json.dumps([peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))")
    mine, inherited = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                check=True).stdout)
    del big
    assert inherited > 400 * 2**20  # the kernel's figure, as the bug saw it
    assert mine < 300 * 2**20, mine  # python + torch, without this process's 400 MiB
