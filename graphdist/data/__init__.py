"""Graph data: the :class:`Graph` type and loaders for every dataset spec in DESIGN.md.

    from graphdist.data import load_graph
    g = load_graph("sbm:nodes=10000,classes=4")
"""
from graphdist.data.graph import Graph, csr_from_coo
from graphdist.data.specs import DEFAULT_SBM, data_root, load_graph, parse_spec

__all__ = ["Graph", "csr_from_coo", "load_graph", "parse_spec", "data_root", "DEFAULT_SBM"]
