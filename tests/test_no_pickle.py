"""No pickle from the network: what graphdist's ranks exchange travels as tensors, or as JSON text
in a byte tensor that the receiver parses (:func:`graphdist.comm.all_gather_json`). Read from the
product's code: no object collective of torch's (``all_gather_object``, ``broadcast_object_list``,
... and torchrec's ``collective_plan``, which broadcasts a pickled plan), no ``pickle`` /
``torch.load`` without ``weights_only=True`` / ``np.load`` that allows pickles. (torch's own
internals that pickle, its store and DCP, are torch's: the multi-node guide says what they trust.)"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from graphdist.testing import run_ranks

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("graphdist", "embeddings", "partitioners")
EXEMPT = {"graphdist/testing.py": "the test helper: results of its own forked children over a local pipe",
          "graphdist/data/planetoid.py": "the Planetoid dataset's own files are pickles (local files, never a peer's), "
                                         "read by an unpickler that builds only arrays, CSR matrices and lists"}
OBJECT_CALLS = {"all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                "send_object_list", "recv_object_list", "collective_plan", "invoke_on_rank_and_broadcast_result",
                "read_pickle"}
PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal", "shelve"}


def _kw(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def unpickling(path: Path) -> list[str]:
    """Where ``path`` may unpickle what it receives or reads: see the module docstring."""
    found = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            found += [f"{n.lineno}: import {a.name}" for a in n.names if a.name.split(".")[0] in PICKLERS]
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] in PICKLERS:
            found.append(f"{n.lineno}: from {n.module}")
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            if name in OBJECT_CALLS:
                found.append(f"{n.lineno}: {name}")
            elif name == "load" and base == "torch":
                w = _kw(n, "weights_only")
                if not (isinstance(w, ast.Constant) and w.value is True):
                    found.append(f"{n.lineno}: torch.load without weights_only=True")
            elif name == "load" and base in ("np", "numpy"):
                a = _kw(n, "allow_pickle")
                if not (isinstance(a, ast.Constant) and a.value is False):
                    found.append(f"{n.lineno}: np.load without allow_pickle=False")
    return found


MODULES = sorted(p for root in PRODUCT for p in (REPO / root).rglob("*.py"))


def test_the_product_unpickles_nothing():
    found = {p.relative_to(REPO).as_posix(): unpickling(p) for p in MODULES}
    assert {k: v for k, v in found.items() if v and k not in EXEMPT} == {}


def test_the_reader_sees_each_kind(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("import pickle\nimport numpy as np\nimport torch\nfrom graphdist import comm\n"
                   "comm.all_gather_object(1)\ndist.broadcast_object_list([1])\nplanner.collective_plan(m, s, pg)\n"
                   "torch.load('f')\ntorch.load('f', weights_only=True)\nnp.load('f')\nnp.load('f', allow_pickle=False)\n"
                   "pickle.loads(b'')\n")
    got = unpickling(bad)
    assert len(got) == 6, got  # import, 3 object calls, torch.load, np.load (pickle.loads: the import)


def _gather(rank, world):
    from graphdist import comm
    mine = {"rank": rank, "x": [0.1 * rank, None, True, "é"], "t": (rank, 2)}
    got = comm.all_gather_json(mine)
    with pytest.raises(TypeError, match="not JSON"):
        comm.all_gather_json(object())  # (refused before anything is sent: every rank alike)
    evil = b"cos\nsystem\n(S'echo owned'\ntR."  # a pickle (protocol 0) that would run a command
    peer = comm.all_gather_bytes(evil if rank == 1 else b"[]")
    try:
        json.loads(peer[1])
        parsed = "parsed"
    except ValueError as e:
        parsed = type(e).__name__
    return got, parsed


def test_all_gather_json_carries_plain_values_and_parses_what_arrives():
    import numpy as np
    from graphdist import comm
    assert comm.all_gather_json((1, np.int64(2), np.float32(0.5))) == [[1, 2, 0.5]]  # one rank: the same types
    got, parsed = run_ranks(_gather, 2, timeout=120)[0]
    assert got == [{"rank": r, "x": [0.1 * r, None, True, "é"], "t": [r, 2]} for r in range(2)]
    assert parsed == "JSONDecodeError"  # a peer's pickle is text that does not parse, never an object
