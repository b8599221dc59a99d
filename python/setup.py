"""Build pinshm's Python module with setuptools, for virtual environments:

    python3 -m pip install --no-build-isolation ./python

(from the source tree's root; offline: Debian's python3-setuptools and
python3-wheel are all it needs).  It compiles the extension (python/*.c)
with the library's own sources (src/, include/): the module carries its
copy of libpinshm, as the automake build's does.  One build serves Python
3.11 and later (the stable ABI, Py_LIMITED_API 3.11).  ./configure && make
remains the build of the library, the daemon and the module together.
"""

import os
import re
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def rel(*parts):
    """A path from this folder (setuptools wants relative source paths)."""
    return os.path.relpath(os.path.join(TOP, *parts), HERE)


def version():
    """The package's version: configure.ac's AC_INIT."""
    with open(os.path.join(TOP, "configure.ac")) as f:
        m = re.search(r"AC_INIT\(\[pinshm\],\s*\[([^\]]+)\]", f.read())
    return m.group(1) if m else "0"


def sources():
    """The module's C files, then the library's (src/*.c, src/device/*.c)."""
    out = sorted(rel("python", f) for f in os.listdir(HERE) if f.endswith(".c"))
    for sub in ("src", os.path.join("src", "device")):
        folder = os.path.join(TOP, sub)
        out += sorted(rel(sub, f) for f in os.listdir(folder) if f.endswith(".c"))
    return out


if not os.path.isdir(os.path.join(TOP, "src")) or not os.path.exists(os.path.join(TOP, "include", "pinshm.h")):
    sys.exit("setup.py: the library's sources (../src, ../include) are missing: install from a pinshm source tree")

macros = [("Py_LIMITED_API", "0x030B0000"), ("_GNU_SOURCE", None), ("PINSHM_BUILDING", None)]
if os.path.exists("/usr/include/CL/cl.h"):  # as configure finds it: OpenCL devices, loaded at run time
    macros.append(("HAVE_CL_H", None))

setup(
    name="pinshm",
    version=version(),
    description="Messages between the processes of one machine over pinned shared memory",
    packages=["pinshm"],
    ext_modules=[
        Extension(
            "_pinshm",
            sources=sources(),
            include_dirs=[rel("include"), rel("src")],
            define_macros=macros,
            extra_compile_args=["-std=gnu11", "-fvisibility=hidden", "-fno-strict-aliasing"],
            libraries=["dl", "pthread"],
            py_limited_api=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}, "build_ext": {"parallel": os.cpu_count() or 1}},
    python_requires=">=3.11",
)
