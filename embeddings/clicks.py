"""``clicks:PATH``: a click log of the user's own columns (not Criteo's 13 + 26), in Parquet, for
DLRM: a label, dense number columns and categorical id columns, each id column one embedding table.

    clicks:log.parquet                                 label "label"; float columns dense, the rest ids
    clicks:logs/,label=clicked,dense=age+price         a folder of *.parquet parts (name order)
    clicks:log.parquet,dense=age+price,sparse=user+item+city    exactly these columns

The columns (names joined by ``+``): ``label`` is 0 or 1 (an integer, boolean, float or string
column, as :func:`embeddings.criteo_tables.labels_of` reads it). Without ``dense=`` and
``sparse=``, the floating-point columns are dense and the integer, string, boolean and categorical
ones are ids; with one of them, the other is the rest (numbers for ``dense``, ids for ``sparse``);
columns of another type (a timestamp, a list) are not read, and rank 0 says so. Values::

    dense   as given (float32; scale them first: graphdist applies no transform); null, nan: 0
    sparse  an integer as itself (a 64-bit one folded to 32 bits: lo ^ hi * 0x9E3779B1, so one
            below 2^32 stays itself), text by 32-bit FNV-1a of its UTF-8 bytes, a boolean 0 / 1,
            null 0; then, per batch, modulo its table's rows (--num-embeddings), as Criteo's ids

A row with a null label, or one not 0 or 1, or an infinite dense value is refused in one line
naming the row and the column, or skipped with ``--skip-bad-lines``. The file is read once into the
cache ``criteo:`` uses (:mod:`embeddings.criteo`: memory-mapped by every rank, built by one; its name
carries the columns chosen), so a log larger than memory trains as a Criteo one does.
"""
from __future__ import annotations

import glob
import os

import numpy as np

from embeddings.criteo import CriteoReader, ensure_cache, mapped
from embeddings.criteo_tables import is_text, labels_of, parquet_file, read_group, text_bytes
from embeddings.data import ClickData
from graphdist.data.parquet import is_parquet
from graphdist.errors import DataFormatError, MissingFileError, SpecError

FNV_OFFSET, FNV_PRIME = 2166136261, 16777619
FOLD = 0x9E3779B1


def fnv1a32(cs: np.ndarray) -> np.ndarray:
    """32-bit FNV-1a of each byte string of ``cs`` (numpy ``S`` dtype) as uint32."""
    n = len(cs)
    width = cs.dtype.itemsize if n else 0
    h = np.full(n, FNV_OFFSET, dtype=np.uint32)
    if not width:
        return h
    raw = np.frombuffer(cs.tobytes(), dtype=np.uint8).reshape(n, width)
    lens = np.char.str_len(cs)
    prime = np.uint32(FNV_PRIME)
    for k in range(width):
        m = k < lens
        h = np.where(m, (h ^ raw[:, k].astype(np.uint32)) * prime, h)
    return h


def fold32(v: np.ndarray) -> np.ndarray:
    """64-bit integers as 32-bit ids: ``lo ^ hi * 0x9E3779B1`` (mod 2^32); one in [0, 2^32) is itself."""
    u = v.astype(np.int64).view(np.uint64) if v.dtype.kind == "i" else v.astype(np.uint64)
    lo = (u & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (u >> np.uint64(32)).astype(np.uint32)
    return lo ^ (hi * np.uint32(FOLD))


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "*.parquet")) if os.path.isfile(f))
        if not files:
            raise MissingFileError(f"{path}: directory has no *.parquet files")
        return files
    if not os.path.exists(path):
        raise MissingFileError(f"{path}: no such click log")
    if not is_parquet(path):
        raise DataFormatError(path, "is not Parquet: clicks: reads Parquet (a CSV becomes one with pandas: "
                                    "pd.read_csv(FILE).to_parquet(FILE.parquet)); a Criteo TSV is criteo:PATH")
    return [path]


def _kind(t) -> str:
    """``dense``, ``sparse``, ``either`` (an integer or boolean column) or ``other``."""
    import pyarrow as pa
    if pa.types.is_dictionary(t):
        return "sparse"
    if pa.types.is_floating(t):
        return "dense"
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return "either"
    if is_text(t):
        return "sparse"
    return "other"


def choose(path: str, schema, label: str, dense: str, sparse: str) -> tuple[str, list[str], list[str], list[str]]:
    """``(label, dense, sparse, left out)`` columns of a file of ``schema`` by the spec's options."""
    names = list(schema.names)
    kinds = {n: _kind(schema.field(n).type) for n in names}
    if label not in kinds:
        raise DataFormatError(path, f"has no label column {label!r} (its columns: {', '.join(names)}); "
                                    "name it with ,label=COLUMN")

    def listed(text: str, what: str) -> list[str]:
        cols = [c for c in text.split("+") if c] if text else []
        for c in cols:
            if c not in kinds:
                raise DataFormatError(path, f"{what}={text}: no column {c!r} (its columns: {', '.join(names)})")
            if c == label:
                raise SpecError(f"{what}={text}: {c!r} is the label column")
        return cols
    d, s = listed(dense, "dense"), listed(sparse, "sparse")
    both = [c for c in d if c in s]
    if both:
        raise SpecError(f"dense={dense}, sparse={sparse}: {both[0]!r} is in both")
    rest = [n for n in names if n != label and n not in d and n not in s]
    if not d and not s:
        d = [n for n in rest if kinds[n] == "dense"]
        s = [n for n in rest if kinds[n] in ("sparse", "either")]
    elif not s:
        s = [n for n in rest if kinds[n] in ("sparse", "either")]
    elif not d:
        d = [n for n in rest if kinds[n] in ("dense", "either")]
    for c in d:
        if kinds[c] not in ("dense", "either"):
            raise DataFormatError(path, f"column {c!r} is {schema.field(c).type}: a dense column holds numbers")
    for c in s:
        if kinds[c] not in ("sparse", "either"):
            raise DataFormatError(path, f"column {c!r} is {schema.field(c).type}: an id column holds integers or "
                                        "text (name a number column in dense=)")
    if not d or not s:
        raise DataFormatError(path, f"{len(d)} dense and {len(s)} id column(s): DLRM needs at least one of each "
                                    "(name them with ,dense=A+B,sparse=C+D)")
    left = [n for n in names if n != label and n not in d and n not in s]
    return label, d, s, left


