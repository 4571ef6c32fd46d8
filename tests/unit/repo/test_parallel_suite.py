"""`make test` runs pytest-xdist workers (tests/conftest.py): each worker chooses ports in its own
slice of the range (two workers never pick the same port before a child binds it), and a file runs
whole in one worker, every real-Vitess file in the same one."""

from __future__ import annotations

from pathlib import Path

from conftest import worker_port_range, xdist_scope

REPO = Path(__file__).resolve().parents[3]


def test_each_worker_has_its_own_slice_of_the_port_range() -> None:
    slices = [worker_port_range(f"gw{i}", 3, 10000, 32768) for i in range(3)]
    assert slices == ["10000-17589", "17589-25178", "25178-32767"]


def test_a_file_is_one_group_and_real_vitess_files_share_one() -> None:
    assert xdist_scope("tests/unit/a/test_x.py::test_one[p-1]") == "tests/unit/a/test_x.py"
    assert xdist_scope("tests/unit/a/test_x.py::Case::test_two") == "tests/unit/a/test_x.py"
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py"))
    # Every file on the session's real Vitess carries "realvitess" in its name, so it joins the group.
    on_real_vitess = [f for f in files if "real_vitess" in (REPO / f).read_text() and not f.endswith(Path(__file__).name)]
    assert on_real_vitess and {xdist_scope(f + "::t") for f in on_real_vitess} == {"realvitess"}
