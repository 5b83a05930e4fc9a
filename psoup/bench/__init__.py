"""Benchmarks run by ``psoup bench``: each variant beside its baseline, in one process."""
