"""``graphdist export --checkpoint-dir D --out DIR``: a trained model that runs without graphdist.

The flags are generated from :class:`graphdist.trained.ExportConfig`; the command is
:func:`graphdist.trained.export`, which dispatches on the trainer that wrote the checkpoint.
"""
from __future__ import annotations

from graphdist import config
from graphdist.trained import ExportConfig


def _handler(args) -> int:
    from graphdist.trained import export
    rep = export(config.from_namespace(ExportConfig, args))
    if rep:
        print(f"export: {rep['out']}: {', '.join(rep['files'])} ({rep.get('model', '')})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="a trained model for use without graphdist (PyG model, vectors, or an unsharded DLRM)",
                       description="Write a trained model out of graphdist: a train-gcn checkpoint as a one-process "
                                   "PyG model (DIR/model.py build(), model.pt, model.json); a train-rec checkpoint "
                                   "as its final user and item vectors (DIR/users.parquet, DIR/items.parquet; give "
                                   "the interaction SPEC or --partition); a train-dlrm checkpoint of any sharding as "
                                   "one unsharded torchrec model (DIR/model.py build() and features(), model.pt, "
                                   "model.json), read by graphdist score.")
    config.add_arguments(p, ExportConfig)
    p.set_defaults(func=_handler)
