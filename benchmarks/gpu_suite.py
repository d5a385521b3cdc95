"""The GPU figures in one run (under 8 minutes on one GPU), as JSON.

    python benchmarks/gpu_suite.py --json gpu_suite.json            # on a machine with a GPU
    python benchmarks/gpu_suite.py --quick --device cpu             # a functional check on CPU

Three parts, each one side-by-side comparison, each in a subprocess with its own time limit
(a part that fails or times out is recorded as such; the others still run):

1. ``gcn``: one-GPU epoch time and peak memory on an ogbn-products-sized random graph,
   graphdist (k=1) vs PyG ``GCNConv`` (:mod:`benchmarks.gpu_gcn`).
2. ``dlrm``: DLRM training throughput on one GPU, graphdist's loop vs a plain torchrec loop
   (:mod:`benchmarks.dlrm_throughput`); recorded as skipped when torchrec/FBGEMM are not
   installed (the lent GPU image has neither).
3. ``lookup``: embedding-bag lookup bandwidth (bytes of rows gathered per second) against the
   device's own copy bandwidth: ``torch.nn.EmbeddingBag`` (sum), and FBGEMM's table-batched
   kernel when installed.

4. ``tests``: the tests that need a GPU (:data:`CUDA_TESTS`, skipped on a CPU-only box), run
   with pytest; their outcome line.

Record the output in BENCHMARKS.md with the GPU's name (``device`` in the JSON).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_TESTS = (
    "tests/test_gcn_cuda.py",
    "tests/test_dlrm_cuda.py",
    "tests/test_halo_route.py::test_hosts_route_on_cuda",  # --halo-route hosts: the route's indices on the GPU
)
"""The tests that skip without a GPU: what a machine with one runs (part ``tests``)."""


def cuda_tests(timeout: float) -> dict:
    """Run :data:`CUDA_TESTS` with pytest in this process's checkout; pytest's outcome line."""
    root = os.path.dirname(HERE)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", *CUDA_TESTS], cwd=root,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
    return {"wall_s": round(time.perf_counter() - t0, 1), "status": "ok" if r.returncode == 0 else
            f"failed (exit {r.returncode})", "summary": lines[-1] if lines else r.stderr.strip()[-300:]}


def _sub(cmd: list[str], timeout: float) -> dict:
    """Run one part; its ``--json`` output, or what went wrong."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "part.json")
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, *cmd, "--json", out], capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {timeout:.0f} s"}
        res = {"wall_s": round(time.perf_counter() - t0, 1)}
        if r.returncode != 0 or not os.path.exists(out):
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return {**res, "status": f"failed (exit {r.returncode})", "tail": tail}
        with open(out) as fh:
            return {**res, "status": "ok", **json.load(fh)}


def _bandwidth(fn, nbytes: int, device: torch.device, reps: int) -> float:
    """GB/s of ``fn`` moving ``nbytes``, median of ``reps`` timed calls after one warm-up."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    times = harness.alternate({"fn": lambda r: fn()}, reps, warmup=1, sync=sync)["fn"].wall
    return nbytes / statistics.median(times) / 1e9


def _copy_gb_per_s(gathered: int, device: torch.device, reps: int) -> float:
    """The device's own copy GB/s (read + write) over a buffer of ``gathered`` bytes."""
    src = torch.empty(gathered // 4, device=device)
    dst = torch.empty_like(src)
    return _bandwidth(lambda: dst.copy_(src), 2 * gathered, device, reps)


def _bag_gb_per_s(rows: int, dim: int, ids, offsets, device: torch.device, reps: int) -> float:
    """``torch.nn.EmbeddingBag`` (sum) lookup GB/s: rows gathered x dim x 4 bytes."""
    bag = torch.nn.EmbeddingBag(rows, dim, mode="sum").to(device)
    with torch.no_grad():
        return _bandwidth(lambda: bag(ids, offsets), ids.numel() * dim * 4, device, reps)


def lookup(device: torch.device, quick: bool) -> dict:
    """Embedding-bag lookup GB/s (rows gathered x dim x 4 bytes) vs the device's copy GB/s."""
    rows, dim, batch, pool = (200_000, 64, 4096, 8) if quick else (20_000_000, 128, 65536, 32)
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, rows, (batch * pool,), generator=g).to(device)
    offsets = torch.arange(0, batch * pool, pool, device=device)
    gathered = ids.numel() * dim * 4
    reps = 5 if quick else 20
    res = {"rows": rows, "dim": dim, "batch": batch, "pooling": pool}
    res["copy_gb_per_s"] = round(_copy_gb_per_s(gathered, device, reps), 1)
    res["embedding_bag_gb_per_s"] = round(_bag_gb_per_s(rows, dim, ids, offsets, device, reps), 1)
    res["embedding_bag_vs_copy"] = round(res["embedding_bag_gb_per_s"] / res["copy_gb_per_s"], 3)
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)
        loc = (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if device.type == "cuda" else (
            EmbeddingLocation.HOST, ComputeDevice.CPU)
        tbe = SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, loc[0], loc[1])], device=device)
        tbe_offsets = torch.cat([offsets, offsets.new_tensor([ids.numel()])])  # B + 1 entries
        with torch.no_grad():
            res["fbgemm_tbe_gb_per_s"] = round(_bandwidth(lambda: tbe(ids, tbe_offsets), gathered, device, reps), 1)
        res["fbgemm_tbe_vs_copy"] = round(res["fbgemm_tbe_gb_per_s"] / res["copy_gb_per_s"], 3)
    except Exception as e:  # noqa: BLE001 - FBGEMM is optional here
        res["fbgemm_tbe"] = f"skipped: {type(e).__name__}: {str(e)[:120]}"
    return res


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small sizes: a functional check, not a figure")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    dev = torch.device(a.device)
    res = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "quick": a.quick}
    t0 = time.perf_counter()
    scale, epochs = ("0.002", "3") if a.quick else ("1.0", "20")
    res["gcn"] = _sub([os.path.join(HERE, "gpu_gcn.py"), "--device", a.device, "--scale", scale,
                       "--epochs", epochs, "--warmup", "1" if a.quick else "3"], timeout=240)
    print("gcn   ", json.dumps(res["gcn"]), flush=True)
    try:
        import torchrec
        del torchrec  # importable: the part can run
        res["dlrm"] = _sub([os.path.join(HERE, "dlrm_throughput.py"), "--device", a.device,
                            "--nproc", "1", "--rounds", "1" if a.quick else "3"], timeout=180)
    except ImportError as e:
        res["dlrm"] = {"status": f"skipped: torchrec not importable ({e})"}
    print("dlrm  ", json.dumps(res["dlrm"]), flush=True)
    res["lookup"] = lookup(dev, a.quick)
    print("lookup", json.dumps(res["lookup"]), flush=True)
    res["tests"] = cuda_tests(timeout=300)
    print("tests ", json.dumps(res["tests"]), flush=True)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    harness.write_json(a.json, res, indent=2)
    return res


if __name__ == "__main__":
    main()
