"""Only registry data names a strategy: the places outside ``training/strategies.py`` that name
one by a string literal (``strategy_names``), held at or below the count left to remove."""

from strategy_names import ALLOWED, ROOT, named_places, report

from course_utils.training.strategies import SPECS

# the files that still name a strategy by a literal; the goal is at most 4
MOST_FILES = 9


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
