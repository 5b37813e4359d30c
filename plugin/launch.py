#!/usr/bin/env python3
"""What the host runs (abx-provider.toml [runtime] command): provider.py's main(), with its bytecode
cached under ABX_PROVIDER_DATA_DIR. The host sets PYTHONDONTWRITEBYTECODE and re-hashes the plugin root
at every start, so nothing may be written there; a script is never cached by Python, so without this
launcher provider.py and the modules it imports would be compiled again at every one of the host's many
plugin starts."""

import os
import sys

data = os.environ.get("ABX_PROVIDER_DATA_DIR")
if data and os.path.isdir(data):
    sys.pycache_prefix = os.path.join(data, ".pycache")
    sys.dont_write_bytecode = False

import provider  # noqa: E402  (this file's directory is sys.path[0])

sys.exit(provider.main())
