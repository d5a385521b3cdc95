"""``criteo:PATH``: the Criteo Kaggle / Terabyte TSV, streamed in chunks into a binary npy cache.

One line = 40 tab-separated fields, no header::

    label \t i1 .. i13 \t c1 .. c26
    0/1      integers, may be negative,   8-hex-digit strings, e.g. 68fd1e64
             empty = missing (0)          empty = missing (0)

PATH is a file or a directory of ``day_*`` files (read in day order: ``day_2`` before ``day_10``),
each plain text or gzip / bzip2 / xz compressed (:func:`open_text`). The first read parses the
text ``CHUNK_LINES`` lines at a time (never the whole file as Python objects) into a cache
directory in graphdist's cache home (``$XDG_CACHE_HOME/graphdist/criteo/<name>-<digest>``, or
``--cache-dir DIR``: ``DIR/<name>.graphdist-cache``), never beside the data::

    <cache>/
        dense.npy   float32 [N, 13]   log(1 + max(x, 0))
        sparse.npy  uint32  [N, 26]   the raw 32-bit ids (hashing into tables happens per batch)
        labels.npy  int8    [N]
        skipped.npy int64   [skipped]  0-based lines skipped (over the files in order): bad ones
                                       (--skip-bad-lines), a CSV's line of column names
        meta.json   source sizes/mtimes, rows, bad_lines

which is the dense / sparse / labels split of torchrec's Criteo preprocessing
(``torchrec.datasets.criteo.BinaryCriteoUtils``: ``day_X_dense.npy``, ``day_X_sparse.npy``,
``day_X_labels.npy``) with the raw ids kept un-hashed, so one cache serves any table size.
The same log as Parquet (a file, or a directory of ``*.parquet`` files) or as comma-separated
text with a line of column names fills the same cache (:mod:`embeddings.criteo_tables`).
Each chunk is parsed vectorised (:func:`~embeddings.criteo_text.parse_lines_fast`, about 44k lines/s on one busy core,
so the 45M-line Kaggle file takes about 17 minutes once); a chunk with a malformed line is re-parsed
line by line to name it. Later runs memory-map the arrays; each rank reads only its own rows of
each global batch.
A bad line (wrong field count, non-integer dense value, non-hex categorical value) raises
:class:`~graphdist.errors.DataFormatError` with file and line, unless ``skip_bad_lines``.
Row r of the cache is line :func:`row_lines` ``(r)`` of the input (0-based, counted over its
files in order): r itself unless lines were skipped.
"""
from __future__ import annotations

import contextlib
import glob
import json
import lzma
import os
import shutil
import zlib

import numpy as np

from embeddings import criteo_tables
from embeddings.criteo_text import parse_lines, parse_lines_fast
from embeddings.data import NUM_DENSE, NUM_SPARSE, ClickData
from graphdist.data.parquet import is_parquet
from graphdist.errors import DataFormatError, MissingFileError
from graphdist.progress import progress

CHUNK_LINES = 200_000
SHOW_BYTES = 64 << 20
"""Source files larger than this (in all, on disk) show the cache build's progress on rank 0 (a
bar on a terminal, a line each tenth in a log): the 45M-line Kaggle file parses for minutes."""
FORMAT_VERSION = 1


_PACKED = (".gz", ".bz2", ".xz")
"""Compressed day files read as they are (gzip, bzip2, xz: the Terabyte release ships ``day_N.gz``)."""


def _day_key(name: str):
    """Day order: ``day_2`` before ``day_10`` (name order would hold out day_9, not day_23, as the
    last lines); names without a day number after those, in name order."""
    stem = name.split(".", 1)[0]
    num = stem[len("day_"):]
    return (0, int(num), name) if num.isdigit() else (1, 0, name)


def source_files(path: str) -> list[str]:
    """The files of ``criteo:PATH``: the file, or a directory's ``day_*`` files (plain or
    compressed, not torchrec's ``.npy``) in day order, or where it has none its ``*.parquet`` files
    in name order."""
    if os.path.isdir(path):
        files = [f for f in glob.glob(os.path.join(path, "day_*")) if not f.endswith(".npy") and os.path.isfile(f)]
        if not files:  # a folder of Parquet files (Spark's part-*.parquet, the Hub's 0000.parquet): name order
            files = sorted(f for f in glob.glob(os.path.join(path, "*.parquet")) if os.path.isfile(f))
            if files:
                return files
            raise MissingFileError(f"{path}: directory has no day_* files (nor *.parquet files)")
        days: dict[str, str] = {}
        for f in files:
            name = os.path.basename(f)
            stem = name[:-len(name.rsplit(".", 1)[1]) - 1] if name.endswith(_PACKED) else name
            if stem in days:
                raise DataFormatError(path, f"holds {os.path.basename(days[stem])} and {name}, the same day twice "
                                            "(a decompression left half done?): keep one of them")
            days[stem] = f
        return sorted(files, key=lambda f: _day_key(os.path.basename(f)))
    if not os.path.exists(path):
        raise MissingFileError(f"{path}: no such Criteo file (download the Kaggle/Terabyte TSV; "
                               "see datasets/criteo_kaggle/README.md)")
    return [path]


