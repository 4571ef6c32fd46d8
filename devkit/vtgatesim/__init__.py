"""VTGate test server: a wire-faithful stand-in for Vitess used by tests, the demo and benchmarks."""

from .executor import Result, VTError
from .faults import FaultPlan
from .sim import VTGateSim

__all__ = ["FaultPlan", "Result", "VTError", "VTGateSim"]
