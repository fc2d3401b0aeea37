"""Files copied into the fresh test environments: standard library only."""
