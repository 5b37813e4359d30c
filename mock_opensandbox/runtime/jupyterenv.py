"""A Jupyter environment for code-interpreter sandboxes without Docker or an image (``--jupyter-env PATH``).

PATH is a virtualenv that pip filled with Jupyter and kernels (``python -m mock_opensandbox.runtime.jupyterenv
PATH`` makes one: ``notebook<7``, ``ipykernel``, ``bash_kernel``, kernels "python" and "bash" registered
in the env, as upstream's entrypoint registers them: 3bb6fad sandboxes/code-interpreter/scripts/
code-interpreter.sh). Each sandbox gets PATH bound read-only at the same path (a venv's scripts name
their interpreter by absolute path; the venv is made from /usr/bin/python3, which the host-tools view
shows), JUPYTER_HOST / JUPYTER_TOKEN / JUPYTER_PORT in its environment (the code-interpreter image's ENV),
and ``jupyter notebook --ip=127.0.0.1 --port=44771 --allow-root --no-browser --NotebookApp.token=T``
started INSIDE it (its namespaces, cgroup limits and network), like the entrypoint. QUIRKS.md (part 2).
Standard library only."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from mock_opensandbox.runtime.mounts import plan as plan_mounts

__all__ = [
    "ENTRYPOINT",
    "JUPYTER_PORT",
    "JUPYTER_TOKEN",
    "REQUIREMENTS",
    "check",
    "entrypoint_for",
    "make",
    "sandbox_env",
    "start_in",
]

JUPYTER_PORT = 44771  # code-interpreter.sh: ${JUPYTER_PORT:-44771}
JUPYTER_TOKEN = "opensandboxcodeinterpreterjupyter"  # code-interpreter.sh: ${JUPYTER_TOKEN:-...}
# pinned: what `pip install "notebook<7" ipykernel bash_kernel` resolved to here
REQUIREMENTS = ("notebook==6.5.7", "ipykernel==6.29.5", "bash_kernel==0.10.0", "jupyter_client==7.4.9")
BASE_PYTHON = "/usr/bin/python3"
HINT = (
    "code interpreter: no Jupyter environment (a code-interpreter image answers as a plain image); "
    "make one with `python -m mock_opensandbox.runtime.jupyterenv DIR` and pass --jupyter-env DIR"
)


def check(path: str) -> str | None:
    """None when ``path`` is a usable Jupyter env, else why not."""
    if not os.path.isabs(path):
        return "--jupyter-env must be an absolute path, not %r" % path
    if not os.access(os.path.join(path, "bin", "jupyter"), os.X_OK):
        return "%s has no bin/jupyter (make it with `python -m mock_opensandbox.runtime.jupyterenv %s`)" % (path, path)
    if not os.path.isdir(os.path.join(path, "share", "jupyter", "kernels", "python")):
        return "%s has no registered 'python' kernel (share/jupyter/kernels/python)" % path
    return None


def make(
    path: str, requirements: Sequence[str] = REQUIREMENTS, base_python: str = BASE_PYTHON, pip_args: Sequence[str] = ()
) -> None:
    """Create the venv, pip-install ``requirements``, register the python and bash kernels in it.
    Raises subprocess.CalledProcessError (pip could not install) or OSError."""
    path = os.path.abspath(path)
    subprocess.run([base_python, "-m", "venv", path], check=True)
    py = os.path.join(path, "bin", "python")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip_args, *requirements], check=True
    )
    register_kernels(path)


def register_kernels(path: str, prefix: str | None = None) -> None:
    """The python and bash kernels registered in the env at ``path`` (or under ``prefix``). ipykernel's install
    removes the kernel it wrote to a ``tempfile.mkdtemp(suffix="_kernels")`` directory but not that directory:
    their temporary files go to one of ours, removed afterwards."""
    py = os.path.join(path, "bin", "python")
    where = ["--prefix", prefix] if prefix else ["--sys-prefix"]
    with tempfile.TemporaryDirectory(prefix="osb-kernels-") as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        subprocess.run(
            [py, "-m", "ipykernel", "install", "--name", "python", "--display-name", "Python", *where],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        subprocess.run([py, "-m", "bash_kernel.install", *where], check=True, stdout=subprocess.DEVNULL, env=env)


def sandbox_env(path: str) -> dict[str, str]:
    """What the code-interpreter image's ENV holds (the request's env wins over it, as over an image's)."""
    return {
        "JUPYTER_HOST": "http://127.0.0.1:%d" % JUPYTER_PORT,
        "JUPYTER_TOKEN": JUPYTER_TOKEN,
        "JUPYTER_PORT": str(JUPYTER_PORT),
    }


