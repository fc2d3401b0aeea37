"""Knowledge, what the project knows: the one reader of each table in torchbuild/data (releases and toolchains, the
CUDA wheels, DLL providers, companions and their pairing, the 2018 names, PyPI -> conda names, the embeddable
CPython, the smoke environments, build dependencies, CI estimates), each with its source. It imports nothing of
what a user says (torchbuild/config)."""
