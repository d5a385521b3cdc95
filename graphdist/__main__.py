from graphdist.cli import main

rc = main()
from graphdist.launch import leave  # noqa: E402 - after the job (importing it loads torch)

raise SystemExit(leave(rc))
