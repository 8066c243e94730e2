"""Retrieval benchmarks: quality and speed of the indexes, retrievers and methods (SciFact, XQuAD-en, synthetic)."""
