"""repair: make the wheel self-contained for its platform tag."""
