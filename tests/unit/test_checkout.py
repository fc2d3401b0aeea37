"""The checkout behind --source-dir / --git-ref, on real git repositories made here (no network: the "remote" is a
local repository reached by a file:// URL)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from torchbuild.errors import UserError
from torchbuild.host import checkout


def git(cwd: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always", *args]
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    return path


def commit_all(path: Path, message: str) -> str:
    git(path, "add", "-A")
    git(path, "commit", "-qm", message)
    return git(path, "rev-parse", "HEAD")


@pytest.fixture
def file_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    """Submodules from local repositories need protocol.file.allow=always (git refuses them by default)."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")


def fp(path: Path) -> str:
    return checkout.fingerprint(path)[1]


# --- fingerprint -----------------------------------------------------------------------------------------------


def test_each_edit_of_an_already_modified_file_changes_the_fingerprint(tmp_path: Path) -> None:
    src = repo(tmp_path / "src", {"a.c": "int a = 1;\n", ".gitignore": "*.o\n"})
    commit, clean = checkout.fingerprint(src)
    assert commit == git(src, "rev-parse", "HEAD") and fp(src) == clean  # unchanged tree: same fingerprint
    (src / "a.c").write_text("int a = 2;\n")
    first = fp(src)
    (src / "a.c").write_text("int a = 3;\n")  # same name, same size: only the content differs
    second = fp(src)
    assert len({clean, first, second}) == 3
    assert fp(src) == second
    (src / "a.o").write_text("ignored build output")
    assert fp(src) == second
    (src / "a.c").write_text("int a = 1;\n")
    assert fp(src) == clean  # back to the commit's content


def test_untracked_files_count_by_name_and_content(tmp_path: Path) -> None:
    src = repo(tmp_path / "src", {"a.c": "x\n"})
    clean = fp(src)
    (src / "new.c").write_text("one\n")
    first = fp(src)
    (src / "new.c").write_text("two\n")
    second = fp(src)
    (src / "new.c").rename(src / "other.c")
    renamed = fp(src)
    assert len({clean, first, second, renamed}) == 4
    (src / "other.c").unlink()
    (src / "build").mkdir()
    (src / "build" / "obj.o").write_text("generated")  # the build's own output does not change the source
    assert fp(src) == clean


def test_a_new_commit_changes_commit_and_fingerprint(tmp_path: Path) -> None:
    src = repo(tmp_path / "src", {"a.c": "x\n"})
    before = checkout.fingerprint(src)
    (src / "a.c").write_text("y\n")
    after_commit = commit_all(src, "edit")
    after = checkout.fingerprint(src)
    assert after[0] == after_commit != before[0] and after[1] != before[1]


def test_edits_inside_nested_submodules_change_the_fingerprint(tmp_path: Path, file_protocol: None) -> None:
    leaf = repo(tmp_path / "leaf", {"leaf.h": "#define LEAF 1\n"})
    mid = repo(tmp_path / "mid", {"mid.h": "#define MID 1\n"})
    git(mid, "submodule", "add", "-q", leaf.as_uri(), "third_party/leaf")
    commit_all(mid, "add leaf")
    top = repo(tmp_path / "top", {"top.c": "int main(void) { return 0; }\n"})
    git(top, "submodule", "add", "-q", mid.as_uri(), "third_party/mid")
    commit_all(top, "add mid")
    git(top, "submodule", "update", "--init", "--recursive", "-q")
    header = top / "third_party" / "mid" / "third_party" / "leaf" / "leaf.h"
    assert header.read_text() == "#define LEAF 1\n"

    clean = fp(top)
    assert fp(top) == clean
    header.write_text("#define LEAF 2\n")
    first = fp(top)
    header.write_text("#define LEAF 3\n")
    second = fp(top)
    (header.parent / "extra.h").write_text("untracked in a submodule\n")
    untracked = fp(top)
    assert len({clean, first, second, untracked}) == 4
    (header.parent / "extra.h").unlink()
    header.write_text("#define LEAF 1\n")
    assert fp(top) == clean
    # A submodule moved to another commit (checked out, not yet recorded in the superproject).
    (top / "third_party" / "mid" / "mid.h").write_text("#define MID 2\n")
    commit_all(top / "third_party" / "mid", "move mid")
    assert fp(top) != clean


