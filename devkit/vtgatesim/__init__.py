"""VTGate test server: a wire-faithful stand-in for Vitess used by tests, the demo and benchmarks."""
