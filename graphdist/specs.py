"""Dataset specs: one grammar and one parser for every kind of data (graphs, click logs, ratings).

    SPEC := KIND ":" [PATH] ("," KEY "=" VALUE)*

    sbm:nodes=2000,classes=4                     generated, no path
    edgelist:graph.txt,directed=1                a path, then options
    criteo-synth:                                all defaults

A kind belongs to one *domain* (``graph``, ``clicks``, ``ratings``); a command asks for the
domain it trains on, and a spec of another domain is refused naming both. Every kind is listed
in :data:`KINDS` with its options and their defaults (the option's type is its default's type);
an unknown option, a value of the wrong type or a missing path is a
:class:`~graphdist.errors.SpecError` that names the spec. The loader is imported only when the
kind is used (``"module:function"``), so this module depends on nothing but the error family.

Relative paths are looked up in the working directory, then in the data homes
(``$GRAPHDIST_DATA``, then ``<repo>/datasets``).
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from graphdist.errors import MissingFileError, SpecError

__all__ = ["Kind", "Spec", "KINDS", "parse_spec", "load_spec", "data_homes", "resolve_path", "kinds_help"]


@dataclass(frozen=True)
class Kind:
    """One data kind: its domain, loader, options and what its path names."""

    name: str
    """The text before the colon."""
    domain: str
    """``graph``, ``clicks`` or ``ratings``."""
    loader: str
    """``module:function``; called as ``f(path, **options)`` (or ``f(**options)`` without a path)."""
    options: dict = field(default_factory=dict)
    """Option names and defaults; the default's type is the option's type."""
    path: str = ""
    """What the path names (``"edge list"``); empty: the kind takes no path."""
    hint: str = ""
    """Where to get the file, appended to a 'not found' error."""


@dataclass(frozen=True)
class Spec:
    """A parsed spec: kind, resolved path (or None) and every option (defaults filled in)."""

    kind: Kind
    path: Path | None
    options: dict
    text: str

    def load(self, **extra):
        """Call the kind's loader with the path, the options and ``extra`` keyword arguments."""
        mod, fn = self.kind.loader.split(":")
        f = getattr(importlib.import_module(mod), fn)
        kw = {**self.options, **extra}
        return f(self.path, **kw) if self.kind.path else f(**kw)


_SBM = {"nodes": 20000, "classes": 8, "avg_degree": 20.0, "homophily": 0.7, "features": 32,
        "signal": 0.35, "train": 0.1, "val": 0.1, "seed": 0}
_RMAT = {"scale": 14, "edge_factor": 16, "a": 0.57, "b": 0.19, "c": 0.19, "features": 0,
         "classes": 0, "seed": 0}

