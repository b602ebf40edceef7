"""The sizing core must import without Django."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, pkgutil, sys
import sizing as pkg
names = [m.name for m in pkgutil.iter_modules(pkg.__path__, "sizing.")]
for name in names:
    importlib.import_module(name)
assert "sizing.chain" in sys.modules, names
leaked = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
assert not leaked, leaked
print(len(names))
"""


def test_every_sizing_module_imports_without_django():
    # given a fresh interpreter with only the repo root on the path
    # when every sizing module is imported
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    # then none of them pulled in django
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 10


def test_planner_package_init_does_not_import_django():
    # planner/__init__.py belongs to the Django app; it must stay import-light for the core
    out = subprocess.run(
        [sys.executable, "-c", "import planner, sys; assert 'django' not in sys.modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