@contextlib.contextmanager
def open_text(path: str):
    """``(text, raw)``: ``path`` as a binary stream of its text lines, decompressed when it is gzip,
    bzip2 or xz (by its first bytes, whatever its name), and the file under it (``raw.tell()``:
    how far into the file on disk). An archive or another compression is refused in one line
    that says what to do."""
    name = os.path.basename(path)
    with open(path, "rb") as raw:
        head = raw.peek(6)[:6]
        if head[:2] == b"\x1f\x8b":
            import gzip
            fh = gzip.GzipFile(fileobj=raw, mode="rb")
        elif head[:3] == b"BZh":
            import bz2
            fh = bz2.BZ2File(raw)
        elif head == b"\xfd7zXZ\x00":
            fh = lzma.LZMAFile(raw)
        elif head[:4] == b"PK\x03\x04":
            raise DataFormatError(path, f"is a zip archive, not a Criteo TSV: extract it (unzip {name}) and give "
                                        "the file inside")
        elif head[:4] == b"\x28\xb5\x2f\xfd":
            raise DataFormatError(path, f"is zstd-compressed: decompress it (zstd -d {name}), or give it gzip-, "
                                        "bz2- or xz-compressed")
        else:
            fh = raw
        with fh:
            try:
                first = fh.peek(512)[:512]
            except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
                if fh is raw:
                    raise
                raise _damaged(path, e) from None
            if len(first) >= 262 and first[257:262] == b"ustar":
                raise DataFormatError(path, f"is a tar archive, not a Criteo TSV: extract it (tar -xf {name}) and "
                                            "give the TSV file inside (the Kaggle archive's is train.txt)")
            yield fh, raw


def _damaged(path: str, e: Exception) -> DataFormatError:
    return DataFormatError(path, f"cannot be decompressed to its end ({e}): a download cut short? "
                                 "(gzip -t, bzip2 -t or xz -t checks it)")


def _signature(files: list[str]) -> list:
    return [[os.path.abspath(f), os.path.getsize(f), int(os.path.getmtime(f))] for f in files]


def cache_path(path: str, cache_dir: str | None, tag: str = "") -> str:
    """``DIR/<name>.graphdist-cache`` under ``--cache-dir``; by default
    ``<cache home>/criteo/<name>-<digest of its absolute path>`` (:func:`graphdist.fileio.cache_home`),
    so two files of one name get two caches and nothing is written beside the data. ``tag``: what
    else the cache depends on (a ``clicks:`` spec's choice of columns), in the name and the digest."""
    import hashlib
    name = os.path.basename(os.path.normpath(path))
    if tag:
        name += "-" + hashlib.sha256(tag.encode()).hexdigest()[:8]
    if cache_dir:
        return os.path.join(cache_dir, name + ".graphdist-cache")
    from graphdist.fileio import cache_home
    digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
    return str(cache_home() / "criteo" / f"{name}-{digest}")


class CriteoReader:
    """What a cache is filled from: the files of ``criteo:PATH`` (:func:`source_files`), each read
    chunk by chunk (:func:`_file_chunks`) into 13 dense and 26 id columns.
    :class:`embeddings.clicks.ClicksReader` reads a click table of the user's own columns so."""

    tag = ""
    """What else than the path the cache depends on (:func:`cache_path`)."""
    extra: dict = {}
    """Written into the cache's ``meta.json``."""

    def __init__(self, path: str):
        self.path = path
        self.files = source_files(path)
        self.widths = (NUM_DENSE, NUM_SPARSE)

    def count(self, show: bool) -> int:
        """The lines (rows) of the files, an upper bound of the cache's rows."""
        return _count_lines(self.files, show)

    def chunks(self, fpath: str, skip_bad_lines: bool):
        """As :func:`_file_chunks`."""
        return _file_chunks(fpath, skip_bad_lines)


