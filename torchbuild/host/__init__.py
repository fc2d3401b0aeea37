"""This machine: files, subprocesses, the console, scratch space, downloads, and the one wrapper of pip, uv and git."""
