module github.com/waitroom/waitroom/bench/ceiling

go 1.26.8
