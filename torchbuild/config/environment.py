"""The environment variables torchbuild reads, each checked once, before any command does anything (``check``), with
one message naming the variable and what it takes. The modules that use one read it through this module.

pip's own variables (PIP_*) are pip's to check, the AWS ones boto3's (except AWS_MAX_ATTEMPTS, which botocore reads
only when a request is made); ANACONDA_API_TOKEN is checked where an anaconda.org channel is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from torchbuild.errors import UserError, one_of

SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
SCRATCH = "TORCHBUILD_SCRATCH"
SCRATCH_CHOICES = ("auto", "disk")  # auto: in memory where there is room
S3_PART_MB = "TORCHBUILD_S3_PART_MB"
S3_PART_RANGE = range(5, 5121)  # S3's multipart limits: parts of 5 MiB to 5 GiB
ANACONDA = "TORCHBUILD_ANACONDA"
AWS_MAX_ATTEMPTS = "AWS_MAX_ATTEMPTS"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
REPODATA = "TORCHBUILD_REPODATA"
MAX_UNPACKED = "TORCHBUILD_MAX_UNPACKED"
MAX_UNPACKED_DEFAULT = 8 << 30  # torch's CUDA wheels unpack to about 3 GiB
MAX_RATIO = "TORCHBUILD_MAX_RATIO"
# torch 2.13.0 cpu's manylinux wheel: 3.7 overall, 24 for its worst member of 1 MiB or more (33 for a small one);
# deflate reaches about 1030 on zeros, so 100 leaves real wheels room and refuses a bomb.
MAX_RATIO_DEFAULT = 100.0
MAX_MEMBERS = "TORCHBUILD_MAX_MEMBERS"
# torch 2.13.0 cpu's wheel holds about 12,500 members, a CUDA wheel about as many: 100,000 leaves room, and stops an
# archive of countless empty members (each one a file made, an inode spent) before it is unpacked.
MAX_MEMBERS_DEFAULT = 100_000
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# Where temporary files go: what py-rattler-build (Rust's std::env::temp_dir) and the tools it runs read; Python's
# tempfile would quietly fall back to /tmp, py-rattler-build fails mid-run instead.
TEMP_FOLDERS = ("TMP", "TEMP") if os.name == "nt" else ("TMPDIR",)

# The times a zip member can carry (MS-DOS dates): every archive a cell makes is a zip or holds zips.
EARLIEST = 315532800  # 1980-01-01 00:00:00 UTC
LATEST = 4354819198  # 2107-12-31 23:59:58 UTC (zip times count in steps of two seconds)


def _integer(name: str, raw: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a whole number: it takes {what}.") from None


def source_date_epoch(env: Mapping[str, str] = os.environ) -> int | None:
    """SOURCE_DATE_EPOCH: a whole number of seconds in the range every archive of the cell can carry; None: unset."""
    raw = env.get(SOURCE_DATE_EPOCH)
    if raw is None or raw.strip() == "":
        return None
    try:
        if not re.fullmatch(r"-?[0-9]+", raw):  # int() takes ' 17', '1_7' and other scripts' digits; tools don't
            raise ValueError(raw)
        value = int(raw)
    except ValueError:
        raise UserError(f"{SOURCE_DATE_EPOCH}={raw!r} is not a number of seconds since 1970-01-01. Set it to one "
                        f"(e.g. {SOURCE_DATE_EPOCH}=$(git log -1 --format=%ct)) or unset it.") from None  # fmt: skip
    if not EARLIEST <= value <= LATEST:
        raise UserError(
            f"{SOURCE_DATE_EPOCH}={raw} is outside the times a wheel (a zip) can carry: give one from {EARLIEST} "
            f"(1980-01-01) to {LATEST} (2107-12-31), or unset it to use the source's own time."
        )
    return value


def scratch_setting(env: Mapping[str, str] = os.environ) -> str:
    setting = env.get(SCRATCH, "auto").strip().lower() or "auto"
    if setting not in SCRATCH_CHOICES:
        raise UserError(f"{SCRATCH}={env[SCRATCH]!r} is not a scratch setting: use {one_of(SCRATCH_CHOICES)}.")
    return setting


def s3_part_mb(env: Mapping[str, str] = os.environ) -> int:
    """The size of an S3 upload's parts, in MiB (64 unless set)."""
    raw = env.get(S3_PART_MB, "").strip()
    if not raw:
        return 64
    value = _integer(S3_PART_MB, raw, "MiB per part of an S3 upload")
    if value not in S3_PART_RANGE:
        raise UserError(
            f"{S3_PART_MB}={raw}: S3 takes parts of {S3_PART_RANGE.start} to {S3_PART_RANGE.stop - 1} MiB."
        )
    return value


