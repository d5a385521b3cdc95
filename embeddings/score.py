"""``graphdist score DIR SPEC --out OUT [--json FILE]``: click probabilities of a DLRM that
``graphdist export`` unsharded, in one process, as Parquet, with AUC / log loss / NE.

    DIR       the export of a train-dlrm checkpoint (model.py build(), model.pt, model.json)
    SPEC      criteo:PATH (a TSV, CSV or Parquet file, or a directory of day_* or *.parquet files)
              or criteo-synth:k=v,...
    OUT/part-00000.parquet   line  int64    0-based line of the input (criteo: over its files
                                            in order, lines skipped by --skip-bad-lines keep
                                            their numbers; Parquet: the row; criteo-synth:
                                            the row)
                             prob  float32  sigmoid of the model's logit
                             label int8     the click, 0 / 1
    OUT/_manifest.json        the export, the input, the metrics (graphdist.outputs)

The input goes through the loader training used (:func:`embeddings.data.load_click_data`: the
Criteo binary cache, ``log(1 + max(x, 0))`` of the dense values) and the batches training
evaluated (:func:`embeddings.data.make_batch`: each raw id modulo its table's rows, the rows
``model.json`` records), into the model ``DIR/model.py`` builds: the same input, the same
model, on one process. The metrics are training's (:func:`embeddings.metrics.click_metrics`,
over the logits), so scoring the rows a training run evaluated gives its ``auc``, ``logloss``
and ``ne``. ``throughput/samples_per_s`` counts what training's evaluation counts per row:
making the batch and the forward pass (the Parquet encoding is ``time/total_s``).
"""
from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from graphdist.errors import ArtifactError, ConfigError, MissingFileError
from graphdist.fmt import fmt_bytes

__all__ = ["ScoreConfig", "run", "read_export", "load_model"]


@dataclass
class ScoreConfig:
    """``graphdist score``: one process, no process group."""

    model_dir: str = field(default="", metadata={"positional": True, "metavar": "DIR"})
    """the folder `graphdist export` wrote from a train-dlrm checkpoint"""
    spec: str = field(default="", metadata={"positional": True, "metavar": "SPEC"})
    """click data: criteo:PATH (a TSV, CSV or Parquet file; a directory of day_* or *.parquet files) or
    criteo-synth:k=v,..."""
    out: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """output folder: part-00000.parquet (line, prob, label) and _manifest.json"""
    json: str | None = field(default=None, metadata={"metavar": "FILE"})
    """also write the metrics (auc, logloss, ne), rows and throughput to FILE"""
    overwrite: bool = False
    """replace an existing, non-empty --out"""
    batch_size: int = 4096
    """rows per forward pass"""
    skip_bad_lines: bool = False
    """skip (and count) malformed Criteo lines; the others keep their line numbers"""
    cache_dir: str | None = field(default=None, metadata={"metavar": "DIR"})
    """where the Criteo binary cache goes (default: graphdist's cache home, as train-dlrm)"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line summary"""

    def validate(self) -> None:
        if not self.model_dir or not self.spec:
            raise ConfigError("score needs DIR (an export of a train-dlrm checkpoint) and SPEC (the click data)")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")

    def check_outputs(self) -> None:
        from graphdist.fileio import check_output_file
        from graphdist.outputs import check_out
        check_out(self.out, self.overwrite)
        if self.json:
            check_output_file(self.json, "--json")


def read_export(model_dir) -> dict:
    """``DIR/model.json`` of a train-dlrm export; one line for anything else."""
    from graphdist.trained import TRAINERS
    d = Path(model_dir)
    if not d.is_dir():
        raise MissingFileError(f"{model_dir}: no such directory (score reads the --out of graphdist export)")
    p = d / "model.json"
    if not p.is_file():
        if (d / "latest").is_file():
            raise ConfigError(f"{model_dir}: a training checkpoint, not an export: run graphdist export "
                              f"--checkpoint-dir {model_dir} --out DIR, then score DIR")
        what = "the vectors of a train-rec export" if (d / "users.parquet").is_file() else "no model.json"
        raise MissingFileError(f"{model_dir}: {what}; score reads the folder graphdist export writes from a "
                               "train-dlrm checkpoint")
    try:
        spec = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{p}: unreadable ({e})") from None
    trainer = spec.get("trainer") if isinstance(spec, dict) else None
    if trainer != "dlrm":
        what = TRAINERS[trainer][1] if trainer in TRAINERS else "an unknown trainer"
        raise ConfigError(f"{model_dir}: an export of {what}, but score needs one of {TRAINERS['dlrm'][1]}")
    for name in ("model.py", "model.pt"):
        if not (d / name).is_file():
            raise MissingFileError(f"{model_dir}: {name} is missing (an incomplete export; export it again)")
    return spec


