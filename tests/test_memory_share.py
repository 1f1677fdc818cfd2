"""tests/conftest.py memory_share, in a pytest run of its own on two pytest-xdist workers: two modules marked
big_memory(alone=True) never run at once, and two marked big_memory (shared) do; and what a module freed goes back
to the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

MODULE = '''
import os, pathlib, time
import pytest

pytestmark = pytest.mark.big_memory{marker}

def test_holds_its_share():
    here = pathlib.Path(os.environ["SHARE_DIR"])
    (here / "{name}.running").touch()
    deadline = time.monotonic() + {wait_s}  # how long it looks for the other module running beside it
    seen = False
    while not seen and time.monotonic() < deadline:
        seen = (here / "{other}.running").exists()
        time.sleep(0.05)
    (here / "{name}.running").unlink()
    (here / "{name}.saw_the_other").write_text(str(seen))
'''


def _run(tmp_path: Path, marker: str, wait_s: float) -> dict[str, bool]:
    for name, other in (("a", "b"), ("b", "a")):
        (tmp_path / f"test_{name}.py").write_text(MODULE.format(marker=marker, name=name, other=other, wait_s=wait_s))
    (tmp_path / "conftest.py").write_text("from tests.conftest import memory_share  # noqa: F401\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    big_memory: holds GBs\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist",
                           "loadfile", f"--basetemp={tmp_path / 'base'}", "test_a.py", "test_b.py"],
                          cwd=tmp_path, env={**os.environ, "SHARE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {name: (tmp_path / f"{name}.saw_the_other").read_text() == "True" for name in "ab"}


@pytest.mark.parametrize("marker, wait_s, together", [("(alone=True)", 5.0, False), ("", 120.0, True)],
                         ids=["alone", "shared"])
def test_big_modules_run_beside_each_other_only_when_shared(tmp_path, marker, wait_s, together):
    seen = _run(tmp_path, marker, wait_s)
    assert seen == {"a": together, "b": together}


FREED_HEAP = '''
from tests.conftest import return_freed_memory

def resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

start = resident_mb()
blocks = [bytes(4000) for _ in range(100_000)]  # 400 MB in the malloc heap (above pymalloc's small objects)
sentinel = bytes(4000)  # allocated last, at the heap's top: freeing the blocks below it cannot shrink the heap
del blocks
freed = resident_mb()
return_freed_memory()
print(start, freed, resident_mb())
'''


def test_a_module_gives_what_it_freed_back_to_the_machine():
    done = subprocess.run([sys.executable, "-c", FREED_HEAP], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    start, freed, returned = map(float, done.stdout.split())
    assert freed - start > 300  # glibc kept the freed blocks: the case this is for
    assert returned - start < 100
