# The holder: the sandbox's main process. Started as `unshare [--user --map-root-user] --mount
# --ipc --uts --pid --fork --kill-child sh -c VIEW+HOLDER osb-holder R FIFO H X E S O ENTRYPOINT...`
#   F  a FIFO the mock reads: "pid <host pid>" once the view is built, "started" once the
#      entrypoint was forked
#   S  setpriv; O its options (the server's capability set, no_new_privs; no spaces inside one)
# It becomes PID 1: an init that starts the entrypoint as its child, reaps orphans (its `wait`
# reaps every child) and exits with the entrypoint's status; TERM/INT are forwarded and end it
# with 0 - bootstrap.sh's shape (seed 001 process list; bootstrap.sh: `"$@" &`, `wait $CMD_PID`,
# TERM trap). PID 1 and everything it starts run with the capability set and no_new_privs.
R="$1"; F="$2"; H="$3"; X="$4"; E="$5"; S="$6"; O="$7"; shift 7; P=new
exec 9>"$F" || exit 125
read -r PID _ < /proc/self/stat || exit 125
hostname "$H" 2>/dev/null || :
osb_view || exit 125
osb_pivot || exit 125
echo "pid $PID" >&9 || exit 125
case "$1" in -*) set -- -- "$@" ;; esac
PATH=$osb_path
exec "$S" $O -- /bin/sh -s "$@" <<'OSB_INIT'
trap 'kill -TERM $c 2>/dev/null; wait $c; exit 0' TERM INT
"$@" </dev/null 9>&- &
c=$!
echo started >&9
exec 9>&-
wait $c
OSB_INIT
