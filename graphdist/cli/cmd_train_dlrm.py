"""``graphdist train-dlrm SPEC``: DLRM with sharded embedding tables (torchrec) on click logs.

    graphdist train-dlrm criteo-synth: --nproc 2 --sharding row_wise --batch-size 512 --epochs 1
    torchrun --nproc-per-node 4 -m graphdist train-dlrm criteo:/data/train.txt --sharding auto

With ``--nproc N`` this process first checks the input (data, cache, flags, that the plan fits)
so that mistakes end in one line and exit 2, then starts N workers via ``graphdist.launch``.
"""
from __future__ import annotations

import argparse
import logging
import warnings

from graphdist.errors import ConfigError

_PARSER: argparse.ArgumentParser | None = None
_LIST_FLAGS = ("dense_arch", "over_arch", "num_embeddings_per_feature")


def _int_list(s: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} needs comma-separated integers, got {s!r}") from None


def register(sub) -> None:
    global _PARSER
    from embeddings.config import DLRMTrainConfig
    from embeddings.sharding import SHARDING_TYPES
    d = DLRMTrainConfig()
    p = sub.add_parser("train-dlrm", help="train DLRM/DCNv2 with sharded embedding tables (torchrec)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="criteo:PATH (TSV file or dir of day_* files) or criteo-synth:k=v,...")
    p.add_argument("--nproc", type=int, default=1, help="local worker processes (default 1)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--sharding", default=d.sharding, choices=["auto", *SHARDING_TYPES])
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="GLOBAL batch size")
    p.add_argument("--eval-batch-size", type=int, default=d.eval_batch_size)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=int, default=None, help="passes over the training rows (default 1)")
    g.add_argument("--steps", type=int, default=None, help="total optimizer steps")
    g2 = p.add_mutually_exclusive_group()
    g2.add_argument("--eval-fraction", type=float, default=None,
                    help=f"hold out the last fraction of rows (default {d.eval_fraction})")
    g2.add_argument("--eval-data", default=None, help="separate evaluation data spec")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--arch", default="dlrm", choices=["dlrm", "dcn"])
    p.add_argument("--embedding-dim", type=int, default=d.model.embedding_dim)
    p.add_argument("--dense-arch", default=",".join(map(str, d.model.dense_arch)),
                   help="bottom MLP hidden sizes (a layer of --embedding-dim is appended)")
    p.add_argument("--over-arch", default=",".join(map(str, d.model.over_arch)),
                   help="top MLP hidden sizes (the 1-unit logit layer is appended)")
    p.add_argument("--dcn-layers", type=int, default=d.model.dcn_layers)
    p.add_argument("--dcn-low-rank", type=int, default=d.model.dcn_low_rank)
    p.add_argument("--embedding-optimizer", default=d.embedding_optimizer,
                   choices=["rowwise_adagrad", "adagrad", "adam", "sgd"])
    p.add_argument("--embedding-lr", type=float, default=d.embedding_lr)
    p.add_argument("--dense-optimizer", default=d.dense_optimizer, choices=["adagrad", "adam", "sgd"])
    p.add_argument("--dense-lr", type=float, default=d.dense_lr)
    p.add_argument("--num-embeddings-per-feature", default=None, help="26 comma-separated table sizes")
    p.add_argument("--num-embeddings", type=int, default=None,
                   help="one table size (criteo: hash size, default 100000; synth: a cap)")
    p.add_argument("--skip-bad-lines", action="store_true", help="skip and count malformed lines")
    p.add_argument("--cache-dir", default=None, help="where the criteo binary cache goes")
    g3 = p.add_mutually_exclusive_group()
    g3.add_argument("--pipeline", action="store_true",
                    help="force TrainPipelineSparseDist (default: on with CUDA, off on CPU)")
    g3.add_argument("--no-pipeline", action="store_true", help="force the plain loop")
    p.add_argument("--memory-budget-gb", type=float, default=None,
                   help="per-rank memory for embeddings + optimizer state (default: device/host memory)")
    p.add_argument("--report", default=None, help="write the JSON report here")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    p.set_defaults(func=handler)
    _PARSER = p


