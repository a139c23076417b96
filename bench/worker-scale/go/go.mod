module podprobe.bench/worker-scale

go 1.26
