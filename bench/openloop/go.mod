module github.com/waitroom/waitroom/bench/openloop

go 1.26.8
