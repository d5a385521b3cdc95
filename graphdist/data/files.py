"""File loaders: unpacked OGB node datasets, edge lists, npz archives (Planetoid raw files:
:mod:`graphdist.data.planetoid`).

Every problem with a file's content is a :class:`DataFormatError` naming the file and, for
text files, the 1-based line number.
"""
from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import torch

from graphdist.data.graph import Graph
from graphdist.errors import DataFormatError, MissingFileError

# ---------------------------------------------------------------------------------- text tables
def _read_text(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except OSError as e:
        raise MissingFileError(f"{path}: cannot read ({e.strerror or e})") from None


def load_edgelist(path: Path, *, features: str = "", labels: str = "", directed: bool = False,
                  self_loops: bool = False, train: float = 0.0, val: float = 0.0, seed: int = 0) -> Graph:
    """Edge list ``src dst`` per line (``#``/``%`` comments, tab/space/comma, CRLF, a first line
    of column names; a third column such as a weight is ignored), read by
    :func:`graphdist.data.table.read_table`, or a Parquet file (its first two columns; its node
    tables may be Parquet too: :mod:`graphdist.data.parquet`). Ids are remapped to 0..N-1 in ascending order of the
    original id (:attr:`Graph.node_ids` keeps them): integers, or, where any id is not a number
    (``alice``, a URL) or an integer beyond 2^62, every id as the string written, in ascending
    UTF-8 order (:func:`graphdist.data.tokens.text_ids`; the first line as column names:
    :func:`graphdist.data.tokens.first_line`). Undirected (both directions stored) unless
    ``directed``. ``features``/``labels``: ``.npy`` files (rows in the ids' order), tables keyed
    by the ids (:mod:`graphdist.data.node_tables`: any other file), or generated node data
    (:func:`node_data`); with a labels file, ``train``/``val`` > 0 draw a random split of the
    labelled nodes (:func:`graphdist.data.synthetic.label_splits`, from ``seed``)."""
    if (train > 0 or val > 0) and not (labels and not _generated(labels)):
        from graphdist.errors import SpecError
        raise SpecError(f"train={train:g},val={val:g} split the labels of a labels=FILE; give one (a .npy, or a table of node id and label) "
                        f"(labels=random:C draws its own 10/10/80 split)")
    from graphdist.data import parquet
    ids, src, dst = parquet.edge_ids(path) if parquet.is_parquet(path) else _edge_ids(path)
    _say_unread_columns(path)
    n = ids.size
    kw = {}
    if features and not _generated(features):
        from graphdist.specs import resolve_path
        fpath = resolve_path(features, what="features file")
        if fpath.suffix == ".npy":
            x = load_npy(fpath)
            if x.ndim not in (1, 2) or x.shape[0] != n:
                raise DataFormatError(features, f"has {x.shape[0] if x.ndim else 0} rows but {path.name} has {n} distinct nodes")
            check_finite(x, features, ids)
        else:
            from graphdist.data.node_tables import features_by_id
            read = parquet.features_by_id if parquet.is_parquet(fpath) else features_by_id
            x, grown = read(fpath, ids, path.name)
            if grown.size > ids.size:  # nodes without edges: the edges' ends numbered among all
                src, dst = np.searchsorted(grown, ids[src]), np.searchsorted(grown, ids[dst])
                ids, n = grown, grown.size
        kw["x"] = torch.from_numpy(np.asarray(x, dtype=np.float32))
    if labels and not _generated(labels):
        from graphdist.specs import resolve_path
        lpath = resolve_path(labels, what="labels file")
        if lpath.suffix == ".npy":
            from graphdist.data.node_tables import class_index
            y, kw["class_names"] = class_index(load_npy(lpath), labels)
            if y.shape[0] != n:
                raise DataFormatError(labels, f"has {y.shape[0]} labels but {path.name} has {n} distinct nodes")
        else:
            from graphdist.data.node_tables import labels_by_id
            y, kw["class_names"] = (parquet.labels_by_id if parquet.is_parquet(lpath) else labels_by_id)(
                lpath, ids, path.name)
        kw["y"] = torch.from_numpy(y.astype(np.int64))
        if train > 0:
            from graphdist.data.synthetic import label_splits
            kw["train_mask"], kw["val_mask"], kw["test_mask"] = label_splits(y, train, val, seed)
    meta = {"directed": bool(directed)}
    if ids.dtype.kind in "iu":
        meta.update(original_ids_min=int(ids[0]), original_ids_max=int(ids[-1]))
    g = Graph.from_edges(src, dst, n, symmetrize=not directed, self_loops=self_loops, meta=meta,
                         node_ids=ids, **kw)
    return node_data(g, features if _generated(features) else "", labels if _generated(labels) else "")


def check_finite(x: np.ndarray, name: str, ids: np.ndarray, rows: np.ndarray | None = None) -> None:
    """Refuse a features array with a nan or an infinity, naming its first such row and that row's
    node (``ids[i]``); ``rows``: the graph's row number of each of ``x``'s rows (a rank's owned
    rows in the k-worker build), else ``x`` is the whole graph's."""
    ok = np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1) if x.size else np.ones(0, dtype=bool)
    if not ok.all():
        i = int(np.argmin(ok))
        row = i if rows is None else int(rows[i])
        raise DataFormatError(name, f"row {row} (node {ids[i].item() if hasattr(ids[i], 'item') else ids[i]!r}) "
                                    "holds a nan or an infinity: fill missing values before training (a nan "
                                    "trains to a nan loss)")


