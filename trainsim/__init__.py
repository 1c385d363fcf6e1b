"""trainsim: predict, plan, calibrate and execute distributed training runs.

Layering (lower never imports upper): specs → topologies → cost_models → simulator → reports;
kernels (torch) sits beside the simulator and is imported lazily by reports only.
"""

__version__ = "0.1.0"
SCHEMA_VERSION = 1
