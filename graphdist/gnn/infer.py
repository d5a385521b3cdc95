"""``graphdist infer``: full-graph inference from a ``train-gcn`` checkpoint, each rank writing its
own nodes.

    graphdist infer (SPEC | --partition DIR) --checkpoint-dir D --out OUT [--nproc N] [--layer L]
                    [--halo-rounds R]

On any number of ranks (the weights are replicated, so not necessarily the training's): each
rank loads its part, builds the trained model from the checkpoint's recorded settings (graphdist's
own GCN / SAGE, :class:`graphdist.gnn.net.BuiltinNet`, or the PyG ``--model``,
:class:`graphdist.gnn.pyg.net.PygNet`), loads the weights only (no optimizer state), and runs
one forward pass as evaluation runs it: no autograd graph, dropout off, exact 32-bit halo rows in
the plain exchange (in as many rounds as the part needs to fit, ``--halo-rounds``), each layer's
activations freed when the next is computed. Its owned nodes
go to its own Parquet file (:mod:`graphdist.outputs`)::

    node_id    int64 or string  the input's own id (edge list / npz id, Planetoid index)
    pred       int64 or string  argmax of logits (the class's name where the labels were names)
    logits     list<float32>[C]
    embedding  list<float32>[H] the output of message-passing layer L (1-based; default the
                                last hidden layer, L = layers - 1; the output layer for a
                                one-layer model), before its activation

Refused in one line before the forward pass: a checkpoint of another trainer, of another number
of classes or input features, or of another graph (fingerprint; ``--other-graph`` predicts for
one with the same features, :mod:`graphdist.gnn.infer_checks`), each naming both sides; a part
that would not fit its machine's memory or its rank's process limit, with the numbers
(:mod:`graphdist.gnn.infer_memory`, checked once the part is loaded, before it is reordered and the model built).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import torch

from graphdist.errors import ConfigError
from graphdist.gnn import infer_checks as checks
from graphdist.launch import Nodes
from partitioners import METHODS

__all__ = ["InferConfig", "run", "worker", "infer", "summary_line", "gcn_config"]


@dataclass
class InferConfig:
    """Everything one ``graphdist infer`` run needs (the same on every rank)."""

    halo_bits: ClassVar[int] = 32  # (the job checks read it: inference exchanges float32 rows)

    spec: str | None = field(default=None, metadata={"positional": True, "metavar": "SPEC"})
    """dataset spec (partitioned in-process); with --partition, the artifact must have been cut from it"""
    partition: str | None = field(default=None, metadata={"metavar": "DIR"})
    """partition artifact directory (each rank reads only its part and its nodes' ids)"""
    checkpoint_dir: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """the train-gcn run's --checkpoint-dir (its latest snapshot; settings and weights come from it)"""
    out: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """output folder: one part-RRRRR.parquet per rank and _manifest.json"""
    halo_rounds: int = 0
    """move each layer's halo rows in R all-to-alls of a slice each, so a rank holds one slice's
    buffers (0: the fewest of 1, 2, 4, ... 64 whose predicted peak fits every machine and process
    limit; --model gcn|sage only; the result is the same up to float rounding)"""
    layer: int | None = None
    """write the output of message-passing layer L (1-based) as the embedding (default: the last
    hidden layer, layers - 1; the output layer of a one-layer model)"""
    overwrite: bool = False
    """replace an existing, non-empty --out"""
    other_graph: bool = False
    """predict for a graph other than the training's, with the same features (one that grew, the
    next day's): its fingerprint is not checked; the classes and their names are the training's"""
    parts: int | None = None
    """number of parts K when partitioning SPEC in-process (= number of workers; default: --nproc)"""
    method: Literal[METHODS] = "auto"
    """partition method when partitioning in-process"""
    seed: int = 0
    """seed of the in-process partition"""
    nproc: int | None = None
    """start N local workers (default: the number of parts, divided by --nnodes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    report: str | None = field(default=None, metadata={"metavar": "FILE"})
    """write the JSON report here (rank 0): rows, bytes, times, peak memory per rank"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda; one GPU per local rank"""
    timeout_s: float = field(default=300.0, metadata={"flag": "--timeout"})
    """collective timeout in seconds: a silent peer makes the others fail after this long (rank 0
    partitioning a spec in-process is waited for without it)"""
    malloc_mmap_mb: int = 4
    """CPU: tensors above N MiB get their own mmap, so freed memory returns to the OS at once"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line summary on rank 0"""

    def validate(self) -> None:
        from graphdist.config import check_choices
        check_choices(self)
        self.nodes.validate()
        if self.spec is None and self.partition is None:
            raise ConfigError("give a dataset SPEC or --partition DIR")
        if not self.checkpoint_dir or not self.out:
            raise ConfigError("--checkpoint-dir and --out are required")
        if not 0 <= self.halo_rounds <= 64:
            raise ConfigError(f"--halo-rounds must be in 0..64, got {self.halo_rounds}")
        if self.layer is not None and self.layer < 1:
            raise ConfigError(f"--layer must be >= 1 (layers count from 1), got {self.layer}")
        for name, v in (("parts", self.parts), ("nproc", self.nproc)):
            if v is not None and v < 1:
                raise ConfigError(f"--{name} must be >= 1, got {v}")

    def check_outputs(self) -> None:
        """--out and --report are writable (and --out empty, or --overwrite), before any work."""
        from graphdist.fileio import check_output_file
        from graphdist.outputs import check_out
        check_out(self.out, self.overwrite)
        if self.report:
            check_output_file(self.report, "--report")


def run(cfg: InferConfig) -> dict | None:
    """Check ``cfg``, its outputs and its checkpoint, then infer here or on local workers;
    returns the report."""
    from graphdist.partition.job import workers_for
    from graphdist.launch import run_job
    from graphdist.procgroup import pick_backend
    from graphdist.trained import open_checkpoint
    cfg.validate()
    cfg.check_outputs()
    open_checkpoint(cfg.checkpoint_dir).require("gcn", "infer")
    _, dev_type = pick_backend(cfg.device)
    return run_job(worker, cfg, workers_for(cfg, dev_type), cfg.nodes)


def worker(cfg: InferConfig) -> dict:
    from graphdist.launch import rank_main
    return rank_main(infer, cfg, summary_line)


def gcn_config(settings: dict, **where):
    """The training's :class:`~graphdist.gnn.config.GCNConfig` from its recorded settings, with the
    data source ``where`` and the exact evaluation exchange: plain float32 rows, fresh, direct,
    in one round (infer's memory check may choose more), no simulated link."""
    from graphdist.gnn.config import GCNConfig
    names = {f.name for f in dataclasses.fields(GCNConfig)}
    kw = {k: v for k, v in settings.items() if k in names and k != "nodes"}
    kw.update(halo="plain", halo_bits=32, eval_halo_bits=32, halo_staleness=0, staleness_smoothing=0.0,
              boundary_rate=1.0, link_gbps=0.0, link_latency_us=0.0, halo_route="direct", halo_rounds=1,
              input_halo="exchange", resume=False, checkpoint_dir=None, report=None, tensorboard=None,
              summary=False, progress=False)
    kw.update(where)
    return GCNConfig(**kw)


def infer(cfg: InferConfig) -> dict:
    """This rank's inference (joins the process group from the environment); every rank returns
    the report."""
    from graphdist import comm
    from graphdist.memory import peak_memory_bytes
    from graphdist.gnn.infer_memory import check_infer_fits
    from graphdist.procgroup import start_rank
    from graphdist.timer import Timer
    from graphdist.trained import open_checkpoint
    ctx = start_rank(cfg)
    tr = open_checkpoint(cfg.checkpoint_dir)
    tr.require("gcn", "infer")
    gcfg = gcn_config(tr.settings, spec=cfg.spec, partition=cfg.partition, parts=cfg.parts, method=cfg.method,
                      seed=cfg.seed, device=cfg.device)
    with Timer() as t_load:
        lg, ids = _load(gcfg, ctx.rank, ctx.world_size)
        where = cfg.spec or cfg.partition
        if not cfg.other_graph:
            tr.check_fingerprint(lg.fingerprint, where, "to predict for another graph with the training's features "
                                 "(one that grew, the next day's), add --other-graph")
        n_classes = checks.classes(cfg.other_graph, tr, gcfg, lg)
        names = checks.class_names(cfg.other_graph, tr, lg)
        checks.check_model(tr, gcfg, lg, n_classes, where)
        rounds, fits = check_infer_fits(dataclasses.replace(gcfg, halo_rounds=cfg.halo_rounds), lg, n_classes,
                                        _emb_width(cfg, gcfg, n_classes), ctx.device)
        gcfg = dataclasses.replace(gcfg, halo_rounds=rounds)
        lg, ids = _reordered(lg, ids, gcfg, cfg.checkpoint_dir)
        net = _net(gcfg, lg, n_classes, ctx.device)
        checks.check_shapes(tr, net.model, n_classes, int(lg.x.shape[1]))
        tr.load({"model": net.model.state_dict()})
        labels = _known_labels(gcfg, lg, names, ctx.device)
        graph_fp = lg.fingerprint
        del lg  # the adjacency and the exchanger hold what the forward pass needs (as in training)
    layer = _layer(cfg, gcfg, net)
    with Timer(ctx.device) as t_fwd:
        logits, emb = forward(net, layer, labels)
    del net  # the features and the adjacency go before the rows are written
    with Timer() as t_write:
        man = _write(cfg, tr, gcfg, ids, logits, emb, layer, names, graph_fp)
    peaks = comm.all_gather_json(peak_memory_bytes(ctx.device))
    return {"out": cfg.out, "rows": man["rows"], "bytes": sum(p["bytes"] for p in man["parts"]),
            "rows_per_rank": [p["rows"] for p in man["parts"]], "classes": int(logits.shape[1]),
            "embedding_layer": layer, "embedding_width": int(emb.shape[1]), "model": gcfg.model,
            "checkpoint": str(tr.snap), "time/load_s": t_load.seconds, "time/forward_s": t_fwd.seconds,
            "time/write_s": t_write.seconds, "mem/peak_bytes": int(max(peaks)), "mem/peak_bytes_per_rank": peaks,
            "mem/estimate_bytes_per_rank": fits and fits["need_bytes_per_rank"], "comm/halo_rounds": rounds,
            "world_size": ctx.world_size, "device": str(ctx.device)}


def _load(gcfg, rank: int, world: int):
    """``(LocalGraph of this rank, the input's ids of its owned nodes)``: from the artifact's id
    file of this part (never the whole map), or from the graph loaded in-process."""
    from graphdist.partition.setup import load_local
    from graphdist.ids import take
    if gcfg.partition:
        from graphdist.errors import ArtifactError
        from graphdist.partition.artifact import read_part_ids
        lg, _ = load_local(gcfg, rank, world)
        ids = read_part_ids(gcfg.partition, rank)
        if ids is not None and len(ids) != lg.num_owned:
            raise ArtifactError(f"{gcfg.partition}: part {rank} holds {lg.num_owned} nodes but {len(ids)} ids")
        return lg, take(ids, lg.owned) if ids is None else ids
    from graphdist.data import load_graph
    graph = load_graph(gcfg.spec)
    lg, _ = load_local(gcfg, rank, world, graph=graph)
    ids = take(graph.node_ids, lg.owned)
    del graph
    return lg, ids


def _reordered(lg, ids, gcfg, kept: str):
    """The part in the training's locality order (``--reorder``), and its ids alike (the part's
    owned nodes come in ascending node index): the order the training kept in its checkpoint
    folder ``kept`` where it ran on these parts (read, not computed again), else computed."""
    before = lg.owned.numpy().copy()  # (not a view: the mapped part file goes with the old part)
    out = lg.reordered(gcfg.reorder, max(lg.x.shape[1], gcfg.hidden), kept=kept, write=False)
    if out is lg:
        return lg, ids
    return out, ids[np.searchsorted(before, out.owned.numpy())]


def _net(gcfg, lg, n_classes: int, dev):
    """The trained model's net for this part (the trainer's own classes), in evaluation mode."""
    from graphdist.gnn.config import BUILTIN_MODELS
    from graphdist.partition.setup import check_layout
    check_layout(lg, "plain")
    x = lg.x
    if gcfg.row_normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1.0)
    x = x.to(dev)
    if gcfg.model in BUILTIN_MODELS:
        from graphdist.gnn.net import BuiltinNet
        net = BuiltinNet(gcfg, lg, x, lg.owned.to(dev), n_classes, dev)
    else:
        from graphdist.gnn.pyg.net import PygNet
        net = PygNet(gcfg, lg, x, n_classes, dev)
    net.model.eval()
    return net


