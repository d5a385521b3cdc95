"""METIS, the k-way multilevel graph partitioner, through its C API (ctypes).

k-way always (pymetis would use recursive bisection for k <= 8), minimising the undirected edge
cut (or volume). Called through the ``METIS_PartGraphKway`` symbol, so several constraints (nodes
AND in-edges) are balanced at once, which pymetis' API lacks. Two builds are known: cmeel-metis'
``libmetis.so`` with 32-bit ids (half of METIS' memory: it is used whenever the graph fits 32-bit
ids) and pymetis' own extension (64-bit). A graph whose levels would not fit the memory
available has its finer levels kept on disk (METIS 5.2's ONDISK), the same partition.
"""
from __future__ import annotations

from contextlib import contextmanager
import importlib
import os
import tempfile

import numpy as np

from partitioners.backends import require
from partitioners.common import Weights, id_dtype, sym_csr
from partitioners.errors import MissingBackendError
from partitioners.sysmem import mem_available, process_headroom, smallest

__all__ = ["metis_partition", "metis_kway", "metis_backend", "metis_levels", "metis_ondisk"]

_OBJ = {"cut": 0, "vol": 1}
_METIS_NOPTIONS, _OPT_OBJTYPE = 40, 1
_LAYOUTS = {"5.1": {"seed": 8, "ufactor": 16}, "5.2": {"seed": 9, "ufactor": 18, "ondisk": 11}}
"""Option indices that moved between METIS 5.1 (pymetis) and 5.2 (cmeel-metis: NIPARTS came in
before NITER, ONDISK after NO2HOP)."""
METIS_BYTES_PER_EDGE = {"memory": 96, "ondisk": 24}
"""METIS's working set per stored edge, rounded up from measurements (32-bit build): coarse
levels in memory (57 on an SBM, 75-80 on R-MAT) or, with METIS 5.2's ONDISK option, each finer
level written to a file while the coarser ones are built (16.8 on R-MAT), the same partition."""


_METIS: dict = {}


def _ptr(x: np.ndarray):
    import ctypes
    return x.ctypes.data_as(ctypes.c_void_p)


def _probe(lib, idx, options: dict):
    """4-node path cut in 2 with ``options`` set: ``(status, parts, cut)``."""
    opts = np.full(_METIS_NOPTIONS, -1, dtype=idx)
    lib.METIS_SetDefaultOptions(_ptr(opts))
    for i, v in options.items():
        opts[i] = v
    n = 4
    xadj, adj = np.array([0, 1, 3, 5, 6], idx), np.array([1, 0, 2, 1, 3, 2], idx)
    one, two, nv = np.array([1], idx), np.array([2], idx), np.array([n], idx)
    vw, ub = np.ones(n, idx), np.full(2, 1.03, np.float32)
    obj, part = np.zeros(2, idx), np.zeros(2 * n, idx)
    rc = lib.METIS_PartGraphKway(_ptr(nv), _ptr(one), _ptr(xadj), _ptr(adj), _ptr(vw), None, None,
                                 _ptr(two), None, _ptr(ub), _ptr(opts), _ptr(obj), _ptr(part))
    return rc, part[:n].tolist(), int(obj[0])


class _quiet_stdout:
    """File descriptor 1 sent to /dev/null (C libraries print there, past ``sys.stdout``)."""

    def __enter__(self):
        import sys
        sys.stdout.flush()
        self.saved = os.dup(1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self.saved, 1)
        os.close(self.saved)
        return False


