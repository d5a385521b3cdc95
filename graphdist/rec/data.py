"""Interaction data for graph recommenders: rating logs, the LightGCN train/test layout, and the
user-item graph built from them.

A :class:`Ratings` holds implicit-feedback interactions as ``(user, item)`` pairs with contiguous
ids, split into train and test. Its :attr:`~Ratings.graph` is the bipartite graph LightGCN
propagates over, as one :class:`graphdist.data.Graph` with **users first, then items**::

    node u            user u           (0 <= u < U)
    node U + i        item i           (0 <= i < I)
    edges             u <-> U + i for every training pair (both directions, no self-loops)

so every partitioner and quality tool works on it unchanged. Readers (the ``ratings`` and
``lightgcn`` kinds of :mod:`graphdist.specs`; ``rec-synth`` is in :mod:`graphdist.rec.synth`):

* ``ratings:FILE`` -- one interaction per line: user, item, then optionally a rating (or count)
  and a timestamp; tab, comma, ``;``, whitespace or ``::`` between fields (MovieLens ``u.data``,
  ``ratings.dat``, ``ratings.csv`` with its ``userId,movieId,...`` header line). Ids are remapped to
  0.. in ascending order of the original id (users and items separately). ``min_rating=R`` keeps
  interactions with rating >= R; ``split=random`` (default) holds out a ``test`` fraction of each
  user's interactions at random (``seed``), ``split=temporal`` each user's latest ones (needs the
  timestamp column), ``split=FILE`` reads the test interactions from another file of the same
  format (looked up as given, then beside the ratings file, then in the data home).
* ``lightgcn:DIR`` -- ``DIR/train.txt`` and ``DIR/test.txt`` of the LightGCN repositories, one
  line per user: ``user item item ...``; ids are used as given (0-based), ``U = max user + 1``,
  ``I = max item + 1`` over both files, as the reference code does.

Repeated pairs count once; test pairs that are also training pairs are dropped from the test set
(they are excluded from the ranking anyway). Every bad line is a
:class:`~graphdist.errors.DataFormatError` naming the file and line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from graphdist.errors import DataFormatError, MissingFileError, SpecError

__all__ = ["Ratings", "load_ratings", "load_ratings_file", "load_lightgcn", "split_per_user"]

_ID_LIMIT = 2.0 ** 53  # ids travel as float64 first: larger integers are not exact


@dataclass(eq=False)
class Ratings:
    """Train/test interactions of ``num_users`` users and ``num_items`` items."""

    num_users: int
    """U: users have ids 0..U-1 (and graph nodes 0..U-1)."""
    num_items: int
    """I: items have ids 0..I-1 (graph nodes U..U+I-1)."""
    train: torch.Tensor
    """``[n_train, 2]`` int64 (user, item) pairs, unique, sorted by (user, item)."""
    test: torch.Tensor
    """``[n_test, 2]`` int64 (user, item) pairs, unique, disjoint from train, sorted."""
    name: str = ""
    """Human-readable origin (the spec string)."""
    meta: dict = field(default_factory=dict)
    """Facts about the source (split, filter, dropped duplicates, ...)."""

    @property
    def num_nodes(self) -> int:
        return self.num_users + self.num_items

    @cached_property
    def graph(self):
        """The user-item graph (users, then items; both directions of every training pair)."""
        from graphdist.data import Graph
        u, i = self.train[:, 0], self.train[:, 1] + self.num_users
        g = Graph.from_edges(u, i, self.num_nodes, symmetrize=True)
        g.name = self.name
        g.meta = {"bipartite": {"users": self.num_users, "items": self.num_items}}
        return g

    def summary(self) -> dict:
        """Sizes for ``graphdist data info`` (density = interactions / (users x items))."""
        n = int(self.train.shape[0] + self.test.shape[0])
        cells = self.num_users * self.num_items
        g = self.graph
        return {"name": self.name, "users": self.num_users, "items": self.num_items, "interactions": n,
                "train": int(self.train.shape[0]), "test": int(self.test.shape[0]),
                "test_users": int(torch.unique(self.test[:, 0]).numel()) if self.test.numel() else 0,
                "density": n / cells if cells else 0.0, "nodes": g.num_nodes, "edges": g.num_edges,
                "fingerprint": g.fingerprint}


def load_ratings(spec: str) -> Ratings:
    """Load (or generate) the interactions a ``ratings``-domain spec names."""
    from graphdist.specs import load_spec
    r = load_spec(spec, "ratings")
    r.name = spec
    if "graph" in r.__dict__:
        r.graph.name = spec
    return r


# ------------------------------------------------------------------------------ splits
def _unique_pairs(pairs: np.ndarray, order_key: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows of ``pairs [n, 2]`` (first occurrence in ``order_key`` order, else file order);
    returns ``(pairs, index of the kept rows)``."""
    key = pairs[:, 0] * (int(pairs[:, 1].max()) + 1 if pairs.size else 1) + pairs[:, 1]
    order = np.argsort(order_key, kind="stable") if order_key is not None else np.arange(key.size)
    _, first = np.unique(key[order], return_index=True)
    keep = np.sort(order[first])
    return pairs[keep], keep


