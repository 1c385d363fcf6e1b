"""Published training runs as data (trainsim/data/validation), the loaders that turn a row into a scenario,
and the comparisons: `trainsim validate` (predicted vs published) and `trainsim regress` (predicted vs a
stored baseline)."""
