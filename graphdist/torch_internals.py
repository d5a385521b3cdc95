"""torch's internals behind one door: every private name of torch, torchrec or fbgemm_gpu that
graphdist uses, every patch of their objects and every workaround of their behaviour, each with
the torch behaviour it depends on (source file, torch 2.13.0 / torchrec 1.9.2). Nothing else in
graphdist names a private torch name (``tests/test_torch_internals.py`` reads every module's
imports and attribute accesses), and each item has a test there that fails when the behaviour it
works around changes: an upgrade names the workaround to drop or to adapt.

Items:

1. :func:`release_process_groups` -- process groups held in torch's function defaults.
   ``torch/distributed/nn/functional.py`` binds ``group.WORLD`` into its functions' defaults
   when it is imported (``def all_reduce(tensor, op=..., group=group.WORLD)``; imported by
   torch.distributed.checkpoint), ``torch/distributed/optim/zero_redundancy_optimizer.py``
   likewise (``_broadcast_object``; imported by torchrec), so a module imported after the group
   exists holds it.
   ``destroy_process_group`` calls ``ProcessGroup.shutdown()``, which does not join a gloo
   group's worker and transport threads: they end only when the C++ object is freed. Freed
   during interpreter finalisation, a thread still releasing a finished collective's tensors
   needs the GIL, Python ends it with ``pthread_exit``, whose unwinding through a ``noexcept``
   destructor calls ``std::terminate`` ("terminate called without an active exception",
   SIGABRT): a finished job failed. So the destroyed groups are taken out of those defaults and
   reference cycles are collected. Private: ``distributed_c10d._world`` (the registry of every
   group; torch offers no public list), ``ProcessGroup._device_types`` and
   ``ProcessGroup._get_backend`` (the backends torchrec's modules hold).
2. :func:`stop_keep_alive_timers` -- the rendezvous keep-alive timer left running on a signal.
   ``torch/distributed/launcher/api.py`` (``launch_agent``) leaves the rendezvous open when the
   agent stops on a signal (``shutdown_rdzv = False``, so that a restarted agent could rejoin), and
   with it the handler's keep-alive thread, a ``_PeriodicTimer``
   (``torch/distributed/elastic/rendezvous/utils.py``). When that thread drops the handler's last
   reference itself, the timer's ``weakref.finalize`` joins the thread it runs on: "cannot join
   current thread", printed as the process exits. The timers are found on the heap (the launcher
   keeps no handle to its handler) and cancelled.
3. :func:`dcp_flat_shapes` -- the keys DCP stores a nested state under.
   ``torch/distributed/checkpoint/_nested_dict.py`` (``flatten_state_dict``) names them; a
   resume compares a snapshot's metadata with the state it must fill by those names. No public
   function gives them.
4. :func:`untraced` -- pausing ``torch.jit.trace``. ``torch._C._get_tracing_state`` (what
   ``torch/nn/modules/module.py``'s ``_slow_forward`` reads) and ``torch._C._set_tracing_state``
   (C++ bindings; no Python caller in torch): the tracer records what runs while a state is set;
   there is no public pause (``torch.jit.is_tracing`` only asks).
5. :func:`tensor_version` -- ``Tensor._version``, autograd's counter of in-place changes (a
   product is kept while its input is unchanged); no public accessor.
6. :func:`csr_pointer` -- ``torch._convert_indices_from_coo_to_csr`` (the kernel behind
   ``to_sparse_csr``): a CSR row pointer from sorted row ids in one parallel pass, int32 out when
   asked. The public ways (``searchsorted`` over ``arange``, ``bincount`` + ``cumsum``) give the
   same pointer, 1.8-3x slower on 20M sorted ids into 2M rows (one measurement on the loaded
   2-core box, torch 2.13; not a benchmark), so the private kernel stays.
7. :func:`remote_device` -- ``torch.distributed._remote_device``, the placement a ShardedTensor
   shard carries (``rank:N/cpu``; ``torch/distributed/remote_device.py``): the DLRM 2D layout
   rewrites torchrec's plan for another sharding group as torchrec's ``DMPCollection`` does.
8. :func:`sharded_lookups` -- torchrec's ``ShardedEmbeddingBagCollection._lookups``
   (``torchrec/distributed/embeddingbag.py``), a plain list, not registered submodules: a walk
   over ``named_children`` never reaches the fbgemm TBE modules that hold the table shards.
   torchrec's own ``DMPCollection`` walks ``_lookups`` the same way.
9. :func:`quiet_sparse_csr_warning` -- torch warns "Sparse CSR tensor support is in beta
   state" at the first CSR tensor of a process (ATen, C++: the message is in
   ``torch/lib/libtorch_cpu.so``), which every rank would print; silenced by its message.
10. :func:`tensor_from_numpy` -- ``torch.from_numpy`` keeps numpy's strides, and numpy gives an
   empty array stride 0 (``torch/csrc/utils/tensor_numpy.cpp``, C++); ``torch.save`` writes the
   strides, so a part file built by k ranks would differ from the one-process artifact's bytes.
11. :func:`profiler_event_tree`, :func:`is_allocation` -- torch.profiler's record of every
   allocation in order, with its address and size: the event tree of a finished
   ``profile(profile_memory=True)`` (``prof.profiler.kineto_results.experimental_event_tree()``,
   ``torch/autograd/profiler.py``) whose allocation nodes carry the tag
   ``torch._C._profiler._EventType.Allocation`` and ``extra_fields.ptr`` / ``alloc_size``. The
   public ``key_averages()`` sums memory per op and loses the order and the addresses the memory
   model's check needs (:mod:`graphdist.gnn.alloc_record`).
   The values are copied into a tensor torch made (torch's own strides).
12. :class:`graphdist.adam.Adam` and :mod:`graphdist.data.planetoid` -- torch's compiler
   imported by what a rank needs. ``torch/optim/optimizer.py``: ``Optimizer.add_param_group``
   (called by ``__init__``), ``state_dict``, ``load_state_dict`` and ``zero_grad`` are decorated
   with ``torch._disable_dynamo`` (``torch/_compile.py``), which imports ``torch._dynamo`` on its
   first call, and ``_use_grad_for_differentiable`` (every ``step``) imports it too (so
   ``torch.distributed.checkpoint.state_dict.get_state_dict`` of such an optimizer does);
   ``import torch_geometric`` (2.8) imports it. ``torch._dynamo``
   brings sympy: about 70 MiB and 1.5 CPU-s a process. So graphdist steps Adam itself (bit for bit
   torch's) and reads the Planetoid files itself (equal to PyG's reader); no private name is used.
"""
from __future__ import annotations

