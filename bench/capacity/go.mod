module github.com/waitroom/waitroom/bench/capacity

go 1.26.8
