"""The conftest.py that tiers/flows/clients/agent_suites.py puts beside the backends' own integration tests (unchanged): what
their fixtures leave to the environment of a developer's machine, set from the runner's environment.

* deepagents-opensandbox-backend's fixture calls ``OpenSandboxBackend.create()`` with its defaults (a server at
  localhost:8080, no API key): ``create`` gets OPENSANDBOX_DOMAIN and OPENSANDBOX_API_KEY as its defaults.
* Both fixtures name public images (``python:3.12``, ``opensandbox/code-interpreter:v1.1.0``). A stack without a
  registry has them under local names: AGENT_SUITES_IMAGES (``public=local,...``) renames them at
  ``Sandbox.create`` / ``SandboxSync.create``, the only places an image name reaches the server.

Runs inside .venv-agents (requirements-agents.txt), never in the project's venv.
"""

from __future__ import annotations

import os
from typing import Any

import deepagents_opensandbox_backend as _deepagents
import opensandbox

_RENAME = dict(
    pair.split("=", 1) for pair in os.environ.get("AGENT_SUITES_IMAGES", "").split(",") if pair.count("=") == 1
)


def _renaming(create: Any) -> Any:
    def wrapper(cls: Any, image: Any = None, *args: Any, **kw: Any) -> Any:
        if isinstance(image, str):
            image = _RENAME.get(image, image)
        return create(cls, image, *args, **kw)

    return classmethod(wrapper)


opensandbox.Sandbox.create = _renaming(opensandbox.Sandbox.create.__func__)  # type: ignore[method-assign]
opensandbox.SandboxSync.create = _renaming(opensandbox.SandboxSync.create.__func__)  # type: ignore[method-assign]

_backend_create = _deepagents.OpenSandboxBackend.create.__func__


def _create(cls: Any, domain: Any = None, image: Any = None, entrypoint: Any = None, api_key: Any = None, **kw: Any):
    return _backend_create(
        cls,
        domain=domain or os.environ["OPENSANDBOX_DOMAIN"],
        image=image or _deepagents.backend.DEFAULT_IMAGE,
        entrypoint=entrypoint,
        api_key=api_key or os.environ.get("OPENSANDBOX_API_KEY") or None,
        **kw,
    )


_deepagents.OpenSandboxBackend.create = classmethod(_create)  # type: ignore[method-assign]
