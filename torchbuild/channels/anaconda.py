"""anaconda.org (``anaconda://owner[/label]``): conda packages go up with anaconda-client's ``anaconda upload``.

The token comes from ANACONDA_API_TOKEN and reaches the client as a file (``--token`` takes a token or a path to a
file holding one), so it is on no command line, in no ``ps`` listing and in no log. Wheels are not sent:
anaconda.org's PyPI side is a different service. anaconda.org indexes what it receives itself.

Re-publishing: anaconda-client cannot compare sha256s before uploading, so an existing file of the same name is
skipped (``--skip-existing``), or replaced with ``--replace`` (``--force``).

Nightlies (a .devN version, channels/nightly.py) go up under the label ``nightly`` whatever label the channel names,
so that the releases' label never lists one: ``conda install -c <owner>/label/nightly pytorch``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from torchbuild.channels import Action, Upload, nightly
from torchbuild.channels.secrets import redact
from torchbuild.config import environment
from torchbuild.config.channel_spec import parse_anaconda
from torchbuild.errors import UserError
from torchbuild.host import signals
from torchbuild.host.console import console
from torchbuild.results import Artifact

TOKEN_VARIABLE = "ANACONDA_API_TOKEN"



def upload_command(executable: str, token_file: Path, owner: str, label: str, files: Sequence[Path],
                   replace: bool) -> list[str]:  # fmt: skip
    return [
        executable, "--token", str(token_file), "upload", "--user", owner, "--label", label,
        "--force" if replace else "--skip-existing", *(str(f) for f in files),
    ]  # fmt: skip


class AnacondaChannel:
    def __init__(self, url: str) -> None:
        self.owner, self.label = parse_anaconda(url)
        base = f"https://conda.anaconda.org/{self.owner}"
        self.url = base if self.label == "main" else f"{base}/label/{self.label}"
        self.nightly_url = f"{base}/{nightly.CONDA_ROOT}"  # nightlies go to their own label, whatever this one is
        self.serves_wheels = False
        self.replace = False

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """anaconda.org takes each upload whole, and refuses an existing name unless --replace (--force)."""
        yield

    def _executable(self) -> str:
        found = shutil.which(environment.anaconda_command())
        if found is None:
            raise UserError("the 'anaconda' command (anaconda-client) is not on PATH: pip install anaconda-client")
        return found

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        if not os.environ.get(TOKEN_VARIABLE):
            raise UserError(f"publishing to anaconda.org needs a token in {TOKEN_VARIABLE} (anaconda.org > Settings)")
        self._executable()
        if wheels:
            names = ", ".join(w.path.name for w in wheels)
            console.print(f"  anaconda.org gets conda packages only; not sent: {names}")
        self.replace = replace
        action: Action = "replaced" if replace else "new"
        return [
            Upload(artifact=a, kind="conda", subdir=subdir, action=action,
                   destination=f"{self._label_url(self._label_of(a.path))}/{subdir}/{a.path.name}")
            for a, subdir in conda
        ]  # fmt: skip

    def _label_of(self, package: Path) -> str:
        return nightly.LABEL if nightly.is_nightly(package.name) else self.label

    def _label_url(self, label: str) -> str:
        base = f"https://conda.anaconda.org/{self.owner}"
        return base if label == "main" else f"{base}/label/{label}"

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        if not uploads:
            return []
        labels = sorted({self._label_of(u.artifact.path) for u in uploads})
        for label in labels:  # one upload per label: the releases', then (or only) the nightlies'
            self._upload(label, [u.artifact.path for u in uploads if self._label_of(u.artifact.path) == label])
        return [Artifact(path=Path(u.destination), sha256=u.artifact.sha256, size=u.artifact.size) for u in uploads]

    def _upload(self, label: str, files: Sequence[Path]) -> None:
        token = os.environ.get(TOKEN_VARIABLE, "")
        with tempfile.TemporaryDirectory(prefix="torchbuild-anaconda-") as tmp:
            token_file = Path(tmp) / "token"
            token_file.touch(mode=0o600)
            token_file.write_text(token, encoding="utf-8")
            command = upload_command(self._executable(), token_file, self.owner, label, files, self.replace)
            env = {k: v for k, v in os.environ.items() if k != TOKEN_VARIABLE}
            console.print(f"  $ {redact(' '.join(command))}")
            proc = signals.run(command, env=env, capture_output=True, text=True, errors="replace", check=False)
        output = redact((proc.stdout + proc.stderr).replace(token, "***") if token else proc.stdout + proc.stderr)
        if proc.returncode != 0:
            last = "\n".join(output.splitlines()[-20:])
            raise UserError(f"anaconda upload to {self.owner}/{label} failed (exit {proc.returncode}):\n{last}")
        for line in output.splitlines()[-10:]:
            console.print(f"  {line}")

    def index(self, keep_nightlies: int | None = None) -> str:
        return "anaconda.org indexes what it receives; nothing to do"
