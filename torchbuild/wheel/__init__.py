"""Wheels: names, tags and metadata, read in one place; rewriting, re-versioning, installing; the SBOM and provenance
they carry."""