def test_a_failing_git_command_is_a_user_error_naming_it(tmp_path: Path) -> None:
    src = repo(tmp_path / "src", {"a.c": "x\n"})
    index = src / ".git" / "index"
    index.write_bytes(b"not an index")  # a corrupt repository: HEAD still resolves, the diff cannot be made
    with pytest.raises(UserError) as err:
        checkout.fingerprint(src)
    message = str(err.value)
    assert f"`git -C {src} diff" in message and "failed (exit 128)" in message and "index" in message


# --- clone -------------------------------------------------------------------------------------------------------


@pytest.fixture
def upstream(tmp_path: Path, file_protocol: None) -> Path:
    """A "remote" PyTorch stand-in: a tag, a branch `dev`, and a submodule."""
    sub = repo(tmp_path / "remote-sub", {"sub.h": "#define SUB 1\n"})
    main = repo(tmp_path / "remote" / "pytorch", {"version.txt": "9.9.9a0\n"})
    git(main, "submodule", "add", "-q", sub.as_uri(), "third_party/sub")
    commit_all(main, "add sub")
    git(main, "tag", "-a", "v9.9.9", "-m", "release")
    git(main, "branch", "dev")
    return main


def log_commands(log: Path) -> list[str]:
    return [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("$ git")]


def test_clone_of_a_tag_with_submodules(tmp_path: Path, upstream: Path) -> None:
    log = tmp_path / "source.log"
    cloned = checkout.clone(upstream.as_uri(), "v9.9.9", tmp_path / "cache", log)
    assert cloned.path == tmp_path / "cache" / "src" / "pytorch-v9.9.9"
    assert cloned.commit == git(upstream, "rev-parse", "v9.9.9^{commit}")
    assert (cloned.path / "version.txt").read_text() == "9.9.9a0\n"
    assert (cloned.path / "third_party" / "sub" / "sub.h").read_text() == "#define SUB 1\n"
    assert git(cloned.path, "status", "--porcelain") == ""  # the clone's bookkeeping is not a local change
    assert any(" fetch --depth 1 --no-recurse-submodules origin v9.9.9" in c for c in log_commands(log))


def test_a_branch_is_fetched_again_on_each_run(tmp_path: Path, upstream: Path) -> None:
    log, cache = tmp_path / "source.log", tmp_path / "cache"
    first = checkout.clone(upstream.as_uri(), "dev", cache, log)
    assert first.commit == git(upstream, "rev-parse", "dev")
    git(upstream, "checkout", "-q", "dev")
    (upstream / "version.txt").write_text("9.9.10a0\n")
    moved = commit_all(upstream, "bump")
    second = checkout.clone(upstream.as_uri(), "dev", cache, log)
    assert second.path == first.path and second.commit == moved != first.commit
    assert (second.path / "version.txt").read_text() == "9.9.10a0\n"
    assert (second.path / "third_party" / "sub" / "sub.h").is_file()
    assert checkout.fingerprint(second.path)[0] == moved


def test_a_full_sha_is_cloned_once_and_then_reused(tmp_path: Path, upstream: Path) -> None:
    log, cache = tmp_path / "source.log", tmp_path / "cache"
    sha = git(upstream, "rev-parse", "HEAD")
    (upstream / "version.txt").write_text("later\n")
    commit_all(upstream, "later commit")  # the SHA is no longer a branch tip
    cloned = checkout.clone(upstream.as_uri(), sha.upper(), cache, log)
    assert cloned.commit == sha and cloned.path.name == f"pytorch-{sha}"
    assert (cloned.path / "version.txt").read_text() == "9.9.9a0\n"
    commands = len(log_commands(log))
    again = checkout.clone(upstream.as_uri(), sha, cache, log)
    assert again == cloned and len(log_commands(log)) == commands  # reused: no git command ran


