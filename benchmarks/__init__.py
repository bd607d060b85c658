"""Performance measurements as interleaved ratios against a baseline (README.md beside this file lists them; ``vsr bench
exact`` and ``vsr bench generation`` run two of them, the others are ``python -m benchmarks.<module>``)."""