def _edge_ids(path: Path):
    """``(ids [N] ascending, src [E], dst [E])``: an edge list's distinct ids (int64, or str where
    any is a word) and each edge's ends as indices into them."""
    from graphdist.data.table import TextField, read_table
    try:
        tab = read_table(path, 2)
    except TextField as e:
        return _word_edge_ids(path, e)
    arr = tab.values
    if arr.shape[0] == 0:
        raise DataFormatError(path, "no edges found")
    if arr.min() < 0:
        row = int(np.flatnonzero((arr < 0).any(axis=1))[0])
        raise DataFormatError(path, f"negative node id {int(arr[row].min())}", tab.line_of(row))
    ids, inv = np.unique(arr.ravel(), return_inverse=True)
    inv = inv.reshape(-1, 2)
    return ids, inv[:, 0], inv[:, 1]


def _word_edge_ids(path: Path, e):
    """:func:`_edge_ids` once the numeric reader met ``e``: the ids as written where any field of
    the file is a word, else ``e`` (a number that is not an integer id, wherever it is)."""
    from graphdist.data import tokens
    from graphdist.data.table import header_offset
    try:
        cols, tab = tokens.read_fields(path, 2, header=False)
    except DataFormatError:
        if e.word:
            raise
        raise e from None
    names = header_offset(path, 2) is not None  # the first row may be column names
    why = tokens.why_text(cols, tab, skip_first=names)
    if why is None and not e.word:
        raise e from None
    if cols[0].size:
        toks = [bytes(c[0]) for c in cols]
        if tokens.first_line(path, toks, tokens.occurrences(cols, toks), names):
            cols, tab = tokens.drop_first(cols, tab)
    if cols[0].size == 0:
        raise DataFormatError(path, "no edges found")
    ids, inv = tokens.text_ids(cols, tab)
    from graphdist.log import get_logger
    get_logger().info(f"{path}: node ids kept as the strings written ({why or e})")
    return ids, inv[0], inv[1]


def _say_unread_columns(path: Path) -> None:
    """Say (rank 0) that an edge list's columns past the second (a weight, a time) are not read:
    the graph is trained unweighted, each edge once."""
    from graphdist.data import parquet
    if parquet.is_parquet(path):
        import pyarrow.parquet as pq
        names = pq.ParquetFile(path).schema_arrow.names
        more = len(names) - 2
        what = ", ".join(repr(n) for n in names[2:5]) + (", ..." if more > 3 else "")
    else:
        from graphdist.data.table import head_lines
        lines = head_lines(path, 2)
        more = max((len(f) for _, _, f in lines[-1:]), default=2) - 2
        what = "a weight?" if more == 1 else "a weight, a time?"
    if more > 0:
        from graphdist.log import get_logger
        get_logger().info(f"{path}: {more} column(s) past the source and destination ({what}) not read: "
                          "the graph is trained unweighted, each edge once")


def _generated(value: str) -> bool:
    return value == "degree" or value.startswith("random:")


