"""The eager baseline cache (``verifier.baseline``): keyed by everything the time depends on."""

from __future__ import annotations

from metakernelbench.verifier import baseline


def test_store_and_load_round_trip(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("x = 1\n")
    key = baseline.baseline_key(problem, {"n": 4}, "NVIDIA H200", 10, 100)
    entry = baseline.make_entry(key, [1.0, 2.0, 3.0], 2.0, "NVIDIA H200")
    baseline.store(tmp_path / "cache", entry)
    assert baseline.load(tmp_path / "cache", key) == entry
    assert baseline.load(None, key) is None


def test_key_changes_with_problem_workload_device_and_counts(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("x = 1\n")
    base = baseline.baseline_key(problem, {"n": 4}, "H200", 10, 100)
    assert base != baseline.baseline_key(problem, {"n": 5}, "H200", 10, 100)
    assert base != baseline.baseline_key(problem, {"n": 4}, "H100", 10, 100)
    assert base != baseline.baseline_key(problem, {"n": 4}, "H200", 10, 50)
    problem.write_text("x = 2\n")
    assert base != baseline.baseline_key(problem, {"n": 4}, "H200", 10, 100)


def test_a_damaged_entry_is_ignored(tmp_path):
    (tmp_path / "k.json").write_text("{not json")
    assert baseline.load(tmp_path, "k") is None


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MKB_EAGER_CACHE", str(tmp_path / "c"))
    assert baseline.default_cache_dir() == tmp_path / "c"


def _cached(median_ms: float) -> baseline.EagerBaseline:
    return baseline.make_entry("k", [median_ms] * 5, median_ms, "gpu")


def test_the_drift_check_keeps_its_full_count_for_fast_or_uncached_references():
    from metakernelbench.verifier.launch import GradeConfig
    from metakernelbench.verifier.timing import check_calls

    cfg = GradeConfig()
    assert check_calls(cfg, None) == cfg.eager_check_timed
    assert check_calls(cfg, _cached(5.0)) == cfg.eager_check_timed


def test_a_slow_cached_reference_is_checked_with_fewer_calls_but_never_below_the_minimum():
    from metakernelbench.verifier.launch import GradeConfig
    from metakernelbench.verifier.timing import check_calls

    cfg = GradeConfig()
    assert check_calls(cfg, _cached(1000.0)) == 10  # 10 s of calls at 1 s each
    assert check_calls(cfg, _cached(60_000.0)) == cfg.eager_check_min
    assert check_calls(GradeConfig(eager_check_timed=3), _cached(60_000.0)) == 3


def test_key_changes_with_the_problems_captured_values(tmp_path):
    problem = tmp_path / "01_p.py"
    problem.write_text("x = 1\n")
    base = baseline.baseline_key(problem, {"n": 4}, "H200", 10, 100)
    (tmp_path / "01_p.captured.json").write_text('{"values": {"v": [1]}}')
    assert base != baseline.baseline_key(problem, {"n": 4}, "H200", 10, 100)
