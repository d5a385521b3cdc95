"""The partitioned graph a rank holds, and how it is made, stored and loaded.

    artifact.py     the artifact directory ``graphdist partition`` writes and training reads
    meta.py         ``meta.json``: format version, sizes, the record every part is checked against
    parts.py        per-part files: each rank loads only its own part
    build.py        an artifact built by k ranks together (no rank holds the whole graph)
    assignment.py   a partition given as a file (``--assignment FILE``)
    rank_layout.py  one rank's LocalGraph from its own rows and its peers' replies
    local.py        LocalGraph: one rank's share (owned rows, halo, send lists), plain tensors
    layout.py       the LocalGraph of every part in one process (plain and mvc layouts)
    order.py        orders of a rank's owned rows for the owned-block product's locality
    setup.py        where a rank's part comes from: an artifact or a dataset spec
    regroup.py      a partition for the world that is there after a lost node
    job.py          what every graph workload's job shares around its trainer
    tools.py        the partition / quality / compare configs and functions the CLI calls
    budget.py       will ``graphdist partition`` fit in memory: the estimate checked first

Below it sit :mod:`partitioners` (assignments and quality metrics); above it the exchange
(:mod:`graphdist.exchange`, which imports none of this room's storage side) and the workloads.
"""