def node_data(g: Graph, features: str = "", labels: str = "", seed: int = 0) -> Graph:
    """Give a graph without node data something to train on (scale and speed runs, SNAP graphs):

    * ``features=degree``: 2 columns, log(1 + in-degree) and log(1 + out-degree);
    * ``features=random:F``: F columns of N(0, 1);
    * ``labels=random:C``: C classes uniformly, and a random 10/10/80 train/val/test split when
      the graph has none.
    """
    from graphdist.errors import SpecError
    rng = np.random.default_rng(seed)
    if features == "degree":
        g.x = degree_features(g.in_degree(), g.out_degree())
    elif features.startswith("random:"):
        f = _count(features, "features=random:F")
        g.x = torch.from_numpy(rng.standard_normal((g.num_nodes, f), dtype=np.float32))
    elif features:
        raise SpecError(f"features={features!r}: expected a .npy file, degree or random:F")
    if labels.startswith("random:"):
        c = _count(labels, "labels=random:C")
        g.y, g.class_names = torch.from_numpy(rng.integers(0, c, g.num_nodes)), None
        if g.train_mask is None:
            from graphdist.data.synthetic import random_splits
            g.train_mask, g.val_mask, g.test_mask = random_splits(rng, g.num_nodes, 0.1, 0.1)
    elif labels:
        raise SpecError(f"labels={labels!r}: expected a .npy file or random:C")
    return g


def _count(value: str, form: str) -> int:
    from graphdist.errors import SpecError
    try:
        v = int(value.split(":", 1)[1])
    except ValueError:
        v = 0
    if v < 1:
        raise SpecError(f"{value!r} is not of the form {form} with a positive integer")
    return v


def degree_features(indeg, outdeg) -> torch.Tensor:
    """``features=degree``: ``[N, 2]`` float32 ``log1p`` of (in-degree, out-degree)."""
    deg = torch.stack([torch.as_tensor(indeg), torch.as_tensor(outdeg)], 1)
    return torch.log1p(deg.to(torch.float32))


def load_npy(path: Path, *, mmap: bool = False) -> np.ndarray:
    """A ``.npy`` array (memory-mapped with ``mmap``), or one line naming the file."""
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError) as e:
        raise DataFormatError(path, f"not a readable .npy array ({e})") from None


# ---------------------------------------------------------------------------------- npz
def load_npz(path: Path, *, symmetrize: bool = False, self_loops: bool = True, features: str = "",
             labels: str = "") -> Graph:
    """``edge_index [2, E]`` (src, dst) or ``indptr``/``indices`` (graphdist layout: row i lists
    the sources of edges into i), optional ``x``, ``y``, ``train_mask``/``val_mask``/
    ``test_mask``, ``num_nodes`` and ``node_ids`` (``[N]`` integers or strings: the id of node i in
    the user's own data, kept for outputs; without it the index is the id). Edges are taken as
    stored unless ``symmetrize=1``."""
    try:
        z = np.load(path, allow_pickle=False)
        arrs = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise DataFormatError(path, f"not a readable .npz archive ({e})") from None
    x = arrs.get("x")
    if "num_nodes" in arrs:
        n = int(arrs["num_nodes"])
    elif x is not None:
        n = int(x.shape[0])
    elif "indptr" in arrs:
        n = int(arrs["indptr"].shape[0] - 1)
    elif "edge_index" in arrs:
        n = int(arrs["edge_index"].max()) + 1 if arrs["edge_index"].size else 0
    else:
        raise DataFormatError(path, "needs 'edge_index' or 'indptr'+'indices'")
    if "edge_index" in arrs:
        ei = np.asarray(arrs["edge_index"])
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise DataFormatError(path, f"edge_index must have shape [2, E], got {list(ei.shape)}")
        src, dst = ei[0].astype(np.int64), ei[1].astype(np.int64)
    elif "indptr" in arrs and "indices" in arrs:
        indptr = arrs["indptr"].astype(np.int64)
        if indptr.shape[0] != n + 1 or indptr[-1] != arrs["indices"].shape[0] or (np.diff(indptr) < 0).any():
            raise DataFormatError(path, f"indptr (length {indptr.shape[0]}) is not a valid CSR pointer for {n} nodes and {arrs['indices'].shape[0]} indices")
        src = arrs["indices"].astype(np.int64)
        dst = np.repeat(np.arange(n), np.diff(indptr))
    else:
        raise DataFormatError(path, "needs 'edge_index' or 'indptr'+'indices'")
    for name, a in (("source", src), ("target", dst)):
        if a.size and (a.min() < 0 or a.max() >= n):
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise DataFormatError(path, f"{name} node id {bad} out of range for {n} nodes")
    kw = {k: arrs[k] for k in ("x", "y", "train_mask", "val_mask", "test_mask") if k in arrs}
    for k, v in kw.items():
        if v.shape[0] != n:
            raise DataFormatError(path, f"{k} has {v.shape[0]} rows but the graph has {n} nodes")
    if "y" in kw:
        from graphdist.data.node_tables import class_index
        kw["y"], kw["class_names"] = class_index(kw["y"].reshape(n, -1)[:, 0], f"{path}: y")
    if "node_ids" in arrs:
        ids = np.asarray(arrs["node_ids"]).reshape(-1)
        if ids.shape[0] != n or ids.dtype.kind not in "iuUS":
            raise DataFormatError(path, f"node_ids must be {n} integers or strings (one per node), got "
                                        f"{ids.shape[0]} of type {ids.dtype}")
        if ids.dtype.kind == "S":
            try:
                ids = np.char.decode(ids, "utf-8")
            except UnicodeDecodeError:
                raise DataFormatError(path, "node_ids holds bytes that are not UTF-8 text") from None
        if np.unique(ids).size != n:
            raise DataFormatError(path, "node_ids has repeated ids")
        kw["node_ids"] = ids.astype(np.int64) if ids.dtype.kind in "iu" else ids.astype(str)
    if "x" in kw and kw["x"].dtype.kind == "f":
        check_finite(kw["x"], f"{path} (x)", kw.get("node_ids", np.arange(n)))
    g = Graph.from_edges(src, dst, n, symmetrize=symmetrize, self_loops=self_loops,
                         meta={"directed": not symmetrize}, **kw)
    return node_data(g, features, labels)


