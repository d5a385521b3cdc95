"""torch's internals behind one door (graphdist/torch_internals.py): no module of the product names
a private torch / torchrec / fbgemm_gpu name but that one (read from every module's imports and
attribute accesses), and each of its items has a test here that fails when the torch behaviour it
depends on changes (torch 2.13.0, torchrec 1.9.2): the test names the workaround to drop or
adapt after an upgrade."""
from __future__ import annotations

import ast
import os
import signal
import threading
from pathlib import Path

import pytest
import torch

from graphdist import torch_internals as ti
from graphdist.testing import run_ranks

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("graphdist", "embeddings", "partitioners")
DOOR = "graphdist/torch_internals.py"
TORCH = ("torch", "torchrec", "fbgemm_gpu")
NOT_TORCH = {  # private names of other libraries (not torch's), by name, with whose they are
    "_exit": "os._exit (Python's documented exit without cleanup)",
    "_user_args": "torch_geometric's MessagePassing (PyG, not torch)",
    "_edge_user_args": "torch_geometric's MessagePassing (PyG, not torch)",
}
GLOO = ("gloo", "pt_gloo")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owned_names(paths) -> set[str]:
    """Every name the product defines itself (functions, classes, assigned names and attributes,
    arguments, import aliases): a private name outside this set is some library's."""
    out = set()
    for p in paths:
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                out.add(n.attr)
            elif isinstance(n, ast.arg):
                out.add(n.arg)
            elif isinstance(n, ast.alias) and n.asname:
                out.add(n.asname)
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr"
                  and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)):
                out.add(str(n.args[1].value))
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__setattr__"
                  and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)):
                out.add(str(n.args[1].value))
    return out


def private_uses(path: Path, owned: set[str]) -> list[str]:
    """The private torch names ``path`` uses: an import of a private module or name of torch,
    torchrec or fbgemm_gpu; an attribute chain from such an import through a private name
    (``torch._C``, ``c10d._world``); and any ``x._name`` / ``getattr(x, "_name")`` whose name the
    product does not define (so it is a library's: torch's, unless :data:`NOT_TORCH` says whose)."""
    tree = ast.parse(path.read_text())
    found, bound = [], set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] in TORCH:
                    bound.add(a.asname or a.name.split(".")[0])
                    if any(_private(c) for c in a.name.split(".")):
                        found.append(f"{n.lineno}: import {a.name}")
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and n.module.split(".")[0] in TORCH:
            for a in n.names:
                bound.add(a.asname or a.name)
                if any(_private(c) for c in n.module.split(".")) or _private(a.name):
                    found.append(f"{n.lineno}: from {n.module} import {a.name}")
    for n in ast.walk(tree):
        name = None
        if isinstance(n, ast.Attribute) and _private(n.attr):
            base = n.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound or n.attr not in owned:
                name = n.attr
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
              and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)
              and _private(n.args[1].value) and n.args[1].value not in owned):
            name = n.args[1].value
        if name is not None and name not in NOT_TORCH:
            found.append(f"{n.lineno}: {ast.unparse(n)[:80]}")
    return found


MODULES = sorted(p for root in PRODUCT for p in (REPO / root).rglob("*.py"))


def test_no_private_torch_name_outside_the_door():
    owned = _owned_names(MODULES)
    found = {p.relative_to(REPO).as_posix(): private_uses(p, owned) for p in MODULES
             if p.relative_to(REPO).as_posix() != DOOR}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_reader_sees_private_torch_names(tmp_path):
    """The reader catches each kind (a module written here, read like the product's)."""
    bad = tmp_path / "m.py"
    bad.write_text("import torch\nimport torch.distributed as dist\nfrom torch.distributed import _remote_device\n"
                   "from torch.distributed.checkpoint._nested_dict import flatten_state_dict\n"
                   "import torch.distributed._shard.api\n"
                   "def f(t, m):\n    torch._C._get_tracing_state()\n    dist.distributed_c10d._world\n"
                   "    t._version\n    getattr(m, '_lookups', None)\n    m._mine\n    m.public\n"
                   "class A:\n    _mine = 1\n")
    owned = _owned_names([bad])
    got = private_uses(bad, owned)
    assert len(got) == 8, got
    assert not any("_mine" in g for g in got)
    door = private_uses(REPO / DOOR, _owned_names(MODULES))
    assert len(door) >= 9, door  # (the door itself holds them: the reader sees them there)


# 1. process groups held in torch's function defaults ----------------------------------------

def _gloo_threads() -> list[str]:
    return [t for t in (Path(f"/proc/self/task/{i}/comm").read_text().strip() for i in os.listdir("/proc/self/task"))
            if t.startswith(GLOO)]