def _layer(cfg, gcfg, net) -> int:
    """``--layer``, checked against the model's message-passing layers (default: the last hidden)."""
    n = _num_layers(net.model)
    layer = cfg.layer if cfg.layer is not None else max(n - 1, 1)
    if not 1 <= layer <= n:
        raise ConfigError(f"--layer {layer}: the {gcfg.model} model has {n} message-passing layers (1..{n})")
    return layer


def _emb_width(cfg, gcfg, n_classes: int) -> int:
    """The written embedding's width for graphdist's own models (``--layer`` as :func:`_layer`
    resolves it, checked there): the hidden width, or the classes for the output layer."""
    layer = cfg.layer if cfg.layer is not None else max(gcfg.layers - 1, 1)
    return n_classes if layer >= gcfg.layers else gcfg.hidden


def _layers(model) -> list:
    """The model's message-passing layers in module order (graphdist's convs, PyG MessagePassing)."""
    convs = getattr(model, "convs", None)
    from graphdist.gnn.models import GNN
    if isinstance(model, GNN):
        return list(convs)
    from torch_geometric.nn.conv import MessagePassing
    return [m for m in model.modules() if isinstance(m, MessagePassing)]


def _num_layers(model) -> int:
    return len(_layers(model))


def _known_labels(gcfg, lg, names, dev):
    """What evaluation feeds a masked label embedding (``--label-rate``): every training label
    (in the training's class numbering, :func:`graphdist.gnn.infer_checks.training_labels`)."""
    if gcfg.label_rate <= 0 or lg.y is None or lg.train_mask is None:
        return None
    return torch.where(lg.train_mask, checks.training_labels(lg, names), -1).to(dev)


