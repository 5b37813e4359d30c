# The agent of a mock sandbox whose execd is the mock's own (in the mock process): a small process
# inside the sandbox, /opt/opensandbox/execd in `ps`, that does for the mock what needs the sandbox's
# own namespaces, over a unix SOCK_SEQPACKET channel the mock hands it as fd 3. Written by the
# OpenSandbox mock (mock_opensandbox/runtime/scripts/agent.py; runtime/agent.py is the mock's side).
# How it runs: /opt/opensandbox/execd is the sandbox's Python 3 interpreter (view.py bind-mounts it
# there, read-only), bootstrap.sh starts it with no arguments and this program on stdin (a pipe
# view.py fills), so the kernel's argv - and `ps` - is exactly `/opt/opensandbox/execd`, like the real
# container's execd. Standard library only.
# Protocol (runtime/agent.py writes and reads it): one message each way, ASCII words
# `key=value` (values without spaces; the first word is the request id, the second the op); a reply
# starts with the request's id and, for "connect", carries the connected socket as an SCM_RIGHTS fd.
#   ID ping               -> ID ok=1 pid=<pid inside>
#   ID connect port=P     -> ID ok=1 + fd (TCP to 127.0.0.1:P in the sandbox's network namespace)
#                            or ID ok=0 errno=E
#   ID listen port=P      -> ID ok=1 + fd (TCP listening on 0.0.0.0:P in the sandbox's network namespace,
#                            like execd's `:44772`) or ID ok=0 errno=E
# Once running it sends `0 hello pid=<pid inside>`; it exits when the mock closes the channel. Run as
# `python3 -IS -c SOURCE` with the channel as stdin, it answers one request and exits (no hello needed).
# `_socket` and no json: every import costs resident memory in every idle sandbox.
import os
import sys

NAME = "/opt/opensandbox/execd"
CHANNEL_FD = 3


def serve(fd: int, once: bool) -> None:
    import _socket

    try:
        chan = _socket.socket(fileno=os.dup(fd))
    except OSError:
        os._exit(0)  # no channel: nothing to serve
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, fd)
    os.close(null)

    def send(text: str, fd: "int | None" = None) -> None:
        anc = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))] if fd is not None else []
        chan.sendmsg([text.encode()], anc)

    send("0 hello pid=%d" % os.getpid())
    while True:
        try:
            data = chan.recv(4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        words = data.decode("ascii", "replace").split()
        if len(words) < 2:
            continue
        rid, op = words[0], words[1]
        args = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        if op == "ping":
            send("%s ok=1 pid=%d" % (rid, os.getpid()))
        elif op in ("connect", "listen"):
            # a socket of the agent's network namespace, handed over on the socketpair: connected to
            # host:port, or listening on 0.0.0.0:port
            s = None
            try:
                port = int(args.get("port", ""))
                s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
                if op == "connect":
                    s.settimeout(float(args.get("timeout", "5")))
                    s.connect((args.get("host", "127.0.0.1"), port))
                    s.setblocking(True)  # the receiver shares this open file: hand it over blocking
                else:
                    s.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
                    s.bind(("0.0.0.0", port))
                    s.listen(int(args.get("backlog", "128")))
                send("%s ok=1" % rid, s.fileno())
            except OSError as e:
                send("%s ok=0 errno=%d" % (rid, e.errno or 5))
            except (TypeError, ValueError, OverflowError):
                send("%s ok=0 errno=22" % rid)
            finally:
                if s is not None:
                    s.close()
        else:
            send("%s ok=0 errno=38" % rid)
        if once:
            break
    os._exit(0)


if sys.argv[0] == "-c":  # `python3 -IS -c SOURCE`: one request on stdin's socket (runtime/agent.py)
    serve(0, True)
else:  # the agent proper: its program came on stdin
    serve(CHANNEL_FD, False)
