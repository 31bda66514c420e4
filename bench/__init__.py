"""Benchmarks: ``python -m bench`` runs every ``bench/bench_*.py`` and writes bench/results/."""
