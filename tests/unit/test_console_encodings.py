"""What torchbuild prints survives the streams Windows and minimal containers give it: a piped stdout in the ANSI
code page (cp1252), a console's OEM code page (cp437, cp936), ASCII (a C locale). Each character a stream cannot
encode is written as its ASCII stand-in (console.STAND_INS), else escaped; never an error."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchbuild.host import console

ROOT = Path(__file__).resolve().parents[2]
ENCODINGS = ("cp1252", "cp437", "cp936", "ascii")
# Modules whose non-ASCII text goes only into files (UTF-8, whatever the host): the HTML page and the Markdown
# report ($GITHUB_STEP_SUMMARY is a file too)
FILES_ONLY = {"torchbuild/run/report_html.py", "torchbuild/run/report.py"}


def _stream(encoding: str) -> tuple[io.BytesIO, io.TextIOWrapper]:
    raw = io.BytesIO()
    return raw, io.TextIOWrapper(raw, encoding=encoding, errors="strict", write_through=True)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_mark_the_stream_cannot_encode_is_written_as_its_stand_in(encoding: str) -> None:
    raw, stream = _stream(encoding)
    console.adapt_streams(stream)
    stream.write("✓ source passed; ✗ repair failed; ↺ conda cached; ▶ verify ...; sha256 1f2e…\n")
    written = raw.getvalue().decode(encoding)
    for glyph in "✓✗↺▶":
        assert glyph not in written and f"\\u{ord(glyph):04x}" not in written
    assert written.startswith("+ source passed; x repair failed; = conda cached; > verify ...; sha256 1f2e")


def test_what_the_encoding_can_say_is_kept_and_the_rest_escaped_not_lost() -> None:
    raw, stream = _stream("cp1252")
    console.adapt_streams(stream)
    stream.write("C:\\Users\\Zoë Ng … 张\n")
    assert raw.getvalue().decode("cp1252") == "C:\\Users\\Zoë Ng … \\u5f20\n"
    raw, stream = _stream("ascii")
    console.adapt_streams(stream)
    stream.write("C:\\Users\\Zoë Ng …\n")
    assert raw.getvalue().decode("ascii") == "C:\\Users\\Zo\\xeb Ng ...\n"


def test_a_utf8_stream_writes_every_glyph_as_it_is() -> None:
    raw, stream = _stream("utf-8")
    console.adapt_streams(stream)
    stream.write("✓ ↺ ▶ Zoë\n")
    assert raw.getvalue().decode("utf-8") == "✓ ↺ ▶ Zoë\n"


def test_a_stream_without_reconfigure_is_left_as_it_is() -> None:
    console.adapt_streams(io.StringIO())  # a test's capture: nothing to do, no error


def _printed_literals(path: Path) -> set[str]:
    """The non-ASCII characters of ``path``'s string constants, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found |= {c for c in node.value if ord(c) > 127}
    return found


def test_every_non_ascii_character_torchbuild_prints_has_a_stand_in() -> None:
    """A new glyph in a message gets its stand-in in console.STAND_INS, chosen once, or it would print escaped."""
    missing = {}
    for path in sorted((ROOT / "torchbuild").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in FILES_ONLY or "/resources/" in relative:  # the smoke's scripts print JSON (ASCII)
            continue
        lacking = {c for c in _printed_literals(path) if c not in console.STAND_INS}
        if lacking:
            missing[relative] = "".join(sorted(lacking))
    assert missing == {}


def _text_subprocess_calls_without_errors(path: Path) -> list[int]:
    calls = {"run", "Popen", "check_output", "call", "check_call"}
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func  # subprocess.run(...), and signals.run(...), torchbuild's one way to run a tool in a stage
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        name = func.attr if isinstance(func, ast.Attribute) and owner in ("subprocess", "signals") else ""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        text = any(
            key in keywords and not (isinstance(keywords[key], ast.Constant) and keywords[key].value in (False, None))
            for key in ("text", "universal_newlines", "encoding")
        )
        if name in calls and text and "errors" not in keywords:
            lines.append(node.lineno)
    return lines


def test_every_child_output_read_as_text_says_what_to_do_with_bytes_it_cannot_decode() -> None:
    """A tool's output decoded in the locale's encoding (ASCII in a C locale) with strict errors stops the run at the
    first byte it cannot decode (a path with 'ë' in git's message): every text-mode subprocess call gives errors=."""
    found = {}
    for folder in ("torchbuild", "scripts", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = _text_subprocess_calls_without_errors(path)
            if lines:
                found[path.relative_to(ROOT).as_posix()] = lines
    assert found == {}


def test_the_scan_finds_a_text_mode_call_without_errors(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import subprocess\nsubprocess.run(['git'], text=True)\nsubprocess.run(['git'], text=True, errors='replace')\n"
        "subprocess.run(['git'], capture_output=True)\nsession.run(['x'], encoding='cp1252')\n",
        encoding="utf-8",
    )
    assert _text_subprocess_calls_without_errors(sample) == [2]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_help_and_a_bad_input_error_print_in_any_encoding(encoding: str) -> None:
    env = {"PYTHONIOENCODING": encoding, "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    for args, code in ((["--help"], 0), (["plan", "--cuda", "8.7", "--py", "3.11"], 2)):
        proc = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *args], capture_output=True, env=env,
                              check=False)  # fmt: skip
        out, err = proc.stdout.decode(encoding), proc.stderr.decode(encoding)
        assert proc.returncode == code, out + err
        assert "Traceback" not in err and not re.search(r"\\u[0-9a-f]{4}", out + err)
    assert "Valid: cpu, 8.0, 9.0" in err
