"""Typed dataclass configs: the one mechanism behind every command's flags and its workers.

A command's configuration is one dataclass. Each field has a type, a default and a docstring
(the string literal under it); :func:`add_arguments` turns them into argparse flags, so the help
text, the choices and the defaults live in one place::

    @dataclass
    class GCNConfig:
        model: Literal["gcn", "sage"] = "gcn"
        \"\"\"gcn (Kipf & Welling) or sage (GraphSAGE mean with root weight).\"\"\"

    --model {gcn,sage}    gcn (Kipf & Welling) or sage (...). (default: gcn)

Mapping from a field to its flag:

    foo_bar: int / float / str        --foo-bar VALUE
    Literal["a", "b"]                 --foo-bar {a,b}
    bool, default False / True        --foo-bar  /  --no-foo-bar
    bool | None (tri-state)           --foo-bar / --no-foo-bar (None = decide automatically)
    list[int]                         --foo-bar 64,32
    int | Literal["auto"]             --foo-bar N|auto  (a number, or one of the words)
    a nested dataclass                its fields, at the top level

``field(metadata=...)`` adjusts a field: ``flag`` (another flag name), ``positional`` (a
positional argument), ``required``, ``cli=False`` (not a flag), ``group`` (flags of one group
are mutually exclusive), ``metavar``.

Workers never re-parse a command line: the parent sends the config as JSON (:func:`to_json`)
and the worker rebuilds it with :func:`from_json`.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import types
import typing
from typing import Any, Literal, get_args, get_origin

__all__ = ["add_arguments", "from_namespace", "to_dict", "from_dict", "to_json", "from_json",
           "field_docs", "flag_name", "check_choices"]


@functools.lru_cache(maxsize=None)
def _module_tree(filename: str) -> ast.Module:
    """A source file parsed once per process (every config class of a module is read from it)."""
    with open(filename, encoding="utf-8") as f:
        return ast.parse(f.read(), filename)


def _class_node(klass) -> ast.ClassDef | None:
    """The ``class`` statement of ``klass`` (by its qualified name) in its module's parsed source."""
    try:
        filename = inspect.getsourcefile(klass)
    except TypeError:
        return None
    if filename is None:
        return None
    try:
        body = _module_tree(filename).body
    except (OSError, SyntaxError):
        return None
    node = None
    for name in klass.__qualname__.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:  # a class made in a function (`<locals>`): inspect finds it by its line
            try:
                return ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
            except (OSError, TypeError, SyntaxError):
                return None
        body = node.body
    return node


@functools.lru_cache(maxsize=None)
def field_docs(cls) -> dict[str, str]:
    """``{field: docstring}`` from the string literals that follow each annotated field."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        node = _class_node(klass)
        if node is None:  # no source (frozen app): flags without help
            continue
        body = node.body
        for node, nxt in zip(body, body[1:] + [None]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict[str, Any]:
    """The resolved annotations of ``cls`` (evaluated once per class: every field reads them)."""
    return typing.get_type_hints(cls)


def _unoptional(tp) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _number_or_word(tp) -> tuple[type, tuple[str, ...]] | None:
    """``int | Literal["auto", ...]`` (or float) -> ``(int, ("auto", ...))``; else None."""
    if get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    args = get_args(tp)
    nums = [a for a in args if a in (int, float)]
    lits = [a for a in args if get_origin(a) is Literal]
    if len(nums) != 1 or len(lits) != 1 or len(args) != 2:
        return None
    return nums[0], tuple(str(w) for w in get_args(lits[0]))


def _number_or_word_type(num: type, words: tuple[str, ...]):
    def parse(text: str):
        if text in words:
            return text
        try:
            return num(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if num is int else 'a number'} or "
                                             f"{' or '.join(words)}, got {text!r}") from None
    return parse


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _fields(cls):
    """Flattened ``(owner class, field)`` pairs; nested dataclass fields come out at the top, the
    :class:`RunConfig` fields a trainer's config inherits after its own (the order of ``--help``)."""
    hints = _hints(cls)
    run = {f.name for f in dataclasses.fields(RunConfig)} if issubclass(cls, RunConfig) else set()
    fields = dataclasses.fields(cls)
    for f in [f for f in fields if f.name not in run] + [f for f in fields if f.name in run]:
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _fields(tp)
        else:
            yield cls, f


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _show(v) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def add_arguments(parser: argparse.ArgumentParser, cls, *, skip: tuple[str, ...] = ()) -> None:
    """Add one flag (or positional) per field of ``cls`` (and its nested dataclasses).

    Every flag defaults to ``None`` ("not given"), so :func:`from_namespace` can tell a given
    value from the dataclass default; the help shows the dataclass default."""
    groups: dict[str, Any] = {}
    for owner, f in _fields(cls):
        if f.name in skip or not f.metadata.get("cli", True):
            continue
        tp, optional = _unoptional(_hints(owner)[f.name])
        doc = field_docs(owner).get(f.name, "").replace("%", "%%")  # argparse formats help with %
        default = _default(f)
        target = parser
        if "group" in f.metadata:
            g = f.metadata["group"]
            if g not in groups:
                groups[g] = parser.add_mutually_exclusive_group()
            target = groups[g]
        kw: dict[str, Any] = {"dest": f.name, "default": None}
        if f.metadata.get("required"):
            kw["required"] = True
        if f.metadata.get("positional"):
            kw.pop("dest")
            target.add_argument(f.name, nargs="+" if get_origin(tp) is list else "?" if optional or default else None,
                                default=None, help=doc, metavar=f.metadata.get("metavar", f.name.upper()))
            continue
        flag = flag_name(f)
        words = [a for a in get_args(tp) if isinstance(a, str)] if get_origin(tp) is Literal else []
        if words and {True, False} <= set(a for a in get_args(tp) if isinstance(a, bool)):
            # a switch that also takes a word: `--resume` (True) or `--resume auto`
            target.add_argument(flag, nargs="?", const=True, choices=words, metavar="|".join(words),
                                help=f"{doc} (the flag alone: yes)", **kw)
            continue
        if tp is bool and optional:
            kw["action"] = argparse.BooleanOptionalAction
            target.add_argument(flag, help=doc + " (default: automatic)", **kw)
            continue
        if tp is bool:
            if default:
                target.add_argument("--no-" + flag[2:], action="store_false", help="turn off: " + doc, **kw)
            else:
                target.add_argument(flag, action="store_true", help=doc, **kw)
            continue
        either = _number_or_word(tp)
        if either is not None:
            kw["type"] = _number_or_word_type(*either)
            kw["metavar"] = f.metadata.get("metavar", "|".join(("N" if either[0] is int else "X",) + either[1]))
        elif get_origin(tp) is Literal:
            kw["choices"] = list(get_args(tp))
            kw["type"] = type(kw["choices"][0])
        elif get_origin(tp) is list:
            kw["type"] = _int_list
            kw["metavar"] = f.metadata.get("metavar", "N,N,...")
        elif tp in (int, float, str):
            kw["type"] = tp
            kw["metavar"] = f.metadata.get("metavar", {int: "N", float: "X", str: "VALUE"}[tp])
        else:  # pragma: no cover - a config author error
            raise TypeError(f"{owner.__name__}.{f.name}: unsupported flag type {tp!r}")
        shown = ("" if default is None or f.metadata.get("required")
                 else f" (default: {_show(default)})".replace("%", "%%"))
        target.add_argument(flag, help=doc + shown, **kw)