# ---------------------------------------------------------------------------------- OGB
def _ogb_table(path: Path, dtype, cols=None) -> np.ndarray:
    if not path.exists():
        raise MissingFileError(f"ogb: {path} is missing (unpack the dataset zip from the OGB site so that raw/ and split/ sit in one folder)")
    try:
        return np.loadtxt(io.BytesIO(_read_text(path)), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as e:
        raise DataFormatError(path, f"could not parse ({e})") from None


def load_ogb(root: Path, *, split: str = "", directed: bool = False) -> Graph:
    """Unpacked OGB node-property dataset (e.g. ``ogbn_arxiv/``)::

        raw/edge.csv.gz            src,dst per line
        raw/num-node-list.csv.gz   number of nodes (optional: else from features/labels/edges)
        raw/node-feat.csv.gz       F comma-separated floats per node (optional)
        raw/node-label.csv.gz      one label per node (optional; NaN = unlabelled)
        split/<scheme>/{train,valid,test}.csv.gz   node ids per line

    Symmetrised unless ``directed=1`` (as OGB's GCN examples do for arxiv)."""
    raw = root / "raw"
    edges = _ogb_table(raw / "edge.csv.gz", np.int64)
    x = _ogb_table(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").exists() else None
    y = None
    if (raw / "node-label.csv.gz").exists():
        yl = _ogb_table(raw / "node-label.csv.gz", np.float64)[:, 0]
        y = np.where(np.isnan(yl), -1, yl).astype(np.int64)
    if (raw / "num-node-list.csv.gz").exists():
        n = int(_ogb_table(raw / "num-node-list.csv.gz", np.int64).sum())
    elif x is not None:
        n = x.shape[0]
    elif y is not None:
        n = y.shape[0]
    else:
        n = int(edges.max()) + 1
    if edges.shape[1] < 2:
        raise DataFormatError(raw / "edge.csv.gz", "needs two columns src,dst")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise DataFormatError(raw / "edge.csv.gz", f"node id out of range for {n} nodes")
    for name, a in (("node-feat.csv.gz", x), ("node-label.csv.gz", y)):
        if a is not None and a.shape[0] != n:
            raise DataFormatError(raw / name, f"has {a.shape[0]} rows but the graph has {n} nodes")
    kw = {"x": x, "y": y}
    sroot = root / "split"
    if sroot.exists():
        schemes = sorted(d.name for d in sroot.iterdir() if d.is_dir())
        if split:
            if split not in schemes:
                raise MissingFileError(f"ogb: split scheme {split!r} not in {sroot} (have: {', '.join(schemes)})")
            scheme = split
        elif len(schemes) == 1:
            scheme = schemes[0]
        else:
            raise MissingFileError(f"ogb: {sroot} has {len(schemes)} split schemes {schemes}; choose one with ,split=NAME")
        for part, key in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
            idx = _ogb_table(sroot / scheme / f"{part}.csv.gz", np.int64)[:, 0]
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise DataFormatError(sroot / scheme / f"{part}.csv.gz", f"node id out of range for {n} nodes")
            m = np.zeros(n, dtype=bool)
            m[idx] = True
            kw[key] = torch.from_numpy(m)
    return Graph.from_edges(edges[:, 0], edges[:, 1], n, symmetrize=not directed, self_loops=False,
                            meta={"directed": bool(directed), "source": "ogb"}, **kw)
