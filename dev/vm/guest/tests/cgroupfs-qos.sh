# Guest test: cgroupDriver cgroupfs on the same cgroup v2 host (runc's cgroupfs manager).
DRIVER=cgroupfs
. /mnt/share/guest/qos.sh
