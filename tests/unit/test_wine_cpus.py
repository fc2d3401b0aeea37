"""Which CPU a Wine session runs on (platforms/windows/wine_cpus.py): one each on a host with few CPUs, the least
used first; none pinned on a host with more, or without taskset."""

from __future__ import annotations

from torchbuild.platforms.windows import wine_cpus


def test_sessions_at_once_get_the_least_used_cpus_of_a_two_cpu_host() -> None:
    cpus = wine_cpus.Cpus([0, 1], pin=True)
    wheel, conda = cpus.take(), cpus.take()
    assert (wheel, conda) == (0, 1)  # the two smoke environments: a CPU each
    loader = cpus.take()
    assert loader == 0  # a third shares the lowest of the least used
    cpus.give(wheel)
    assert cpus.take() == 0  # CPU 0 has one session again, CPU 1 one: the lowest
    cpus.give(conda)
    assert cpus.take() == 1


def test_a_host_with_more_cpus_or_without_taskset_pins_nothing() -> None:
    assert wine_cpus.Cpus(list(range(wine_cpus.PIN_BELOW_CPUS)), pin=True).take() is None
    assert wine_cpus.Cpus([0, 1], pin=False).take() is None
    assert wine_cpus.Cpus([], pin=True).take() is None


def test_a_pinned_command_runs_under_taskset_and_an_unpinned_one_as_it_is() -> None:
    assert wine_cpus.pinned(["wine", "python.exe"], 1) == ["taskset", "-c", "1", "wine", "python.exe"]
    assert wine_cpus.pinned(["wine", "python.exe"], None) == ["wine", "python.exe"]
    wine_cpus.Cpus([0, 1], pin=True).give(None)  # a session that was never pinned gives nothing back
