"""Running cells: the runner, the run state, what a run recorded and its reports."""
