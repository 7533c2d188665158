import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_utils import format_bytes
from course_utils.tools.cli import COMMANDS, main
from course_utils.tools.notebooks import run as run_module
from course_utils.tools.notebooks.run import find_notebooks, merge_streams, run_one, set_parameters

ROOT = Path(__file__).resolve().parents[1]


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nbformat.write(nb, path)
    return path


def test_set_parameters_rewrites_only_the_tagged_cell(tmp_path):
    nb = nbformat.read(
        _notebook(tmp_path / "01_a.ipynb", "N_DEVICES = 4\nOTHER = 1", "N_DEVICES = 9"), 4
    )
    set_parameters(nb, {"N_DEVICES": 8})
    assert (
        nb.cells[0].source == "N_DEVICES = 8\nOTHER = 1" and nb.cells[1].source == "N_DEVICES = 9"
    )
    with pytest.raises(ValueError, match="does not set MISSING"):
        set_parameters(nb, {"MISSING": 1})
    nb.cells[1].metadata["tags"] = ["parameters"]
    with pytest.raises(ValueError, match="found 2"):
        set_parameters(nb, {"N_DEVICES": 2})


def test_merge_streams_joins_only_neighbouring_outputs_of_one_stream():
    out, err = nbformat.v4.new_output, nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [
        out("stream", name="stdout", text="a\n"),
        out("stream", name="stdout", text="b\n"),
        err("stream", name="stderr", text="warn\n"),
        out("stream", name="stdout", text="c\n"),
        out("execute_result", data={"text/plain": "1"}, execution_count=1),
        out("stream", name="stdout", text="d\n"),
        out("stream", name="stdout", text="e\n"),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    merge_streams(nb)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in cell.outputs] == [
        ("stream", "stdout", "a\nb\n"),
        ("stream", "stderr", "warn\n"),
        ("stream", "stdout", "c\n"),
        ("execute_result", None, None),
        ("stream", "stdout", "d\ne\n"),
    ]


def test_run_one_reports_success_figures_and_errors_without_touching_the_original(tmp_path):
    good = _notebook(
        tmp_path / "01_good.ipynb",
        "N_DEVICES = 4",
        "%matplotlib inline\nfrom matplotlib.figure import Figure\n"
        "fig = Figure()\nfig.subplots().plot([1, 2])\nfig",
    )
    before = good.read_text()
    result = run_one(good, tmp_path / "out")
    assert (
        result.ok and len(result.figures) == 1 and result.figures[0].read_bytes()[:4] == b"\x89PNG"
    )
    assert good.read_text() == before
    bad = _notebook(
        tmp_path / "02_bad.ipynb", "N_DEVICES = 4", "raise ValueError('broken on purpose')"
    )
    result = run_one(bad, tmp_path / "out")
    assert result.error == "ValueError: broken on purpose"


@pytest.mark.parametrize(
    "message, starts", [(run_module.KERNEL_DIED_AT_START, 2), ("kernel refused on purpose", 1)]
)
def test_only_a_kernel_that_died_at_start_is_started_again(monkeypatch, tmp_path, message, starts):
    import nbclient

    started = []

    class DiesOnce:
        def __init__(self, nb, **_):
            pass

        def execute(self, **_):
            started.append(1)
            if len(started) == 1:
                raise RuntimeError(message)

    monkeypatch.setattr(nbclient, "NotebookClient", DiesOnce)
    nb = nbformat.v4.new_notebook()
    if starts == 1:
        with pytest.raises(RuntimeError, match=message):
            run_module.run_in_fresh_kernel(nb, tmp_path, 60)
    else:
        run_module.run_in_fresh_kernel(nb, tmp_path, 60)
    assert len(started) == starts


