"""Graph data: the :class:`Graph` type and the loaders of every graph kind in :mod:`graphdist.specs`.

    from graphdist.data import load_graph
    g = load_graph("sbm:nodes=10000,classes=4")

Spec strings and every data kind are defined in :mod:`graphdist.specs`.
"""
from graphdist.data.graph import Graph, csr_from_coo
from graphdist.specs import data_homes, load_spec

DEFAULT_SBM = "sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.7,features=32,seed=0"
"""The default synthetic graph (demo, ``graphdist data info`` with no spec)."""


def load_graph(spec: str) -> Graph:
    """Load (or generate) the graph a spec names (:mod:`graphdist.specs`, domain ``graph``).
    Raises :class:`~graphdist.errors.GraphdistError` subclasses on bad input."""
    g = load_spec(spec, "graph")
    g.name = spec
    return g


__all__ = ["Graph", "csr_from_coo", "load_graph", "data_homes", "DEFAULT_SBM"]
