"""Dataset spec strings (``kind:arguments``) and the dispatcher :func:`load_graph`.

Kinds (DESIGN.md)::

    sbm:nodes=N,classes=C,avg_degree=D,homophily=H,features=F,seed=S   planted partition
    rmat:scale=S,edge_factor=E,seed=S                                  Graph500 R-MAT
    planetoid:ROOT/NAME                                                Cora, CiteSeer, PubMed raw
    ogb:DIR                                                            unpacked OGB node dataset
    edgelist:FILE[,features=F.npy,labels=L.npy,directed=1,self_loops=1]
    npz:FILE[,symmetrize=1]

Relative paths are tried against the working directory first, then the data home
(``$GRAPHDIST_DATA`` or ``<repo>/datasets``).
"""
from __future__ import annotations

import os
from pathlib import Path

from graphdist.errors import MissingFileError, SpecError

DEFAULT_SBM = "sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.7,features=32,seed=0"
"""The default synthetic graph (demo, ``graphdist data info`` with no spec)."""


def data_root() -> Path:
    """The data home: ``$GRAPHDIST_DATA`` or ``<repo>/datasets``."""
    env = os.environ.get("GRAPHDIST_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "datasets"


def resolve_path(p: str, *, what: str) -> Path:
    """An existing path: as given, else under the data home; else MissingFileError."""
    path = Path(p).expanduser()
    if path.exists():
        return path
    alt = data_root() / p
    if not path.is_absolute() and alt.exists():
        return alt
    raise MissingFileError(f"{what} {p!r} not found (also looked in the data home {data_root()})")


def _convert(kind: str, key: str, value: str, default):
    try:
        if isinstance(default, bool):
            if value.lower() in ("1", "true", "yes"):
                return True
            if value.lower() in ("0", "false", "no"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise SpecError(f"{kind}: argument {key}={value!r} is not a valid "
                        f"{type(default).__name__}") from None
    return value


def parse_args(kind: str, text: str, defaults: dict, *, positional: bool = False):
    """Parse ``[path,]k=v,...`` against ``defaults`` (types come from the defaults).

    Returns ``(path or None, dict)``; an unknown key is a SpecError listing the allowed ones."""
    parts = [p for p in text.split(",")] if text else []
    path = None
    if positional:
        head, opts = [], []
        for i, p in enumerate(parts):
            (opts if ("=" in p and i > 0) else head).append(p)
        path = ",".join(head).strip()
        if not path:
            raise SpecError(f"{kind}: needs a path, e.g. {kind}:FILE")
        parts = opts
    out = dict(defaults)
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if "=" not in p:
            raise SpecError(f"{kind}: argument {p!r} is not key=value")
        k, v = (s.strip() for s in p.split("=", 1))
        if k not in defaults:
            allowed = ", ".join(sorted(defaults)) or "none"
            raise SpecError(f"{kind}: unknown argument {k!r} (allowed: {allowed})")
        out[k] = _convert(kind, k, v, defaults[k])
    return path, out


def parse_spec(spec: str) -> tuple[str, str]:
    """``'kind:rest'`` -> ``(kind, rest)``; a spec without ``:`` is a SpecError."""
    if not isinstance(spec, str) or ":" not in spec:
        raise SpecError(f"dataset spec {spec!r} must look like KIND:ARGS (kinds: {', '.join(sorted(_KINDS))})")
    kind, rest = spec.split(":", 1)
    kind = kind.strip().lower()
    if kind not in _KINDS:
        raise SpecError(f"unknown dataset kind {kind!r} in {spec!r} (kinds: {', '.join(sorted(_KINDS))})")
    return kind, rest.strip()


def load_graph(spec: str):
    """Load (or generate) the graph a spec names. Raises GraphdistError subclasses on bad input."""
    kind, rest = parse_spec(spec)
    g = _KINDS[kind](rest)
    g.name = spec
    return g


def _sbm(rest):
    from graphdist.data.synthetic import SBM_DEFAULTS, sbm_graph
    _, a = parse_args("sbm", rest, SBM_DEFAULTS)
    return sbm_graph(**a)


def _rmat(rest):
    from graphdist.data.synthetic import RMAT_DEFAULTS, rmat_graph
    _, a = parse_args("rmat", rest, RMAT_DEFAULTS)
    return rmat_graph(**a)


def _planetoid(rest):
    from graphdist.data.files import load_planetoid
    path, _ = parse_args("planetoid", rest, {}, positional=True)
    return load_planetoid(path)


def _ogb(rest):
    from graphdist.data.files import load_ogb
    path, a = parse_args("ogb", rest, {"split": "", "directed": False}, positional=True)
    return load_ogb(resolve_path(path, what="OGB directory"), **a)


def _edgelist(rest):
    from graphdist.data.files import load_edgelist
    path, a = parse_args("edgelist", rest, {"features": "", "labels": "", "directed": False,
                                            "self_loops": False}, positional=True)
    return load_edgelist(resolve_path(path, what="edge list"), **a)


def _npz(rest):
    from graphdist.data.files import load_npz
    path, a = parse_args("npz", rest, {"symmetrize": False, "self_loops": True}, positional=True)
    return load_npz(resolve_path(path, what="npz file"), **a)


_KINDS = {"sbm": _sbm, "rmat": _rmat, "planetoid": _planetoid, "ogb": _ogb,
          "edgelist": _edgelist, "npz": _npz}
