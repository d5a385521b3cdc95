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
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def one(directory: str, rank: int, how: str) -> dict:
    import torch
    from graphdist.partition.parts import load_part, part_path
    path = part_path(directory, rank)
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    if how == "mmap":
        lg = load_part(directory, rank)
        tensors = [v for v in lg.to_dict().values() if isinstance(v, torch.Tensor)]
    else:
        d = torch.load(path, map_location="cpu", weights_only=True)
        tensors = [v for v in d.values() if isinstance(v, torch.Tensor)]
    total = sum(float(t.max()) for t in tensors if t.numel())  # reads every page, allocates nothing
    peak = _status("VmHWM") - base
    return {"how": how, "file_bytes": path.stat().st_size, "peak_growth_bytes": peak, "checksum": total}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.dir, args.rank, args.one)))
        return 0
    for how in ("mmap", "torch.load"):
        p = subprocess.run([sys.executable, __file__, args.dir, "--rank", str(args.rank), "--one", how],
                           capture_output=True, text=True, check=True)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{how:<11} part {r['file_bytes'] / 2**20:8.1f} MiB  peak RSS growth {r['peak_growth_bytes'] / 2**20:8.1f} MiB"
              f"  = {r['peak_growth_bytes'] / r['file_bytes']:.2f}x the file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
