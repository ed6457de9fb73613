# shellcheck shell=bash
# Helpers of the cost scripts (scripts/proxy-cost.sh, scripts/tier-cost.sh):
# a process's CPU from /proc, medians, free loopback ports.

# free_port: a free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# cpu_ticks PID: "user+system user" clock ticks of the whole process so far.
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13, $12 }' "/proc/$1/stat"; }

# median: the median of the numbers on stdin, one per line ("nan": none).
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
