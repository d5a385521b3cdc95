"""2D sparse parallelism: G replicas of an S-rank sharded embedding model (world W = G x S).

Two rank layouts (``--sparse-layout``); ranks are host-major, as torchrun numbers them
(rank = node rank x L + local rank, L ranks per node):

``hosts`` (torchrec ``DMPCollection(use_inter_host_allreduce=True)``)::

    rank r:  sharding group g = r // S  members {S*g + j : j < S}   (S consecutive ranks)
             replica group       j = r % S   members {S*g + j : g < G}

    W = 4, G = 2, 2 nodes of 2:  sharding groups {0,1} (node 0) {2,3} (node 1);
                                 replica groups {0,2} {1,3} (across the nodes)

``torchrec`` (``DMPCollection``'s default, ``use_inter_host_allreduce=False``)::

    rank r:  sharding group g = r % G   members {g + G*j : j < S}   group rank j = r // G
             replica group       j      members {G*j + g : g < G}   (G consecutive ranks)

    W = 4, G = 2, 2 nodes of 2:  sharding groups {0,2} {1,3} (each across the nodes);
                                 replica groups {0,1} (node 0) {2,3} (node 1)

The all-to-all of the embedding lookups stays inside a sharding group, the replica sync inside
a replica group. ``hosts`` keeps the all-to-all inside a node when S divides the ranks per node
(the sync crosses nodes); ``torchrec`` keeps the sync inside a node when G divides them (the
all-to-all crosses nodes). Either way sharding group g of the data takes the g-th 1/G of the
global batch in group-rank order (:meth:`Layout.slot`), so both layouts train the same model.

The two paths shard alike and sync the same tensors; they differ in what a sync moves:

* CUDA: torchrec's ``DMPCollection`` (plan for S ranks, remapped by DMPCollection itself);
  ``sync()`` is ``DMPCollection.sync``, which all-reduces (AVG) every fused table shard and its
  optimizer state ``"sum"`` on the replica group, whole, at every sync, touched or not.
* CPU (DMPCollection asserts CUDA/MTIA): the same ``DeviceMesh(("replicate", "shard"))``, the
  plan remapped the same way, torchrec's ``ShardingEnv2D`` and a plain
  ``DistributedModelParallel``; :class:`ReplicaSync` caches the tensors DMPCollection caches
  (every ``SplitTableBatchedEmbeddingBagsCodegen``'s ``split_embedding_weights()`` and the
  ``"sum"`` of its ``get_optimizer_state()``, found by the same walk) and averages, with the
  same ``allreduce_coalesced(AVG)`` on the replica group, only the rows some replica looked up
  since the last sync: the same result (bit for bit at G = 2), for the bytes of the rows that
  changed instead of whole shards. :meth:`ReplicaSync.sync_all` is DMPCollection's whole-shard
  sync.

Under ``ShardingEnv2D`` dense layers and data_parallel tables are DDP over the whole world
(gradients averaged over all W ranks), exactly as in DMPCollection; only fused (sharded)
tables are replicas that drift apart between syncs.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist

from graphdist.errors import ConfigError

__all__ = ["Layout", "layout_for", "build_dmp_2d", "build_local", "ReplicaSync"]


LAYOUTS = ("hosts", "torchrec")
"""``--sparse-layout`` choices (see the module docstring)."""


@dataclass(frozen=True)
class Layout:
    """Where each rank sits in a W = G x S job."""

    world: int
    """W, all ranks."""
    groups: int
    """G, replicas of the sharded model (= number of sharding groups)."""
    local_size: int = 0
    """ranks per node (0: unknown, taken as W)."""
    kind: str = "hosts"
    """``hosts``: sharding groups of S consecutive ranks; ``torchrec``: of every G-th rank."""

    @property
    def size(self) -> int:
        """S, ranks per sharding group."""
        return self.world // self.groups

    @property
    def contiguous(self) -> bool:
        """Sharding groups are consecutive ranks (``hosts``; always at G = 1)."""
        return self.kind == "hosts" or self.groups == 1

    def position(self, rank: int) -> tuple[int, int]:
        """``(sharding group g, group rank j)`` of global ``rank``."""
        if self.contiguous:
            return rank // self.size, rank % self.size
        return rank % self.groups, rank // self.groups

    def global_rank(self, g: int, j: int) -> int:
        return g * self.size + j if self.contiguous else g + self.groups * j

    def sharding_group(self, g: int) -> list[int]:
        return [self.global_rank(g, j) for j in range(self.size)]

    def replica_group(self, j: int) -> list[int]:
        return [self.global_rank(g, j) for g in range(self.groups)]

    def slot(self, rank: int) -> int:
        """Which of the W equal slices of a global batch ``rank`` trains on: sharding group g
        takes the g-th 1/G of the batch, in group-rank order (= ``rank`` with ``hosts``)."""
        g, j = self.position(rank)
        return g * self.size + j

    @property
    def node_group_size(self) -> int:
        """Members of one sharding group on one node (torchrec's ``node_group_size``, the
        'host' of table_row_wise inside a group): ``torchrec``: L/G when G divides the L ranks
        per node; ``hosts``: S when S divides L (the group is inside a node), L when L divides S."""
        L = self.local_size or self.world
        if L >= self.world:
            return self.size
        if self.contiguous:
            n = self.size if L % self.size == 0 else L if self.size % L == 0 else 1
        else:
            n = L // self.groups if L % self.groups == 0 else 1
        return n if n >= 1 and self.size % n == 0 else 1

    def describe(self) -> dict:
        return {"sparse_groups": self.groups, "sparse_layout": self.kind, "sharding_group_size": self.size,
                "sharding_groups": [self.sharding_group(g) for g in range(self.groups)],
                "replica_groups": [self.replica_group(j) for j in range(self.size)]}


def layout_for(world: int, groups: int, local_size: int = 0, kind: str = "hosts") -> Layout:
    """The layout, or :class:`ConfigError` when G does not divide W."""
    if groups < 1 or world % groups:
        raise ConfigError(f"--sparse-groups {groups} must divide the world size {world} "
                          f"(W = G x S: G replicas of an S-rank sharding group)")
    if kind not in LAYOUTS:
        raise ConfigError(f"--sparse-layout must be one of {', '.join(LAYOUTS)}, got {kind!r}")
    return Layout(world, groups, local_size, kind)


def remap_plan(plan, rank: int, layout: Layout):
    """A copy of ``plan`` (group ranks 0..S-1) with global ranks for ``rank``'s sharding group,
    as ``DMPCollection._remap_sharding_plan`` does (``p -> p + g*S`` with ``hosts``, its
    ``use_inter_host_allreduce``; ``p -> p*G + g`` with ``torchrec``); placements stay
    ``rank:N/cpu`` on CPU (ShardedTensor rejects ``cpu:K``)."""
    from torchrec.distributed.types import EnumerableShardingSpec

    from graphdist.torch_internals import remote_device
    plan = copy.deepcopy(plan)
    g = layout.position(rank)[0]
    for mp in plan.plan.values():
        for ps in mp.values():
            ps.ranks = [layout.global_rank(g, p) for p in ps.ranks] if ps.ranks is not None else None
            if isinstance(ps.sharding_spec, EnumerableShardingSpec):
                for sh in ps.sharding_spec.shards:
                    new = layout.global_rank(g, sh.placement.rank())
                    dev = sh.placement.device()
                    where = "cpu" if dev.type == "cpu" else f"{dev.type}:{new % max(layout.local_size, 1)}"
                    sh.placement = remote_device(f"rank:{new}/{where}")
    return plan


class ReplicaSync:
    """DMPCollection's ``sync()`` for a model built on CPU, moving only what changed: the rows of
    every fused table shard (weights and the optimizer state ``"sum"``) that some replica of the
    group looked up since the last sync are averaged across the replica group.

    That equals averaging the whole shards (:meth:`sync_all`, what DMPCollection does): a fused
    optimizer changes only the rows its forward looked up, and a row no replica looked up is the
    same on every replica (equal at the last sync, or since the identical initialisation or
    checkpoint load), so its mean is itself. Bit for bit at G = 2 (the mean of two numbers does
    not depend on the order of the sum); at G > 2 the all-reduce may sum in another order,
    within rounding.

    Touched rows come from a forward pre-hook on every ``SplitTableBatchedEmbeddingBagsCodegen``
    (the same walk as DMPCollection's): its ``indices`` are rows of the local shard (row-wise
    shards get ids already shifted to the shard's first row by torchrec's input distribution;
    table-wise and column-wise shards hold every row), split per feature by ``offsets`` and
    mapped to tables by ``feature_table_map``. Forwards without autograd (evaluation) change
    nothing and are not recorded. One sync: an all-gather of this rank's touched row keys (their
    union over the group), then one ``allreduce_coalesced(AVG)`` per dtype of those rows of the
    weights and the state, written back in place. :attr:`bytes_moved` counts what this rank put
    into those collectives (ids as int64, rows as stored)."""

    def __init__(self, dmp, replica_pg):
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            SplitTableBatchedEmbeddingBagsCodegen as TBE)

        from graphdist.torch_internals import sharded_lookups
        self.replica_pg = replica_pg
        found: list = []

        def walk(m):  # DMPCollection._group_sharded_modules, default context
            if isinstance(m, TBE):
                found.append(m)
            for lookup in sharded_lookups(m):  # (not registered submodules: graphdist.torch_internals)
                walk(lookup)
            for _, child in m.named_children():
                walk(child)
        walk(dmp.module)  # (the sharded model without DMP's and DDP's wrappers)
        self.weights_by_dtype: dict = {}
        self.optimizer_tensors_by_dtype: dict = {}
        self.tables: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
        """Per local table shard, in walk order: ``(weights [rows, cols], optimizer states)``."""
        bases = [0]
        for tbe in found:  # DMPCollection._cache_sync_tensors
            weights, states = tbe.split_embedding_weights(), tbe.get_optimizer_state()
            for w in weights:
                self.weights_by_dtype.setdefault(w.dtype, []).append(w)
            for state in states:
                self.optimizer_tensors_by_dtype.setdefault(state["sum"].dtype, []).append(state["sum"])
            for t, w in enumerate(weights):
                self.tables.append((w, [states[t]["sum"]] if t < len(states) else []))
                bases.append(bases[-1] + w.shape[0])
            table_base = torch.tensor(bases[-1 - len(weights):-1], dtype=torch.int64)
            tbe.register_forward_pre_hook(self._recorder(table_base, tbe.feature_table_map), with_kwargs=True)
        self.bases = torch.tensor(bases, dtype=torch.int64)
        """Row key of table i's row 0 (keys number the rows of all local shards; last: the total)."""
        self.touched: list[torch.Tensor] = []
        """Row keys looked up since the last sync (with repeats)."""
        self.bytes_moved = 0
        """Bytes this rank passed into the sync collectives so far."""

    def _recorder(self, table_base: torch.Tensor, feature_table_map: list[int]):
        """The pre-hook of one TBE: appends the row keys its forward looks up to :attr:`touched`."""
        feature_base = table_base[torch.tensor(feature_table_map, dtype=torch.int64)]

        def hook(module, args, kwargs):
            if not torch.is_grad_enabled():
                return
            a = {**dict(zip(("indices", "offsets"), args)), **kwargs}
            ids, offsets = a["indices"].long(), a["offsets"].long()
            per_rank = a.get("batch_size_per_feature_per_rank")
            F = feature_base.numel()
            bags = (torch.tensor([sum(b) for b in per_rank], dtype=torch.int64) if per_rank is not None
                    else torch.full((F,), (offsets.numel() - 1) // F, dtype=torch.int64))
            ends = offsets[torch.cumsum(bags, 0)]
            counts = torch.diff(ends, prepend=offsets[:1])
            self.touched.append(ids[offsets[0]:ends[-1]] + feature_base.repeat_interleave(counts))
        return hook

    def bytes_per_sync(self) -> int:
        """Bytes of one whole-shard sync (:meth:`sync_all`): every shard and its state."""
        return sum(t.numel() * t.element_size() for t in self._whole(True))

    def __call__(self, include_optimizer_state: bool = True) -> None:
        """Average the rows some replica of the group looked up since the last sync."""
        from graphdist import comm
        mine = torch.unique(torch.cat(self.touched)) if self.touched else torch.zeros(0, dtype=torch.int64)
        self.touched = []
        keys = torch.unique(comm.all_gather_rows(mine, self.replica_pg))  # sorted union
        self.bytes_moved += mine.numel() * mine.element_size()
        cuts = torch.searchsorted(keys, self.bases).tolist()
        picked: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (tensor, rows, their values)
        for (w, states), base, lo, hi in zip(self.tables, self.bases.tolist(), cuts[:-1], cuts[1:]):
            if hi > lo:
                rows = keys[lo:hi] - base
                for x in [w, *states] if include_optimizer_state else [w]:
                    picked.append((x, rows, x.index_select(0, rows)))
        by_dtype: dict = {}
        for p in picked:
            by_dtype.setdefault(p[2].dtype, []).append(p[2])
        for vals in by_dtype.values():
            comm.all_reduce_mean_coalesced(vals, self.replica_pg)
            self.bytes_moved += sum(v.numel() * v.element_size() for v in vals)
        for x, rows, vals in picked:
            x.index_copy_(0, rows, vals)

    def sync_all(self, include_optimizer_state: bool = True) -> None:
        """DMPCollection's own sync: average every shard and its state, touched or not."""
        from graphdist import comm
        self.touched = []
        for tensors in self.weights_by_dtype.values():
            comm.all_reduce_mean_coalesced(tensors, self.replica_pg)
        if include_optimizer_state:
            for tensors in self.optimizer_tensors_by_dtype.values():
                comm.all_reduce_mean_coalesced(tensors, self.replica_pg)
        self.bytes_moved += sum(t.numel() * t.element_size() for t in self._whole(include_optimizer_state))

    def _whole(self, include_optimizer_state: bool):
        for d in (self.weights_by_dtype, self.optimizer_tensors_by_dtype) if include_optimizer_state \
                else (self.weights_by_dtype,):
            for ts in d.values():
                yield from ts


def build_dmp_2d(module, plan, device: torch.device, layout: Layout, sharders=None):
    """``(dmp, sync)``: ``module`` sharded by ``plan`` (made for S ranks, group ranks) inside this
    rank's sharding group, replicated across the G groups; ``sync()`` averages the replicas."""
    W, S = layout.world, layout.size
    if device.type in ("cuda", "mtia"):
        from torchrec.distributed.model_parallel import DMPCollection
        dmp = DMPCollection(module=module, device=device, plan=copy.deepcopy(plan), world_size=W,
                            sharding_group_size=S, global_pg=dist.group.WORLD,
                            node_group_size=layout.node_group_size, sharders=sharders,
                            use_inter_host_allreduce=layout.contiguous)
        return dmp, dmp.sync
    from torch.distributed.device_mesh import DeviceMesh
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv2D
    from graphdist import comm
    rank = comm.world()[0]
    # DMPCollection._create_process_groups: rows are sharding groups, columns replica groups
    mesh = DeviceMesh(device_type=device.type, mesh=[layout.sharding_group(g) for g in range(layout.groups)],
                      mesh_dim_names=("replicate", "shard"))
    sharding_pg, replica_pg = mesh.get_group(mesh_dim="shard"), mesh.get_group(mesh_dim="replicate")
    env = ShardingEnv2D(sharding_pg=sharding_pg, replica_pg=replica_pg, global_pg=dist.group.WORLD,
                        device_mesh=mesh, node_group_size=layout.node_group_size,
                        use_inter_host_allreduce=layout.contiguous)
    dmp = DistributedModelParallel(module, env=env, device=device, plan=remap_plan(plan, rank, layout),
                                   sharders=sharders)
    return dmp, ReplicaSync(dmp, replica_pg)


def build_local(module, plan, device: torch.device, world: int):
    """``module`` with every table on this rank (``plan`` made for one rank) and no collective in
    its step: the sharding group is this rank alone (the layout of G = W), and so is the group
    its dense layers' DDP reduces over. :func:`embeddings.auto.probe_step_s` times its step as
    the compute of one rank's step. Every rank must call it (the device mesh is collective)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv2D
    from graphdist import comm
    layout = layout_for(world, world)
    mesh = DeviceMesh(device_type=device.type, mesh=[layout.sharding_group(g) for g in range(world)],
                      mesh_dim_names=("replicate", "shard"))
    alone = mesh.get_group(mesh_dim="shard")
    env = ShardingEnv2D(sharding_pg=alone, replica_pg=alone, global_pg=alone, device_mesh=mesh,
                        node_group_size=1, use_inter_host_allreduce=True)
    return DistributedModelParallel(module, env=env, device=device,
                                    plan=remap_plan(plan, comm.world()[0], layout))
