"""Only registry data names a strategy: the places outside ``training/strategies.py`` that name
one by a string literal (``strategy_names``), held at or below the count left to remove."""

from strategy_names import ALLOWED, ROOT, named_places, report

from course_utils.training.strategies import SPECS

# the files that still name a strategy by a literal (the goal: at most 4)
MOST_FILES = 0


def test_strategy_literals_outside_the_registry_stay_within_the_bound():
    places = named_places(SPECS)
    print(report(places))
    assert len(places) <= MOST_FILES, report(places)


def test_each_allowed_literal_is_in_its_file():
    for (path, text), count in ALLOWED.items():
        assert (ROOT / path).read_text().count(f'"{text}"') >= count, (path, text)


def test_a_new_literal_is_counted(tmp_path):
    code = tmp_path / "course_utils" / "x.py"
    code.parent.mkdir()
    code.write_text('"""zero1 in a docstring"""\nNAME, RUN = "zero1", "local_sgd H=8"\n')
    assert named_places(SPECS, tmp_path) == {"course_utils/x.py": [(2, "zero1"),
                                                                   (2, "local_sgd H=8")]}


# what still works with every strategy renamed (``renamed_copy``): the readers that name a
# strategy only through the registry. Not yet here, as each still names one by a literal (the
# counter's files): the saved runs of parts three and five and their figures, part four's
# target, and the cluster's plans
RENAMED_READERS = """
import course_utils
from course_utils.checks.compute import expected_rows
from course_utils.checks.training import STAGES, check_memory_prediction
from course_utils.devices.setup import data_mesh
from course_utils.figures.labels import human, short_label
from course_utils.results.training import part_four_traffic, saved_training_results
from course_utils.results.training_figures import step_figure_data
from course_utils.training.part_four import COMPRESSED, PART_FOUR_ROWS, find_row
from course_utils.training.run import Memory
from course_utils.training.strategies import DATA_PARALLEL, SPECS, ZERO_STAGES
from course_utils.training.train import train

assert course_utils.__file__.startswith({root!r})
mapping = {mapping!r}
assert set(SPECS) == set(mapping.values()) and STAGES == ZERO_STAGES
assert [r.strategy for r in PART_FOUR_ROWS] == [mapping[s] for s in {strategies!r}]
assert find_row(mapping["zero3"]).strategy == mapping["zero3_regather"] and len(COMPRESSED) == 4
assert all(human(name) == s.label and short_label(name) for name, s in SPECS.items())
assert all(part_four_traffic(r.name, 2, 2).link_bytes > 0 for r in PART_FOUR_ROWS)
step_figure_data(saved_training_results())
assert expected_rows(100_000, 2, 2, 1e8, 1e-4, 1e10) > 0
whole, piece = 4096, 1024
memory = {{s: Memory(parameters=whole if i < 3 else piece, gradients=whole if i < 2 else piece,
                     optimizer=whole if i < 1 else piece) for i, s in enumerate(STAGES)}}
check_memory_prediction(lambda n, p: {{s: 4 * n * (3 - i) + 4 * n // p * i
                                       for i, s in enumerate(STAGES)}}, memory, 1024, 4)
assert train(data_mesh(), DATA_PARALLEL, steps=1, batch_size=8).loss
"""


def test_renamed_strategies_still_read_through_the_registry(tmp_path):
    import subprocess
    import sys

    from strategy_names import renamed_copy

    from course_utils.training.part_four import PART_FOUR_ROWS

    mapping = renamed_copy(SPECS, tmp_path)
    code = RENAMED_READERS.format(root=str(tmp_path), mapping=mapping,
                                  strategies=[r.strategy for r in PART_FOUR_ROWS])
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(tmp_path), "JAX_PLATFORMS": "cpu"},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
