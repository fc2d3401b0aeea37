"""The Windows machine a host under Wine runs in (scripts/wine_host.py): a prefix laid out as a Windows build
machine's, with Windows's defaults (a user profile with a space and a non-ASCII letter, output in the ANSI code page),
or the UTF-8 host of earlier rounds."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from torchbuild.errors import UserError
from torchbuild.knowledge import dll_providers
from torchbuild.platforms.windows import providers, wine

VC_PROVIDER = "msvc-runtime"  # dll_providers.yaml's provider of the VC++ runtime (windows: %SystemRoot%\System32)
CUDA_PROVIDERS = ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc")  # what --cuda-path lays out (the CUDA fixture's DLLs)
ONEAPI_PROVIDERS = ("mkl", "intel-openmp")  # laid out under %ONEAPI_ROOT% with --cuda-path too
CUDA_ROOT = r"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA"  # where NVIDIA's installer puts v12.8
ONEAPI_ROOT = r"C:\Program Files (x86)\Intel\oneAPI"  # where Intel's oneAPI installer puts mkl\latest
ENV = {
    # What the Linux host's Wine smoke sets too (torchbuild/stages/smoke/wine.py): Intel's OpenMP (libiomp5md.dll,
    # torch >= 2.9) aborts at start-up under Wine 8.0, "OMP: Error #179: Function GetNumaNodeProcessorMaskEx()
    # failed", a call Wine does not implement. Here the smoke runs as on a Windows host and inherits it.
    "KMP_AFFINITY": "disabled",
}
# Windows's defaults, the host's by default: a user profile whose name has a space and a non-ASCII letter (TEMP and
# %LOCALAPPDATA%\torchbuild\Cache under it), and nothing that makes Python's output UTF-8: a program's piped stdout
# is written in the ANSI code page, cp1252 (Wine's locale for this side's C.UTF-8 is English (United States): ANSI
# cp1252, OEM cp437). LC_ALL concerns Wine's Linux side only: its file names and variables are UTF-8 there.
PROFILE_USER = "Zoë Ng"
ANSI_CODE_PAGE = "cp1252"
# Python's own switches of this side, if set here, emptied there (Python reads an empty one as unset).
WINDOWS_SIDE = {**wine.user_env(PROFILE_USER), "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "", "PYTHONUTF8": ""}
# --utf8-host: the host of earlier rounds, user root and Python's output forced to UTF-8. Nothing proven only there
# counts: a Windows machine and its CI logs have neither.
UTF8_HOST = {"PYTHONIOENCODING": "utf-8"}
MACHINE_DONE = ".torchbuild-machine"  # in a --machine folder: its prefix is laid out
# This side's files that reach the network here (a certificate bundle) or hold the wheels pip is told about: given to
# the Windows side as its Z: paths. As POSIX paths they name a folder of the current drive (C:\etc\ssl\... from C:).
HOST_FILES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_FIND_LINKS")


def vc_runtime_dlls(cache_dir: Path) -> list[Path]:
    """The DLLs of the msvc-runtime wheel dll_providers.yaml pins (fetched once into the cache)."""
    provider = next(p for p in dll_providers.load().providers if p.name == VC_PROVIDER)
    requirement = provider.requirement(dll_providers.values_for("cpu", None))
    if requirement is None:
        raise UserError(f"{dll_providers.DATA_FILE}: provider {VC_PROVIDER} names no wheel")
    log = cache_dir / "wine-host" / "vc-runtime.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    folder = providers.provider_dir(requirement, provider.python or "3.11", cache_dir, log)
    return sorted(p for p in folder.iterdir() if p.suffix.lower() == ".dll" and provider.provides(p.name))


def lay_out_system32(prefix: Path, dlls: list[Path]) -> Path:
    """Copies ``dlls`` into the prefix's System32 over Wine's placeholders of the same name (Wine's file names
    are lower case; Windows compares them case-insensitively)."""
    system32 = prefix / "drive_c" / "windows" / "system32"
    for dll in dlls:
        target = system32 / dll.name.lower()
        target.unlink(missing_ok=True)
        shutil.copyfile(dll, target)
    return system32


def drive_c(prefix: Path, windows: str) -> Path:
    """The prefix's file for a ``C:\\...`` path."""
    drive, _, rest = windows.partition(":")
    if drive.upper() != "C":
        raise ValueError(f"{windows} is not on drive C:")
    return prefix / "drive_c" / rest.strip("\\").replace("\\", "/")