@torch.no_grad()
def forward(net, layer: int, labels=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits [n_own, C], output of layer ``layer`` [n_own, H])``: one evaluation pass of
    ``net`` (no autograd), the layer's output copied as it is made (its activation is applied in
    place later)."""
    mods = _layers(net.model)
    seen: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        if len(seen) < 1:
            seen.append(output.detach().clone() if torch.is_tensor(output) else output)

    h = mods[layer - 1].register_forward_hook(hook)
    try:
        net.model.eval()
        logits = net.eval_pass(labels)
    finally:
        h.remove()
    emb = seen[0] if seen else None
    if not torch.is_tensor(emb) or emb.dim() != 2 or emb.shape[0] != logits.shape[0]:
        got = tuple(emb.shape) if torch.is_tensor(emb) else type(emb).__name__
        raise ConfigError(f"--layer {layer}: that layer's output is not one row per node ({got})")
    return logits, emb


def _write(cfg, tr, gcfg, ids, logits, emb, layer: int, names, graph_fp: str) -> dict:
    """This rank's rows into the output folder (collective); returns the manifest (its
    ``fingerprint`` the training's graph; ``graph_fingerprint`` this one, where it is another)."""
    model = {"model": gcfg.model, "layers": gcfg.layers, "hidden": gcfg.hidden, "classes": int(logits.shape[1]),
             "embedding_layer": layer}
    meta = {"command": "infer", **tr.describe(), "model": model}
    if graph_fp != tr.fingerprint:
        meta["graph_fingerprint"] = graph_fp
    return write_node_rows(cfg.out, cfg.overwrite, ids, logits, emb, meta, names)


