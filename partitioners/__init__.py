"""Graph partitioners and partition-quality metrics (numpy/torch only; no torch.distributed).

    from partitioners import partition, quality
    a = partition(graph, 16, method="auto")          # LongTensor[N], part of every node
    quality(graph, a, feature_dim=128)               # dict: comm_volume, edge_imbalance, ...
"""
from partitioners.api import BALANCES, METHODS, partition
from partitioners.errors import MissingBackendError, PartitionError
from partitioners.quality import (QUALITY_KEYS, bytes_per_layer, comm_volume, edge_cut,
                                  edge_cut_fraction, edge_imbalance, max_recv, max_send,
                                  node_imbalance, quality, recv_per_part, replication_factor,
                                  send_matrix, send_per_part, moved_rows)

__all__ = [
    "partition", "METHODS", "BALANCES", "PartitionError", "MissingBackendError", "quality",
    "QUALITY_KEYS", "edge_cut", "edge_cut_fraction", "comm_volume", "max_recv", "max_send",
    "node_imbalance", "edge_imbalance", "replication_factor", "bytes_per_layer", "send_matrix",
    "recv_per_part", "send_per_part", "moved_rows",
]
