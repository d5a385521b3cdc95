"""Atomic per-rank checkpoints for GCN training.

    DIR/epoch000010_rank00000.pt   model + optimiser + RNG + history of rank 0 after epoch 10
    DIR/epoch000010_rank00001.pt   ...
    DIR/latest.json                {"epoch": 10, "world_size": 2, "fingerprint": ..., ...}

Every rank writes its file (temp + os.replace); after a barrier rank 0 replaces latest.json and
removes older epochs. A crash at any point leaves latest.json pointing at a complete set.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from graphdist import comm
from graphdist.errors import ArtifactError, MissingFileError
from graphdist.fileio import atomic_torch_save, atomic_write_json

_KEYS = ("model", "layers", "hidden", "batch_norm", "seed")


def _file(d: Path, epoch: int, rank: int) -> Path:
    return d / f"epoch{epoch:06d}_rank{rank:05d}.pt"


def save_checkpoint(cfg, rank, ws, fingerprint, epoch, model, opt, hist) -> None:
    d = Path(cfg.checkpoint_dir)
    d.mkdir(parents=True, exist_ok=True)
    state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict(),
             "rng": torch.get_rng_state(), "hist": hist,
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    dst = _file(d, epoch, rank)
    atomic_torch_save(state, dst)
    comm.barrier()
    if rank == 0:
        meta = {"epoch": epoch, "world_size": ws, "fingerprint": fingerprint,
                **{k: getattr(cfg, k) for k in _KEYS}}
        atomic_write_json(d / "latest.json", meta)
        for f in d.glob("epoch*_rank*.pt"):
            if not f.name.startswith(f"epoch{epoch:06d}_"):
                f.unlink(missing_ok=True)
    comm.barrier()


def load_checkpoint(cfg, rank, ws, fingerprint, model, opt, device) -> tuple[int, dict]:
    """Restore model/optimiser/RNG; returns ``(epoch done, history)``."""
    d = Path(cfg.checkpoint_dir)
    latest = d / "latest.json"
    if not latest.exists():
        raise MissingFileError(f"--resume: no checkpoint in {d} (latest.json not found)")
    meta = json.loads(latest.read_text())
    if meta["world_size"] != ws:
        raise ArtifactError(f"checkpoint {d} was written by {meta['world_size']} ranks, this run has {ws}")
    if meta["fingerprint"] != fingerprint:
        raise ArtifactError(f"checkpoint {d} is for graph fingerprint {meta['fingerprint']}, "
                            f"this run's graph has {fingerprint}")
    for k in _KEYS:
        if meta.get(k) != getattr(cfg, k):
            raise ArtifactError(f"checkpoint {d} has {k}={meta.get(k)!r} but this run has {getattr(cfg, k)!r}")
    f = _file(d, meta["epoch"], rank)
    if not f.exists():
        raise MissingFileError(f"--resume: {f} is missing")
    st = torch.load(f, map_location=device, weights_only=False)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    torch.set_rng_state(st["rng"].cpu())
    if st.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda_rng"])
    return int(st["epoch"]), st["hist"]
