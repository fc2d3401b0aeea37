"""matrix.yaml's schema as data: each key's kind, the choices of the keys that have them, an example of each key's
valid value (shown with a wrong one) and the ranges of the numbers. Read by config/matrix.py only. The ``build`` keys,
their kinds and choices are BuildOptions's fields (config/options.py), not written here again."""

from dataclasses import fields

from torchbuild.config.option_fields import default, literal_choices, type_of
from torchbuild.config.options import BuildOptions

# key -> kind
TOP_LEVEL = {
    "torch": "torch",  # latest, a release, or a branch to compile: {git_ref, git_url, build_version}
    "platforms": "list",
    "cuda": "list",
    "python": "list",
    "exclude": "rules",
    "include": "rules",
    "channel": "str",
    "build_number": "int",
    "build": "build",
    "packages": "packages",
    "declared_libraries": "choice",
    "keep_nightlies": "int",  # at least 1 (config/matrix.py MIN_INT)
    "test_command": "test",  # the users' own tests (config/user_tests.py), run in both smoke environments
    "test_requires": "test",
}
RULE_KEYS = ("platform", "cuda", "python", "torch")
TEST_KEYS = ("test_command", "test_requires")
INCLUDE_KEYS = (*RULE_KEYS, "declared_libraries", *TEST_KEYS)
INCLUDE_REQUIRED = ("platform", "cuda", "python")
TORCH_SOURCE_KEYS = ("git_ref", "git_url", "build_version")  # torch: {git_ref: main, build_version: nightly}
# build key -> kind ("float" or "str": a choice, "auto" or a number are all read as text)
BUILD_KEYS = {f.name: "float" if type_of(BuildOptions, f.name) is float else "str" for f in fields(BuildOptions)}
# build key -> its choices, for the keys whose type is a Literal
CHOICES = {
    name: found for name in BUILD_KEYS if (found := literal_choices(type_of(BuildOptions, name)))
}
# What a valid value of each key looks like, shown with a wrong type.
EXAMPLES = {
    "the matrix": "torch: latest",
    "torch": 'torch: "2.5.1" (or latest, or a branch: torch: {git_ref: main, build_version: nightly})',
    "git_ref": "git_ref: main",
    "git_url": "git_url: https://github.com/pytorch/pytorch",
    "build_version": "build_version: nightly",
    "platforms": "platforms: [win-64, linux-64]",
    "cuda": 'cuda: [cpu, "12.6"]',
    "python": 'python: ["3.11", "3.12"]',
    "exclude": 'exclude: [{platform: linux-64, cuda: "12.6"}]',
    "include": 'include: [{platform: win-64, cuda: "9.0", python: "3.6"}]',
    "channel": "channel: s3://bucket/prefix",
    "build_number": "build_number: 0",
    "build": "build: {max_jobs: auto, timeout_hours: 6}",
    "platform": "platform: linux-64",
    "max_jobs": "max_jobs: 4",
    "msvc_toolset": 'msvc_toolset: "14.29"',
    "timeout_hours": "timeout_hours: 6",
    "packages": "packages: [torch, torchvision, torchaudio]",
    "declared_libraries": "declared_libraries: keep",
    "keep_nightlies": "keep_nightlies: 7",
    "test_command": 'test_command: "pytest {project}/tests"',
    "test_requires": "test_requires: [pytest]",
}
EXAMPLES.update({name: f"{name}: {default(BuildOptions, name)}" for name in CHOICES})  # a choice: its default
MIN_INT = {"keep_nightlies": 1}  # the integers whose least value is not 0


# Ranges: build_number stays within a signed 32-bit integer (what every tool reading a package's index can hold);
# timeout_hours within a month (longer than any CI lets a job run; the build's timer cannot hold much more);
# max_jobs within what any build host has.
MAX_INT = 2**31 - 1
FLOAT_RANGES = {"timeout_hours": (0.0, 24.0 * 31)}
MAX_JOBS = 4096
