#!/bin/sh
# The sandbox's main process (PID 1), written into every mock sandbox by the OpenSandbox mock
# (mock_opensandbox/runtime/scripts/bootstrap.sh): it starts execd in the background, then the
# entrypoint given as arguments, and ends with the entrypoint's status. TERM and INT are passed on to
# the entrypoint. Run as `/bin/sh /opt/opensandbox/bootstrap.sh ENTRYPOINT...`.
EXECD="${EXECD:-/opt/opensandbox/execd}"
EXECD_ENVS="${EXECD_ENVS:-/opt/opensandbox/.env}"
export EXECD_ENVS
# `true`, not `:`: a failed redirection of a special built-in ends a POSIX shell (an image's USER
# cannot write /opt/opensandbox); the server's bootstrap.sh warns the same way and goes on
if ! true 2>/dev/null >>"$EXECD_ENVS"; then
	echo "warning: failed to touch EXECD_ENVS=$EXECD_ENVS" >&2
fi
# set by the mock for a real execd binary: its flags (--port, -access-token) and its log file
execd_args="${OSB_EXECD_ARGS-}"
execd_log="${OSB_EXECD_LOG:-/dev/null}"
unset OSB_EXECD_ARGS OSB_EXECD_LOG
if [ -n "$execd_args" ]; then
	# a real execd binary, with its flags (word-split, no globbing)
	set -f
	"$EXECD" $execd_args >>"$execd_log" 2>&1 &
	set +f
elif [ -x "$EXECD" ]; then
	# the mock's own execd: its agent is a Python interpreter reading its program from fd 4, with
	# the mock's channel as fd 3 (only execd gets them); no Python setting of the sandbox applies.
	# As root it is an idle placeholder (`cat`) reading fd 4, a pipe whose write end (fd 5) it holds
	(
		unset PYTHONHOME PYTHONPATH PYTHONSTARTUP PYTHONINSPECT PYTHONUSERBASE PYTHONWARNINGS \
			PYTHONSAFEPATH PYTHONPLATLIBDIR PYTHONEXECUTABLE PYTHONOPTIMIZE PYTHONVERBOSE PYTHONDEBUG
		PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 exec "$EXECD" <&4 4<&-
	) &
fi
exec 4<&-
exec 5>&-
exec 3>&-
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 0' TERM INT
"$@" &
child=$!
wait $child