def test_an_interrupted_clone_is_removed_and_redone(tmp_path: Path, upstream: Path) -> None:
    dest = tmp_path / "cache" / "src" / "pytorch-v9.9.9"
    pack = dest / ".git" / "objects" / "pack"
    pack.mkdir(parents=True)
    (pack / "pack-half.pack").write_bytes(b"partial")
    os.chmod(pack / "pack-half.pack", stat.S_IREAD)  # git's packs are read-only (what stops rmtree on Windows)
    cloned = checkout.clone(upstream.as_uri(), "v9.9.9", tmp_path / "cache", tmp_path / "source.log")
    assert cloned.path == dest and not (pack / "pack-half.pack").exists()
    assert (dest / "version.txt").read_text() == "9.9.9a0\n"


def test_an_unknown_ref_names_the_command_url_and_ref(tmp_path: Path, upstream: Path) -> None:
    log = tmp_path / "source.log"
    with pytest.raises(UserError) as err:
        checkout.clone(upstream.as_uri(), "v0.0.0-no-such-tag", tmp_path / "cache", log)
    message = str(err.value)
    assert "`git fetch --depth 1 --no-recurse-submodules origin v0.0.0-no-such-tag`" in message
    assert f"--git-url {upstream.as_uri()} --git-ref v0.0.0-no-such-tag" in message
    assert "a full 40-character commit SHA" in message and message.endswith(f"Full log: {log}")
    assert "couldn't find remote ref v0.0.0-no-such-tag" in log.read_text()


@pytest.mark.parametrize(("url", "ref", "named"), [("file:///x", "--upload-pack=touch", "--git-ref"),
                                                   ("-oProxyCommand=x", "v1", "--git-url")])
def test_a_ref_or_url_that_git_would_take_as_an_option_is_refused(tmp_path: Path, url: str, ref: str,
                                                                  named: str) -> None:
    with pytest.raises(UserError, match=f"^{named} '"):
        checkout.clone(url, ref, tmp_path / "cache", tmp_path / "log")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "log").exists()


def test_a_submodule_that_cannot_be_fetched_is_a_user_error(tmp_path: Path, upstream: Path) -> None:
    (tmp_path / "remote-sub").rename(tmp_path / "gone")
    with pytest.raises(UserError) as err:
        checkout.clone(upstream.as_uri(), "v9.9.9", tmp_path / "cache", tmp_path / "source.log")
    message = str(err.value)
    assert message.startswith("`git submodule update --init --recursive")
    assert f"--git-url {upstream.as_uri()} --git-ref v9.9.9" in message and "URLs in its .gitmodules" in message


def test_a_file_in_the_way_of_the_clone_is_replaced(tmp_path: Path, upstream: Path) -> None:
    dest = tmp_path / "cache" / "src" / "pytorch-dev"
    dest.parent.mkdir(parents=True)
    dest.write_text("not a clone")
    assert checkout.clone(upstream.as_uri(), "dev", tmp_path / "cache", tmp_path / "log").path == dest
    assert (dest / "version.txt").is_file()


# --- remove_tree -------------------------------------------------------------------------------------------------


def test_remove_tree_removes_read_only_files_and_folders(tmp_path: Path) -> None:
    top = tmp_path / "clone"
    inner = top / ".git" / "objects"
    inner.mkdir(parents=True)
    (inner / "pack.idx").write_bytes(b"idx")
    os.chmod(inner / "pack.idx", stat.S_IREAD)
    os.chmod(inner, stat.S_IREAD | stat.S_IEXEC)  # a read-only folder: what refuses unlink on POSIX
    checkout.remove_tree(top)
    assert not top.exists() and tmp_path.is_dir()


def test_remove_tree_failure_is_a_user_error_naming_the_folder(tmp_path: Path) -> None:
    missing_parent = tmp_path / "no-such" / "clone"
    with pytest.raises(UserError) as err:
        checkout.remove_tree(missing_parent)
    assert str(err.value).startswith(f"cannot delete the incomplete clone {missing_parent}: ")
    assert "delete the folder yourself, and run again" in str(err.value)
