"""Training benchmarks: trainer cost, `rag-hier tune`, and the dev grids that chose training settings."""