def from_namespace(cls, ns: argparse.Namespace, **overrides):
    """A ``cls`` instance: dataclass defaults, replaced by the flags given in ``ns``."""
    hints = _hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            kw[f.name] = from_namespace(hints[f.name], ns)
        elif f.name in overrides:
            kw[f.name] = overrides[f.name]
        else:
            v = getattr(ns, f.name, None)
            if v is not None:
                kw[f.name] = v
    return cls(**kw)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(cls, d: dict):
    """Inverse of :func:`to_dict` (nested dataclasses rebuilt; unknown keys are an error)."""
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown config keys {sorted(unknown)}")
    kw = {}
    for k, v in d.items():
        tp = hints[k]
        kw[k] = from_dict(tp, v) if dataclasses.is_dataclass(tp) and isinstance(v, dict) else v
    return cls(**kw)


def to_json(cfg) -> str:
    return json.dumps(to_dict(cfg), sort_keys=True)


def from_json(cls, text: str):
    return from_dict(cls, json.loads(text))


def check_choices(cfg) -> None:
    """Raise :class:`~graphdist.errors.ConfigError` when a ``Literal`` field holds another value
    (library callers bypass argparse's ``choices``)."""
    from graphdist.errors import ConfigError
    hints = _hints(type(cfg))
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        tp, optional = _unoptional(hints[f.name])
        either = _number_or_word(tp)
        if dataclasses.is_dataclass(tp) and v is not None:
            check_choices(v)
        elif either is not None and not (isinstance(v, either[0]) and not isinstance(v, bool) or v in either[1]):
            kind = "an integer" if either[0] is int else "a number"
            raise ConfigError(f"{flag_name(f)} must be {kind} or {' or '.join(either[1])}, got {v!r}")
        elif get_origin(tp) is Literal and not (optional and v is None) and v not in get_args(tp):
            raise ConfigError(f"{flag_name(f)} must be one of {', '.join(map(str, get_args(tp)))}, got {v!r}")


@dataclasses.dataclass
class RunConfig:
    """The fields of a training run every trainer shares (``GCNConfig``, ``RecConfig``,
    ``DLRMTrainConfig`` extend it): its report, checkpoints, curves, resume and progress bar."""

    report: str | None = dataclasses.field(default=None, metadata={"metavar": "FILE"})
    """write the JSON report here (rank 0)"""
    checkpoint_dir: str | None = dataclasses.field(default=None, metadata={"metavar": "DIR"})
    """write torch.distributed.checkpoint snapshots into this directory (shared by all ranks)"""
    checkpoint_every: int = 10
    """checkpoint every N epochs (and at the last epoch)"""
    keep_checkpoints: int = 2
    """keep the newest N snapshots in --checkpoint-dir"""
    tensorboard: str | None = dataclasses.field(default=None, metadata={"metavar": "DIR"})
    """write the run's curves here for TensorBoard (loss, metrics, time, traffic, memory per
    epoch or step; rank 0): tensorboard --logdir DIR"""
    resume: Literal[False, True, "auto"] = False
    """continue from the latest checkpoint in --checkpoint-dir; auto: if there is one, else start
    (what a worker group restarted by --max-restarts needs)"""
    progress: bool = True
    """progress on rank 0: tqdm's bar on a terminal, whole lines in a log (graphdist.progress)"""
