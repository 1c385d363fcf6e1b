"""Cluster fabrics as graphs, rank placement, and bandwidth/latency between rank groups."""
