# Sandbox view: shell functions shared by holder.sh and prelude.sh (concatenated in front of them).
# They run inside a fresh mount namespace, still privileged, BEFORE the capability drop, and build
# under the sandbox root $R what a container of the real server shows (see ../../QUIRKS.md,
# "Containment"). Nothing here writes outside $R except into mounts it has just created.
#   R  sandbox root (host path, already realpath'd; no whitespace or backslash)
#   H  hostname (12 hex digits, like a Docker container's short id)
#   X  /etc entries to hide (newline separated, relative to /etc)
#   E  directory with the sandbox's passwd, group, shadow, gshadow (../etc)
#   P  "new": mount a fresh procfs (the sandbox has its own PID namespace); else bind the host's
# Every step fails closed: a caller that sees a non-zero status must not run anything.
# The wrappers run with the system PATH; the caller's comes back right before the last exec.
osb_path=${PATH-}
PATH=/usr/sbin:/usr/bin:/sbin:/bin

# osb_ro PATH: remount PATH and every mount below it read-only (a plain `remount,ro` changes one
# mount only, and /sys, /proc/sys and the cgroup hierarchies have submounts)
osb_ro() {
  while read -r _ _ _ _ mp _; do
    case "$mp" in "$1" | "$1"/*) mount -o remount,bind,ro "$mp" || return 1 ;; esac
  done < /proc/self/mountinfo
}

# osb_dir NAME: $R/NAME becomes a real directory (a symlink or file planted there goes: a mount
# must never follow a link out of the root)
osb_dir() {
  if [ -L "$R/$1" ] || { [ -e "$R/$1" ] && [ ! -d "$R/$1" ]; }; then rm -f "$R/$1" || return 1; fi
  mkdir -p "$R/$1"
}

osb_view() {
  # the new root must be a mount point of its own for pivot_root
  mount --bind "$R" "$R" || return 1
  # host system directories, read-only all the way down (merged-/usr hosts have symlinks)
  for d in usr bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
      [ -e "$R/$d" ] || [ -L "$R/$d" ] || ln -s "$(readlink "/$d")" "$R/$d" || return 1
    elif [ -d "/$d" ]; then
      osb_dir "$d" && mount --rbind "/$d" "$R/$d" && osb_ro "$R/$d" || return 1
    fi
  done
  # /etc: the host's, seen through an overlay whose upper layer lives in a tmpfs of this mount
  # namespace: the image's accounts, a locked shadow, the hostname, whiteouts for what must stay
  # invisible (host secrets, /etc/ssh). Writes land in that tmpfs, never on the host.
  osb_dir etc && mount -t tmpfs -o mode=755 osb-etc "$R/etc" && mkdir "$R/etc/up" "$R/etc/work" || return 1
  cp "$E/passwd" "$E/group" "$E/shadow" "$E/gshadow" "$R/etc/up/" || return 1
  chmod 644 "$R/etc/up/passwd" "$R/etc/up/group" && chmod 640 "$R/etc/up/shadow" "$R/etc/up/gshadow" || return 1
  chgrp 42 "$R/etc/up/shadow" "$R/etc/up/gshadow" 2>/dev/null # group shadow; unmapped in a user namespace
  printf '%s\n' "$H" > "$R/etc/up/hostname" || return 1
  printf '%s\n' "$X" | while IFS= read -r p; do
    [ -n "$p" ] || continue
    case "$p" in */*) mkdir -p "$R/etc/up/${p%/*}" || exit 1 ;; esac
    [ -e "$R/etc/up/$p" ] || mknod "$R/etc/up/$p" c 0 0 || exit 1 # an overlay whiteout
  done || return 1
  mount -t overlay -o "lowerdir=/etc,upperdir=$R/etc/up,workdir=$R/etc/work" osb-etc "$R/etc" || return 1
  for f in hosts resolv.conf nsswitch.conf ld.so.cache ssl/certs/ca-certificates.crt; do
    [ -f "/etc/$f" ] || continue
    if [ -L "$R/etc/$f" ]; then rm -f "$R/etc/$f" || return 1; fi
    [ -f "$R/etc/$f" ] || : > "$R/etc/$f" || return 1
    mount --bind "/etc/$f" "$R/etc/$f" && mount -o remount,bind,ro "$R/etc/$f" || return 1
  done
  # /dev: a tmpfs with the container's nodes (mknod as root; bound from the host's in a user
  # namespace, where device nodes on a tmpfs would not work), a fresh devpts, shm, mqueue, links
  osb_dir dev && mount -t tmpfs -o nosuid,mode=755,size=65536k tmpfs "$R/dev" || return 1
  for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
    d=${n%%:*} mm=${n#*:}
    mknod -m 666 "$R/dev/$d" c "${mm%:*}" "${mm#*:}" 2>/dev/null ||
      { : > "$R/dev/$d" && mount --bind "/dev/$d" "$R/dev/$d"; } || return 1
  done
  mkdir "$R/dev/pts" "$R/dev/shm" "$R/dev/mqueue" || return 1
  mount -t devpts -o nosuid,noexec,newinstance,gid=5,mode=620,ptmxmode=666 devpts "$R/dev/pts" 2>/dev/null ||
    mount -t devpts -o nosuid,noexec,newinstance,mode=620,ptmxmode=666 devpts "$R/dev/pts" || return 1
  ln -s pts/ptmx "$R/dev/ptmx" && ln -s /proc/self/fd "$R/dev/fd" && ln -s /proc/self/fd/0 "$R/dev/stdin" &&
    ln -s /proc/self/fd/1 "$R/dev/stdout" && ln -s /proc/self/fd/2 "$R/dev/stderr" || return 1
  mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=65536k shm "$R/dev/shm" || return 1
  mount -t mqueue -o nosuid,nodev,noexec mqueue "$R/dev/mqueue" || return 1
  # /proc: Docker's read-only paths and masked paths
  osb_dir proc || return 1
  if [ "$P" = new ]; then
    mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || return 1
  else
    mount --rbind /proc "$R/proc" || return 1
  fi
  for p in bus fs irq sys sysrq-trigger; do
    [ -e "$R/proc/$p" ] || continue
    mount --bind "$R/proc/$p" "$R/proc/$p" && osb_ro "$R/proc/$p" || return 1
  done
  for p in kcore keys latency_stats timer_list timer_stats sched_debug; do
    [ -e "$R/proc/$p" ] || continue
    mount --bind "$R/dev/null" "$R/proc/$p" || return 1
  done
  for p in acpi asound scsi; do
    [ -d "$R/proc/$p" ] || continue
    mount -t tmpfs -o ro tmpfs "$R/proc/$p" || return 1
  done
  # /sys read-only; a fresh sysfs as root, the host's bound otherwise
  osb_dir sys || return 1
  if mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys" 2>/dev/null; then :; else
    mount --rbind /sys "$R/sys" && osb_ro "$R/sys" || return 1
  fi
  osb_cgroup || return 1
  for p in firmware devices/virtual/powercap; do
    [ -d "$R/sys/$p" ] || continue
    mount -t tmpfs -o ro tmpfs "$R/sys/$p" || return 1
  done
}

