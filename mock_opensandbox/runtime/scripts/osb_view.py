# How the mock runs a sandbox's view (runtime/stages.py: `python -I -S osb_view.py MODE ...`): view.py beside
# this file, loaded as a module so that Python's own bytecode cache (__pycache__/view.*.pyc, written where the
# directory allows) spares every sandbox start the compile of a ~600-line script run as __main__ (~5 ms here;
# a script is never cached). Only what the interpreter has loaded already (sys, the frozen import machinery):
# view.py starts its cgroup move before its own imports. Written by the OpenSandbox mock; standard library only.
import _frozen_importlib_external as _ext
import sys

_path = __file__.rpartition("/")[0] + "/view.py"
_mod = type(sys)("__osb_view__")
_mod.__file__ = _path
_ext.SourceFileLoader("__osb_view__", _path).exec_module(_mod)  # view.py runs main() itself
