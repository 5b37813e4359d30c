"""The plugin's OpenSandbox client (standard library only, Python >= 3.10). No EPP in here.

* ``transport``: keep-alive HTTP, deadlines, retries of idempotent calls, ``HttpError`` / ``NetError``
  (error bodies parsed and scrubbed of secrets);
* ``lifecycle``: ``OpenSandbox`` (the ``/v1/sandboxes`` API) and ``SandboxCache`` (what must outlive
  a plugin process, under ABX_PROVIDER_DATA_DIR);
* ``execd``: ``Execd``, the data plane of one sandbox, and ``CommandRun``, one running command;
* ``sse``, ``multipart``, ``ws``: the codecs those need (event stream, uploads, the PTY WebSocket).

Modules are imported where they are used, so a plugin process pays only for what its call needs.
"""
