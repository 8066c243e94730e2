"""Experiments for a lent GPU machine: one script per experiment, each with a CPU smoke mode (``--smoke``)."""
