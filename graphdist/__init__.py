"""graphdist: distributed full-batch GNN training and sharded DLRM training on torch.distributed."""
from graphdist.errors import GraphdistError

__version__ = "0.1.0"
__all__ = ["GraphdistError", "__version__"]