def test_course_run_in_place_saves_outputs(tmp_path):
    path = _notebook(tmp_path / "01_x.ipynb", "N_DEVICES = 4", "print(N_DEVICES * 2)")
    assert (
        main(["run", "--folder", str(tmp_path), "--out", str(tmp_path / "out"), "--in-place"]) == 0
    )
    nb = nbformat.read(path, 4)
    assert nb.cells[1].outputs[0]["text"] == "8\n" and nb.cells[1].execution_count == 2
    assert "execution" not in nb.cells[1].metadata


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--in-place", "--devices", "8"], "--in-place stores the 4-device run only"),
        (["run", "--jobs", "0"], "argument --jobs: must be a positive integer, got '0'"),
        (["run", "missing.ipynb"], "no such notebook: missing.ipynb"),
        (["run", "--folder", "no-such-folder"], "no step-numbered notebooks"),
        (["run", "--devices", "0"], "argument --devices: must be a positive integer, got '0'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(course, argv, message):
    status, output = course(*argv, cwd=ROOT)
    assert status == 2 and message in output


def test_a_failing_notebook_makes_course_run_fail(course, tmp_path):
    _notebook(tmp_path / "01_bad.ipynb", "N_DEVICES = 4", "assert N_DEVICES == 5, 'wrong count'")
    status, output = course("run", "--folder", str(tmp_path), "--out", str(tmp_path / "out"))
    assert status == 1 and "0 passed, 1 failed" in output and "wrong count" in output


def test_an_unreadable_notebook_is_a_failed_row_not_a_traceback(course, tmp_path):
    (tmp_path / "01_broken.ipynb").write_text("{not json")
    _notebook(tmp_path / "02_fine.ipynb", "N_DEVICES = 4", "print('fine')")
    status, output = course("run", "--folder", str(tmp_path), "--out", str(tmp_path / "out"))
    assert status == 1 and "1 passed, 1 failed" in output and "Traceback" not in output


def test_find_notebooks_orders_steps(tmp_path):
    for name in ("02_b.ipynb", "01_a.ipynb", "notes.ipynb"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in find_notebooks(tmp_path)] == ["01_a.ipynb", "02_b.ipynb"]


def test_course_launch_imports_neither_jax_nor_the_notebook_tools():
    # `course launch` starts its own JAX processes; the launcher itself stays light (notebook 09)
    probe = (
        "import sys\n"
        "from course_utils.tools.cli import build_parser\n"
        "argv = ['launch', '--processes', '2', '--devices-per-process', '2']\n"
        "build_parser('launch').parse_args(argv)\n"
        "print(sorted(m for m in ('jax', 'nbformat', 'nbclient') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_every_subcommand_is_registered_and_help_lists_them(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in COMMANDS)


def test_the_core_package_loads_its_names_on_first_use():
    import course_utils

    assert set(course_utils.__all__) <= set(dir(course_utils))
    assert course_utils.ring_bytes(8, 4).all_reduce == 12
    with pytest.raises(AttributeError, match="no attribute 'ring_byte'"):
        course_utils.ring_byte  # noqa: B018



def spoken(values) -> str:
    """``[32, 128, 512]`` as "32, 128 and 512"."""
    *rest, last = map(str, values)
    return f"{', '.join(rest)} and {last}" if rest else last


PLAN_FACTS = {  # what each plan's help says, read from the plan itself
    "collectives": lambda plan: [
        f"{len(plan['sizes'])} sizes up to {max(plan['sizes']) >> 20} MiB"],
    "training": lambda plan: [f"batch {spoken(plan['batch_sizes'])}",
                              f"curves of {plan['seeds']} seed"],
    "overlap": lambda plan: [f"{plan['tower'].layers}-layer tower of width {plan['tower'].width}"],
    "diloco": lambda plan: [f"H = {spoken(plan['local_steps'])}"],
    "links": lambda plan: [f"{plan['seconds']:g} s a rate"],
    "latency": lambda plan: [f"{len(plan['sizes'])} sizes up to "
                             f"{format_bytes(max(plan['sizes']))}",
                             f"all-reduces up to {format_bytes(max(plan['allreduce']['sizes']))}"],
}


def test_course_cluster_help_is_written_from_every_measurement(capsys):
    from course_utils.tools.cluster.measurements import MEASUREMENTS, measurement

    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone
    for name, about in MEASUREMENTS.items():
        chosen = measurement(name)
        assert about.files[0] == chosen.output and f"{name}: {about.what}" in shown
        assert f"{name}: {about.quick}, or {about.full}" in shown
        assert f"{name}: {' and '.join(about.files)}" in shown
        for plan, text in (("quick", about.quick), ("full", about.full)):
            facts = PLAN_FACTS[name](chosen.plans[plan])
            assert all(fact in text for fact in facts), (name, plan, text)
    assert "(overlap, links, diloco and latency keep every run" in shown
