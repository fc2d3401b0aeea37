"""What the two smoke stages share: the stage body, the environment backends and the check script."""