KINDS: dict[str, Kind] = {k.name: k for k in [
    Kind("sbm", "graph", "graphdist.data.synthetic:sbm_graph", _SBM),
    Kind("rmat", "graph", "graphdist.data.synthetic:rmat_graph", _RMAT),
    Kind("planetoid", "graph", "graphdist.data.planetoid:load_planetoid", {}, "Planetoid dataset folder",
         "Cora: copy the raw files of kimiyoung/planetoid (data/ind.cora.*) into ROOT/Cora/raw/; CiteSeer, "
         "PubMed: python scripts/fetch_planetoid.py (datasets/planetoid/README.md)"),
    Kind("ogb", "graph", "graphdist.data.files:load_ogb", {"split": "", "directed": False}, "OGB directory",
         "unpack the dataset zip from the OGB site so that raw/ and split/ sit in one folder"),
    Kind("edgelist", "graph", "graphdist.data.files:load_edgelist",
         {"features": "", "labels": "", "directed": False, "self_loops": False, "train": 0.0, "val": 0.0, "seed": 0},
         "edge list"),
    Kind("npz", "graph", "graphdist.data.files:load_npz",
         {"symmetrize": False, "self_loops": True, "features": "", "labels": ""}, "npz file"),
    Kind("criteo", "clicks", "embeddings.criteo:load_criteo", {}, "Criteo file or directory",
         "download the Kaggle/Terabyte TSV; see datasets/criteo_kaggle/README.md"),
    Kind("clicks", "clicks", "embeddings.clicks:load_clicks", {"label": "label", "dense": "", "sparse": ""},
         "click log", "a Parquet file or a folder of *.parquet parts: a label, number columns and id columns"),
    Kind("criteo-synth", "clicks", "embeddings.synth:generate",
         {"rows": 100_000, "scale": 0.01, "alpha": 1.1, "pooling": 1, "seed": 0, "shuffle_labels": 0}),
    Kind("ratings", "ratings", "graphdist.rec.data:load_ratings_file",
         {"min_rating": 0.0, "split": "random", "test": 0.2, "seed": 0}, "ratings file",
         "one interaction per line: user item [rating [timestamp]] (e.g. MovieLens u.data, ratings.dat, ratings.csv)"),
    Kind("lightgcn", "ratings", "graphdist.rec.data:load_lightgcn", {}, "LightGCN data directory",
         "a folder with train.txt and test.txt, one line per user: user item item ... (the LightGCN repositories' data/)"),
    Kind("rec-synth", "ratings", "graphdist.rec.synth:rec_synth",
         {"users": 2000, "items": 1000, "avg_items": 20.0, "dim": 8, "signal": 3.0, "popularity": 1.0,
          "test": 0.2, "seed": 0}),
]}
"""Every data kind graphdist reads, by name."""


_SHOWN_PATH = {"planetoid": "ROOT/NAME", "ogb": "DIR", "edgelist": "FILE", "npz": "FILE", "criteo": "PATH",
               "clicks": "PATH",
               "ratings": "FILE", "lightgcn": "DIR"}


def kinds_help(*domains: str) -> str:
    """The spec kinds of ``domains`` with their options and defaults, for a command's ``--help``."""
    lines = ["dataset specs (KIND:[PATH][,key=value...]):"]
    for k in KINDS.values():
        if domains and k.domain not in domains:
            continue
        opts = ",".join(f"{o}={v}" for o, v in k.options.items())
        head = f"{k.name}:{_SHOWN_PATH.get(k.name, '')}"
        lines.append(f"  {head:<22} {k.domain:<8} {opts}" if opts else f"  {head:<22} {k.domain}")
    lines.append("relative paths: the working directory, then the data homes ($GRAPHDIST_DATA, then <repo>/datasets)")
    return "\n".join(lines)


def data_homes() -> list[Path]:
    """The data homes, searched in this order: the folders ``$GRAPHDIST_DATA`` names (one, or
    several separated by ``:``), then ``<repo>/datasets``. A folder of one's own adds to the
    repository's data home, it does not hide it (CiteSeer fetched into ``datasets/`` stays found)."""
    env = [Path(d).expanduser() for d in os.environ.get("GRAPHDIST_DATA", "").split(os.pathsep) if d]
    repo = Path(__file__).resolve().parents[1] / "datasets"
    return [*env, *([repo] if repo not in env else [])]


def resolve_path(p: str, *, what: str, hint: str = "") -> Path:
    """An existing path: as given, else under the first data home that has it; else
    MissingFileError."""
    path = Path(p).expanduser()
    if path.exists():
        return path
    if not path.is_absolute():
        for home in data_homes():
            if (home / p).exists():
                return home / p
    tail = f"; {hint}" if hint else ""
    homes = ", ".join(map(str, data_homes()))
    near = _one_folder_down(p)
    if near:  # (then how to get the data is beside the point)
        tail = f"; it is at {near} in the data home: write {near}"
    raise MissingFileError(f"{what} {p!r} not found (also looked in the data home {homes}){tail}")


def _one_folder_down(p: str) -> str | None:
    """``FOLDER/p`` where a data home has ``p`` one folder down (``Cora`` for ``planetoid/Cora``,
    a SNAP file in ``snap/``): the path a user who left out the folder meant."""
    if Path(p).is_absolute():
        return None
    for home in data_homes():
        try:
            folders = sorted(d for d in home.iterdir() if d.is_dir())
        except OSError:
            continue
        for d in folders:
            if (d / p).exists():
                return f"{d.name}/{p}"
    return None


