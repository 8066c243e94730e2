"""Stress benchmarks: the store under kill -9, concurrent readers and writers."""
