from graphdist.cli import run

raise SystemExit(run())