def _convert(spec: str, key: str, value: str, default):
    try:
        if isinstance(default, bool):
            low = value.lower()
            if low in ("1", "true", "yes"):
                return True
            if low in ("0", "false", "no"):
                return False
            raise ValueError
        if isinstance(default, int):
            try:
                return int(value)
            except ValueError:
                f = float(value)  # 1e5
                if not f.is_integer():
                    raise
                return int(f)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise SpecError(f"{spec}: {key}={value!r} is not a valid {type(default).__name__}") from None
    return value


def _kinds_of(domain: str | None) -> str:
    return ", ".join(sorted(k for k, v in KINDS.items() if domain is None or v.domain == domain))


def _path_hint(text: object, domain: str | None) -> str:
    """For a spec that is only the path of a file or folder that exists: the spec(s) to write."""
    from pathlib import Path
    p = Path(text) if isinstance(text, str) and text else None
    if p is None or not p.exists():
        return ""
    if p.is_dir():  # an OGB folder holds raw/edge.csv.gz, a Planetoid one raw/ind.NAME.*
        graph = "ogb" if (p / "raw" / "edge.csv.gz").exists() else "planetoid"
        by_domain = {"graph": graph, "clicks": "criteo", "ratings": "lightgcn"}
    else:
        by_domain = {"graph": "npz" if p.suffix == ".npz" else "edgelist", "clicks": "criteo", "ratings": "ratings"}
    kinds = [by_domain[domain]] if domain in by_domain else list(by_domain.values())
    return "; for this " + ("folder" if p.is_dir() else "file") + ": " + " or ".join(f"{k}:{text}" for k in kinds)


def parse_spec(text: str, domain: str | None = None) -> Spec:
    """Parse ``text``; with ``domain``, refuse kinds of another domain. Paths are resolved."""
    what = f"{domain} " if domain else ""
    if not isinstance(text, str) or ":" not in text:
        raise SpecError(f"dataset spec {text!r} must look like KIND:ARGS ({what}kinds: {_kinds_of(domain)})"
                        + _path_hint(text, domain))
    name, rest = (s.strip() for s in text.split(":", 1))
    kind = KINDS.get(name.lower())
    if kind is None:
        raise SpecError(f"unknown dataset kind {name!r} in {text!r} ({what}kinds: {_kinds_of(domain)})")
    if domain is not None and kind.domain != domain:
        raise SpecError(f"{text!r} is {kind.domain} data, but this command needs {domain} data "
                        f"(kinds: {_kinds_of(domain)})")
    parts = rest.split(",") if rest else []
    path = None
    if kind.path:  # leading parts without '=' (commas allowed in a path) form the path
        head = parts[:1]  # the first part is always the path; it continues up to the first k=v
        parts = parts[1:]
        while parts and "=" not in parts[0]:
            head.append(parts.pop(0))
        raw = ",".join(head).strip()
        if not raw:
            raise SpecError(f"{name}: needs a path, e.g. {name}:FILE")
        path = resolve_path(raw, what=kind.path, hint=kind.hint)
    opts = dict(kind.options)
    for p in (p.strip() for p in parts):
        if not p:
            continue
        if "=" not in p:
            raise SpecError(f"{text}: argument {p!r} is not key=value")
        k, v = (s.strip() for s in p.split("=", 1))
        if k not in kind.options:
            allowed = ", ".join(sorted(kind.options)) or "none"
            raise SpecError(f"{name}: unknown argument {k!r} (allowed: {allowed})")
        opts[k] = _convert(name, k, v, kind.options[k])
    return Spec(kind, path, opts, text)


def load_spec(text: str, domain: str | None = None):
    """Parse and load: a ``Graph``, ``ClickData`` or ratings object, by the kind's domain."""
    return parse_spec(text, domain).load()
