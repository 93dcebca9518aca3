"""Measurement: profile hooks, energy and GPU clocks."""
