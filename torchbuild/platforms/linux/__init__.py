"""linux-64: gcc, ELF files and manylinux."""