def write_node_rows(out, overwrite: bool, ids, logits: torch.Tensor, emb: torch.Tensor | None, meta: dict,
                    class_names=None) -> dict:
    """``node_id, pred, logits[, embedding]`` of this rank's rows (``ids``: the input's ids of
    its owned nodes, :mod:`graphdist.ids`) into the output folder ``out``, in slices of
    :data:`~graphdist.outputs.ROWS_PER_GROUP` rows (collective); returns the manifest (``meta``
    plus the columns and rows). With ``class_names`` (the input's labels were names) ``pred`` is
    the predicted class's name and the manifest's ``class_names`` names the logits' columns."""
    import pyarrow as pa

    from graphdist.ids import id_type
    from graphdist.outputs import ROWS_PER_GROUP, PartsWriter, id_array, vectors
    pred = logits.argmax(1).cpu().numpy()
    if class_names is not None:
        if len(class_names) != logits.shape[1]:
            raise ConfigError(f"{len(class_names)} class names for logits of {int(logits.shape[1])} classes")
        pred = np.asarray(class_names, dtype=str)[pred]
        meta = {**meta, "class_names": list(class_names)}
    cols = [("node_id", pa.string() if id_type(ids) == "string" else pa.int64()),
            ("pred", pa.int64() if class_names is None else pa.string()),
            ("logits", pa.list_(pa.float32(), int(logits.shape[1])))]
    if emb is not None:
        cols.append(("embedding", pa.list_(pa.float32(), int(emb.shape[1]))))
    schema = pa.schema(cols)
    lg_cpu, em_cpu = logits.detach().cpu(), None if emb is None else emb.detach().cpu()

    def batches():
        for lo in range(0, len(ids), ROWS_PER_GROUP):
            hi = min(len(ids), lo + ROWS_PER_GROUP)
            row = [id_array(ids[lo:hi]), pa.array(pred[lo:hi], cols[1][1]), vectors(lg_cpu[lo:hi])]
            yield pa.record_batch(row + ([] if em_cpu is None else [vectors(em_cpu[lo:hi])]), schema=schema)

    with PartsWriter(out, overwrite) as w:
        w.write_batches(schema, batches())
        return w.close(meta)


def summary_line(rep: dict) -> str:
    mb = rep["bytes"] / 1e6
    rounds = f" in {rep['comm/halo_rounds']} halo rounds" if rep["comm/halo_rounds"] > 1 else ""
    return (f"infer: {rep['rows']:,} nodes -> {rep['out']} ({mb:.1f} MB, {rep['world_size']} part file(s)); "
            f"forward {rep['time/forward_s']:.2f} s{rounds}, write {rep['time/write_s']:.2f} s; "
            f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank")
