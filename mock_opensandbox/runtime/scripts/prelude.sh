# Per-command fallback (no PID namespace of the sandbox's own): every command builds the same view
# in a mount namespace of its own, started as `unshare [--user --map-root-user] --mount --ipc --uts
# sh -c VIEW+PRELUDE osb-prelude R W H X E S O ARGV...` (W = working directory inside the sandbox).
# /proc is the host's (bound, with the same read-only and masked paths).
R="$1"; W="$2"; H="$3"; X="$4"; E="$5"; S="$6"; O="$7"; shift 7; P=host
hostname "$H" 2>/dev/null || :
osb_view || exit 125
osb_pivot || exit 125
cd "$W" 2>/dev/null || { echo "unshare: cannot change directory to $W: No such file or directory" >&2; exit 1; }
PATH=$osb_path
exec "$S" $O -- "$@"
