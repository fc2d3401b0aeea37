"""build: compile the cell's wheel from a checkout, or pass a prebuilt wheel through."""
