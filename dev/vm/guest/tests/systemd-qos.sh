# Guest test: cgroupDriver systemd on cgroup v2, with containerd's runc SystemdCgroup = true.
DRIVER=systemd
. /mnt/share/guest/qos.sh