def lay_out_providers(prefix: Path, names: tuple[str, ...], cuda: str, env: dict[str, str], cache_dir: Path) -> None:
    """Each named provider's DLLs (from its pinned win_amd64 wheel, fetched once into the cache) in the first of its
    dll_providers.yaml `windows` folders that ``env``'s variables name, as an installer puts them; hard links where the
    file system allows (mkl's are 445 MB)."""
    values = dll_providers.values_for(cuda, None)
    log = cache_dir / "wine-host" / "providers.log"
    for provider in (p for p in dll_providers.load().providers if p.name in names):
        requirement = provider.requirement(values)
        folders = (providers.expand_windows_dir(template, values, env) for template in provider.windows)
        folder = next((f for f in folders if f is not None), None)  # the first whose variables ``env`` sets
        if requirement is None or folder is None:
            raise UserError(f"{dll_providers.DATA_FILE}: provider {provider.name} has no wheel or folder for {cuda}")
        target = drive_c(prefix, str(PureWindowsPath(folder)))
        target.mkdir(parents=True, exist_ok=True)
        for dll in providers.provider_dir(requirement, provider.python or "3.11", cache_dir, log).rglob("*"):
            if dll.suffix.lower() == ".dll" and provider.provides(dll.name) and not (target / dll.name).exists():
                try:
                    os.link(dll, target / dll.name)
                except OSError:
                    shutil.copyfile(dll, target / dll.name)


def build_machine_env(cuda: str | None) -> dict[str, str]:
    """The variables NVIDIA's CUDA installer and Intel's oneAPI set on a Windows build machine (``cuda``: X.Y)."""
    if cuda is None:
        return {}
    major, minor = cuda.split(".")
    home = rf"{CUDA_ROOT}\v{major}.{minor}"
    return {"CUDA_PATH": home, f"CUDA_PATH_V{major}_{minor}": home, "ONEAPI_ROOT": ONEAPI_ROOT}


@dataclass(frozen=True)
class Settings:
    """How the Windows host is set up: Windows's defaults, or (``utf8``) the UTF-8 host of earlier rounds."""

    utf8: bool = False

    @property
    def user(self) -> str | None:
        return None if self.utf8 else PROFILE_USER

    @property
    def env(self) -> dict[str, str]:
        files = {name: wine.windows_path(Path(value)) for name in HOST_FILES
                 if (value := os.environ.get(name, "")).startswith("/")}  # fmt: skip
        return {**ENV, **files, **(UTF8_HOST if self.utf8 else WINDOWS_SIDE)}

    @property
    def encoding(self) -> str:
        """What a program's piped output is written in there."""
        return "utf-8" if self.utf8 else ANSI_CODE_PAGE


WINDOWS_DEFAULTS = Settings()


def lay_out(prefix: Path, found: wine.Wine, cache_dir: Path, settings: Settings, *, vc_runtime: bool,
            cuda_path: str | None) -> None:  # fmt: skip
    """A fresh prefix at ``prefix`` laid out as a Windows build machine's."""
    env = {**settings.env, **build_machine_env(cuda_path)}
    wine.fresh_prefix(found, cache_dir, prefix, settings.user)
    lay_out_system32(prefix, vc_runtime_dlls(cache_dir) if vc_runtime else [])
    if cuda_path is not None:
        lay_out_providers(prefix, CUDA_PROVIDERS, cuda_path, env, cache_dir)
        lay_out_providers(prefix, ONEAPI_PROVIDERS, cuda_path, env, cache_dir)


def machine_prefix(machine: Path, found: wine.Wine, cache_dir: Path, settings: Settings, *, vc_runtime: bool = True,
                   cuda_path: str | None = None) -> Path:  # fmt: skip
    """The prefix of the Windows machine kept in ``machine``, laid out on its first use."""
    prefix = machine / "prefix"
    if not (machine / MACHINE_DONE).is_file():
        lay_out(prefix, found, cache_dir, settings, vc_runtime=vc_runtime, cuda_path=cuda_path)
        (machine / MACHINE_DONE).write_text(f"{found.label}\n", encoding="utf-8")
    return prefix
