"""The exchange that moves a partitioned graph's rows between ranks, at run time.

    exchanger.py  the halo exchange: a layer's message rows to the peers that need them
    spmm.py       a rank's normalised adjacency and its product overlapped with the exchange
    csr.py        CSRPair: a sparse matrix as CSR of itself and of its transpose
    rounds.py     the exchange in R rounds (``--halo-rounds``)
    quant.py      rows in flight as b-bit integers (``--halo-bits``)
    stale.py      rows one epoch stale (``--halo-staleness 1``, PipeGCN)
    boundary.py   boundary-node sampling (``--boundary-rate``, BNS-GCN)
    route.py      the two-level route across hosts (``--halo-route hosts``)
    route_plan.py a rank's route plan from its own send list and one all-to-all
    link.py       a simulated network link (``--link-gbps``)
    resident.py   the input's halo rows held by the rank that reads them (``--input-halo resident``)

It reads a rank's LocalGraph (:mod:`graphdist.partition.local`) and calls the wire through
:mod:`graphdist.comm`; it imports nothing of the partition room's storage side.
"""
