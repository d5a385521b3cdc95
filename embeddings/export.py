"""``graphdist export`` of a ``train-dlrm`` checkpoint: one unsharded model on CPU, without a
process group, as plain torchrec modules.

    DIR/model.py    build() -> torchrec DLRM / DLRM_DCN (eval mode, weights loaded);
                    features(lines) -> the model's input from Criteo TSV lines, as training made it
    DIR/model.pt    its state_dict (torch.save): EmbeddingBagCollection tables + dense/over arches
    DIR/model.json  what build() and features() read: shapes, tables, the input's parsing,
                    hashing and dense normalisation, where it came from

Whatever plan wrote the checkpoint (table-, row-, column-wise, table-row-wise, data-parallel,
2D with any G, any world size), DCP stores every tensor as chunks of one global tensor; the
tensors under ``model.`` are read whole into this one process by DCP's own load into plain
tensors (:meth:`graphdist.trained.Trained.tensors`: ``torch.distributed.checkpoint.load``
without a process group, its resharding planner placing each stored chunk): no optimizer
state is read, and besides the tables and dense layers the read holds one stored chunk at a
time. :func:`memory_needed` says so before the read, and the export stops in one line when
this process may not hold it (its free memory, or its ``ulimit -d`` / ``-v``).

``--quantize int8``: the tables row-wise int8 for serving, by torchrec's inference
quantisation (``torchrec.inference.modules.quantize_embeddings`` -> ``torchrec.quant``'s
``EmbeddingBagCollection``, FBGEMM's CPU kernels), each row its int8 values with a float16
scale and bias; ``build()`` rebuilds that module from ``model.json``.
"""
from __future__ import annotations


import torch

from embeddings.data import NUM_DENSE
from graphdist.errors import ConfigError
from graphdist.fmt import fmt_bytes

__all__ = ["export_dlrm", "memory_needed", "int8_row_bytes", "MODEL_PY"]

PREFIX = "model."
"""The checkpoint's ``model`` state holds the training's LossWrapper: DLRM's keys behind this."""
TABLE = "sparse_arch.embedding_bag_collection.embedding_bags.t_{}.weight"
INT8_ALIGN = 16
"""Bytes an int8 row is padded to (FBGEMM's row alignment on CPU)."""


def int8_row_bytes(dim: int) -> int:
    """Bytes of one row-wise int8 row: ``dim`` values, a float16 scale and bias, padded."""
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import rounded_row_size_in_bytes
    return int(rounded_row_size_in_bytes(dim, SparseType.INT8, INT8_ALIGN))


