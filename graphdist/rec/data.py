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
  0.. in ascending order of the original id (users and items separately) and kept
  (:attr:`Ratings.user_ids`, :attr:`Ratings.item_ids`): int64, or exactly as written where an id
  is not a plain int64 (``B00005N7P0``, ``000123``: :func:`graphdist.data.tokens.id_column`).
  ``min_rating=R`` keeps interactions with rating >= R; ``split=random`` (default) holds out a
  ``test`` fraction of each user's interactions at random (``seed``), ``split=temporal`` each
  user's latest ones (needs the timestamp column), ``split=FILE`` reads the test interactions from another file of the same
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

__all__ = ["Ratings", "load_ratings", "load_ratings_file", "load_lightgcn", "split_per_user", "read_interactions"]

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
    user_ids: np.ndarray | None = None
    """``[U]`` each user's id in the input (int64, or the strings written), or None: the index
    is the id (LightGCN files, rec-synth). :mod:`graphdist.ids`."""
    item_ids: np.ndarray | None = None
    """``[I]`` each item's id in the input, as :attr:`user_ids`."""

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
        """Sizes for ``graphdist data info`` (density = interactions / (users x items)) and the
        kind of ids (:func:`graphdist.ids.describe`)."""
        from graphdist.ids import describe, id_type
        n = int(self.train.shape[0] + self.test.shape[0])
        cells = self.num_users * self.num_items
        g = self.graph
        return {"name": self.name, "users": self.num_users, "items": self.num_items, "interactions": n,
                "train": int(self.train.shape[0]), "test": int(self.test.shape[0]),
                "test_users": int(torch.unique(self.test[:, 0]).numel()) if self.test.numel() else 0,
                "density": n / cells if cells else 0.0, "nodes": g.num_nodes, "edges": g.num_edges,
                "user_ids": id_type(self.user_ids), "user_ids_range": describe(self.user_ids),
                "item_ids": id_type(self.item_ids), "item_ids_range": describe(self.item_ids),
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
def read_interactions(path: Path, min_rating: float, need_time: bool):
    """``(user ids, item ids, timestamps or None)`` of the kept lines of one rating log; ids as
    :func:`graphdist.data.tokens.id_column` keeps them (int64, or the strings written)."""
    from graphdist.data import parquet
    from graphdist.data.tokens import id_column
    from graphdist.rec.log import numbers, read_log
    if parquet.is_parquet(path):
        u, i, vals = parquet.interactions(path)
        tab = _Rows()
    else:
        fields, tab = read_log(path)
        vals = [numbers(f, tab, what) for f, what in zip(fields[2:], ("rating", "timestamp"))]
        u, i = id_column(fields[0], tab, "user"), id_column(fields[1], tab, "item")
        if len(fields) == 2:
            _header_hint(path, u, i)
        del fields
    keep = None
    if min_rating > 0:
        if not vals:
            raise DataFormatError(path, f"min_rating={min_rating:g} needs a rating column (3rd field), but the "
                                        f"lines have 2 fields", tab.line_of(0))
        keep = vals[0] >= min_rating
        if not keep.any():
            raise DataFormatError(path, f"no interactions with rating >= {min_rating:g}")
    if need_time and len(vals) < 2:
        raise DataFormatError(path, f"split=temporal needs a timestamp column (4th field), but the lines have "
                                    f"{2 + len(vals)} fields", tab.line_of(0))
    t = vals[1] if len(vals) >= 2 else None
    if keep is not None:
        u, i, t = u[keep], i[keep], (t[keep] if t is not None else None)
    return u, i, t


class _Rows:
    """A Parquet log's messages name no line (``tab.line_of``)."""

    @staticmethod
    def line_of(i: int) -> None:
        return None


def _header_hint(path: Path, u: np.ndarray, i: np.ndarray) -> None:
    """Say (rank 0) when the first line of a 2-field log with word ids may be column names read as
    an interaction (it cannot be told from data there): two words whose user and item appear
    nowhere else."""
    from graphdist.data.table import is_number
    names = u.size > 1 and all(c.dtype.kind == "U" and not is_number(str(c[0])) for c in (u, i))
    if names and np.count_nonzero(u == u[0]) == 1 and np.count_nonzero(i == i[0]) == 1:
        from graphdist.data.tokens import names_hint
        names_hint(path, f"user {str(u[0])!r}, item {str(i[0])!r}", "an interaction whose user and item appear")


def _ids(*cols):
    """``(ids ascending, inverse)`` over the concatenated id columns (strings when any is)."""
    from graphdist.ids import token_ids
    if all(c.dtype.kind in "iu" for c in cols):
        ids, inv = np.unique(np.concatenate(cols), return_inverse=True)
        return ids, inv.reshape(-1)
    return token_ids(np.concatenate([np.char.encode(c.astype(str), "utf-8") for c in cols]))


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
    u, i, t = read_interactions(path, min_rating, mode == "temporal")
    meta = {"source": str(path), "split": split, "min_rating": min_rating, "lines_kept": int(u.size)}
    if mode == "file":
        tpath = _resolve_split_file(split, path)
        tu, ti, _ = read_interactions(tpath, min_rating, False)
        users, uinv = _ids(u, tu)
        items, iinv = _ids(i, ti)
        n = u.size
        train = np.stack([uinv[:n], iinv[:n]], 1)
        tst = np.stack([uinv[n:], iinv[n:]], 1)
    else:
        users, uinv = _ids(u)
        items, iinv = _ids(i)
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
    meta["user_ids"] = [_plain(users[0]), _plain(users[-1])]
    meta["item_ids"] = [_plain(items[0]), _plain(items[-1])]
    r = make_ratings(train, tst, int(users.size), int(items.size), meta)
    r.user_ids, r.item_ids = users, items
    return r


def _plain(v):
    return int(v) if isinstance(v, (int, np.integer)) else str(v)


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
