"""Benchmarks of rag-hier, run from the repository root as ``python -m benchmarks.<folder>.<script>``."""