def memory_needed(snap, quantize: str = "none") -> dict:
    """What reading snapshot ``snap`` into one model takes, from DCP's metadata alone: the
    tables, the dense layers, the largest stored chunk (held while it is copied into place) and,
    with int8, the quantised tables (made while the float ones are still held)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = FileSystemReader(str(snap)).read_metadata().state_dict_metadata
    tables = dense = chunk = int8 = rows = 0
    for k, v in md.items():
        if not (k.startswith("model." + PREFIX) and isinstance(v, TensorStorageMetadata)):
            continue
        size = v.properties.dtype.itemsize
        nbytes = size * v.size.numel()
        chunk = max([chunk] + [size * c.sizes.numel() for c in v.chunks])
        if ".embedding_bags." in k:
            tables += nbytes
            rows += v.size[0]
            int8 += v.size[0] * int8_row_bytes(v.size[1]) if quantize == "int8" else 0
        else:
            dense += nbytes
    return {"tables_bytes": tables, "dense_bytes": dense, "largest_chunk_bytes": chunk, "int8_bytes": int8,
            "rows": rows, "total_bytes": tables + dense + max(chunk, int8)}


def check_memory(need: dict, snap) -> str:
    """The line that says what the export takes; :class:`ConfigError` when it will not fit."""
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    have = resident_bytes() or 0
    room, ceiling = available_bytes(), process_ceiling()
    limit = min(room, ceiling) if ceiling is not None else room
    what = (f"{need['rows']:,} table rows {fmt_bytes(need['tables_bytes'])}, dense layers "
            f"{fmt_bytes(need['dense_bytes'])}, the largest stored chunk {fmt_bytes(need['largest_chunk_bytes'])}"
            + (f", int8 tables {fmt_bytes(need['int8_bytes'])}" if need["int8_bytes"] else ""))
    total = have + need["total_bytes"]
    if total > limit:
        why = "its ulimit -d / -v" if ceiling is not None and ceiling < room else "the free memory"
        raise ConfigError(f"export: the unsharded model of {snap} needs {fmt_bytes(need['total_bytes'])} ({what}) on "
                          f"top of the {fmt_bytes(have)} this process holds, {fmt_bytes(total)} in all, but it may hold "
                          f"{fmt_bytes(limit)} ({why}); export on a machine with more memory")
    return (f"export: the unsharded model takes {fmt_bytes(need['total_bytes'])} ({what}) on top of the "
            f"{fmt_bytes(have)} this process holds; it may hold {fmt_bytes(limit)}")


def unshard(tr) -> dict:
    """The DLRM ``state_dict`` (plain tensors, this process) from checkpoint ``tr``."""
    sd = tr.tensors("model")
    return {k[len(PREFIX):]: v for k, v in sd.items() if k.startswith(PREFIX)}


def model_spec(tr, sd: dict, quantize: str) -> dict:
    """``model.json``: the shapes build() needs, and how a Criteo line becomes the input."""
    s = tr.settings
    n = 0
    while TABLE.format(n) in sd:
        n += 1
    if n == 0:
        raise ConfigError(f"--checkpoint-dir {tr.root}: {tr.snap} holds no embedding tables")
    dim = int(sd[TABLE.format(0)].shape[1])
    tables = [{"name": f"t_{i}", "feature": f"f_{i}", "rows": int(sd[TABLE.format(i)].shape[0])} for i in range(n)]
    first = sd.get("dense_arch.model._mlp.0._linear.weight")  # torchrec's DenseArch: its first layer
    n_dense = int(first.shape[1]) if first is not None else NUM_DENSE
    return {
        "trainer": "dlrm", "arch": s["arch"], "embedding_dim": dim, "dense_features": n_dense,
        "dense_arch_layer_sizes": [*map(int, s["dense_arch"]), dim], "over_arch_layer_sizes": [*map(int, s["over_arch"]), 1],
        "dcn_layers": int(s.get("dcn_layers", 0)), "dcn_low_rank": int(s.get("dcn_low_rank", 0)),
        "tables": tables, "quantize": quantize,
        "input": _input(tr.meta.get("columns"), n_dense, [t["rows"] for t in tables]),
        "checkpoint": str(tr.snap), "step": tr.step, "world_size": tr.meta.get("world_size"),
        "sharding": s.get("sharding"), "sparse_groups": s.get("sparse_groups", 1),
        "output": "the click logit [B, 1]; sigmoid gives the probability",
    }


def _input(columns: dict | None, n_dense: int, rows: list[int]) -> dict:
    """How a row becomes the model's input: a Criteo TSV line, or a ``clicks:`` log's ``columns``
    (the training's label, dense and id columns, recorded in its checkpoint)."""
    if not columns:
        return {"format": f"Criteo TSV: [label] then {n_dense} integer features then {len(rows)} categorical ids",
                "dense": "log(1 + max(x, 0)) in float64, then float32; empty = 0",
                "sparse": "the id as a hexadecimal number (up to 8 digits; empty = 0), modulo its table's rows",
                "rows": rows}
    return {"format": "columns", "label": columns["label"], "dense_columns": columns["dense"],
            "sparse_columns": columns["sparse"],
            "dense": "the value as float32; null or nan = 0",
            "sparse": "an integer as itself folded to 32 bits (lo ^ hi * 0x9E3779B1 mod 2^32), text by 32-bit "
                      "FNV-1a of its UTF-8 bytes, a boolean 0 / 1, null 0; modulo its table's rows",
            "rows": rows}


def quantize_tables(model: torch.nn.Module) -> torch.nn.Module:
    """The tables of ``model`` (a DLRM) row-wise int8 by torchrec's inference quantisation."""
    from torchrec.inference.modules import quantize_embeddings
    return quantize_embeddings(model, dtype=torch.qint8, inplace=True)


def export_dlrm(tr, cfg) -> dict:
    """Write ``cfg.out`` from checkpoint ``tr`` (a ``train-dlrm`` one); returns what was written."""
    from embeddings.job import quiet_torchrec, require_torchrec
    from graphdist.outputs import write_model_dir
    require_torchrec()
    quiet_torchrec()
    quantize = getattr(cfg, "quantize", "none")
    need = memory_needed(tr.snap, quantize)
    line = check_memory(need, tr.snap)
    if cfg.summary:
        print(line, flush=True)
    sd = unshard(tr)
    spec = model_spec(tr, sd, quantize)
    float_bytes = sum(v.numel() * v.element_size() for k, v in sd.items() if ".embedding_bags." in k)
    if quantize == "int8":
        model = build_module(spec, quantized=False)
        model.load_state_dict(sd, strict=True, assign=True)
        del sd
        sd = quantize_tables(model).state_dict()
        del model
    table_bytes = sum(v.numel() * v.element_size() for k, v in sd.items() if ".embedding_bags." in k)
    spec["tables_bytes"] = table_bytes
    write_model_dir(cfg.out, cfg.overwrite, sd, spec, MODEL_PY)
    model = f"{spec['arch']}, {len(spec['tables'])} tables, {spec['embedding_dim']} wide"
    if quantize == "int8":
        model += (f", int8 tables {fmt_bytes(table_bytes)} ({table_bytes / max(float_bytes, 1):.3f}x of "
                  f"{fmt_bytes(float_bytes)} float32)")
    return {"out": str(cfg.out), "files": ["model.py", "model.pt", "model.json"], "model": model,
            "tables_bytes": table_bytes, "float_tables_bytes": float_bytes, "tensors": len(sd)}


def build_module(spec: dict, quantized: bool) -> torch.nn.Module:
    """The module ``model.py``'s ``build()`` makes, without weights (float tables on ``meta``,
    to be assigned): used here to quantise, with the same code the exported file runs."""
    ns: dict = {"__name__": "graphdist_exported_dlrm", "__file__": "model.py"}
    exec(compile(MODEL_PY, "model.py", "exec"), ns)  # noqa: S102 - our own source, the file we write
    return ns["_module"]({**spec, "quantize": "int8" if quantized else "none"})


MODEL_PY = '''"""A DLRM trained by graphdist, unsharded: plain torchrec modules in one process, no process
group (written by `graphdist export`).

    import model                               # this file, with model.pt and model.json beside it
    net = model.build()                        # torchrec DLRM / DLRM_DCN, eval mode, weights loaded
    dense, sparse, labels = model.features(lines)   # Criteo TSV lines (or, for a clicks: log, its
                                               # columns: a DataFrame), turned into the model's
                                               # input exactly as training did (model.json "input")
    prob = torch.sigmoid(net(dense, sparse).squeeze(-1))

model.pt is memory-mapped (its tables are read from the page cache as rows are looked up).
Needs torch and torchrec (FBGEMM's CPU build for an int8 export).
"""
import json
import math
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def spec():
    """model.json."""
    return json.loads((HERE / "model.json").read_text())


def _module(s):
    """The model without its weights (float tables on the meta device; int8 tables allocated)."""
    import torchrec
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    configs = [torchrec.EmbeddingBagConfig(name=t["name"], embedding_dim=s["embedding_dim"], num_embeddings=t["rows"],
                                           feature_names=[t["feature"]], pooling=torchrec.PoolingType.SUM)
               for t in s["tables"]]
    if s["quantize"] == "int8":
        from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC
        for c in configs:
            c.data_type = torchrec.DataType.INT8
        ebc = QuantEBC(configs, is_weighted=False, device=torch.device("cpu"), output_dtype=torch.float)
    else:
        ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    kw = dict(embedding_bag_collection=ebc, dense_in_features=s["dense_features"],
              dense_arch_layer_sizes=s["dense_arch_layer_sizes"], over_arch_layer_sizes=s["over_arch_layer_sizes"],
              dense_device=torch.device("cpu"))
    if s["arch"] == "dcn":
        return DLRM_DCN(dcn_num_layers=s["dcn_layers"], dcn_low_rank_dim=s["dcn_low_rank"], **kw)
    return DLRM(**kw)


def build():
    """The trained model in eval mode: ``net(dense [B, 13], KeyedJaggedTensor) -> logits [B, 1]``."""
    s = spec()
    net = _module(s)
    state = torch.load(HERE / "model.pt", map_location="cpu", weights_only=True, mmap=True)
    net.load_state_dict(state, strict=True, assign=s["quantize"] != "int8")
    return net.eval()


def _missing(v):
    """None, nan or pandas' NA."""
    return v is None or type(v).__name__ == "NAType" or (isinstance(v, float) and math.isnan(v))


def _id(v):
    """A value of an id column as training hashed it (model.json "input" "sparse"); a whole float
    is the integer pandas made of an integer column with gaps."""
    if _missing(v):
        return 0
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, (bool, int)) or hasattr(v, "dtype") and v.dtype.kind in "biu":
        u = int(v) & 0xFFFFFFFFFFFFFFFF
        return (u & 0xFFFFFFFF) ^ (((u >> 32) * 0x9E3779B1) & 0xFFFFFFFF)
    h = 2166136261
    for b in (v if isinstance(v, bytes) else str(v).encode()):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def _from_columns(s, table):
    """A mapping column -> values (a pandas DataFrame, a dict of lists) -> the model's input."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    inp = s["input"]
    n = len(table[inp["dense_columns"][0]])

    def num(v):
        return 0.0 if _missing(v) else float(v)
    dense = torch.tensor([[num(v) for v in table[c]] for c in inp["dense_columns"]],
                         dtype=torch.float64).float().reshape(-1, n).T.contiguous()
    ids = [[_id(v) % r for v in table[c]] for c, r in zip(inp["sparse_columns"], inp["rows"])]
    sparse = KeyedJaggedTensor.from_lengths_sync(
        keys=[t["feature"] for t in s["tables"]], values=torch.tensor([v for col in ids for v in col], dtype=torch.int64),
        lengths=torch.ones(len(ids) * n, dtype=torch.int64))
    labels = torch.tensor([float(v) for v in table[inp["label"]]]) if inp["label"] in table else None
    return dense, sparse, labels


def features(lines):
    """Criteo TSV lines (str or bytes, with or without the leading label) -> ``(dense [n, 13]
    float32, KeyedJaggedTensor of the hashed ids, labels [n] float32 or None)``; for a model
    trained on a ``clicks:`` log, its columns (a pandas DataFrame, or a dict of column -> values;
    the label column may be left out) instead of lines."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    s = spec()
    if s["input"]["format"] == "columns":
        return _from_columns(s, lines)
    rows, nd = s["input"]["rows"], s["dense_features"]
    fields = [(x.decode() if isinstance(x, bytes) else x).rstrip("\\r\\n").split("\\t") for x in lines]
    width = 1 + nd + len(rows)
    if any(len(f) not in (width, width - 1) for f in fields) or len({len(f) for f in fields}) > 1:
        raise ValueError(f"every line needs {width} (labelled) or {width - 1} tab-separated fields, all alike")
    skip = 1 if fields and len(fields[0]) == width else 0
    dense = torch.tensor([[math.log1p(max(int(v), 0)) if v else 0.0 for v in f[skip:skip + nd]] for f in fields],
                         dtype=torch.float64).float().reshape(len(fields), nd)
    ids = [[int(f[skip + nd + j], 16) % r if f[skip + nd + j] else 0 for f in fields] for j, r in enumerate(rows)]
    sparse = KeyedJaggedTensor.from_lengths_sync(
        keys=[t["feature"] for t in s["tables"]], values=torch.tensor([v for col in ids for v in col], dtype=torch.int64),
        lengths=torch.ones(len(rows) * len(fields), dtype=torch.int64))
    labels = torch.tensor([float(f[0]) for f in fields]) if skip else None
    return dense, sparse, labels
'''