def config_from_args(args):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    model = ModelConfig(arch=args.arch, embedding_dim=args.embedding_dim,
                        dense_arch=_int_list(args.dense_arch, "--dense-arch"),
                        over_arch=_int_list(args.over_arch, "--over-arch"),
                        dcn_layers=args.dcn_layers, dcn_low_rank=args.dcn_low_rank)
    nepf = (_int_list(args.num_embeddings_per_feature, "--num-embeddings-per-feature")
            if args.num_embeddings_per_feature else None)
    if args.eval_fraction is not None and not 0.0 < args.eval_fraction < 1.0:
        raise ConfigError(f"--eval-fraction must be in (0, 1), got {args.eval_fraction}")
    for flag, v in (("--batch-size", args.batch_size), ("--nproc", args.nproc), ("--embedding-dim", args.embedding_dim)):
        if v < 1:
            raise ConfigError(f"{flag} must be >= 1, got {v}")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {args.steps}")
    return DLRMTrainConfig(
        spec=args.spec, eval_data=args.eval_data,
        eval_fraction=args.eval_fraction if args.eval_fraction is not None else 0.2,
        sharding=args.sharding, batch_size=args.batch_size, eval_batch_size=args.eval_batch_size,
        epochs=args.epochs if args.epochs is not None else 1, steps=args.steps, seed=args.seed,
        model=model, embedding_optimizer=args.embedding_optimizer, embedding_lr=args.embedding_lr,
        dense_optimizer=args.dense_optimizer, dense_lr=args.dense_lr,
        num_embeddings_per_feature=nepf, num_embeddings=args.num_embeddings,
        skip_bad_lines=args.skip_bad_lines, cache_dir=args.cache_dir, pipeline=True if args.pipeline else (False if args.no_pipeline else None),
        memory_budget_gb=args.memory_budget_gb, report=args.report,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        resume=args.resume, progress=not args.no_progress)


def worker_argv(args) -> list[str]:
    """The command line for the workers: the same flags, without ``--nproc``."""
    out = ["train-dlrm", args.spec]
    for a in _PARSER._actions:
        if not a.option_strings or a.dest in ("nproc", "help"):
            continue
        v = getattr(args, a.dest)
        if isinstance(a, argparse._StoreTrueAction):
            if v:
                out.append(a.option_strings[0])
        elif v is not None and v != a.default:
            out += [a.option_strings[0], str(v)]
    return out


def quiet_torchrec() -> None:
    """torchrec/fbgemm log a lot at import and sharding time; keep warnings and errors only."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("torchrec", "fbgemm_gpu", "torch.distributed", "torch.fx", "torch.fx._symbolic_trace"):
        logging.getLogger(name).setLevel(logging.ERROR)
    root = logging.getLogger()
    if not any(isinstance(f, _DropTorchrec) for f in root.filters):
        root.addFilter(_DropTorchrec())  # torchrec also warns through the root logger


class _DropTorchrec(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.ERROR or not any(
            s in record.pathname for s in ("torchrec", "fbgemm_gpu"))


def precheck(cfg, world: int, device_type: str) -> None:
    """Everything that can be wrong with the input, checked once before workers start."""
    from embeddings.sharding import check_memory
    from embeddings.trainer import load_splits, memory_budget, plan_for, validate
    import torch
    train, _ = load_splits(cfg)  # also builds the criteo binary cache once
    validate(cfg, train, world)
    _, _, desc = plan_for(cfg, train, world, world, device_type)
    check_memory(desc, memory_budget(cfg, torch.device(device_type), world))




def handler(args) -> int:
    from graphdist.launch import launch, under_launcher
    from graphdist.runtime import init_distributed, pick_backend, shutdown
    quiet_torchrec()
    cfg = config_from_args(args)
    if args.nproc > 1 and not under_launcher():
        precheck(cfg, args.nproc, pick_backend(args.device)[1])
        return launch(args.nproc, worker_argv(args))
    ctx = init_distributed(args.device)
    try:
        from embeddings.trainer import train
        report = train(cfg, ctx.device)
    finally:
        shutdown()
    if ctx.rank == 0:
        if cfg.report:
            from graphdist.fileio import atomic_write_json
            atomic_write_json(cfg.report, report, indent=1)
        print(f"auc {report['auc']:.4f}  logloss {report['logloss']:.4f}  ne {report['ne']:.4f}  "
              f"throughput {report['throughput/samples_per_s']:.0f} samples/s  steps {report['steps']}  "
              f"world_size {report['world_size']}" + (f"  bad_lines {report['bad_lines']}" if report['bad_lines'] else ""),
              flush=True)
    return 0