def split_per_user(users: np.ndarray, fraction: float, key: np.ndarray) -> np.ndarray:
    """Boolean test mask: for each user, the ``round(fraction * n_u)`` interactions with the
    largest ``key`` (a random number per interaction, or its timestamp)."""
    order = np.lexsort((-key, users))  # by user, then key descending
    u = users[order]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    counts = np.diff(np.r_[starts, u.size])
    rank = np.arange(u.size) - np.repeat(starts, counts)
    n_test = np.floor(fraction * counts + 0.5).astype(np.int64)
    mask = np.zeros(users.size, dtype=bool)
    mask[order] = rank < np.repeat(n_test, counts)
    return mask


def _pairs_tensor(pairs: np.ndarray, n_items: int) -> torch.Tensor:
    if pairs.size == 0:
        return torch.zeros((0, 2), dtype=torch.int64)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return torch.from_numpy(np.ascontiguousarray(pairs[order]).astype(np.int64))


def make_ratings(train: np.ndarray, test: np.ndarray, num_users: int, num_items: int, meta: dict) -> Ratings:
    """A :class:`Ratings` from id pairs: duplicates removed, test pairs seen in train dropped."""
    train, _ = _unique_pairs(train) if train.size else (train.reshape(0, 2), None)
    test, _ = _unique_pairs(test) if test.size else (test.reshape(0, 2), None)
    if train.size and test.size:
        tk = train[:, 0] * num_items + train[:, 1]
        sk = test[:, 0] * num_items + test[:, 1]
        seen = np.isin(sk, tk)
        meta["test_pairs_in_train_dropped"] = int(seen.sum())
        test = test[~seen]
    return Ratings(num_users, num_items, _pairs_tensor(train, num_items), _pairs_tensor(test, num_items),
                   meta=meta)


# ------------------------------------------------------------------------------ rating logs
def _first_data_line(block: bytes) -> tuple[int, int] | None:
    """``(start, end)`` byte offsets of the first non-blank, non-comment line of ``block``."""
    pos = 0
    while pos < len(block):
        end = block.find(b"\n", pos)
        end = len(block) if end < 0 else end
        s = block[pos:end].strip()
        if s and s[:1] not in (b"#", b"%"):
            return pos, end
        pos = end + 1
    return None


def _fields(line: bytes) -> list[bytes]:
    from graphdist.data.table import FIELD_SEPARATORS
    return line.replace(b"::", b"  ").translate(FIELD_SEPARATORS).split()


