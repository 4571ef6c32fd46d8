module shardcdc/bench/vstreamclient

go 1.24
