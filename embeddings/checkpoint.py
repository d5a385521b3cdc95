"""Checkpoints with ``torch.distributed.checkpoint`` (DCP), written atomically.

    CKPT_DIR/
        step_00000040/          one DCP snapshot: every rank writes its own shards
            .metadata, __0_0.distcp, __1_0.distcp, losses.json
        latest                  text file naming the newest complete snapshot

A snapshot is written to ``step_<t>.tmp-<id>/``; after a barrier rank 0 renames it to
``step_<t>/`` and then replaces ``latest`` (temp file + ``os.replace``), so a crash leaves
either the previous snapshot or the new one, never a half-written one that ``--resume`` reads.
The snapshot holds the sharded model (embedding shards as ShardedTensors, dense replicas), the
fused embedding optimizer state (e.g. row-wise Adagrad sums), the dense optimizer state, the
step and the global losses so far.
"""
from __future__ import annotations

import json
import os
import shutil

import torch.distributed as dist

from graphdist.errors import ArtifactError


def _state(dmp, opt) -> dict:
    return {"model": dmp.state_dict(), "optim": opt.state_dict()}


def save_checkpoint(root: str, step: int, dmp, opt, losses: list[float]) -> str:
    import torch.distributed.checkpoint as dcp
    rank = dist.get_rank()
    final = os.path.join(root, f"step_{step:08d}")
    tmp = final + ".tmp"
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    dist.barrier()
    dcp.save(_state(dmp, opt), checkpoint_id=tmp)
    if rank == 0:
        with open(os.path.join(tmp, "losses.json"), "w") as fh:
            json.dump({"step": step, "losses": losses, "world_size": dist.get_world_size()}, fh)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        lt = os.path.join(root, f"latest.tmp{os.getpid()}")
        with open(lt, "w") as fh:
            fh.write(os.path.basename(final) + "\n")
        os.replace(lt, os.path.join(root, "latest"))
    dist.barrier()
    return final


def latest_checkpoint(root: str) -> str | None:
    p = os.path.join(root, "latest")
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        name = fh.read().strip()
    path = os.path.join(root, name)
    if not os.path.isdir(path):
        raise ArtifactError(f"{p} names {name!r}, which does not exist")
    return path


def load_checkpoint(path: str, dmp, opt) -> tuple[int, list[float]]:
    """Load a snapshot in place; returns ``(step, losses so far)``."""
    import torch.distributed.checkpoint as dcp
    with open(os.path.join(path, "losses.json")) as fh:
        meta = json.load(fh)
    state = _state(dmp, opt)
    dcp.load(state, checkpoint_id=path)
    dmp.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return int(meta["step"]), [float(x) for x in meta["losses"]]
