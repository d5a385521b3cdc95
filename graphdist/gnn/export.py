"""``graphdist export`` of a ``train-gcn`` checkpoint: the trained model as a plain one-process PyG
model that runs without graphdist.

    DIR/model.py    build() -> torch.nn.Module (eval mode, weights loaded): PyG layers only
    DIR/model.pt    its state_dict (torch.save)
    DIR/model.json  the settings build() reads: layer widths, model, preprocessing; and
                    ``class_names``, the logits' columns, where the training's labels were names

``build()(x, edge_index)`` on the dataset's raw features and edges (both directions, as PyG's
loaders give them) returns the logits ``graphdist infer`` writes. The training's preprocessing
is inside the module: row normalisation of the features (``--row-normalize``), repeated edges
merged (graphdist's loaders keep an edge once), and for ``gcn`` the self-loops replaced by one
per node with the symmetric normalisation of the in-degrees (PyG ``GCNConv``'s own
``gcn_norm``, which is graphdist's ``D^-1/2 (A + I) D^-1/2``). ``sage`` is ``SAGEConv(aggr="mean")``
with its root weight, over the edges given (a self-loop in ``edge_index`` is a neighbour, as it
is to graphdist where its loader kept it).

The built-in ``gcn`` / ``sage`` become ``GCNConv`` / ``SAGEConv`` layers (``weight`` ->
``lin.weight``; ``weight_l``, ``bias``, ``weight_r`` -> ``lin_l.weight``, ``lin_l.bias``,
``lin_r.weight``), batch norm ``torch.nn.BatchNorm1d`` with the running statistics. A PyG
``--model`` keeps its own class: ``model.pt`` is its ``state_dict`` (it loads into
``CLASS(in_channels, hidden, out_channels, num_layers, dropout)`` with ``strict=True``), and
``build()`` imports ``MODULE:CLASS`` (graphdist's own module for the built-in PyG names).
"""
from __future__ import annotations


import torch

from graphdist.errors import ConfigError

__all__ = ["export_gcn", "MODEL_PY"]


def export_gcn(tr, cfg) -> dict:
    """Write ``cfg.out`` from the checkpoint ``tr`` (:class:`graphdist.trained.Trained`, a
    ``train-gcn`` one); returns what was written."""
    from graphdist.gnn.config import BUILTIN_MODELS
    from graphdist.outputs import write_model_dir
    s = tr.settings
    sd = tr.tensors("model")
    if s["model"] in BUILTIN_MODELS:
        state, spec = _builtin(sd, s)
        source = MODEL_PY + _BUILTIN_PY
    else:
        state, spec = _pyg(sd, s)
        source = MODEL_PY + _PYG_PY
    spec.update(trainer="gcn", checkpoint=str(tr.snap), step=tr.step, fingerprint=tr.fingerprint,
                preprocessing={"row_normalize": bool(s.get("row_normalize")), "merge_repeated_edges": True,
                               "self_loops": "one per node (GCN norm)" if s["model"] == "gcn" else "as given"})
    if tr.meta.get("class_names"):  # the input's labels were names: the logits' columns, in order
        spec["class_names"] = list(tr.meta["class_names"])
    write_model_dir(cfg.out, cfg.overwrite, state, spec, source)
    return {"out": str(cfg.out), "files": ["model.py", "model.pt", "model.json"], "model": s["model"],
            "tensors": len(state), "parameters": int(sum(v.numel() for v in state.values()))}


def _builtin(sd: dict, s: dict) -> tuple[dict, dict]:
    """The PyG ``Net``'s state dict and settings from graphdist's GCN / SAGE weights."""
    kind, layers = s["model"], int(s["layers"])
    out = {}
    for k, v in sd.items():
        parts = k.split(".")
        if parts[0] == "convs":
            name = {"gcn": {"weight": "lin.weight", "bias": "bias"},
                    "sage": {"weight_l": "lin_l.weight", "bias": "lin_l.bias", "weight_r": "lin_r.weight"}}[kind][parts[2]]
            out[f"convs.{parts[1]}.{name}"] = v
        else:
            out[k] = v
    w0 = sd["convs.0.weight" if kind == "gcn" else "convs.0.weight_l"]
    classes = int(sd[f"convs.{layers - 1}.bias"].shape[0])
    label = sd.get("label_emb.weight")
    net = {"kind": kind, "in_channels": int(w0.shape[1]), "hidden": int(s["hidden"]), "out_channels": classes,
           "num_layers": layers, "row_normalize": bool(s.get("row_normalize")), "batch_norm": bool(s.get("batch_norm")),
           "label_classes": int(label.shape[0]) if label is not None else 0}
    return out, {"model": kind, "net": net}


