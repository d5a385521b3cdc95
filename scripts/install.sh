#!/usr/bin/env bash
# Install graphdist and everything it needs, on a fresh Linux machine with Python >= 3.10 and pip.
#
#   bash scripts/install.sh          # CPU stack (torch 2.13.0 CPU wheel, torchrec on fbgemm-gpu-cpu)
#   bash scripts/install.sh --test   # ... plus the test extras (pytest, MkDocs for the docs site) and CiteSeer/PubMed (scripts/fetch_planetoid.py)
#   GRAPHDIST_GPU=1 bash scripts/install.sh   # keep an already-installed CUDA torch; fbgemm-gpu (CUDA)
#
# torchrec 1.9.2 declares the CUDA-only package fbgemm-gpu as a dependency, so it is installed with
# --no-deps and its real needs are listed here. The pins below are the combination known to work.
# cmeel-metis ships METIS with 32-bit ids, which partitions graphs below 2^31 edges in half the
# memory of pymetis' 64-bit build (graphdist uses pymetis' build when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
PIP=("$PY" -m pip install --disable-pip-version-check --progress-bar off -q)
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

if [ "${GRAPHDIST_GPU:-0}" = "1" ]; then
  "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
    || { echo "install.sh: GRAPHDIST_GPU=1 needs a CUDA build of torch installed first" >&2; exit 2; }
  FBGEMM="fbgemm-gpu==1.8.0"
else
  "${PIP[@]}" "torch==2.13.0"
  FBGEMM="fbgemm-gpu-cpu==1.8.0"
fi
"${PIP[@]}" --no-deps "torchrec==1.9.2" "$FBGEMM"
"${PIP[@]}" "tensordict==0.15.3" "torchmetrics==1.0.3" "pyre-extensions==0.0.32" "iopath==0.1.10" \
  "tqdm>=4.60" "kaminpar==3.7.3" "mtkahypar==1.7.post1" "cmeel-metis==5.2.1.1" "pyarrow==26.0.1"
"${PIP[@]}" -e ".${extras}"
# pip byte-compiles what it installs, but not an editable install: compile it once here, so that each
# process (every rank of every job) reads bytecode instead of compiling the sources again (0.25 s a
# process here; where PYTHONDONTWRITEBYTECODE is set, Python never writes the bytecode itself)
"$PY" -m compileall -q -j 0 graphdist embeddings partitioners ${extras:+tests benchmarks scripts}
if [ -n "$extras" ]; then  # the tests of CiteSeer and PubMed skip without their files; a failed fetch is not fatal
  "$PY" scripts/fetch_planetoid.py || echo "install.sh: CiteSeer/PubMed not fetched; their tests will skip" >&2
fi
"$PY" -c "import torch, torchrec, torch_geometric, pymetis; print(f'graphdist install ok: torch {torch.__version__}, torchrec {torchrec.__version__}, torch_geometric {torch_geometric.__version__}')"
