"""Resume a recommender on another number of ranks or another partition of the same graph.

A checkpoint holds, per old rank ``j``, the rows it owned (``embedding.rank<j>``), their Adam
moments (``adam_exp_avg.rank<j>``, ``adam_exp_avg_sq.rank<j>``) and their global node ids
(``ids.rank<j>``); Adam's step count is one number. Every row of the table and of its moments is
a function of its node alone (Adam is element-wise, sampling is keyed by user and epoch), so the
state moves to any partition by node id: each new rank reads the old shards one at a time and
keeps the rows of the nodes it owns now::

    for each old rank j:   ids_j, rows_j, m_j, v_j   (one old shard in memory at a time)
        mine = ids_j that this rank owns   ->   their local rows  <- rows_j, m_j, v_j

Refused in one line (never a shape error): a checkpoint that saved no node ids (written before
resharding existed), a table of another width, or old shards that do not cover this rank's
nodes exactly once (another graph).
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist.errors import ArtifactError

__all__ = ["load_rows"]

_KINDS = ("embedding", "adam_exp_avg", "adam_exp_avg_sq")


def load_rows(ckpt, snap, was: dict, now: dict, state: dict, owned: torch.Tensor) -> None:
    """Fill this rank's ``state`` (the recommender task's: its rows, moments and the step count,
    under its own rank's keys) from snapshot ``snap`` of another partition (``was``; ``now`` is
    this run's), matching rows by the global node ids ``owned`` (local row order). Collective:
    every rank reads the same old shards in the same order."""
    from graphdist.loop import facts
    layout = ckpt.layout(snap)
    old = int(was["world_size"])
    where = f"checkpoint {snap} ({facts(was)})"
    mine = {k: v for k, v in state.items() if k.startswith(tuple(f"{n}.rank" for n in _KINDS))}
    dim = next(iter(mine.values())).shape[1]
    for j in range(old):
        if f"ids.rank{j}" not in layout:
            raise ArtifactError(f"{where} saved its table rows without their node ids (written before resharding "
                                f"existed), so they cannot move onto {facts(now)}: resume on {old} ranks and the "
                                "same partition")
        for n in _KINDS:
            shape = layout.get(f"{n}.rank{j}")
            if shape is None or len(shape) != 2 or shape[1] != dim or shape[0] != layout[f"ids.rank{j}"][0]:
                raise ArtifactError(f"{where} holds {n}.rank{j} of shape {list(shape) if shape else None}, this run's "
                                    f"table is {dim} wide: not a table of this run")
    ids = owned.to(torch.int64).cpu().numpy()
    order = np.argsort(ids, kind="stable")
    ids_sorted = ids[order]
    filled = np.zeros(ids.size, dtype=bool)
    dest = {n: next(v for k, v in mine.items() if k.startswith(f"{n}.rank")) for n in _KINDS}
    step = torch.zeros_like(state["adam_step"])
    for j in range(old):
        n_j = layout[f"ids.rank{j}"][0]
        part = {f"ids.rank{j}": torch.empty(n_j, dtype=torch.int64)}
        part.update({f"{n}.rank{j}": torch.empty(n_j, dim, dtype=dest[n].dtype) for n in _KINDS})
        if j == 0:
            part["adam_step"] = step
        ckpt.load(snap, part)
        got = part[f"ids.rank{j}"].numpy()
        at = np.minimum(np.searchsorted(ids_sorted, got), max(ids.size - 1, 0))
        hit = (ids_sorted[at] == got) if ids.size else np.zeros(got.size, dtype=bool)
        rows = order[at[hit]]
        if filled[rows].any():
            raise ArtifactError(f"{where}: node {int(ids[rows[filled[rows]][0]])} has rows in two old shards")
        filled[rows] = True
        sel = torch.from_numpy(np.flatnonzero(hit))
        loc = torch.from_numpy(rows)
        with torch.no_grad():
            for n in _KINDS:
                dest[n][loc] = part[f"{n}.rank{j}"][sel].to(dest[n].device)
        del part
    if not filled.all():
        raise ArtifactError(f"{where} has no rows for {int((~filled).sum())} of this rank's {ids.size} nodes "
                            f"(first: node {int(ids[np.flatnonzero(~filled)[0]])}): not a checkpoint of this graph")
    state["adam_step"].copy_(step)
