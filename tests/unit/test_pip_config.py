"""pip's configuration read from its files and PIP_* variables (host/pip_config.py), checked against pip itself:
what pip_config says is in force is what a real `pip download` uses, and what uv is handed (host/uv.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel
from torchbuild.host import pip_config, uv


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with no pip configuration of its own, and no PIP_* variables."""
    for name in [n for n in os.environ if n.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))  # Windows' ~
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "etc-xdg"))
    return tmp_path


def _user_conf(home: Path, text: str) -> Path:
    """A user configuration file: on Windows pip's legacy ~\\pip\\pip.ini (its newer one is in the real
    %APPDATA%, from the shell's known folder, which no variable moves)."""
    conf = home / "pip" / "pip.ini" if sys.platform == "win32" else home / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(text, encoding="utf-8")
    return conf


@pytest.mark.skipif(sys.platform != "linux", reason="skipped: the file locations checked are Linux's")
def test_the_files_pip_looks_for(home: Path) -> None:
    files = pip_config.config_files()
    assert files[:2] == [str(home / "etc-xdg" / "pip" / "pip.conf"), "/etc/pip.conf"]
    assert files[2:4] == [str(home / ".pip" / "pip.conf"), str(home / ".config" / "pip" / "pip.conf")]
    assert files[4:] == [os.path.join(sys.prefix, "pip.conf")]


LATER_FILE = "skipped: the files compared are Linux's (on Windows the later user file is in the real %APPDATA%)"


@pytest.mark.skipif(sys.platform == "win32", reason=LATER_FILE)
def test_later_files_and_variables_win_and_empty_variables_do_not(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    legacy = home / ".pip" / "pip.conf"
    legacy.parent.mkdir()
    legacy.write_text("[global]\nfind-links = /legacy\ntimeout = 60\n", encoding="utf-8")
    _user_conf(home, "[global]\nfind-links =\n    /one\n    /two\n[download]\nno_index = yes\n")
    found = pip_config.settings()
    assert found["find-links"] == ["/one", "/two"] and found["timeout"] == ["60"]
    assert pip_config.is_true(found, "no-index")
    monkeypatch.setenv("PIP_FIND_LINKS", "")  # pip ignores an empty variable
    assert pip_config.settings()["find-links"] == ["/one", "/two"]
    monkeypatch.setenv("PIP_FIND_LINKS", "/three")
    assert pip_config.settings()["find-links"] == ["/three"]


def test_pip_config_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_conf(home, "[global]\nindex-url = https://user.example/simple\n")
    named = home / "named.conf"
    named.write_text("[global]\nextra-index-url = https://named.example/simple\n", encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(named))
    found = pip_config.settings()  # /etc/pip.conf of this machine may add its own settings
    assert found["extra-index-url"] == ["https://named.example/simple"] and "index-url" not in found  # no user files
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert pip_config.config_files() == [] and pip_config.settings() == {}


def test_constraints_named_by_the_configuration(home: Path) -> None:
    constraints = home / "constraints.txt"
    constraints.write_text("# cap\ntorch<=2.14.1  # on this disk\nnumpy<2\n", encoding="utf-8")
    _user_conf(home, f"[global]\nconstraint = {constraints}\n")
    assert [str(r) for r in pip_config.constraints_for("torch")] == ["torch<=2.14.1"]


def test_pip_and_uv_use_what_pip_config_reads(home: Path, tmp_path: Path) -> None:
    """A user pip.conf naming a local folder and no index: real pip downloads from it, and uv's resolver (handed
    the settings pip_config read) chooses the same file."""
    wheels = tmp_path / "wheels"
    wheel = make_wheel(wheels, "tinypkg-1.0-py3-none-any.whl", {"tinypkg/__init__.py": b""})
    _user_conf(home, f"[global]\nfind-links = {wheels}\n    {tmp_path / 'not-there'}\nno-index = true\n")
    assert pip_config.settings()["find-links"] == [str(wheels), str(tmp_path / "not-there")]
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(out), "tinypkg"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == [wheel.name]
    target = uv.Target(python="3.11", platform=uv.python_platform("manylinux_2_28_x86_64"))
    (locked,) = uv.lock(["tinypkg"], target, log=tmp_path / "uv.log")
    assert locked.local_path == wheel and locked.version == "1.0"