def _is_number(tok: bytes) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _read_log(path: Path):
    """``(values float64 [n, c], Table)`` with ``c`` = 2..4 fields of the first data line; a header
    line (a first data line whose first field is not a number) is skipped."""
    from graphdist.data import table as tb
    parts, firsts, lines = [], [], []
    first, ncols = 1, None
    for block in tb.blocks(path):
        if ncols is None:
            loc = _first_data_line(block)
            if loc is None:
                first += block.count(b"\n")
                continue
            s, e = loc
            toks = _fields(block[s:e])
            if not all(map(_is_number, toks)):  # a header such as userId,movieId,rating,timestamp: blank it
                block = block[:s] + b" " * (e - s) + block[e:]
                rest = _first_data_line(block[e:])
                if rest is None:
                    first += block.count(b"\n")
                    ncols = -1  # decided by the next block
                    continue
                toks = _fields(block[e + rest[0]:e + rest[1]])
                lineno = first + block[:e + rest[0]].count(b"\n")
            else:
                lineno = first + block[:s].count(b"\n")
            if len(toks) < 2:
                raise DataFormatError(path, f"expected at least 2 fields (user, item), got {len(toks)}", lineno)
            ncols = min(len(toks), 4)
        elif ncols == -1:
            loc = _first_data_line(block)
            if loc is None:
                first += block.count(b"\n")
                continue
            ncols = max(2, min(len(_fields(block[loc[0]:loc[1]])), 4))
        v, rows, n_lines = tb.parse_block(path, first, block, ncols, np.float64, "id")
        parts.append(v)
        firsts.append(first)
        lines.append(rows)
        first += n_lines
    if ncols is None or ncols < 0:
        raise DataFormatError(path, "no interactions found (expected lines: user item [rating [timestamp]])")
    values = np.concatenate(parts)
    return values, tb.Table(values, path, firsts, lines)


def _check_ids(values: np.ndarray, tab, path) -> None:
    for col, what in ((0, "user"), (1, "item")):
        v = values[:, col]
        bad = ~np.isfinite(v) | (v != np.floor(v)) | (np.abs(v) >= _ID_LIMIT)
        if bad.any():
            row = int(np.argmax(bad))
            raise DataFormatError(path, f"{what} id {float(v[row]):g} is not an integer id", tab.line_of(row))
    for col, what in ((2, "rating"), (3, "timestamp")):
        if values.shape[1] > col:
            bad = ~np.isfinite(values[:, col])
            if bad.any():
                row = int(np.argmax(bad))
                raise DataFormatError(path, f"{what} {float(values[row, col]):g} is not a finite number",
                                      tab.line_of(row))


def _read_interactions(path: Path, min_rating: float, need_time: bool):
    """``(user ids, item ids, timestamps or None)`` of the kept lines of one rating log."""
    values, tab = _read_log(path)
    if values.shape[0] == 0:
        raise DataFormatError(path, "no interactions found (expected lines: user item [rating [timestamp]])")
    _check_ids(values, tab, path)
    if min_rating > 0:
        if values.shape[1] < 3:
            raise DataFormatError(path, f"min_rating={min_rating:g} needs a rating column (3rd field), but the "
                                        f"lines have {values.shape[1]} fields", tab.line_of(0))
        values = values[values[:, 2] >= min_rating]
        if values.shape[0] == 0:
            raise DataFormatError(path, f"no interactions with rating >= {min_rating:g}")
    if need_time and values.shape[1] < 4:
        raise DataFormatError(path, f"split=temporal needs a timestamp column (4th field), but the lines have "
                                    f"{values.shape[1]} fields", tab.line_of(0))
    t = values[:, 3] if values.shape[1] >= 4 else None
    return values[:, 0].astype(np.int64), values[:, 1].astype(np.int64), t


def _resolve_split_file(text: str, beside: Path) -> Path:
    from graphdist.specs import data_homes
    p = Path(text).expanduser()
    for cand in (p, beside.parent / p, *(home / p for home in data_homes())):
        if cand.is_file():
            return cand
    raise MissingFileError(f"split file {text!r} not found (looked in the working directory, beside "
                           f"{beside.name} and in the data home {', '.join(map(str, data_homes()))})")


