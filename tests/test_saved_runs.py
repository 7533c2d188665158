"""Every saved run is read through one loader (``results.records``): a bad or missing file is a
one-line error that names the file and the field and says how to regenerate it."""

import json
from dataclasses import replace

import pytest

from course_utils.results.meta import RunMeta, this_machine
from course_utils.results.records import from_json, load, load_saved, save, saved_path, to_json
from course_utils.results.strategies import StrategyResults, saved_strategy_results

REGENERATE = "regenerate with course bench --strategies"


@pytest.fixture
def saved_copy(tmp_path, monkeypatch):
    """``course_utils/saved/strategies.json``'s contents, and a function that puts other
    contents in its place (the package's saved folder pointed at ``tmp_path``)."""
    import course_utils.results.records as records

    raw = json.loads(saved_path("strategies.json").read_text())
    folder = tmp_path / "course_utils" / "saved"
    folder.mkdir(parents=True)
    monkeypatch.setattr(records, "files", lambda package: tmp_path / package)

    def put(data):
        (folder / "strategies.json").write_text(json.dumps(data))

    return raw, put


def test_a_missing_field_is_named_with_the_file_and_the_command(saved_copy):
    raw, put = saved_copy
    del raw["runs"][3]["loss"]
    put(raw)
    with pytest.raises(ValueError) as error:
        saved_strategy_results()
    assert str(error.value) == ("course_utils/saved/strategies.json: runs[3].loss: missing; "
                                f"{REGENERATE}")


def test_a_wrong_type_is_named_down_to_the_item(saved_copy):
    raw, put = saved_copy
    raw["runs"][0]["heldout_loss"][2][0] = "32"
    put(raw)
    with pytest.raises(ValueError, match=r"^course_utils/saved/strategies.json: "
                       r"runs\[0\].heldout_loss\[2\]\[0\]: an integer expected, got str; "
                       + REGENERATE + "$"):
        saved_strategy_results()
    raw["runs"][0]["heldout_loss"][2] = [32, 1.0, 2.0]
    put(raw)
    with pytest.raises(ValueError, match=r"heldout_loss\[2\]: 2 items expected, got 3"):
        saved_strategy_results()
    raw["devices"] = True
    put(raw)
    with pytest.raises(ValueError, match="devices: an integer expected, got bool"):
        saved_strategy_results()


def test_a_missing_or_broken_file_is_named(saved_copy, tmp_path):
    with pytest.raises(ValueError, match="^course_utils/saved/strategies.json: no such file; "
                       + REGENERATE + "$"):
        saved_strategy_results()
    (tmp_path / "course_utils" / "saved" / "strategies.json").write_text("{")
    with pytest.raises(ValueError, match=r"strategies.json: not JSON \(.*line 1\); regenerate"):
        saved_strategy_results()


def test_a_file_outside_the_package_is_named_by_its_path(tmp_path):
    with pytest.raises(ValueError, match=f"^{tmp_path / 'elsewhere.json'}: no such file; is it"):
        load(StrategyResults, tmp_path / "elsewhere.json")


def test_an_unknown_field_and_a_null_are_named():
    raw = to_json(load_saved(StrategyResults, "strategies.json", "x"))
    with pytest.raises(ValueError, match=r"^here: runs\[1\].speed: not a field of StrategyRun"):
        from_json(StrategyResults, {**raw, "runs": [raw["runs"][0], {"speed": 1}]}, "here")
    with pytest.raises(ValueError, match=r"^here: runs\[0\].final_loss: a number expected, "
                       "got null; fix it$"):
        from_json(StrategyResults, {**raw, "runs": [{**raw["runs"][0], "final_loss": None}]},
                  "here", "fix it")


def test_save_writes_what_load_reads(tmp_path):
    saved = saved_strategy_results()
    save(saved, tmp_path / "strategies.json")
    assert load(StrategyResults, tmp_path / "strategies.json") == saved
    assert (tmp_path / "strategies.json").read_text() == saved_path("strategies.json").read_text()


def test_every_saved_run_says_how_it_was_made_in_one_record():
    from course_utils.results.bench import saved_results
    from course_utils.results.cluster import saved_cluster_results
    from course_utils.results.diloco import saved_diloco_results
    from course_utils.results.overlap import saved_overlap_results
    from course_utils.results.training import saved_training_results

    made = {"course bench": saved_results(), "course bench --strategies": saved_strategy_results(),
            "course cluster --measure collectives": saved_cluster_results("2x2"),
            "course cluster --measure training": saved_training_results(),
            "python scripts/diloco_sweep.py": saved_diloco_results(),
            "course cluster --measure overlap": saved_overlap_results()}
    for command, record in made.items():
        assert isinstance(record.meta, RunMeta) and record.meta.command == command
        assert record.meta.machine.jax and record.meta.seconds > 0


def test_a_run_made_here_records_this_machine_and_reads_back(tmp_path):
    import jax

    meta = RunMeta("course bench --strategies", this_machine(), 1.5)
    assert meta.machine.jax == jax.__version__ and meta.machine.cores >= 1
    results = replace(saved_strategy_results(), meta=meta)
    save(results, tmp_path / "strategies.json")
    assert load(StrategyResults, tmp_path / "strategies.json") == results
