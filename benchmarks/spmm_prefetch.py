"""How much a hand-written product gains over graphdist's (MKL's) on a part too large for the cache.

The owned block of a part, in the order the trainer uses (``--reorder``), multiplied by a 64-wide
float32 input: graphdist's product (``CSRPair.mm``: ``torch.addmm`` on a CSR tensor, MKL on CPU)
against an AVX-512 row loop compiled here (four 16-lane accumulators per row, the input row of
the entry D places ahead prefetched with ``_mm_prefetch``), for several distances D and prefetch
hints, in one process, the two alternated (a change of the machine's load falls on both), median
of ``--repeats``. The hand loop adds in MKL's order,
so its result is compared bit for bit. Not a product path: it answers whether the product is
bound by the kernel or by the memory it gathers from (issue 37).

    OMP_NUM_THREADS=1 python benchmarks/spmm_prefetch.py DIR [--reorder blocks] [--distances 1,16,32,64]

DIR is a k = 1 artifact. Needs a C++ compiler and an AVX-512 CPU (``torch.utils.cpp_extension``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_SRC = r'''
#include <torch/extension.h>
#include <immintrin.h>
template <int HINT>
static void rows64(const int* ptr, const int* idx, const float* val, const float* x, float* y,
                   int64_t n, int64_t dist) {
  for (int64_t r = 0; r < n; ++r) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int e = ptr[r]; e < ptr[r + 1]; ++e) {
      const char* pf = (const char*)(x + (int64_t)idx[e + dist] * 64);
      _mm_prefetch(pf, (_mm_hint)HINT); _mm_prefetch(pf + 64, (_mm_hint)HINT);
      _mm_prefetch(pf + 128, (_mm_hint)HINT); _mm_prefetch(pf + 192, (_mm_hint)HINT);
      const __m512 v = _mm512_set1_ps(val[e]);
      const float* xr = x + (int64_t)idx[e] * 64;
      a0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xr), a0);
      a1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xr + 16), a1);
      a2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xr + 32), a2);
      a3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xr + 48), a3);
    }
    float* yr = y + r * 64;
    _mm512_storeu_ps(yr, a0); _mm512_storeu_ps(yr + 16, a1);
    _mm512_storeu_ps(yr + 32, a2); _mm512_storeu_ps(yr + 48, a3);
  }
}
void spmm64(torch::Tensor ptr, torch::Tensor idx, torch::Tensor val, torch::Tensor x, torch::Tensor y,
            int64_t dist, int64_t hint) {
  const int* p = ptr.data_ptr<int>(); const int* i = idx.data_ptr<int>();
  const float* v = val.data_ptr<float>(); const float* xx = x.data_ptr<float>();
  float* yy = y.data_ptr<float>(); int64_t n = y.size(0);
  if (hint == 0) rows64<_MM_HINT_T0>(p, i, v, xx, yy, n, dist);
  else if (hint == 1) rows64<_MM_HINT_T1>(p, i, v, xx, yy, n, dist);
  else rows64<_MM_HINT_T2>(p, i, v, xx, yy, n, dist);
}
'''
HINTS = {"T0": 0, "T1": 1, "T2": 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--reorder", default="blocks")
    ap.add_argument("--distances", default="1,16,32,64", help="prefetch distances, in entries")
    ap.add_argument("--hints", default="T0,T1,T2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    from torch.utils.cpp_extension import load_inline
    torch.set_num_threads(1)
    if "avx512" not in torch.backends.cpu.get_cpu_capability().lower():
        print("spmm_prefetch: needs an AVX-512 CPU", file=sys.stderr)
        return 2
    from graphdist.partition.parts import load_part
    from graphdist.exchange.spmm import SparseAdj
    ext = load_inline("graphdist_spmm_prefetch", cpp_sources=_SRC, functions=["spmm64"],
                      extra_cflags=["-O3", "-mavx512f", "-mfma"])
    lg = load_part(args.dir, 0)
    lg = lg.reordered(args.reorder, max(int(lg.x.shape[1]), 64))
    own = SparseAdj.for_model(lg, "gcn").own
    a = own.A
    ptr, idx, val = a.crow_indices(), a.col_indices(), a.values()
    dists = [int(d) for d in args.distances.split(",")]
    idx_pad = torch.cat([idx, torch.zeros(max(dists), dtype=idx.dtype)])  # prefetches past the end
    n, nnz = lg.num_owned, own.nnz
    x = torch.randn(n, 64)
    ref = own.mm(x)
    out = {"artifact": str(args.dir), "reorder": args.reorder, "rows": n, "entries": nnz}
    print(f"{n:,} rows, {nnz:,} entries, 64 columns; each hand loop against graphdist's product "
          f"(MKL), the two alternated {args.repeats} times (medians): entries x columns / s")
    y = torch.empty(n, 64)
    for h in args.hints.split(","):
        for d in dists:
            ts = {"mkl": [], "hand": []}
            for _ in range(args.repeats + 1):  # the first pair warms up
                for name, f in (("mkl", lambda: own.mm(x)),
                                ("hand", lambda: ext.spmm64(ptr, idx_pad, val, x, y, d, HINTS[h]))):
                    t0 = time.perf_counter()
                    f()
                    ts[name].append(time.perf_counter() - t0)
            mkl, hand = (nnz * 64 / statistics.median(ts[k][1:]) for k in ("mkl", "hand"))
            same = bool(torch.equal(y, ref))
            out[f"{h}/d{d}"] = {"mkl_entries_cols_per_s": mkl, "hand_entries_cols_per_s": hand,
                                "hand_over_mkl": hand / mkl, "bit_for_bit": same}
            print(f"  prefetch {h} {d:>3} entries ahead: hand {hand:.3g}, MKL {mkl:.3g}: "
                  f"{hand / mkl:.2f}x, bit for bit: {same}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
