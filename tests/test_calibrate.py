"""Tests of eqsat.backend_c.calibrate: the on-disk cache of the measured peaks, and one real run."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from eqsat.backend_c import calibrate
from eqsat.backend_c.calibrate import calibrated, calibrated_host, calibration_key, thread_counts
from eqsat.extract.machine import DTYPES, MEMORY_LEVELS, Calibration, Machine

MACHINE = Machine("avx512", cores=2, l1_bytes=48 << 10, l2_bytes=1 << 20, l3_bytes=32 << 20)


class FakeMeasure:
    """A `measure` that counts its calls and returns made-up figures for every thread count."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, machine: Machine) -> Calibration:
        self.calls += 1
        threads = thread_counts(machine)
        return Calibration(
            {dtype: {t: 1e11 * t for t in threads} for dtype in DTYPES},
            {
                level: {t: 1e10 * (5 - k) * t for t in threads}
                for k, level in enumerate(MEMORY_LEVELS)
            },
            seconds=0.5,
            clock_hz=3.5e9,
            parallel_start_seconds=3e-5,
            parallel_restart_seconds=1e-6,
        )


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_second_call_reads_the_cache() -> None:
    measure = FakeMeasure()
    first = calibrated(MACHINE, measure)
    second = calibrated(MACHINE, measure)
    assert measure.calls == 1
    assert second == first


def test_a_measurement_is_announced_with_its_file_and_a_cached_read_is_silent(
    cache: Path,
) -> None:
    said: list[str] = []
    calibrated(MACHINE, FakeMeasure(), announce=said.append)
    assert len(said) == 1
    assert "measuring this machine once" in said[0] and str(cache) in said[0]
    calibrated(MACHINE, FakeMeasure(), announce=said.append)
    assert len(said) == 1


def test_a_changed_key_measures_again(cache: Path) -> None:
    measure = FakeMeasure()
    calibrated(MACHINE, measure)
    other = replace(MACHINE, cores=4)
    assert calibration_key(other) != calibration_key(MACHINE)
    assert set(calibrated(other, measure).peak_flops["float32"]) == {1, 4}
    assert measure.calls == 2
    assert len(list(cache.glob("calibration-*.json"))) == 2


def truncated(data: dict) -> str:
    return json.dumps(data)[:40]


def not_an_object(data: dict) -> str:
    return "[1, 2]"


def empty_table(data: dict) -> str:
    return json.dumps({**data, "peak_flops": {}})


def negative_figure(data: dict) -> str:
    data["bandwidth"]["DRAM"]["1"] = -1.0
    return json.dumps(data)


def missing_clock(data: dict) -> str:
    del data["clock_hz"]
    return json.dumps(data)


def missing_thread_count(data: dict) -> str:
    del data["peak_flops"]["float64"]["2"]
    return json.dumps(data)


@pytest.mark.parametrize(
    "corrupt",
    [truncated, not_an_object, empty_table, negative_figure, missing_clock, missing_thread_count],
)
def test_a_corrupt_cache_file_is_measured_again(
    cache: Path, corrupt: Callable[[dict], str]
) -> None:
    measure = FakeMeasure()
    good = calibrated(MACHINE, measure)
    path = cache / f"calibration-{calibration_key(MACHINE)}.json"
    path.write_text(corrupt(json.loads(path.read_text())))
    assert calibrated(MACHINE, measure) == good
    assert measure.calls == 2
    assert calibrated(MACHINE, measure) == good  # the rewritten file is read back
    assert measure.calls == 2


def test_machine_takes_a_fake_calibration() -> None:
    fake, twin = FakeMeasure()(MACHINE), FakeMeasure()(MACHINE)
    assert twin is not fake and twin.peak_flops is not fake.peak_flops  # equal, not the same
    machine = replace(MACHINE, calibration=fake)
    assert machine.with_isa("avx2").calibration is fake
    equal = replace(MACHINE, calibration=twin)
    assert machine == equal and hash(machine) == hash(equal)


def test_host_calibration_is_positive_and_gives_the_clock() -> None:
    # Orderings (L1 faster than DRAM, ...) are timings: a shared machine can break them, so the
    # benchmark shows them instead of a test asserting them.
    machine = calibrated_host()
    calibration = machine.calibration
    assert calibration is not None
    for table in (calibration.peak_flops, calibration.bandwidth):
        assert all(value > 0 for row in table.values() for value in row.values())
    assert calibrated_host().calibration == calibration  # from the cache this time
    assert machine.clock_hz() == calibration.clock_hz
    assert 0.3e9 < machine.clock_hz() < 10e9  # a plausible clock, even on a loaded machine


