"""Benchmark: how fast the conda stage turns the unpacked torch wheel into a .conda, against the floor.

In one run, on the same unpacked payload (torch 2.13.0 CPU, linux-64, Python 3.11):
  (a) the pipeline: torchbuild.conda.assembly.assemble (py-rattler-build's assemble_package), zstd LEVEL, THREADS;
  (b) the floor: `tar -cf - . | zstd -LEVEL -TTHREADS` with the CLI tools (apt-get install -y zstd);
  (c) conda-package-handling with its defaults (zstd 19, one thread): slow (minutes); --skip-cph leaves it out.
Prints times, sizes and ratios against the floor.

    python bench/package.py                       # level 5, 2 threads: the pipeline's defaults
    python bench/package.py --level 9 --skip-cph
    pip install -e ".[bench]"                     # conda-package-handling, for (c)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchbuild import plan as plan_mod  # noqa: E402
from torchbuild.conda.assembly import assemble  # noqa: E402
from torchbuild.conda.requirements import wheel_requires  # noqa: E402
from torchbuild.config import matrix  # noqa: E402
from torchbuild.config.matrix import Cell  # noqa: E402
from torchbuild.config.options import RunOptions  # noqa: E402
from torchbuild.stages.conda import recipe  # noqa: E402
from torchbuild.wheel import wheelfile  # noqa: E402
from torchbuild.wheel.install import install_wheel  # noqa: E402

TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")


@dataclass(frozen=True)
class Row:
    what: str
    settings: str
    seconds: float | None
    size: int | None
    note: str = ""


def payload_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def bench_pipeline(meta: dict[str, object], staging: Path, out: Path, level: int, threads: int) -> tuple[Row, Path]:
    options = RunOptions(compression_level=level, compression_threads=threads)
    started = time.perf_counter()
    path = assemble(meta, subdir="linux-64", payload_dir=staging, out_dir=out, options=options)
    seconds = time.perf_counter() - started
    return Row("pipeline: assemble_package", f"zstd {level}, {threads} threads", seconds, path.stat().st_size), path


def bench_floor(staging: Path, out: Path, level: int, threads: int) -> Row:
    settings = f"zstd {level}, -T{threads}"
    if shutil.which("zstd") is None or shutil.which("tar") is None:
        return Row("floor: tar | zstd CLI", settings, None, None, "zstd not found: apt-get install -y zstd")
    target = out / "payload.tar.zst"
    command = f"tar -cf - -C '{staging}' . | zstd -q -{level} -T{threads} -o '{target}'"
    started = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", command], check=True)
    return Row("floor: tar | zstd CLI", settings, time.perf_counter() - started, target.stat().st_size)


def bench_cph(staging: Path, package: Path, out: Path) -> Row:
    try:
        from conda_package_handling import api
        from conda_package_handling.conda_fmt import ZSTD_COMPRESS_LEVEL, ZSTD_COMPRESS_THREADS
    except ImportError:
        return Row(
            "conda-package-handling", "defaults", None, None, "not installed: pip install -e .[bench]"
        )
    settings = f"defaults: zstd {ZSTD_COMPRESS_LEVEL}, {ZSTD_COMPRESS_THREADS} thread"
    # cph packs a prefix that holds info/ too: give it the info/ of the package (a) made.
    stem = package.name.removesuffix(".conda")
    with zipfile.ZipFile(package) as zf, zf.open(f"info-{stem}.tar.zst") as raw:
        from backports import zstd

        with zstd.open(raw, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(staging, filter="tar")
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file() or p.is_symlink())
    started = time.perf_counter()
    api.create(str(staging), files, package.name, out_folder=str(out))
    return Row("conda-package-handling", settings, time.perf_counter() - started, (out / package.name).stat().st_size)


def table(rows: list[Row], floor: Row) -> str:
    header = ("method", "settings", "time s", "size MB", "time/floor", "size/floor", "note")
    lines = [header]
    for row in rows:
        t = f"{row.seconds:.1f}" if row.seconds is not None else "-"
        s = f"{row.size / 1e6:.1f}" if row.size is not None else "-"
        tr = f"{row.seconds / floor.seconds:.2f}x" if row.seconds is not None and floor.seconds else "-"
        sr = f"{row.size / floor.size:.2f}x" if row.size is not None and floor.size else "-"
        lines.append((row.what, row.settings, t, s, tr, sr, row.note))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, default=TORCH_WHEEL)
    parser.add_argument("--level", type=int, default=RunOptions().compression_level)
    parser.add_argument("--threads", type=int, default=RunOptions().compression_threads)
    parser.add_argument("--skip-cph", action="store_true", help="leave out conda-package-handling (minutes)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where to unpack (needs ~1.5 GB); default: tmp")
    args = parser.parse_args()
    if not args.wheel.is_file():
        print(f"bench: the wheel {args.wheel} does not exist (pip download torch==2.13.0+cpu --no-deps)")
        return 2

    plan = plan_mod.resolve(
        Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0"), matrix.load(ROOT / "matrix.yaml")
    )
    work = Path(tempfile.mkdtemp(prefix="bench-package-", dir=args.work_dir))
    try:
        wheel = wheelfile.read_wheel(args.wheel)
        staging = work / "payload"
        started = time.perf_counter()
        install_wheel(wheel.path, plan.conda.install_scheme, staging, windows=plan.platform == "win-64")
        unpack = time.perf_counter() - started
        count, size = payload_bytes(staging)
        print(f"payload: {args.wheel.name} unpacked in {unpack:.1f} s: {count:,} files, {size / 1e6:,.0f} MB")
        rendered = recipe.render(plan, work / "recipe", wheel_requires=wheel_requires(wheel, plan.conda.requirements))

        rows: list[Row] = []
        (work / "a").mkdir()
        pipeline, package = bench_pipeline(dict(rendered.meta), staging, work / "a", args.level, args.threads)
        rows.append(pipeline)
        print(f"  (a) {pipeline.seconds:.1f} s", flush=True)
        (work / "b").mkdir()
        floor = bench_floor(staging, work / "b", args.level, args.threads)
        rows.append(floor)
        print(f"  (b) {floor.seconds:.1f} s" if floor.seconds is not None else f"  (b) {floor.note}", flush=True)
        if args.skip_cph:
            rows.append(Row("conda-package-handling", "defaults", None, None, "skipped (--skip-cph)"))
        else:
            (work / "c").mkdir()
            print("  (c) conda-package-handling, defaults: this takes minutes ...", flush=True)
            rows.append(bench_cph(staging, package, work / "c"))
        print()
        print(table(rows, floor))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
