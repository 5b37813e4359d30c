"""The EPP methods, a module per namespace: ``sandbox.*`` (sandbox.py), ``exec.*`` (exec.py),
``process.*`` (process.py), ``files.*`` (files.py), ``ports.*`` (ports.py), ``pty.*`` (pty.py).

Each method is ``m_<namespace>_<name>(ctx, request, params)``; provider.py's method table names the
module and imports it on the method's first call (the host starts a new plugin process for most
calls, and ``initialize`` needs none of them), so this file imports nothing.
"""