def _defaults_and_threads(rank, world):
    import gc
    import importlib

    import torch.distributed as dist
    import torch.distributed.nn.functional as fn
    import torch.distributed.optim.zero_redundancy_optimizer as zero
    fn, zero = importlib.reload(fn), importlib.reload(zero)  # imported now, after the group exists
    g = dist.group.WORLD
    bound = [fn.all_reduce.__defaults__[-1] is g, any(d is g for d in zero._broadcast_object.__defaults__)]
    t = torch.ones(2)
    dist.all_reduce(t)
    before = _gloo_threads()
    dist.destroy_process_group()  # torch's own teardown, without graphdist's release
    held = _gloo_threads()
    importlib.reload(fn)  # (imported again without a group: the defaults let go of it)
    importlib.reload(zero)
    del g
    gc.collect()
    return bound, before, held, _gloo_threads()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names need Linux /proc")
def test_item1_torch_binds_the_group_into_defaults_and_destroy_leaves_its_threads():
    """What release_process_groups works around: torch binds the default group into function
    defaults at import (nn/functional.py, optim/zero_redundancy_optimizer.py), and
    destroy_process_group leaves a referenced gloo group's threads running until the object is
    freed. When either stops, the workaround can go."""
    bound, before, held, after = run_ranks(_defaults_and_threads, 2, timeout=120)[0]
    assert bound == [True, True], "torch no longer binds the default group into defaults: drop drop_bound_groups"
    assert before and held == before, "destroy_process_group now joins gloo's threads: release_process_groups can go"
    assert after == [], after  # freed, they go


# 2. the rendezvous keep-alive timer left running on a signal ----------------------------------

