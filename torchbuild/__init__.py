"""torchbuild: one matrix of CUDA x Python versions -> PyTorch wheels and conda packages."""

__version__ = "0.1.0"
