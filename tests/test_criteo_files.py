"""``criteo:PATH`` as the Criteo logs ship: the Terabyte release's ``day_0`` .. ``day_23`` read in
day order (``--eval-fraction`` holds out the last lines, the last days), its ``day_N.gz`` files
read as they are (as are ``.bz2`` and ``.xz``), and an archive or a half-decompressed folder refused
in one line that says what to do."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile

import numpy as np
import pytest

from embeddings.criteo import load_criteo, row_lines
from graphdist.errors import DataFormatError


def line(label: int, first_id: int) -> bytes:
    """A good line whose first categorical id is ``first_id`` (the others 0x0a)."""
    cats = [f"{first_id:08x}"] + ["0000000a"] * 25
    return ("\t".join([str(label), *["1"] * 13, *cats]) + "\n").encode()


def test_a_directory_of_days_is_read_in_day_order_not_name_order(tmp_path):
    days = tmp_path / "days"
    days.mkdir()
    for d in range(12):  # in name order day_10 and day_11 come before day_2
        (days / f"day_{d}").write_bytes(line(d % 2, d) * 2)
    data = load_criteo(str(days), cache_dir=str(tmp_path / "c"))
    assert data.cat[:, 0, 0].tolist() == [d for d in range(12) for _ in range(2)]
    # the held-out tail (--eval-fraction, time order) is the last day's lines
    assert data.cat[-2:, 0, 0].tolist() == [11, 11]


@pytest.mark.parametrize("suffix,pack", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_a_compressed_file_reads_as_its_text(tmp_path, suffix, pack):
    text = b"".join(line(i % 2, i) for i in range(50))
    plain = tmp_path / "train.txt"
    plain.write_bytes(text)
    packed = tmp_path / f"train.txt{suffix}"
    packed.write_bytes(pack(text))
    a = load_criteo(str(plain), cache_dir=str(tmp_path / "c"))
    b = load_criteo(str(packed), cache_dir=str(tmp_path / "c"))
    assert len(b) == 50
    for x, y in ((a.dense, b.dense), (a.cat, b.cat), (a.labels, b.labels)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_gzipped_days_in_day_order_with_their_line_numbers(tmp_path):
    days = tmp_path / "days"
    days.mkdir()
    bad = b"not a criteo line\n"
    (days / "day_0.gz").write_bytes(gzip.compress(line(0, 0) + bad + line(1, 1)))  # lines 0 1 2
    (days / "day_1.gz").write_bytes(gzip.compress(line(1, 2)))  # line 3
    (days / "day_10.gz").write_bytes(gzip.compress(bad + line(0, 3)))  # lines 4 5
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(days), cache_dir=str(tmp_path / "c"))
    assert str(e.value).startswith(f"{days / 'day_0.gz'}:2: expected 40 tab-separated fields, got 1")
    data = load_criteo(str(days), skip_bad_lines=True, cache_dir=str(tmp_path / "c"))
    assert data.cat[:, 0, 0].tolist() == [0, 1, 2, 3] and data.bad_lines == 2
    assert row_lines(str(days), np.arange(4), str(tmp_path / "c")).tolist() == [0, 2, 3, 5]


@pytest.mark.parametrize("suffix,pack", [(".gz", gzip.compress), (".xz", lzma.compress)])
def test_a_compressed_file_cut_short_is_refused_naming_it(tmp_path, suffix, pack):
    p = tmp_path / f"day_0{suffix}"
    p.write_bytes(pack(b"".join(line(1, i) for i in range(200)))[:-30])  # a download cut short
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(p), cache_dir=str(tmp_path / "c"))
    assert str(e.value).startswith(f"{p}: cannot be decompressed to its end (")
    assert str(e.value).endswith("): a download cut short? (gzip -t, bzip2 -t or xz -t checks it)")


def _tar_gz(name: str, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _zip(name: str, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(name, payload)
    return buf.getvalue()


@pytest.mark.parametrize("name,make,says", [
    ("dac.tar.gz", lambda: _tar_gz("train.txt", line(1, 1) * 3),
     "is a tar archive, not a Criteo TSV: extract it (tar -xf dac.tar.gz) and give the TSV file inside "
     "(the Kaggle archive's is train.txt)"),
    ("train.zip", lambda: _zip("train.txt", line(1, 1) * 3),
     "is a zip archive, not a Criteo TSV: extract it (unzip train.zip) and give the file inside"),
    ("train.txt.zst", lambda: bytes.fromhex("28b52ffd") + b"\0" * 16,
     "is zstd-compressed: decompress it (zstd -d train.txt.zst), or give it gzip-, bz2- or xz-compressed"),
])
def test_an_archive_is_refused_with_what_to_do(tmp_path, name, make, says):
    p = tmp_path / name
    p.write_bytes(make())
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(p), cache_dir=str(tmp_path / "c"))
    assert str(e.value) == f"{p}: {says}"


def test_a_day_both_plain_and_compressed_is_refused(tmp_path):
    days = tmp_path / "days"
    days.mkdir()
    (days / "day_0").write_bytes(line(0, 0))
    (days / "day_1").write_bytes(line(0, 1))
    (days / "day_1.gz").write_bytes(gzip.compress(line(0, 1)))
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(days), cache_dir=str(tmp_path / "c"))
    assert str(e.value) == (f"{days}: holds day_1 and day_1.gz, the same day twice (a decompression left "
                            "half done?): keep one of them")


def test_a_large_source_shows_the_cache_build_in_a_log(tmp_path, monkeypatch, capsys):
    """Above SHOW_BYTES (64 MiB; the 45M-line Kaggle file parses for minutes) both passes over the
    text say how far they are: whole lines in a log, a bar on a terminal; nothing for a small file."""
    import embeddings.criteo as criteo
    p = tmp_path / "day_0.gz"
    p.write_bytes(gzip.compress(b"".join(line(i % 2, i) for i in range(40))))
    load_criteo(str(p), cache_dir=str(tmp_path / "c"))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(criteo, "SHOW_BYTES", 0)
    monkeypatch.setattr(criteo, "CHUNK_LINES", 1)  # chunks of ~200 bytes: one line each
    load_criteo(str(p), cache_dir=str(tmp_path / "d"))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("criteo cache: counting lines: MB 1/1 (100%)"), err
    assert [x.split(",")[0] for x in err[1:]] == [f"criteo cache: lines {4 * i}/40 ({10 * i}%)" for i in range(1, 11)]


_BUILDER = """
import sys, time
import embeddings.criteo as criteo
real = criteo.build_cache
def slow(*a, **k):  # a build that takes long enough for the others to arrive while it runs
    with open(sys.argv[2], "a") as f:
        f.write("built\\n")
    time.sleep(1.5)
    return real(*a, **k)
criteo.build_cache = slow
print(len(criteo.load_criteo(sys.argv[1], cache_dir=sys.argv[3])))
"""


def test_processes_started_together_build_the_cache_once(tmp_path):
    """The ranks of a job under torchrun (or two jobs) reading one uncached file: the first to take
    the cache's lock builds it, the others wait and map it (before: each built its own)."""
    import os
    import subprocess
    import sys
    from tests.conftest import REPO
    p = tmp_path / "day_0"
    p.write_bytes(b"".join(line(i % 2, i) for i in range(300)))
    log = tmp_path / "builds.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(p), str(log), str(tmp_path / "c")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [pr.communicate(timeout=120) for pr in procs]
    assert [pr.returncode for pr in procs] == [0, 0], outs
    assert [o[0].strip() for o in outs] == ["300"] * 2
    assert log.read_text() == "built\n"
