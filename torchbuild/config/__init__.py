"""Configuration: matrix.yaml, the run options, channel names, and the one parser of each table in torchbuild/data."""