class ClicksReader(CriteoReader):
    """The Parquet files of ``clicks:PATH`` into the cache, by the columns :func:`choose` picks."""

    def __init__(self, path: str, label: str = "label", dense: str = "", sparse: str = ""):
        self.path = path
        self.files = _files(path)
        schema = parquet_file(self.files[0]).schema_arrow
        self.label, self.dense, self.sparse, self.left = choose(self.files[0], schema, label, dense, sparse)
        self.widths = (len(self.dense), len(self.sparse))
        self.tag = "clicks|" + "|".join([self.label, "+".join(self.dense), "+".join(self.sparse)])
        self.extra = {"label": self.label, "dense": self.dense, "sparse": self.sparse}

    def count(self, show: bool) -> int:
        return sum(parquet_file(f).metadata.num_rows for f in self.files)

    def chunks(self, fpath: str, skip_bad_lines: bool):
        pf = parquet_file(fpath)
        cols = [self.label, *self.dense, *self.sparse]
        missing = [c for c in cols if c not in pf.schema_arrow.names]
        if missing:
            raise DataFormatError(fpath, f"has no column {missing[0]!r}, which {self.files[0]} has: every part of "
                                         "a folder needs the same columns")
        row0 = 0
        for g in range(pf.metadata.num_row_groups):
            arrays = read_group(pf, g, cols, fpath)
            y, dense, ids, bad_rows = self._convert(fpath, arrays, skip_bad_lines, row0)
            yield dense, ids, y, bad_rows, len(bad_rows), len(y) + len(bad_rows)
            row0 += len(arrays[0])

    def _convert(self, fpath, arrays, skip_bad, row0):
        y, (lbad, lwhy) = labels_of(fpath, self.label, arrays[0])
        n = len(y)
        dense = np.zeros((n, len(self.dense)), dtype=np.float32)
        bad, why = lbad.copy(), {}
        for i, (name, a) in enumerate(zip(self.dense, arrays[1:1 + len(self.dense)])):
            v = a.cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False)
            inf = np.isinf(v)
            dense[:, i] = np.where(np.isnan(v) | inf, 0.0, v)
            if inf.any():
                r = int(np.flatnonzero(inf)[0])
                why.setdefault(r, f"value in column {name!r} is {v[r]}, not a finite number")
                bad |= inf
        ids = np.zeros((n, len(self.sparse)), dtype=np.uint32)
        for i, a in enumerate(arrays[1 + len(self.dense):]):
            ids[:, i] = _ids(a)
        if bad.any() and not skip_bad:
            r = int(np.flatnonzero(bad)[0])
            raise DataFormatError(fpath, f"row {row0 + r}: {lwhy(r) if lbad[r] else why[r]} "
                                         "(use --skip-bad-lines to skip such rows)")
        keep = ~bad
        return y[keep], dense[keep], ids[keep], np.flatnonzero(bad)


def _ids(a) -> np.ndarray:
    import pyarrow as pa
    t = a.type
    if pa.types.is_null(t):
        return np.zeros(len(a), dtype=np.uint32)
    if pa.types.is_boolean(t):
        return a.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint32)
    if pa.types.is_integer(t):
        return fold32(a.fill_null(0).to_numpy(zero_copy_only=False))
    null = a.is_null().to_numpy(zero_copy_only=False)
    return np.where(null, np.uint32(0), fnv1a32(text_bytes(a)))


def load_clicks(path: str, label: str = "label", dense: str = "", sparse: str = "", skip_bad_lines: bool = False,
                cache_dir: str | None = None, num_embeddings_cap: int = 100_000) -> ClickData:
    """Memory-map the cache of the click log ``path`` (building it first if needed)."""
    reader = ClicksReader(str(path), label, dense, sparse)
    if reader.left and os.environ.get("RANK", "0") == "0":
        from graphdist.log import get_logger
        get_logger().info(f"clicks: {path}: column(s) {', '.join(reader.left)} not read (neither numbers nor "
                          "ids; name them in dense= or sparse=)")
    data, meta = mapped(str(path), ensure_cache(str(path), skip_bad_lines, cache_dir, reader), num_embeddings_cap)
    data.columns = {"label": meta["label"], "dense": list(meta["dense"]), "sparse": list(meta["sparse"])}
    return data