class BindMount:
    """The env as one read-only bind (the object runtime/mounts.py plan() takes)."""

    def __init__(self, path: str):
        self.anchor, self.rel, self.host_path, self.target, self.read_only = path, "", path, path, True
        self.name, self.kind = "jupyter-env", "host"


def for_image(jupyter_env: str | None, image: Any) -> str | None:
    """--jupyter-env for a code-interpreter image ("code-interpreter" in its name) [choice, QUIRKS.md]."""
    uri = str((image or {}).get("uri", ""))
    return jupyter_env if jupyter_env and "code-interpreter" in uri else None


def bind_into(runtime: Any, volumes: Any, path: str) -> None:
    """The env bound read-only at its own path, planned with the sandbox's volumes (before PID 1)."""
    runtime.volumes = plan_mounts(
        runtime.root,
        runtime.paths.resolve_in_root,
        list(volumes.mounts if volumes is not None else []) + [BindMount(path)],
    )


ENTRYPOINT = "/opt/code-interpreter/code-interpreter.sh"  # the image's ENTRYPOINT (Dockerfile at 3bb6fad)


def entrypoint_for(entrypoint: Any, runtime: Any) -> tuple[Any, bool]:
    """(what PID 1's entrypoint runs, whether the mock starts Jupyter itself). The code-interpreter
    image's own entrypoint (which upstream's e2e names) starts Jupyter: in a view without it (host
    tools), the env's Jupyter plays its part and the entrypoint waits, as the script does in the
    foreground [choice, QUIRKS.md]; in the image's own tree the script runs and the mock starts none."""
    if list(entrypoint or []) != [ENTRYPOINT]:
        return entrypoint, True
    try:
        present = os.path.exists(runtime.resolve(ENTRYPOINT))
    except (OSError, ValueError):
        present = False
    return (entrypoint, False) if present else (["tail", "-f", "/dev/null"], True)


def start_logged(runtime: Any, path: str, log: Any, errors: tuple[type[BaseException], ...]) -> None:
    """start_in(), a failure written to the sandbox's log instead of failing the create."""
    try:
        start_in(runtime, path, os.path.join(runtime.root, "tmp", "jupyter.log"))
    except errors as exc:
        log.feed(("code-interpreter: jupyter did not start: %s\n" % exc).encode())


def start_in(runtime: Any, path: str, log_path: str) -> Any:
    """Start Jupyter inside the sandbox (its PATH first: kernels find the env's python and jupyter)."""
    env = runtime.base_env()
    port = env.get("JUPYTER_PORT") or str(JUPYTER_PORT)
    token = env.get("JUPYTER_TOKEN") or JUPYTER_TOKEN
    argv = [
        os.path.join(path, "bin", "jupyter"),
        "notebook",
        "--ip=127.0.0.1",
        "--port=%s" % port,
        "--allow-root",
        "--no-browser",
        "--NotebookApp.token=%s" % token,
    ]
    extra = {
        "PATH": os.path.join(path, "bin") + ":" + env.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "JUPYTER_RUNTIME_DIR": "/tmp/.jupyter-runtime",
        "JUPYTER_DATA_DIR": "/tmp/.jupyter-data",
        "JUPYTER_CONFIG_DIR": "/tmp/.jupyter-config",
        "IPYTHONDIR": "/tmp/.ipython",
    }
    try:  # the image's WORKDIR /workspace: Jupyter's root dir, so a context's default cwd
        os.makedirs(runtime.resolve("/workspace"), exist_ok=True)
    except (OSError, ValueError):
        pass
    log = open(log_path, "ab")
    try:
        return runtime.spawn(argv, cwd="/workspace", env=extra, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print(
            "usage: python -m mock_opensandbox.runtime.jupyterenv DIR   (a venv with Jupyter + python/bash kernels)",
            file=sys.stderr,
        )
        return 2
    try:
        make(args[0])
    except (OSError, subprocess.CalledProcessError) as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    print("Jupyter env ready: pass --jupyter-env %s" % os.path.abspath(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