def test_the_fma_probe_is_a_share_of_the_calibrated_peak() -> None:
    """`fma_share_now` times the calibration's own FMA chains: at most about 1 against the peak
    (a wrong count of lanes, chains or threads would give twice as much or more), and it scales
    inversely with the peak it is compared with. The peak is the calibration's or one measured
    a moment before, whichever is higher: the cached calibration may come from a busier spell of
    the shared host than this one (it read 1.57 of a calibration so measured)."""
    machine = calibrated_host()
    calibration = machine.calibration
    assert calibration is not None
    fresh = calibrate.fma_rates_now(machine)
    best = {t: max(p, fresh[t]) for t, p in calibration.peak_flops["float32"].items()}
    now = {**calibration.peak_flops, "float32": best}
    measured_now = replace(machine, calibration=replace(calibration, peak_flops=now))
    assert 0.05 < calibrate.fma_share_now(measured_now) < 1.5
    tenth = {dtype: {t: p / 10 for t, p in row.items()} for dtype, row in now.items()}
    slower = replace(machine, calibration=replace(calibration, peak_flops=tenth))
    assert calibrate.fma_share_now(slower) > 2.0  # ten times a share of at least 0.2


def test_a_busy_spell_falls_on_every_thread_count_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock: each rep takes 20 ms, twice that while the host is busy, which it is for the
    # first 7 calls (both counts' first calls and the next five). Timed one count after the
    # other, the 1-thread figure would come out of busy calls only, at half its rate.
    clock = {"now": 0.0, "calls": 0}

    def run(threads: int, reps: int) -> None:
        busy = clock["calls"] < 7
        clock["calls"] += 1
        clock["now"] += reps * calibrate.MIN_CALL_SECONDS * (2 if busy else 1)

    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: clock["now"])
    rates = calibrate._best_rates(run, lambda threads: float(threads), (1, 2))
    assert rates == pytest.approx({t: t / calibrate.MIN_CALL_SECONDS for t in (1, 2)})


def test_per_core_figures_that_do_not_scale_are_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first measurement's 2-thread figures come from a spell when the other core was busy
    # (as the 1-thread ones); the second's from a quiet one, but for DRAM, which was busier.
    spells = {"fma": iter([1.0, 2.0]), "triad": iter([1.0, 2.0])}
    dram = iter([1.5, 1.2])

    def fma_rates(library: object, machine: Machine, dtype: str) -> dict[int, float]:
        return {1: 100.0, 2: 100.0 * next(spells["fma"]) if dtype == "float32" else 200.0}

    def triad_rates(library: object, buffer: object, machine: Machine, level: str) -> dict:
        if level == "DRAM":
            return {1: 10.0, 2: 10.0 * next(dram)}
        rate = next(spells["triad"]) if level == "L1" else 2.0
        return {1: 50.0, 2: 50.0 * rate}

    monkeypatch.setattr(calibrate, "build_library", lambda *args: None)
    monkeypatch.setattr(calibrate, "_fma_rates", fma_rates)
    monkeypatch.setattr(calibrate, "_triad_rates", triad_rates)
    monkeypatch.setattr(calibrate, "_region_start_seconds", lambda *args: 1e-5)
    measured = calibrate.measure(MACHINE)
    assert measured.peak_flops["float32"] == {1: 100.0, 2: 200.0}
    assert measured.bandwidth["L1"] == {1: 50.0, 2: 100.0}
    assert measured.bandwidth["DRAM"] == {1: 10.0, 2: 15.0}  # each figure's best of the two
    assert next(dram, None) is None  # measured twice, and no more once the figures scaled


def test_per_core_figures_of_cores_that_share_them_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SMT siblings: the second thread adds nothing, however often it is measured
    measurements = []

    def fma_rates(library: object, machine: Machine, dtype: str) -> dict[int, float]:
        measurements.append(dtype)
        return {1: 100.0, 2: 110.0}

    monkeypatch.setattr(calibrate, "build_library", lambda *args: None)
    monkeypatch.setattr(calibrate, "_fma_rates", fma_rates)
    monkeypatch.setattr(calibrate, "_triad_rates", lambda *args: {1: 50.0, 2: 55.0})
    monkeypatch.setattr(calibrate, "_region_start_seconds", lambda *args: 1e-5)
    measured = calibrate.measure(MACHINE)
    assert measured.peak_flops["float32"] == {1: 100.0, 2: 110.0}
    assert len(measurements) == len(DTYPES) * (1 + calibrate.REMEASUREMENTS)
