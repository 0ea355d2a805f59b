"""finishline's benchmarks: `make bench` (or `python -m bench`); see bench/README.md."""
