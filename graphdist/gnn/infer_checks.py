"""What ``graphdist infer`` checks of a checkpoint against the graph it predicts for, and the
classes it predicts: the training's.

Without ``--other-graph`` the graph must be the training's (its fingerprint), so its labels give
the classes; with it (a graph that grew, the next day's), the class count and names are the
training's, recorded in the checkpoint (``num_classes``, ``class_names``; a built-in model's
output layer says its count where an older checkpoint does not), and a graph's own labels, fed
to a ``--label-rate`` model, are renumbered to the training's classes by name.
"""
from __future__ import annotations

import torch

from graphdist import comm
from graphdist.errors import ConfigError

__all__ = ["classes", "class_names", "training_labels", "check_model", "check_shapes"]


def classes(other_graph: bool, tr, gcfg, lg) -> int:
    """The model's class count: the graph's (max label + 1 over the ranks), or with
    ``other_graph`` the training's."""
    data = int(comm.all_reduce_max(torch.tensor([lg.num_classes])).item())
    if not other_graph:
        return data
    if tr.meta.get("num_classes"):
        return int(tr.meta["num_classes"])
    from graphdist.gnn.config import BUILTIN_MODELS
    out = tr.layout().get(f"model.convs.{gcfg.layers - 1}.bias") if gcfg.model in BUILTIN_MODELS else None
    if out is not None:
        return int(out[0])
    if data:
        return data
    raise ConfigError(f"--other-graph: --checkpoint-dir {tr.root} does not record its classes (written before "
                      "graphdist recorded them) and the graph has no labels to count them by")


def class_names(other_graph: bool, tr, lg) -> list[str] | None:
    """The names of the logits' columns: the training's where it recorded them, else the graph's
    (the training's too, without ``other_graph``: the same graph)."""
    return tr.meta.get("class_names") or (None if other_graph else lg.class_names)


def training_labels(lg, names: list[str] | None) -> torch.Tensor | None:
    """``lg.y`` in the training's class numbering: a label named otherwise than the training's
    classes is renumbered by its name (a name the training never saw: no label)."""
    if lg.y is None or not names or not lg.class_names or list(lg.class_names) == list(names):
        return lg.y
    at = {n: i for i, n in enumerate(names)}
    to = torch.tensor([at.get(n, -1) for n in lg.class_names], dtype=torch.int64)
    return torch.where(lg.y >= 0, to[lg.y.clamp(min=0)], -1)


def check_model(tr, gcfg, lg, n_classes: int, where: str) -> None:
    """Refuse a checkpoint of another class count, feature count or graph (naming both)."""
    from graphdist.gnn.config import BUILTIN_MODELS
    if lg.x is None:
        raise ConfigError(f"{where}: the graph has no node features x to infer from")
    f_in = int(lg.x.shape[1])
    if gcfg.model in BUILTIN_MODELS:
        lay = tr.layout()
        w0 = lay.get("model.convs.0.weight") or lay.get("model.convs.0.weight_l")
        out = lay.get(f"model.convs.{gcfg.layers - 1}.bias")
        if w0 is None or out is None:
            raise ConfigError(f"--checkpoint-dir {tr.root}: holds no {gcfg.model} weights of {gcfg.layers} layers "
                              "(not a checkpoint of this model)")
        if (out[0], w0[1]) != (n_classes, f_in):
            raise ConfigError(f"--checkpoint-dir {tr.root} was trained for {out[0]} classes and {w0[1]} features, "
                              f"but {where} has {n_classes} classes and {f_in} features")


def check_shapes(tr, model, n_classes: int, f_in: int) -> None:
    """Refuse a checkpoint whose weights do not fit the model built for this graph (a PyG model
    for another class or feature count), naming the first tensor both ways."""
    from graphdist.checkpoint import state_layout
    have = tr.layout()
    want = state_layout({"model": model.state_dict()})
    missing = [k for k in want if k not in have]
    if missing:
        raise ConfigError(f"--checkpoint-dir {tr.root} holds no {missing[0]} (not a checkpoint of this model)")
    bad = [k for k in want if have[k] != want[k]]
    if bad:
        k = bad[0]
        raise ConfigError(f"--checkpoint-dir {tr.root} holds {k} {list(have[k])}, but {n_classes} classes and {f_in} "
                          f"features give {list(want[k])} (a checkpoint of another class or feature count)")