def load_model(model_dir) -> torch.nn.Module:
    """``build()`` of ``DIR/model.py``: the exported model, as a user without graphdist gets it."""
    path = Path(model_dir).resolve() / "model.py"
    spec = importlib.util.spec_from_file_location(f"graphdist_export_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def _check_memory(model_dir, rows: int) -> None:
    """The model file (mapped) and the logits and labels kept for the metrics must fit."""
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    model = (Path(model_dir) / "model.pt").stat().st_size
    need = model + rows * 9  # float32 logit, float32 label, int8 label column slice
    have = resident_bytes() or 0
    room, ceiling = available_bytes(), process_ceiling()
    limit = min(room, ceiling) if ceiling is not None else room
    if have + need > limit:
        raise ConfigError(f"score: the model ({fmt_bytes(model)}) and {rows:,} rows of results need {fmt_bytes(need)} "
                          f"on top of the {fmt_bytes(have)} this process holds, but it may hold {fmt_bytes(limit)}")


def _line_numbers(cfg: ScoreConfig):
    """``rows -> 0-based input lines`` for the spec."""
    from graphdist.specs import parse_spec
    s = parse_spec(cfg.spec, "clicks")
    if s.kind.name not in ("criteo", "clicks"):
        return lambda rows: rows
    from embeddings.criteo import row_lines
    tag = ""
    if s.kind.name == "clicks":  # its cache is named by the columns chosen
        from embeddings.clicks import ClicksReader
        tag = ClicksReader(str(s.path), **s.options).tag
    return lambda rows: row_lines(str(s.path), rows, cfg.cache_dir, tag)


def _batches(net, data, cfg: ScoreConfig, lines_of, kept: dict):
    """Record batches of (line, prob, label); the logits and labels go into ``kept``."""
    import pyarrow as pa

    from embeddings.data import make_batch
    n, B = len(data), cfg.batch_size
    for s in range(0, n, B):
        t0 = time.perf_counter()
        batch, k = make_batch(data, s, B, 0, 1)
        with torch.no_grad():
            logit = net(batch.dense_features, batch.sparse_features).squeeze(-1)[:k].float()
        kept["forward_s"] += time.perf_counter() - t0
        kept["logits"][s:s + k] = logit.numpy()
        kept["labels"][s:s + k] = batch.labels[:k].numpy()
        yield pa.record_batch([pa.array(lines_of(np.arange(s, s + k)), pa.int64()),
                               pa.array(torch.sigmoid(logit).numpy(), pa.float32()),
                               pa.array(batch.labels[:k].numpy().astype(np.int8), pa.int8())],
                              names=["line", "prob", "label"])


def run(cfg: ScoreConfig) -> dict:
    """Score ``cfg.spec`` with the export ``cfg.model_dir``; returns the report (``--json``)."""
    import pyarrow as pa

    from embeddings.data import load_click_data
    from embeddings.job import quiet_torchrec, require_torchrec
    from embeddings.metrics import click_metrics
    from graphdist.outputs import PartsWriter
    require_torchrec()
    quiet_torchrec()
    cfg.validate()
    cfg.check_outputs()
    spec = read_export(cfg.model_dir)
    t_all = time.perf_counter()
    data = load_click_data(cfg.spec, skip_bad_lines=cfg.skip_bad_lines, cache_dir=cfg.cache_dir)
    rows, inp = spec["input"]["rows"], spec["input"]
    if len(data.num_embeddings) != len(rows) or data.dense.shape[1] != spec["dense_features"]:
        cols = (f" (dense {', '.join(inp['dense_columns'])}; ids {', '.join(inp['sparse_columns'])})"
                if inp.get("format") == "columns" else "")
        raise ConfigError(f"{cfg.spec} has {data.dense.shape[1]} dense and {len(data.num_embeddings)} id features, "
                          f"but the model in {cfg.model_dir} takes {spec['dense_features']} and {len(rows)}{cols}: "
                          "score data of the training's columns")
    data.num_embeddings = [int(r) for r in rows]  # each id modulo its table's rows, as training hashed it
    _check_memory(cfg.model_dir, len(data))
    net = load_model(cfg.model_dir)
    n = len(data)
    kept = {"logits": np.empty(n, np.float32), "labels": np.empty(n, np.float32), "forward_s": 0.0}
    schema = pa.schema([("line", pa.int64()), ("prob", pa.float32()), ("label", pa.int8())])
    with PartsWriter(cfg.out, cfg.overwrite) as w:
        w.write_batches(schema, _batches(net, data, cfg, _line_numbers(cfg), kept))
        m = click_metrics(kept["labels"], kept["logits"])
        metrics = {"auc": m["auc"], "logloss": m["logloss"], "ne": m["ne"], "rows": n,
                   "click_rate": m["eval_click_rate"], "bad_lines": int(data.bad_lines)}
        w.close({"command": "score", "model": str(Path(cfg.model_dir).resolve()), "input": cfg.spec,
                 "checkpoint": spec.get("checkpoint"), "quantize": spec.get("quantize", "none"), "metrics": metrics})
    report = {**metrics, "throughput/samples_per_s": n / kept["forward_s"] if kept["forward_s"] > 0 else 0.0,
              "time/forward_s": kept["forward_s"], "time/total_s": time.perf_counter() - t_all,
              "out": str(cfg.out), "model": str(cfg.model_dir), "quantize": spec.get("quantize", "none")}
    if cfg.summary:
        from embeddings.metrics import metrics_text
        print(f"score: {n:,} lines  {metrics_text(m['auc'], m['logloss'], m['ne'], n, m['eval_click_rate'], 6)}  "
              f"{report['throughput/samples_per_s']:.0f} samples/s -> {cfg.out}", flush=True)
    if cfg.json:
        from graphdist.fileio import atomic_write_json
        try:
            atomic_write_json(cfg.json, report)
        except OSError as e:
            raise ConfigError(f"--json {cfg.json}: could not write it ({e.strerror or e}); the line above is "
                              "the result") from None
    return report