def _pyg(sd: dict, s: dict) -> tuple[dict, dict]:
    """A PyG ``--model``'s own state dict, and the arguments its class was built with (the
    ``(in_channels, out_channels)`` whose model has exactly the checkpoint's tensors)."""
    from graphdist.gnn.pyg.models import BUILTIN, model_class
    name = s["model"]
    cls = model_class(name)
    target = f"{cls.__module__}:{cls.__qualname__}" if name in BUILTIN else name
    want = {k: tuple(v.shape) for k, v in sd.items()}
    dims = sorted({d for shape in want.values() for d in shape})
    hidden, layers, dropout = int(s["hidden"]), int(s["layers"]), float(s["dropout"])
    found = []
    for f_in in dims:
        for f_out in dims:
            try:
                with torch.device("meta"):
                    m = cls(f_in, hidden, f_out, layers, dropout)
            except Exception:  # noqa: BLE001 - a user's class may refuse some widths
                continue
            if {k: tuple(v.shape) for k, v in m.state_dict().items()} == want:
                found.append((f_in, f_out))
    if len(found) != 1:
        why = "none" if not found else f"{len(found)} ({found})"
        raise ConfigError(f"--model {name}: cannot tell the widths it was built with from its {len(want)} tensors "
                          f"({why} of in_channels x out_channels in {dims} build a model with exactly them)")
    f_in, f_out = found[0]
    return dict(sd), {"model": name, "class": target,
                      "args": {"in_channels": f_in, "hidden": hidden, "out_channels": f_out, "num_layers": layers,
                               "dropout": dropout},
                      "row_normalize": bool(s.get("row_normalize"))}


MODEL_PY = '''"""A model trained by graphdist, as a plain one-process PyG module (written by `graphdist export`).

    import model                  # this file, with model.pt and model.json beside it
    net = model.build()           # torch.nn.Module in eval mode, weights loaded
    logits = net(x, edge_index)   # the dataset's raw features [N, F] and edges [2, E], both
                                  # directions, as PyG's loaders give them
    model.CLASS_NAMES             # the logits' columns by name where the training's labels were
                                  # names (model.json "class_names"), else None

The training's preprocessing happens inside (model.json "preprocessing"): the features' row
normalisation where the training had it, repeated edges merged, and for GCN one self-loop per
node with the symmetric normalisation (GCNConv). Needs torch and torch_geometric only.
"""
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.utils import coalesce, remove_self_loops

HERE = Path(__file__).resolve().parent
CLASS_NAMES = json.loads((HERE / "model.json").read_text()).get("class_names")


def _edges(edge_index, n, drop_loops):
    edge_index = coalesce(edge_index, num_nodes=n)
    return remove_self_loops(edge_index)[0] if drop_loops else edge_index


def _rows(x, on):
    return x / x.sum(1, keepdim=True).clamp(min=1.0) if on else x
'''

_BUILTIN_PY = '''

class Net(nn.Module):
    """graphdist's GCN / SAGE as PyG layers: conv, batch norm (if trained with it), ReLU, ..."""

    def __init__(self, kind, in_channels, hidden, out_channels, num_layers, row_normalize=False,
                 batch_norm=False, label_classes=0):
        super().__init__()
        from torch_geometric.nn import GCNConv, SAGEConv
        dims = [in_channels] + [hidden] * (num_layers - 1) + [out_channels]
        self.kind, self.row_normalize = kind, row_normalize
        layer = (lambda a, b: GCNConv(a, b)) if kind == "gcn" else (lambda a, b: SAGEConv(a, b, aggr="mean"))
        self.convs = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(num_layers - 1)) if batch_norm else None
        self.label_emb = nn.Embedding(label_classes, in_channels) if label_classes else None

    def forward(self, x, edge_index, labels=None):
        """``labels`` ([N] class or -1) only for a model trained with --label-rate: evaluation
        feeds every training node's label."""
        h = _rows(x, self.row_normalize)
        edge_index = _edges(edge_index, x.shape[0], self.kind == "gcn")
        if self.label_emb is not None and labels is not None:
            h = h + self.label_emb(labels.clamp(min=0)) * (labels >= 0).to(h.dtype)[:, None]
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if i:
                h = F.relu(h)
            h = conv(h, edge_index)
            if self.norms is not None and i < last:
                h = self.norms[i](h)
        return h


def build():
    """The trained model (eval mode)."""
    spec = json.loads((HERE / "model.json").read_text())
    net = Net(**spec["net"])
    net.load_state_dict(torch.load(HERE / "model.pt", map_location="cpu", weights_only=True), strict=True)
    return net.eval()
'''

_PYG_PY = '''

class Exported(nn.Module):
    """The user's model with the training's preprocessing in front."""

    def __init__(self, model, row_normalize=False):
        super().__init__()
        self.model, self.row_normalize = model, row_normalize

    def forward(self, x, edge_index, **kwargs):
        return self.model(_rows(x, self.row_normalize), _edges(edge_index, x.shape[0], False), **kwargs)


def build():
    """The trained model (eval mode); its class (model.json "class", MODULE:CLASS) must be importable."""
    import importlib
    spec = json.loads((HERE / "model.json").read_text())
    module, name = spec["class"].split(":")
    cls = getattr(importlib.import_module(module), name)
    a = spec["args"]
    model = cls(a["in_channels"], a["hidden"], a["out_channels"], a["num_layers"], a["dropout"])
    model.load_state_dict(torch.load(HERE / "model.pt", map_location="cpu", weights_only=True), strict=True)
    return Exported(model, spec["row_normalize"]).eval()
'''
