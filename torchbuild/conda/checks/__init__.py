"""Package checks of a conda archive, by code: conda-verify's C11xx and torchbuild's TB1xx."""
