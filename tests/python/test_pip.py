"""pip install ./python into a virtual environment (--system-site-packages,
--no-build-isolation, no index: offline), from a copy of the source tree
(pip builds in the folder it is given, and distcheck's is read-only); the
installed module then makes a round trip with the test's daemon."""

import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROUND_TRIP = r"""
import sys, numpy as np, _pinshm, pinshm
assert _pinshm.__file__.startswith(sys.prefix), _pinshm.__file__
with pinshm.connect() as c:
    c.create("pip", capacity=1 << 16)
    with c.open("pip", pinshm.PRODUCER) as tx, c.open("pip", pinshm.CONSUMER) as rx:
        pinshm.send_array(tx, np.arange(6.0).reshape(2, 3))
        a = pinshm.recv_array(rx, timeout=5)
        assert a.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        del a
        tx.send(b"abc")
        with rx.recv_inplace(timeout=5) as m:
            assert np.from_dlpack(m).tobytes() == b"abc"
print("ok")
"""


def _missing():
    """Why pip cannot build here, or None."""
    for mod in ("pip", "setuptools", "wheel", "venv"):
        r = subprocess.run([sys.executable, "-c", "import " + mod], capture_output=True)
        if r.returncode != 0:
            return "%s cannot import %s (Debian: python3-pip, python3-setuptools, python3-wheel, python3-venv)" % (
                sys.executable, mod)
    return None


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="pip's build is not sanitized: the ASan stage would time a compiler only")
def test_pip_install(tmp_path, daemon):
    why = _missing()
    if why:
        pytest.skip(why)
    src = tmp_path / "src"
    for part in ("python", "src", "include"):
        shutil.copytree(os.path.join(TOP, part), src / part,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.o", ".libs", ".deps"))
    shutil.copy(os.path.join(TOP, "configure.ac"), src)
    for path in [src] + [p for p in src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # distcheck's sources are read-only
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "./python"],
                       cwd=src, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([py, "-c", ROUND_TRIP], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
