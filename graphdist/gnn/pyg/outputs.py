"""A script's predictions as the files ``graphdist infer`` writes: one Parquet file per rank,
keyed by the input's own ids, and a manifest.

    out = model(part.x, part.edge_index)                      # owned rows: [n_own, C]
    gd.write_predictions(part, out, "runs/gat/pred")          # every rank, together

    runs/gat/pred/
      part-00000.parquet ...   node_id, pred, logits[, embedding]: this rank's owned nodes
      _manifest.json           written last by rank 0: the input, the world size, the columns, the rows

``node_id`` is the input's id (an edge list's numbers or words, :attr:`Part.input_ids`), ``pred``
the argmax of the logits: its class, or its class's name where the labels were names
(:attr:`Part.class_names`, also in the manifest, in the logits' order). The folder is written
atomically (:mod:`graphdist.outputs`): pandas reads it as ``pd.read_parquet("runs/gat/pred")``.
"""
from __future__ import annotations

import torch

from graphdist.errors import ConfigError

__all__ = ["write_predictions"]


def write_predictions(part, logits: torch.Tensor, out, *, embedding: torch.Tensor | None = None,
                      overwrite: bool = False) -> dict:
    """Write this rank's rows of ``logits`` (``[n_own, C]``, the model's output on
    ``part.x``) and, if given, of ``embedding`` (``[n_own, D]``) into the folder ``out``, keyed by
    the input's ids. A collective: every rank calls it. Returns the manifest. An ``out`` that
    exists and is not empty is refused unless ``overwrite`` (then replaced whole, atomically)."""
    from graphdist.gnn.infer import write_node_rows
    from graphdist.ids import take
    from graphdist.outputs import check_out
    n = part.num_owned
    for name, t in (("logits", logits), ("embedding", embedding)):
        if t is not None and (not torch.is_tensor(t) or t.dim() != 2 or t.shape[0] != n):
            got = tuple(t.shape) if torch.is_tensor(t) else type(t).__name__
            raise ConfigError(f"gd.write_predictions: {name} must be one row per owned node, [{n}, D] on rank "
                              f"{part.rank}, got {got} (pass the model's output on part.x, not part.gather(...))")
    check_out(out, overwrite, "gd.write_predictions: out", "overwrite=True")
    ids = part.input_ids if part.input_ids is not None else take(None, part.node_ids)
    meta = {"command": "write_predictions", "input": part.info.get("input"), "world_size": part.world_size,
            "fingerprint": part.graph.fingerprint}
    return write_node_rows(out, overwrite, ids, logits, embedding, meta, part.class_names)