def _count_lines(files: list[str], show: bool) -> int:
    """Lines over the files (the first read of each to its end: a compressed file cut short or
    damaged is refused here, naming it, before anything is parsed); progress in MB of the files
    on disk when ``show``."""
    n = 0
    size = sum(os.path.getsize(f) for f in files)
    bar = progress(-(-size >> 20), desc="criteo cache: counting lines", unit="MB", enabled=show)
    done = 0
    for f in files:
        if is_parquet(f):
            n += criteo_tables.rows(f)
            done += os.path.getsize(f)
            bar.update(-(-done >> 20) - bar.n)
            continue
        with open_text(f) as (fh, raw):
            last = b"\n"
            try:
                while True:
                    block = fh.read(1 << 24)
                    if not block:
                        break
                    n += block.count(b"\n")
                    last = block[-1:]
                    bar.update(((done + raw.tell()) >> 20) - bar.n)
            except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
                if fh is raw:  # a plain file's read error is the disk's, not a decompression's
                    raise
                raise _damaged(f, e) from None
            n += last != b"\n"  # final line without newline
        done += os.path.getsize(f)
        bar.update(-(-done >> 20) - bar.n)
    bar.close()
    return n


def _file_chunks(fpath: str, skip_bad_lines: bool):
    """``(dense, sparse, labels, skipped, bad, read)`` per chunk of one file: its good rows, the
    0-based lines (rows) of the chunk it skipped (bad ones and a line of column names),
    how many of those were bad, and how many lines (rows) it read. A TSV, a comma-separated file
    (:func:`embeddings.criteo_tables.csv_layout`) or Parquet (:func:`embeddings.criteo_tables.chunks`)."""
    if is_parquet(fpath):
        for cd, cs, cy, sk in criteo_tables.chunks(fpath, skip_bad_lines):
            yield cd, cs, cy, sk, len(sk), len(cy) + len(sk)
        return
    with open_text(fpath) as (fh, _):
        line_no, commas = 1, None
        while True:
            lines = fh.readlines(CHUNK_LINES * 200)  # ~ CHUNK_LINES lines of ~200 bytes
            if not lines:
                break
            names = []
            if commas is None:
                commas, header = criteo_tables.csv_layout(lines[0])
                if header:  # reczoo's label,I1,...,C26
                    names, lines = [0], lines[1:]
                    line_no += 1
            if commas:
                lines = [x.replace(b",", b"\t") for x in lines]
            parsed = parse_lines_fast(lines)
            sk: list[int] = []
            if parsed is None:  # some line is malformed: find it (or skip it) line by line
                parsed = parse_lines([x.decode("utf-8", "replace") for x in lines], fpath, line_no,
                                     skip_bad_lines, sk, "comma" if commas else "tab")
            cd, cs, cy, b = parsed
            yield cd, cs, cy, names + [len(names) + j for j in sk], b, len(lines) + len(names)
            line_no += len(lines)


