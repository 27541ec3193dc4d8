"""Causal discovery tasks (MAC, Le et al.): relate a set of described variables by a causal
graph, scored against the true graph. `pairs.py` asks one ordered pair at a time,
`whole_graph.py` for the whole graph at once."""

from crawdad.tasks.discovery.pairs import DiscoveryPairsTask, PairItem
from crawdad.tasks.discovery.whole_graph import DiscoveryGraphTask, GraphItem

__all__ = ["DiscoveryGraphTask", "DiscoveryPairsTask", "GraphItem", "PairItem"]
