"""Benchmark: the pipeline's win-64 repair of PyPI's torch 2.5.1 cp311 win_amd64 wheel, against plain delvewheel.

In one run, on the same input wheel, with the same DLL providers (the msvc-runtime wheel, unpacked in the cache):
  (a) the pipeline: torchbuild.stages.repair.stage.run for the cell win-64-cpu-py3.11-torch2.5.1 (provider lookup,
      delvewheel with the VC runtime included and no mangling, then the PE import-closure check of the result);
  (b) plain `delvewheel repair --ignore-existing --add-path <providers>`.
Prints times, output sizes, the ratio (a)/(b), and what each output lacks per the closure check.

    python bench/repair.py            # the wheel comes from the source stage's cache (downloaded once)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchbuild import plan as plan_mod  # noqa: E402
from torchbuild.config import matrix  # noqa: E402
from torchbuild.config.matrix import Cell  # noqa: E402
from torchbuild.config.options import RunOptions  # noqa: E402
from torchbuild.platforms.windows import pe  # noqa: E402
from torchbuild.results import Artifact  # noqa: E402
from torchbuild.stages import Context  # noqa: E402
from torchbuild.stages import source as source_stage  # noqa: E402
from torchbuild.stages.repair import stage as repair_stage  # noqa: E402
from torchbuild.stages.repair import windows  # noqa: E402


def main() -> int:
    cell = Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.5.1")
    plan = plan_mod.resolve(cell, matrix.load(ROOT / "matrix.yaml"))
    options = RunOptions()
    with tempfile.TemporaryDirectory(prefix="bench-repair-") as tmp:
        work = Path(tmp)
        ctx = Context(plan=plan, root=work, options=options)
        source = source_stage.run(ctx)  # cached after the first run; re-versioned to 2.5.1+cpu (about 1 s)
        wheel = source.outputs["source_wheel"].path
        log = work / "providers.log"
        located = windows.needs(plan, wheel, options.cache_dir, log).located
        providers = sorted({hit.path.parent for hit in located})
        print(f"input: {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB); providers: {', '.join(map(str, providers))}")

        started = time.perf_counter()
        inputs = {"built_wheel": Artifact.of(wheel), "source_info": source.outputs["source_info"]}
        result = repair_stage.run(Context(plan=plan, root=work, options=options, inputs=inputs))
        pipeline_s = time.perf_counter() - started
        ours = result.outputs["repaired_wheel"].path

        plain_dir = work / "plain"
        argv = [sys.executable, "-m", "delvewheel", "repair", "--ignore-existing", "-w", str(plain_dir),
                "--add-path", ":".join(map(str, providers)), str(wheel)]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        plain_s = time.perf_counter() - started
        plain = next(plain_dir.glob("*.whl"))

        rows = [
            ("pipeline repair (delvewheel + closure check)", pipeline_s, ours),
            ("plain delvewheel", plain_s, plain),
        ]
        print(f"{'':48} {'time':>8} {'size':>10}  closure")
        for what, seconds, path in rows:
            report = pe.check_wheel(path, python=plan.python)
            closure = "complete" if report.ok else "missing " + ", ".join(report.missing_names)
            print(f"{what:48} {seconds:7.1f}s {path.stat().st_size / 1e6:8.1f} MB  {closure}")
        print(f"ratio pipeline / plain: {pipeline_s / plain_s:.2f}")
        with zipfile.ZipFile(ours) as archive:
            dlls = sorted(n for n in archive.namelist() if n.lower().endswith((".dll", ".pyd")))
        print(f"DLLs and extensions in the repaired wheel ({len(dlls)}):")
        for name in dlls:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
