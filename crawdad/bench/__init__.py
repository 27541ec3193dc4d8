"""`crawdad bench`: the servers' ceiling against crawdad's throughput, and what to change."""

from crawdad.bench.advice import Advice, advise
from crawdad.bench.measure import BenchResult, report_lines, run_bench

__all__ = ["Advice", "BenchResult", "advise", "report_lines", "run_bench"]
