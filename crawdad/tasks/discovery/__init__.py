"""Causal discovery tasks (MAC, Le et al.): relate a set of described variables by a causal
graph, scored against the true graph. `pairs.py` asks one ordered pair at a time."""

from crawdad.tasks.discovery.pairs import DiscoveryPairsTask, PairItem

__all__ = ["DiscoveryPairsTask", "PairItem"]
