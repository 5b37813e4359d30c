#!/bin/sh
# The sandbox's main process (PID 1), written into every mock sandbox by the OpenSandbox mock
# (mock_opensandbox/runtime/scripts/bootstrap.sh): it starts execd in the background, then the
# entrypoint given as arguments, and ends with the entrypoint's status. TERM and INT are passed on to
# the entrypoint. Run as `/bin/sh /opt/opensandbox/bootstrap.sh ENTRYPOINT...`.
EXECD="${EXECD:-/opt/opensandbox/execd}"
EXECD_ENVS="${EXECD_ENVS:-/opt/opensandbox/.env}"
export EXECD EXECD_ENVS
: >>"$EXECD_ENVS" 2>/dev/null
# set by the mock for a real execd binary: its flags (--port, -access-token) and its log file
execd_args="${OSB_EXECD_ARGS-}"
execd_log="${OSB_EXECD_LOG:-/dev/null}"
unset OSB_EXECD_ARGS OSB_EXECD_LOG
if [ -x "$EXECD" ]; then
	set -f
	# fd 3, when open, is the mock's channel to its own execd (an agent): execd gets it, nobody else
	if [ -n "$execd_args" ]; then
		"$EXECD" $execd_args >>"$execd_log" 2>&1 &
	else
		"$EXECD" &
	fi
	set +f
fi
exec 3>&-
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 0' TERM INT
"$@" &
child=$!
wait $child
