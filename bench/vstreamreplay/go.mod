module shardcdc/bench/vstreamreplay

go 1.24