import contextlib
import sys
import types
import warnings

import torch

__all__ = ["release_process_groups", "stop_keep_alive_timers", "dcp_flat_shapes", "untraced", "tensor_version",
           "csr_pointer", "remote_device", "sharded_lookups", "quiet_sparse_csr_warning", "tensor_from_numpy",
           "GROUP_HOLDERS"]


# 1. process groups held in torch's function defaults -------------------------------------------

GROUP_HOLDERS = ("torch.distributed", "torchrec", "fbgemm_gpu")
"""Packages whose functions may hold a process group in their defaults (module level or in a
class), scanned by :func:`release_process_groups`."""


def process_group_refs() -> dict:
    """Weak references to every process group of this process and to its backends (which
    torchrec's modules hold), by name."""
    import weakref

    from torch.distributed import distributed_c10d as c10d
    world, refs = c10d._world, {}
    for i, g in enumerate(world.pg_map):
        name = str(world.pg_names.get(g, i))
        refs[name] = weakref.ref(g)
        for t in getattr(g, "_device_types", []):
            refs[f"{name}/{t}"] = weakref.ref(g._get_backend(torch.device(t)))
    return refs


def release_process_groups() -> list[str]:
    """Destroy every process group of this process and free them now, while the interpreter is
    whole (item 1 above): the destroyed groups are taken out of the defaults of the functions of
    :data:`GROUP_HOLDERS` (``None``: the default group, as those functions mean it) and cycles
    are collected, so their threads are joined here. Returns the names of groups still alive
    afterwards (none, unless something new holds one)."""
    import gc

    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return []
    groups = process_group_refs()
    dist.destroy_process_group()
    if any(r() is not None for r in groups.values()):
        drop_bound_groups([r() for r in groups.values()])
        if any(r() is not None for r in groups.values()):
            gc.collect()  # a group held in a reference cycle (torchrec's sharded modules)
    return [n for n, r in groups.items() if r() is not None]


