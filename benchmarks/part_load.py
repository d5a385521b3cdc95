"""What loading one part file costs a rank: peak RSS of ``load_part`` (memory-mapped) against the
part file's size, and against a plain ``torch.load`` of the same file.

    python benchmarks/part_load.py DIR [--rank 0]           # DIR: an artifact (graphdist partition)

Each way runs in a fresh child process: it loads the part, touches every tensor (a sum over
its maximum, so every page is read and nothing is allocated), and reports the growth of its peak RSS (``VmHWM``) over its RSS
before the load, divided by the file size. 1.0x means the part is held once.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import harness


def one(directory: str, rank: int, how: str) -> dict:
    import torch
    from graphdist.partition.parts import load_part, part_path
    path = part_path(directory, rank)
    base = harness.status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    if how == "mmap":
        lg = load_part(directory, rank)
        tensors = [v for v in lg.to_dict().values() if isinstance(v, torch.Tensor)]
    else:
        d = torch.load(path, map_location="cpu", weights_only=True)
        tensors = [v for v in d.values() if isinstance(v, torch.Tensor)]
    total = sum(float(t.max()) for t in tensors if t.numel())  # reads every page, allocates nothing
    peak = harness.status_bytes("VmHWM") - base
    return {"how": how, "file_bytes": path.stat().st_size, "peak_growth_bytes": peak, "checksum": total}


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("dir")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.one:
        print(json.dumps(one(args.dir, args.rank, args.one)))
        return 0
    rows = []
    for how in ("mmap", "torch.load"):
        r = harness.child_json([__file__, args.dir, "--rank", str(args.rank), "--one", how], 3600, cwd=Path.cwd())
        if "error" in r:
            raise SystemExit(f"{how}: {r['error']}")
        rows.append(r)
        print(f"{how:<11} part {r['file_bytes'] / 2**20:8.1f} MiB  peak RSS growth {r['peak_growth_bytes'] / 2**20:8.1f} MiB"
              f"  = {r['peak_growth_bytes'] / r['file_bytes']:.2f}x the file")
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
