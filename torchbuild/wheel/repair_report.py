"""``repair.json``: what the repair stage vendored and read from the binaries, for the stages after it (the conda
package's runtime dependency and what it leaves out, the environment closure, the SBOM) and for people."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torchbuild.config import nesting
from torchbuild.errors import UserError
from torchbuild.host.files import write_atomic
from torchbuild.knowledge.compat import version_key


@dataclass(frozen=True)
class Floor:
    version: str  # the MSVC version the runtime must be at least as new as, e.g. 14.42
    set_by: str  # the file whose linker version set it, e.g. torch/lib/c10.dll

    def admits(self, file_version: str) -> bool:
        """A runtime DLL of ``file_version`` (14.44.35211.0) serves binaries linked by this MSVC."""
        return version_key(file_version)[:2] >= version_key(self.version)[:2]

    def to_dict(self) -> dict[str, str]:
        return {"version": self.version, "set_by": self.set_by}


@dataclass(frozen=True)
class Vendored:
    """One file the repair put into the wheel."""

    path: str  # in the wheel, e.g. torch.libs/msvcp140.dll
    sha256: str
    size: int
    version: str | None  # the PE FileVersion (DLLs); None for ELF libraries
    provider: str  # dll_providers.yaml's name (msvc-runtime, nvidia-cuda-runtime, ...), or "system" (auditwheel)
    origin: str  # the provider wheel's file name, or the directory it was copied from
    origin_sha256: str = ""  # of the provider wheel, when it came from one
    origin_url: str = ""  # where pip found the provider wheel
    origin_name: str = ""  # the provider wheel's distribution name and version
    origin_version: str = ""
    license: str = ""  # as the provider wheel declares it
    signer: str = ""  # the Authenticode signer (CN, O; root), or why there is none


@dataclass(frozen=True)
class RepairReport:
    wheel: str  # the repaired wheel's file name
    platform: str
    vendored: tuple[Vendored, ...] = ()
    vc_runtime_floor: Floor | None = None
    runtime_loaded: tuple[str, ...] = ()  # DLLs shipped because they are loaded by name at run time (no import)
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> str:
        data = asdict(self)
        data["vc_runtime_floor"] = self.vc_runtime_floor.to_dict() if self.vc_runtime_floor else None
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        write_atomic(path, self.to_json())

    @classmethod
    def read(cls, path: Path) -> RepairReport:
        """The report the repair stage wrote; UserError naming it when it is not of that shape (edited, or another
        torchbuild version's)."""
        try:
            raw: Mapping[str, Any] = nesting.loads(path.read_text(encoding="utf-8"))
            floor = raw.get("vc_runtime_floor")
            return cls(
                wheel=str(raw["wheel"]),
                platform=str(raw["platform"]),
                vendored=tuple(Vendored(**v) for v in raw.get("vendored", ())),
                vc_runtime_floor=Floor(**floor) if floor else None,
                runtime_loaded=tuple(str(name) for name in raw.get("runtime_loaded", ())),
                notes=tuple(str(note) for note in raw.get("notes", ())),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(
                f"{path}: not a repair report of this torchbuild ({type(exc).__name__}: {exc}); rerun with --force"
            ) from None


def names(vendored: Sequence[Vendored]) -> list[str]:
    return [Path(v.path).name for v in vendored]
