"""conda: the repaired wheel becomes the cell's conda package."""