def load_ratings_file(path: Path, *, min_rating: float = 0.0, split: str = "random", test: float = 0.2,
                      seed: int = 0) -> Ratings:
    """The ``ratings:FILE`` kind (see the module docstring)."""
    path = Path(path)
    if not 0.0 < test < 1.0:
        raise SpecError(f"ratings: test={test} must lie strictly between 0 and 1")
    mode = split if split in ("random", "temporal") else "file"
    u, i, t = _read_interactions(path, min_rating, mode == "temporal")
    meta = {"source": str(path), "split": split, "min_rating": min_rating, "lines_kept": int(u.size)}
    if mode == "file":
        tpath = _resolve_split_file(split, path)
        tu, ti, _ = _read_interactions(tpath, min_rating, False)
        users, uinv = np.unique(np.concatenate([u, tu]), return_inverse=True)
        items, iinv = np.unique(np.concatenate([i, ti]), return_inverse=True)
        n = u.size
        train = np.stack([uinv[:n], iinv[:n]], 1)
        tst = np.stack([uinv[n:], iinv[n:]], 1)
    else:
        users, uinv = np.unique(u, return_inverse=True)
        items, iinv = np.unique(i, return_inverse=True)
        pairs = np.stack([uinv, iinv], 1)
        # a repeated pair counts once: its first line (its earliest one for a temporal split)
        pairs, kept = _unique_pairs(pairs, t if mode == "temporal" else None)
        if mode == "temporal":
            key = t[kept]
        else:
            key = torch.rand(pairs.shape[0], generator=torch.Generator().manual_seed(seed),
                             dtype=torch.float64).numpy()
        is_test = split_per_user(pairs[:, 0], test, key)
        train, tst = pairs[~is_test], pairs[is_test]
    meta["user_ids"] = [int(users.min()), int(users.max())]
    meta["item_ids"] = [int(items.min()), int(items.max())]
    return make_ratings(train, tst, int(users.size), int(items.size), meta)


# ------------------------------------------------------------------------------ LightGCN layout
def _read_user_lists(path: Path) -> np.ndarray:
    """``[n, 2]`` (user, item) pairs of a ``user item item ...`` file."""
    try:
        text = path.read_bytes()
    except OSError as e:
        raise MissingFileError(f"{path}: cannot read ({e.strerror or e})") from None
    users, items = [], []
    for lineno, line in enumerate(text.split(b"\n"), 1):
        toks = line.split()
        if not toks or toks[0][:1] in (b"#", b"%"):
            continue
        try:
            ids = np.array(toks, dtype=np.int64)
        except (ValueError, OverflowError):
            bad = next(t for t in toks if not t.lstrip(b"-").isdigit())
            raise DataFormatError(path, f"{bad.decode(errors='replace')!r} is not an integer id", lineno) from None
        if ids.min() < 0:
            raise DataFormatError(path, f"negative id {int(ids.min())}", lineno)
        users.append(np.full(ids.size - 1, ids[0], dtype=np.int64))
        items.append(ids[1:])
    if not users:
        return np.zeros((0, 2), dtype=np.int64)
    return np.stack([np.concatenate(users), np.concatenate(items)], 1)


def load_lightgcn(path: Path) -> Ratings:
    """The ``lightgcn:DIR`` kind: ``DIR/train.txt`` and ``DIR/test.txt`` (see the module docstring)."""
    d = Path(path)
    files = [d / "train.txt", d / "test.txt"]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise MissingFileError(f"lightgcn: {d} lacks {', '.join(missing)} (expected train.txt and test.txt with "
                               "one line per user: user item item ...)")
    train, test = (_read_user_lists(f) for f in files)
    if train.shape[0] == 0:
        raise DataFormatError(files[0], "no interactions found (expected lines: user item item ...)")
    both = np.concatenate([train, test])
    meta = {"source": str(d), "split": "test.txt"}
    return make_ratings(train, test, int(both[:, 0].max()) + 1, int(both[:, 1].max()) + 1, meta)
