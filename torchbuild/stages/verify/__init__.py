"""verify: static checks of the cell's artifacts and a solve against real repodata."""