def build_cache(path: str, out: str, skip_bad_lines: bool, reader: CriteoReader | None = None) -> dict:
    """Parse the TSV file(s) (``reader``'s files) chunk by chunk into ``out`` (written to a temp
    dir, then renamed)."""
    reader = reader or CriteoReader(path)
    files = reader.files
    show = sum(os.path.getsize(f) for f in files) > SHOW_BYTES and os.environ.get("RANK", "0") == "0"
    total = reader.count(show)
    n_dense, n_sparse = reader.widths
    bar = progress(total, desc="criteo cache", unit="lines", enabled=show)
    tmp = f"{out}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        d = np.lib.format.open_memmap(os.path.join(tmp, "dense.npy"), "w+", np.float32, (total, n_dense))
        s = np.lib.format.open_memmap(os.path.join(tmp, "sparse.npy"), "w+", np.uint32, (total, n_sparse))
        y = np.lib.format.open_memmap(os.path.join(tmp, "labels.npy"), "w+", np.int8, (total,))
        rows = bad = seen = 0
        skipped: list[int] = []
        for fpath in files:
            for cd, cs, cy, sk, n_bad, n_read in reader.chunks(fpath, skip_bad_lines):
                skipped += [seen + j for j in sk]
                seen += n_read
                d[rows:rows + len(cy)] = cd
                s[rows:rows + len(cy)] = cs
                y[rows:rows + len(cy)] = cy
                rows += len(cy)
                bad += n_bad
                bar.update(n_read)
        bar.close()
        for a in (d, s, y):
            a.flush()
        del d, s, y
        np.save(os.path.join(tmp, "skipped.npy"), np.asarray(skipped, dtype=np.int64))
        meta = {"format_version": FORMAT_VERSION, "source": _signature(files), "rows": rows,
                "lines": total, "bad_lines": bad, **reader.extra}
        with open(os.path.join(tmp, "meta.json"), "w") as fh:
            json.dump(meta, fh)
        shutil.rmtree(out, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:  # another process (rank) finished the same cache first
            if not os.path.exists(os.path.join(out, "meta.json")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def ensure_cache(path: str, skip_bad_lines: bool = False, cache_dir: str | None = None,
                 reader: CriteoReader | None = None) -> str:
    """The cache directory for ``path`` (read by ``reader``, by default the Criteo TSV's), built
    (or rebuilt when the source changed) if needed: by one process at a time (an exclusive lock on
    ``<cache>.lock``, on whatever file system holds the cache), so the ranks of a job, or two jobs,
    build it once and the others then map it."""
    reader = reader or CriteoReader(path)
    files = reader.files
    out = cache_path(path, cache_dir, reader.tag)
    if _valid(out, files, skip_bad_lines):
        return out
    import fcntl
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process builds it: wait for it here, then find it built
            from graphdist.log import get_logger
            get_logger().info(f"criteo cache: another process is building the cache of {path} in {out}; "
                              "waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _valid(out, files, skip_bad_lines):
                build_cache(path, out, skip_bad_lines, reader)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def _valid(out: str, files: list[str], skip_bad_lines: bool) -> bool:
    """Whether ``out`` holds a complete cache of ``files`` as they are now (and one that kept the
    bad lines' numbers, where it skipped any, only when they may be skipped)."""
    meta_p = os.path.join(out, "meta.json")
    if not os.path.exists(meta_p):
        return False
    with open(meta_p) as fh:
        meta = json.load(fh)
    return (meta.get("format_version") == FORMAT_VERSION and meta.get("source") == _signature(files)
            and (skip_bad_lines or meta.get("bad_lines", 0) == 0)
            and (meta.get("bad_lines", 0) == 0 or os.path.exists(os.path.join(out, "skipped.npy"))))


def load_criteo(path: str, skip_bad_lines: bool = False, cache_dir: str | None = None,
                num_embeddings_cap: int = 100_000) -> ClickData:
    """Memory-map the cache of ``path`` (building it first if needed)."""
    return mapped(path, ensure_cache(path, skip_bad_lines, cache_dir), num_embeddings_cap)[0]


def mapped(path: str, out: str, num_embeddings_cap: int) -> tuple[ClickData, dict]:
    """The cache ``out`` of ``path`` memory-mapped as :class:`ClickData` (every table
    ``num_embeddings_cap`` rows), and its ``meta.json``."""
    with open(os.path.join(out, "meta.json")) as fh:
        meta = json.load(fh)
    n = int(meta["rows"])
    if n == 0:
        raise DataFormatError(path, f"no data lines ({meta['lines']} lines, {meta['bad_lines']} bad)")
    dense = np.load(os.path.join(out, "dense.npy"), mmap_mode="r", allow_pickle=False)[:n]
    sparse = np.load(os.path.join(out, "sparse.npy"), mmap_mode="r", allow_pickle=False)[:n]
    labels = np.load(os.path.join(out, "labels.npy"), mmap_mode="r", allow_pickle=False)[:n]
    return ClickData(dense=dense, cat=sparse[:, :, None], labels=labels,
                     num_embeddings=[num_embeddings_cap] * sparse.shape[1], bad_lines=int(meta["bad_lines"])), meta


def row_lines(path: str, rows, cache_dir: str | None = None, tag: str = "") -> np.ndarray:
    """The 0-based input lines (over the files in order) of cache rows ``rows``: a row is its
    line plus the lines skipped before it (``skipped.npy``; a cache built before that file
    existed skipped nothing, else :func:`ensure_cache` rebuilt it). ``tag``: the reader's."""
    rows = np.asarray(rows, dtype=np.int64)
    p = os.path.join(cache_path(path, cache_dir, tag), "skipped.npy")
    skipped = np.load(p, allow_pickle=False) if os.path.exists(p) else np.zeros(0, np.int64)
    if skipped.size == 0:
        return rows
    kept_before = skipped - np.arange(skipped.size)  # rows kept before each skipped line
    return rows + np.searchsorted(kept_before, rows, side="right")
