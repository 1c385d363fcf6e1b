"""Pure cost functions: FLOPs, bytes, compute time, collective time, memory per rank, calibration profiles."""
