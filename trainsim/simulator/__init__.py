"""The discrete-event engine of one training step, metrics, and the layout planner."""
