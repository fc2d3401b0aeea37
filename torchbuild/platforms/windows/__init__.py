"""win-64: MSVC, PE files, Authenticode, the VC runtime, DLL providers, Wine and python.org's embeddable CPython."""