def _metis_selftest(lib) -> tuple[str, object, dict | None]:
    """``("", idx dtype, option layout)`` when the library's ``idx_t`` is 32- or 64-bit, its
    ``real_t`` 32-bit and its option layout known, else ``(what was seen, None, None)``.

    ``METIS_SetDefaultOptions`` writes ``METIS_NOPTIONS`` idx_t values (all -1) into a buffer
    of ``2 * METIS_NOPTIONS`` int64 words: 40 words change when idx_t is 64-bit, 20 when it is
    32-bit. Then a 4-node path cut in 2 with ``ubvec`` in float32 must come back as the
    balanced cut ``[0, 0, 1, 1]`` with edge cut 1 (a 64-bit real_t misreads ubvec and returns
    an error or a degenerate cut). Option 8 is the seed in METIS 5.1 and ``ncuts`` in 5.2:
    setting it to 0 is refused (status -2) only by 5.2."""
    opts = np.full(2 * _METIS_NOPTIONS, 7, dtype=np.int64)
    lib.METIS_SetDefaultOptions(_ptr(opts))
    written = int((opts != 7).sum())
    if written not in (_METIS_NOPTIONS, _METIS_NOPTIONS // 2):
        return f"idx_t is neither 32- nor 64-bit ({written * 8 // _METIS_NOPTIONS}-byte options seen)", None, None
    idx = np.int64 if written == _METIS_NOPTIONS else np.int32
    with _quiet_stdout():  # METIS 5.2 prints "Input Error: Incorrect ncuts." for this probe
        rc, _, _ = _probe(lib, idx, {8: 0})
    layout = _LAYOUTS["5.1" if rc == 1 else "5.2"]
    rc, got, cut = _probe(lib, idx, {layout["seed"]: 0, layout["ufactor"]: 30})
    if rc != 1 or cut != 1 or sorted(got) != [0, 0, 1, 1] or got[0] != got[1]:
        return f"real_t is not 32-bit (4-node path probe: status {rc}, parts {got}, cut {cut})", None, None
    return "", idx, layout


def _metis_candidates() -> list[str]:
    """Shared libraries that may hold ``METIS_PartGraphKway``, narrowest ids first: cmeel-metis'
    ``libmetis.so`` (32-bit ids), then pymetis' own extension (64-bit)."""
    import glob
    import sys
    found = []
    for d in sys.path:
        found += glob.glob(os.path.join(d, "cmeel.prefix", "lib", "libmetis.so*"))
    try:
        pymetis = importlib.import_module("pymetis")
        found += glob.glob(os.path.join(os.path.dirname(pymetis.__file__), "_internal*.so"))
    except ImportError:
        pass
    return list(dict.fromkeys(found))


def _metis_libs() -> dict:
    """``{idx dtype: METIS library}`` of the builds that passed :func:`_metis_selftest` (the
    first of each width); ``_METIS["why"]`` says why none did."""
    if "libs" not in _METIS:
        import ctypes
        libs, why = {}, "no library with METIS_PartGraphKway found (pymetis or cmeel-metis)"
        for so in _metis_candidates():
            try:
                gk = os.path.join(os.path.dirname(so), "libGKlib.so")
                if os.path.exists(gk):  # cmeel's libmetis needs its GKlib, found by no rpath
                    ctypes.CDLL(gk, mode=ctypes.RTLD_GLOBAL)
                lib = ctypes.CDLL(so)
                lib.METIS_PartGraphKway  # noqa: B018 - raises AttributeError if absent
                lib.METIS_SetDefaultOptions.restype = ctypes.c_int
                lib.METIS_PartGraphKway.restype = ctypes.c_int
            except (OSError, AttributeError):
                continue
            bad, idx, layout = _metis_selftest(lib)
            if bad:
                why = f"{so}: {bad}"
                continue
            libs.setdefault(np.dtype(idx), (lib, layout))
        _METIS["libs"], _METIS["why"] = libs, "" if libs else why
    return _METIS["libs"]


def _metis_lib(n: int = 0, nnz: int = 0):
    """``(library, idx dtype)`` for a graph of ``n`` nodes and ``nnz`` adjacency entries: the
    32-bit build when the ids fit and it is there, else the 64-bit one; ``(None, None)`` when
    neither is usable."""
    libs = _metis_libs()
    small = max(n + 1, nnz) < 2**31 - 1
    for idx in ((np.dtype(np.int32), np.dtype(np.int64)) if small else (np.dtype(np.int64),)):
        if idx in libs:
            return libs[idx][0], idx
    return None, None


def metis_backend(n: int = 0, nnz: int = 0) -> str:
    """Which METIS serves a graph of this size: ``"32-bit"``, ``"64-bit"`` or ``"none"``."""
    _, idx = _metis_lib(n, nnz)
    return "none" if idx is None else f"{idx.itemsize * 8}-bit"


def metis_levels(n: int = 0, nnz: int = 0, available: int | None = None) -> str:
    """Where the METIS serving a graph of this size keeps its coarse levels: ``"ondisk"`` (a 5.2
    build, and :func:`metis_ondisk` says so), ``"memory"``, or ``"none"`` without METIS."""
    lib, idx = _metis_lib(n, nnz)
    if lib is None:
        return "none"
    return "ondisk" if "ondisk" in _metis_libs()[idx][1] and metis_ondisk(nnz, available) else "memory"


def metis_kway(s, k: int, vwgt: np.ndarray, *, imbalance: float, seed: int,
               objective: str = "cut", adjwgt: np.ndarray | None = None) -> np.ndarray:
    """METIS k-way on symmetric CSR ``s`` with ``vwgt [N, ncon]`` integer weights (several
    constraints balanced at once, each to ``1 + imbalance``); ``objective`` cut or vol;
    ``adjwgt`` optional integer edge weights (aligned with ``s.indices``, symmetric) for the cut.
    With the 32-bit build an int32 ``s.indices`` is handed over without a copy."""
    n, ncon = vwgt.shape
    lib, idx = _metis_lib(n, s.nnz)
    if lib is None:
        if ncon != 1 or objective != "cut" or adjwgt is not None:
            raise MissingBackendError(f"multi-constraint/volume METIS needs METIS_PartGraphKway with 32- or "
                                      f"64-bit idx_t and 32-bit real_t, and no build passes that check "
                                      f"({_METIS['why']}); install it with: pip install cmeel-metis==5.2.1.1")
        import warnings
        pymetis = require("pymetis", "metis")
        opts = pymetis.Options(seed=int(seed), ufactor=max(1, int(round(1000 * imbalance))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            _, parts = pymetis.part_graph(k, xadj=s.indptr.astype(np.int64), adjncy=s.indices.astype(np.int64),
                                          vweights=vwgt[:, 0], recursive=False, options=opts)
        return np.asarray(parts, dtype=np.int64)
    ptr = _ptr
    opts = np.full(_METIS_NOPTIONS, -1, dtype=idx)
    lib.METIS_SetDefaultOptions(ptr(opts))
    layout = _metis_libs()[idx][1]
    opts[_OPT_OBJTYPE] = _OBJ[objective]
    opts[layout["seed"]] = int(seed)
    opts[layout["ufactor"]] = max(1, int(round(1000 * imbalance)))
    nv, nc, nparts = np.array([n], idx), np.array([ncon], idx), np.array([k], idx)
    xadj = np.ascontiguousarray(s.indptr, dtype=idx)
    adj = np.ascontiguousarray(s.indices, dtype=idx)
    vw = np.ascontiguousarray(vwgt, dtype=idx).reshape(-1)
    ub = np.full(ncon, 1.0 + imbalance, dtype=np.float32)
    obj, part = np.zeros(1, idx), np.zeros(n, idx)
    ew = None if adjwgt is None else np.ascontiguousarray(np.maximum(adjwgt, 1), dtype=idx)
    ondisk = metis_levels(n, s.nnz) == "ondisk"
    if ondisk:
        opts[layout["ondisk"]] = 1
    with _ondisk_folder(ondisk):
        rc = lib.METIS_PartGraphKway(ptr(nv), ptr(nc), ptr(xadj), ptr(adj), ptr(vw), None,
                                     None if ew is None else ptr(ew),
                                     ptr(nparts), None, ptr(ub), ptr(opts), ptr(obj), ptr(part))
    if rc != 1:  # METIS_OK
        raise RuntimeError(f"METIS_PartGraphKway failed with status {rc} (n={n}, k={k})")
    return part.astype(np.int64)


METIS_MEMORY_SHARE = 0.25
"""METIS keeps its levels in memory while they take at most this share of the memory available."""


def metis_ondisk(nnz: int, available: int | None = None) -> bool:
    """Whether METIS keeps its finer levels on disk (ONDISK, 5.2 builds): when its in-memory
    working set would take more than :data:`METIS_MEMORY_SHARE` of the memory available now
    (:mod:`partitioners.sysmem`: ``MemAvailable``, the memory cgroup's and this process's limits;
    a products-sized graph on a 24 GiB machine), and a folder on disk
    (not tmpfs) can take the levels (:func:`scratch_dir`). The result is the same
    partition either way; on disk costs about 1.3x the time of the METIS call (135 vs 104 s on the
    products-sized R-MAT) and a quarter of its memory."""
    if available is None:
        available = smallest(mem_available(), process_headroom())
    return (available is not None and METIS_BYTES_PER_EDGE["memory"] * int(nnz) > METIS_MEMORY_SHARE * available
            and scratch_dir() is not None)


_MEMORY_FS = ("tmpfs", "ramfs")


def _fs_type(path: str) -> str:
    """The file system type of ``path`` (its longest mount point in ``/proc/mounts``; "" when unknown)."""
    path, best, kind = os.path.realpath(path), "", ""
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2:
                    mnt = fields[1].replace("\\040", " ")
                    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, fields[2]
    except OSError:
        pass
    return kind


def scratch_dir() -> str | None:
    """A folder on disk for METIS' levels: ``$TMPDIR`` (``tempfile.gettempdir()``), or the working
    directory when that is memory (tmpfs); None when both are, where on disk would save nothing."""
    for d in (tempfile.gettempdir(), os.getcwd()):
        if _fs_type(d) not in _MEMORY_FS and os.access(d, os.W_OK):
            return d
    return None


@contextmanager
def _ondisk_folder(on: bool):
    """METIS writes its ONDISK files (``metis<pid>.<level>``) into the working directory: run it
    in a fresh temporary folder (under :func:`scratch_dir`), removed afterwards. The process's
    working directory is that folder for the length of the call."""
    if not on:
        yield
        return
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="graphdist-metis-", dir=scratch_dir()) as tmp:
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(here)


def metis_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                    objective: str = "cut", hub_cut: bool = False) -> np.ndarray:
    """METIS k-way (``PartGraphKway``, never recursive bisection) on the undirected graph,
    balancing every constraint of ``weights`` at once (multi-constraint METIS). ``hub_cut``:
    edge ``{u, v}`` weighs ``64 / max(deg u, deg v)`` (at least 1) in the cut, so edges at hubs
    are cheap to cut: with pre/post aggregation a hub's cut edges cost one row per part, not
    one per edge."""
    if metis_backend() == "none":
        require("pymetis", "metis")
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    s = sym_csr(graph)
    vw = np.stack([np.round(w).astype(np.int64) if np.allclose(w, np.round(w))
                   else np.round(16 * w / max(float(w.mean()), 1e-12)).astype(np.int64)
                   for w in weights.w], 1)
    ew = None
    if hub_cut:
        deg = np.diff(s.indptr).astype(np.int32)
        rows = np.repeat(np.arange(n, dtype=id_dtype(n)), deg)
        ew = np.maximum(np.round(64.0 / np.maximum(deg[rows], deg[s.indices])), 1).astype(np.int32)
        del rows
    return metis_kway(s, k, vw, imbalance=imbalance, seed=seed, objective=objective, adjwgt=ew)
