"""``graphdist report``: runs' curves side by side, from their ``--report`` files.

    graphdist report runs/a.json runs/b.json --plot runs/curves.png

prints one line per run (its trainer, epochs or steps, final loss, best metric) and, with
``--plot``, draws the training loss of every run in one panel and each metric the runs record
(GCN validation and test accuracy per epoch, recommender recall/NDCG at its evaluations, DLRM
AUC as a final point) in the next, written atomically.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graphdist import config
from graphdist.errors import ConfigError, DataFormatError, MissingFileError


@dataclass
class ReportConfig:
    reports: list[str] = field(default_factory=list, metadata={"positional": True, "metavar": "REPORT.json"})
    """report files written by train-gcn, train-rec or train-dlrm --report"""
    plot: str | None = field(default=None, metadata={"metavar": "FILE.png"})
    """draw the runs' loss and metric curves into this PNG"""


def _load(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"report {path} not found")
    try:
        rep = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise DataFormatError(path, f"not a JSON report ({e.msg})", e.lineno) from None
    if not isinstance(rep, dict) or not isinstance(rep.get("losses"), list):
        raise DataFormatError(path, "not a graphdist report (no 'losses' list)")
    return rep


def metrics(rep: dict) -> dict[str, tuple[list[int], list[float]]]:
    """The metric curves a report holds, by name: ``(units, values)``."""
    out = {}
    if isinstance(rep.get("val_acc"), list):  # train-gcn: one per epoch
        out["val_acc"] = (list(range(1, len(rep["val_acc"]) + 1)), rep["val_acc"])
    ev = rep.get("eval") or []
    if ev and isinstance(ev[0], dict):  # train-rec: {"epoch", "recall@K", "ndcg@K"} at its evaluations
        for name in (k for k in ev[0] if k != "epoch"):
            out[name] = ([e["epoch"] for e in ev], [e[name] for e in ev])
    if "auc" in rep and rep.get("steps"):  # train-dlrm: the held-out AUC at the end
        out["auc"] = ([int(rep["steps"])], [float(rep["auc"])])
    return out


def summary(name: str, rep: dict) -> str:
    """One line per run: its length, final loss and the best value of each metric; a value that is
    nan (no validation or test rows to measure it on) is left out, and a metric with no other value
    says so (``max`` over a list holding nan depends on where the nan stands)."""
    parts = []
    for k, (_, vals) in metrics(rep).items():
        real = [v for v in vals if v == v]
        if real:
            parts.append(f"best {k} {max(real):.4f}")
        elif vals:
            parts.append(f"{k} not measured")
    shown = ", ".join(parts)
    return f"{name}: {len(rep['losses'])} {'steps' if 'auc' in rep else 'epochs'}, final loss {rep['losses'][-1]:.4f}" \
        + (f", {shown}" if shown else "")


def plot(reps: dict[str, dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted({m for r in reps.values() for m in metrics(r)})
    fig, axes = plt.subplots(1, 1 + bool(names), figsize=(6 + 5 * bool(names), 4), squeeze=False)
    loss_ax = axes[0][0]
    for name, rep in reps.items():
        loss_ax.plot(range(1, len(rep["losses"]) + 1), rep["losses"], label=name)
        if names:
            for m, (x, y) in metrics(rep).items():
                axes[0][1].plot(x, y, marker="o" if len(x) < 20 else None, label=f"{name} {m}")
    loss_ax.set(title="training loss", xlabel="epoch or step", ylabel="loss")
    loss_ax.set_yscale("log" if all(v > 0 for r in reps.values() for v in r["losses"]) else "linear")
    loss_ax.legend(fontsize=8)
    if names:
        axes[0][1].set(title=", ".join(names), xlabel="epoch or step")
        axes[0][1].legend(fontsize=8)
    fig.tight_layout()
    from graphdist.fileio import atomic_savefig
    atomic_savefig(fig, path)


def _handler(args) -> int:
    from graphdist.fileio import check_output_file
    cfg = config.from_namespace(ReportConfig, args)
    if not cfg.reports:
        raise ConfigError("give one or more report files (train-gcn/train-rec/train-dlrm --report)")
    if cfg.plot:
        check_output_file(cfg.plot, "--plot")
    reps = {}
    for path in cfg.reports:
        name = Path(path).stem
        reps[name if name not in reps else path] = _load(path)
    for name, rep in reps.items():
        print(summary(name, rep))
    if cfg.plot:
        plot(reps, cfg.plot)
        print(f"plot: {cfg.plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="show runs' loss and metric curves side by side",
                       description="Print one line per run report and, with --plot, draw the runs' training "
                                   "loss and metrics (validation accuracy, recall/NDCG, AUC) side by side.")
    config.add_arguments(p, ReportConfig)
    p.set_defaults(func=_handler)
