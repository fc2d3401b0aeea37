"""Running cells: the pin step, the runner, the run state, what a run recorded and its reports."""