def anaconda_command(env: Mapping[str, str] = os.environ) -> str:
    """The anaconda-client command (a name on PATH, or a path)."""
    raw = env.get(ANACONDA)
    if raw is not None and not raw.strip():
        raise UserError(f"{ANACONDA} is set but empty: give the anaconda-client command (e.g. anaconda), or unset it.")
    return raw or "anaconda"


def _aws_max_attempts(env: Mapping[str, str]) -> None:
    raw = env.get(AWS_MAX_ATTEMPTS)
    if raw is not None and _integer(AWS_MAX_ATTEMPTS, raw, "how many times botocore tries a request (1 or more)") < 1:
        raise UserError(f"{AWS_MAX_ATTEMPTS}={raw}: give 1 or more (how many times botocore tries a request).")


def step_summary(env: Mapping[str, str] = os.environ) -> Path | None:
    """The file GitHub Actions shows as the job's summary (the run's Markdown report is added to it)."""
    raw = env.get(STEP_SUMMARY)
    if not raw:
        return None
    path = Path(raw)
    if path.is_dir() or path.is_fifo() or not path.parent.is_dir():
        what = (
            "is a directory" if path.is_dir()
            else "is a named pipe (appending to it would wait for a reader)" if path.is_fifo()
            else f"is in a folder that does not exist ({path.parent})"
        )  # fmt: skip
        raise UserError(f"{STEP_SUMMARY}={raw} {what}: it names the file the report is appended to.")
    return path


def repodata(env: Mapping[str, str] = os.environ) -> Path | None:
    """TORCHBUILD_REPODATA: stored conda repodata (<channel>/<subdir>/repodata.json) the verify stage solves against
    instead of the live channels, as --repodata gives it; None: unset."""
    raw = env.get(REPODATA)
    if raw is None or not raw.strip():
        return None
    path = Path(raw).resolve()  # absolute: a relative 'rd' would be a channel name to rattler
    if not path.is_dir():
        raise UserError(
            f"{REPODATA}={raw}: no such directory; give a directory with <channel>/<subdir>/repodata.json, or unset "
            "it to solve against the live channels."
        )
    return path


def max_unpacked(env: Mapping[str, str] = os.environ) -> int:
    """The most bytes one archive (a wheel, a conda package) may unpack to, e.g. TORCHBUILD_MAX_UNPACKED=12GiB."""
    raw = env.get(MAX_UNPACKED, "")
    if not raw.strip():
        return MAX_UNPACKED_DEFAULT
    found = _SIZE.match(raw)
    if found is None or float(found[1]) <= 0:
        raise UserError(f"{MAX_UNPACKED}={raw!r} is not a size: give one such as 12GiB, 500MiB or a number of bytes.")
    unit = (found[2] or "").upper().rstrip("B").rstrip("I")
    return int(float(found[1]) * _UNITS[unit])


def max_ratio(env: Mapping[str, str] = os.environ) -> float:
    """How many times its compressed size an archive, or one member of 1 MiB or more, may unpack to."""
    raw = env.get(MAX_RATIO, "")
    if not raw.strip():
        return MAX_RATIO_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value >= 1:
        raise UserError(f"{MAX_RATIO}={raw!r}: give a number of 1 or more (unpacked size / compressed size).")
    return value


def max_members(env: Mapping[str, str] = os.environ) -> int:
    """How many members (files, folders, links) one archive may hold, e.g. TORCHBUILD_MAX_MEMBERS=250000."""
    raw = env.get(MAX_MEMBERS, "").strip()
    if not raw:
        return MAX_MEMBERS_DEFAULT
    if not raw.isdigit() or int(raw) < 1:
        raise UserError(f"{MAX_MEMBERS}={raw!r}: give a whole number of 1 or more (members of one archive).")
    return int(raw)


def _temp_folders(env: Mapping[str, str]) -> None:
    for name in TEMP_FOLDERS:
        raw = env.get(name)
        if raw is None:
            continue
        path = Path(raw)
        if not raw.strip():
            problem = "is set but empty"
        elif not path.is_dir():
            problem = "is a file, not a folder" if path.exists() else "is a folder that does not exist"
        elif not os.access(path, os.W_OK | os.X_OK):
            problem = "is a folder you cannot write to"
        else:
            continue
        raise UserError(f"{name}={raw} {problem}: temporary files go there. Give an existing folder you can write "
                        f"to, or unset {name}.")  # fmt: skip


CHECKS: tuple[Callable[[Mapping[str, str]], object], ...] = (
    source_date_epoch,
    scratch_setting,
    s3_part_mb,
    anaconda_command,
    _aws_max_attempts,
    step_summary,
    repodata,
    _temp_folders,
    max_unpacked,
    max_ratio,
    max_members,
)


def check(env: Mapping[str, str] = os.environ) -> None:
    """Every variable torchbuild reads, as it would read it; the first bad one raises UserError."""
    for read in CHECKS:
        read(env)
