"""Precision schedules and the attention router that applies them to every self-attention."""
