"""The Plan of one cell (plan/model.py) and its resolution from a Cell (plan/resolution.py), before anything runs.
Every later stage reads only the Plan; ``from torchbuild.plan import Plan, resolve`` as before the split."""

from torchbuild.plan.model import (
    SMOKE_STAGES,
    SOLVE_CHANNEL,
    STAGES,
    Compiled,
    CondaTarget,
    Offered,
    Plan,
    SolveTarget,
    WindowsFacts,
)
from torchbuild.plan.resolution import (
    Probe,
    check_cell,
    probe,
    resolve,
    unlabelled_build,
    user_test,
    work_dir_of,
)
from torchbuild.plan.shipped import CondaPackage, PackageBuild, ShippedPackage

__all__ = [
    "SMOKE_STAGES",
    "SOLVE_CHANNEL",
    "STAGES",
    "Compiled",
    "CondaPackage",
    "CondaTarget",
    "Offered",
    "PackageBuild",
    "Plan",
    "Probe",
    "ShippedPackage",
    "SolveTarget",
    "WindowsFacts",
    "check_cell",
    "probe",
    "resolve",
    "unlabelled_build",
    "user_test",
    "work_dir_of",
]