def drop_bound_groups(groups: list) -> int:
    """Replace ``groups`` by ``None`` in the defaults of the functions of :data:`GROUP_HOLDERS`
    (module-level and class-level) that hold one; returns how many functions changed."""
    ids = {id(g) for g in groups if g is not None}
    changed = [0]

    def fix(f):
        if type(f) in (staticmethod, classmethod):
            f = f.__func__
        if type(f) is not types.FunctionType:
            return
        d = f.__defaults__
        if d and any(id(v) in ids for v in d):
            f.__defaults__ = tuple(None if id(v) in ids else v for v in d)
            changed[0] += 1
        kw = f.__kwdefaults__
        if kw and any(id(v) in ids for v in kw.values()):
            f.__kwdefaults__ = {k: (None if id(v) in ids else v) for k, v in kw.items()}
            changed[0] += 1

    for name, mod in list(sys.modules.items()):
        if mod is None or not any(name == p or name.startswith(p + ".") for p in GROUP_HOLDERS):
            continue
        for v in list(getattr(mod, "__dict__", {}).values()):
            fix(v)
            if issubclass(type(v), type) and getattr(v, "__module__", None) == name:
                for w in list(vars(v).values()):
                    fix(w)
    return changed[0]


# 2. the rendezvous keep-alive timer left running on a signal --------------------------------

def stop_keep_alive_timers() -> int:
    """Cancel every rendezvous keep-alive timer of this process (item 2), here on the calling
    thread; returns how many were cancelled."""
    import gc

    from torch.distributed.elastic.rendezvous.utils import _PeriodicTimer
    n = 0
    for o in gc.get_objects():
        if type(o) is _PeriodicTimer:  # (isinstance would touch deprecated torch objects, warning)
            o.cancel()
            n += 1
    return n


# 3. DCP's keys of a nested state ------------------------------------------------------------

def dcp_flat_shapes(state: dict) -> dict:
    """``{key: global shape}`` of the tensors of a DCP state dict (ShardedTensor and DTensor by
    their whole size), keyed as DCP stores them (item 3)."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    flat, _ = flatten_state_dict(state)
    return {k: tuple(v.size()) for k, v in flat.items() if isinstance(v, torch.Tensor)}


# 4. pausing torch.jit.trace -----------------------------------------------------------------

@contextlib.contextmanager
def untraced():
    """Pause ``torch.jit.trace`` (a no-op when not tracing): what runs inside is a constant of the
    trace (item 4)."""
    state = torch._C._get_tracing_state()
    if state is None:
        yield
        return
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


# 5. a tensor's version counter -------------------------------------------------------------

def tensor_version(t: torch.Tensor) -> int:
    """How many in-place changes ``t``'s storage has seen (autograd's version counter, item 5)."""
    return t._version


# 6. a CSR row pointer ----------------------------------------------------------------------

def csr_pointer(index: torch.Tensor, size: int, out_int32: bool) -> torch.Tensor:
    """Row pointer ``[size + 1]`` of sorted row ids ``index``, int32 when ``out_int32`` (item 6)."""
    return torch._convert_indices_from_coo_to_csr(index, size, out_int32=out_int32)


# 7. a shard's placement --------------------------------------------------------------------

def remote_device(text: str):
    """A ShardedTensor shard placement, ``rank:N/DEVICE`` (item 7)."""
    from torch.distributed import _remote_device
    return _remote_device(text)


# 8. torchrec's lookups of a sharded module -------------------------------------------------

def sharded_lookups(module) -> list:
    """The lookup modules of a torchrec sharded module (item 8); [] for any other module."""
    return list(getattr(module, "_lookups", None) or [])


# 9. the sparse CSR beta warning ------------------------------------------------------------

CSR_BETA = "Sparse CSR tensor support is in beta state"
"""The start of torch's warning at a process's first CSR tensor (item 9)."""


def quiet_sparse_csr_warning() -> None:
    """Ignore torch's CSR beta warning in this process (item 9)."""
    warnings.filterwarnings("ignore", message=CSR_BETA)


# 10. numpy's strides in a saved tensor -------------------------------------------------------

def tensor_from_numpy(arr) -> torch.Tensor:
    """A fresh tensor holding numpy array ``arr``'s values, with torch's own strides (item 10)."""
    t = torch.empty(arr.shape, dtype=torch.from_numpy(arr[:0]).dtype)
    t.numpy()[...] = arr
    return t


# 11. the profiler's record of each allocation ------------------------------------------------

def profiler_event_tree(prof) -> list:
    """The root events of a finished ``torch.profiler.profile`` (item 11)."""
    return prof.profiler.kineto_results.experimental_event_tree()


def is_allocation(node) -> bool:
    """Whether an event of :func:`profiler_event_tree` is an allocation (a free when its
    ``extra_fields.alloc_size`` is negative; item 11)."""
    from torch._C._profiler import _EventType
    return node.tag == _EventType.Allocation
