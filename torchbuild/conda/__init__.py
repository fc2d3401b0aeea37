"""Conda packages: reading an archive back, its checks by code, assembly, requirements from a wheel, solving."""