# osb_cgroup: the cgroup hierarchies, read-only. cgroup v1 (Docker 20.10 on this kind of host): a
# tmpfs of the sandbox's own at /sys/fs/cgroup (writable, as in the real sandbox, but in memory)
# with every v1 hierarchy bound read-only (the unified v2 one of a hybrid host stays out, as in
# Docker); cgroup v2: the hierarchy itself, read-only.
osb_cgroup() {
  [ -d /sys/fs/cgroup ] && [ -d "$R/sys/fs/cgroup" ] || return 0
  case "$(stat -f -c %T /sys/fs/cgroup)" in
  tmpfs)
    mount -t tmpfs -o nosuid,nodev,noexec,mode=755 tmpfs "$R/sys/fs/cgroup" || return 1
    for c in /sys/fs/cgroup/*; do
      n=${c##*/}
      if [ -L "$c" ]; then
        ln -s "$(readlink "$c")" "$R/sys/fs/cgroup/$n" || return 1
      elif [ -d "$c" ] && [ "$(stat -f -c %T "$c")" = cgroupfs ]; then
        mkdir "$R/sys/fs/cgroup/$n" && mount --bind "$c" "$R/sys/fs/cgroup/$n" &&
          mount -o remount,bind,ro,nosuid,nodev,noexec "$R/sys/fs/cgroup/$n" || return 1
      fi
    done ;;
  *)
    mount --rbind /sys/fs/cgroup "$R/sys/fs/cgroup" && osb_ro "$R/sys/fs/cgroup" || return 1 ;;
  esac
}

# osb_pivot: $R becomes "/" of this mount namespace and the host's tree is detached from it (a
# chroot would leave it reachable to a process holding CAP_SYS_CHROOT)
osb_pivot() {
  cd "$R" && pivot_root . . && umount -l . && cd /
}
