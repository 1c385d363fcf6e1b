"""Everything that needs torch: microbenchmarks, calibration, and the plan executor. Imported lazily."""