def test_item2_launch_agent_leaves_the_rendezvous_open_on_a_signal(monkeypatch):
    """torch's launch_agent does not shut the rendezvous handler down when the agent stops on a
    signal (it does on other errors): its keep-alive timer keeps running."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous import RendezvousHandler, rendezvous_handler_registry
    from torch.distributed.launcher.api import LaunchConfig, launch_agent

    shut = []

    class Fake(RendezvousHandler):
        def get_backend(self):
            return "graphdist-test-fake"

        def next_rendezvous(self):
            raise AssertionError("not reached")

        def is_closed(self):
            return False

        def set_closed(self):
            pass

        def num_nodes_waiting(self):
            return 0

        def get_run_id(self):
            return "fake"

        def shutdown(self):
            shut.append(True)
            return True

    if "graphdist-test-fake" not in getattr(rendezvous_handler_registry, "_registry", {}):
        rendezvous_handler_registry.register("graphdist-test-fake", lambda params: Fake())
    cfg = lambda: LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1, run_id="fake",  # noqa: E731
                               rdzv_backend="graphdist-test-fake", rdzv_endpoint="localhost:0")
    for error, closes in ((SignalException("stop", sigval=signal.SIGTERM), False), (RuntimeError("x"), True)):
        def run(self, role="default", e=error):
            raise e
        monkeypatch.setattr(LocalElasticAgent, "run", run)
        shut.clear()
        with pytest.raises(type(error)):
            launch_agent(cfg(), "true", [])
        assert bool(shut) == closes, f"launch_agent {'now' if shut else 'no longer'} shuts the rendezvous on " \
                                     f"{type(error).__name__}: revisit stop_keep_alive_timers"


def test_item2_keep_alive_timers_are_found_and_stopped():
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    from graphdist.netif import free_port
    params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{free_port()}", run_id="door",
                                  min_nodes=1, max_nodes=1, is_host=True)
    backend, store = create_backend(params)
    h = create_handler(store, backend, params)
    h.next_rendezvous()
    keep = [t for t in threading.enumerate() if t.name.startswith("RendezvousKeepAliveTimer")]
    try:
        assert keep, "the rendezvous keeps itself alive without a timer thread now: revisit item 2"
        assert ti.stop_keep_alive_timers() >= 1
        for t in keep:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in keep)
    finally:
        h.shutdown()


# 3. DCP's keys of a nested state ------------------------------------------------------------

def test_item3_dcp_flat_keys():
    state = {"model": {"w": torch.zeros(2, 3), "b": torch.zeros(3)}, "opt": {"state": {"0": {"m": torch.zeros(4)}}},
             "step": 5}
    assert ti.dcp_flat_shapes(state) == {"model.w": (2, 3), "model.b": (3,), "opt.state.0.m": (4,)}


# 4. pausing torch.jit.trace -------------------------------------------------------------------

def test_item4_untraced_keeps_work_out_of_a_trace():
    def f(x):
        y = x * 2
        with ti.untraced():
            assert not torch.jit.is_tracing()
            z = torch.sin(x)  # a constant of the trace
        return y + z
    with ti.untraced():  # a no-op outside a trace
        pass
    traced = torch.jit.trace(f, torch.ones(3), check_trace=False)
    kinds = {n.kind() for n in traced.graph.nodes()}
    assert "aten::mul" in kinds and "aten::sin" not in kinds, kinds


# 5. a tensor's version counter ----------------------------------------------------------------

def test_item5_tensor_version_counts_in_place_changes():
    t = torch.zeros(3)
    v = ti.tensor_version(t)
    _ = t + 1
    assert ti.tensor_version(t) == v
    t.add_(1)
    t[0] = 5
    assert ti.tensor_version(t) == v + 2


# 6. a CSR row pointer -------------------------------------------------------------------------

def test_item6_csr_pointer_is_the_row_pointer():
    idx = torch.tensor([0, 0, 2, 2, 3])
    ref = torch.tensor([0, 2, 2, 4, 5, 5])
    for dt, narrow in ((torch.int64, False), (torch.int32, True)):
        got = ti.csr_pointer(idx.to(dt), 5, out_int32=narrow)
        assert got.dtype == (torch.int32 if narrow else torch.int64) and torch.equal(got.long(), ref)
    assert ti.csr_pointer(torch.zeros(0, dtype=torch.int64), 3, out_int32=False).tolist() == [0, 0, 0, 0]


# 7. a shard's placement -----------------------------------------------------------------------

def test_item7_remote_device_parses_a_shard_placement():
    d = ti.remote_device("rank:3/cpu")
    assert d.rank() == 3 and d.device() == torch.device("cpu")
    assert str(d) == "rank:3/cpu"


# 8. torchrec's lookups of a sharded module ----------------------------------------------------

def _lookups(rank, world):
    import warnings
    warnings.filterwarnings("ignore")
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen as TBE
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
    from torchrec.distributed.types import ShardingPlan
    ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=16,
                                                            feature_names=["f"])], device=torch.device("meta"))
    plan = ShardingPlan({"": construct_module_sharding_plan(ebc, {"t": table_wise(rank=0, compute_kernel="fused")}, local_size=1,
                                                            world_size=1, device_type="cpu")})
    sharded = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan).module
    lookups = ti.sharded_lookups(sharded)
    registered = {id(m) for m in sharded.modules()}
    tbe_through_lookups = [m for lk in lookups for m in lk.modules() if isinstance(m, TBE)]
    return len(lookups), any(id(lk) in registered for lk in lookups), len(tbe_through_lookups), \
        ti.sharded_lookups(torch.nn.Linear(1, 1))


def test_item8_torchrec_lookups_are_not_registered_submodules():
    n, registered, tbes, none = run_ranks(_lookups, 1, timeout=180)[0]
    assert n >= 1 and tbes >= 1, (n, tbes)
    assert not registered, "torchrec registers its lookups as submodules now: walk named_children instead"
    assert none == []


# 9. the sparse CSR beta warning ---------------------------------------------------------------

def _csr_warnings(rank, world):
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1.0]), (1, 1))
    return [str(x.message) for x in w]


def test_item9_torch_warns_that_sparse_csr_is_beta():
    said = run_ranks(_csr_warnings, 1, timeout=60)[0]  # (a fresh process: torch warns once per process)
    assert any(m.startswith(ti.CSR_BETA) for m in said), f"torch no longer warns: drop the filter ({said})"


# 10. numpy's strides in a saved tensor --------------------------------------------------------

def _saved(t) -> bytes:
    import io
    f = io.BytesIO()
    torch.save({"t": t}, f)
    return f.getvalue()


def test_item10_from_numpy_keeps_an_empty_arrays_zero_stride_and_save_writes_it():
    import numpy as np
    empty = np.zeros((0,), dtype=np.int64)
    assert torch.from_numpy(empty).stride() == (0,), "torch normalises numpy's strides now: drop tensor_from_numpy"
    assert _saved(torch.from_numpy(empty)) != _saved(torch.empty(0, dtype=torch.int64))
    fresh = ti.tensor_from_numpy(empty)
    assert fresh.stride() == (1,) and _saved(fresh) == _saved(torch.empty(0, dtype=torch.int64))
    full = np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2]  # (a view of a larger array, too)
    got = ti.tensor_from_numpy(full)
    assert got.tolist() == [[0, 2], [3, 5]] and got.is_contiguous() and got.dtype == torch.int64


# 11. the profiler's record of each allocation -------------------------------------------------

def test_item11_the_profilers_event_tree_holds_each_allocation_with_its_address_and_size():
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("graphdist.probe"):
            t = torch.empty(12345, dtype=torch.uint8)
            del t
    nodes, stack = [], list(ti.profiler_event_tree(prof))
    while stack:
        n = stack.pop()
        nodes.append(n)
        stack.extend(n.children)
    sizes = [int(n.extra_fields.alloc_size) for n in nodes if ti.is_allocation(n)]
    assert 12345 in sizes and -12345 in sizes, f"no allocation / free of 12345 B in the tree: {sizes}"
    assert any(n.name == "graphdist.probe" for n in nodes)
    assert all(isinstance(n.extra_fields.ptr, int) for n in nodes if ti.is_allocation(n))


# 12. torch's compiler imported by an optimizer and by PyG ----------------------------------------

@pytest.mark.parametrize("what, code", [
    ("torch.optim.Adam", "torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=0.1)"),
    ("import torch_geometric", "import torch_geometric"),
])
def test_item12_these_import_torch_dynamo(what, code):
    """When one of these stops importing torch._dynamo, graphdist's own Adam (or Planetoid
    reader) is no longer needed for it: this test fails and says which."""
    import subprocess
    import sys
    probe = f"import sys, torch\n{code}\nprint('torch._dynamo' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "True", f"{what} no longer imports torch._dynamo (item 12 can go)"
