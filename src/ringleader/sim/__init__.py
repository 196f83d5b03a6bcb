"""Discrete-event cluster simulator over the real scheduler (``place``) and the throughput model.

from ringleader.sim import compare_policies, generate_trace
from ringleader.topology import load_cluster_file
result = compare_policies(load_cluster_file("c.yaml"), generate_trace(200, 1, 6.0), ["topology"])
"""

from ringleader.sim.compare import Comparison, compare_policies, parse_policies, write_outputs
from ringleader.sim.engine import JobRecord, NodeFailures, PreemptionCost, SimRun, Simulation, simulate
from ringleader.sim.steptime import Memoised, StepTime, StepTimeFn, linear_step_time, model_step_time
from ringleader.sim.summary import percentile, summarise, wait_by_size
from ringleader.sim.trace import TraceJob, format_trace, generate_trace, load_trace, parse_trace, write_trace

__all__ = [
    "Comparison",
    "JobRecord",
    "Memoised",
    "NodeFailures",
    "PreemptionCost",
    "SimRun",
    "Simulation",
    "StepTime",
    "StepTimeFn",
    "TraceJob",
    "compare_policies",
    "format_trace",
    "generate_trace",
    "linear_step_time",
    "load_trace",
    "model_step_time",
    "parse_policies",
    "parse_trace",
    "percentile",
    "simulate",
    "summarise",
    "wait_by_size",
    "write_outputs",
    "write_trace",
]
