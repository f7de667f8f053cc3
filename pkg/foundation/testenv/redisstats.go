package testenv

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStats is what a redis-server's INFO cpu and commandstats say, for
// benchmarks that report the server's work per record.
type RedisStats struct {
	MainCPU float64 // seconds of CPU of the main thread (used_cpu_*_main_thread)
	CPU     float64 // seconds of CPU of every thread (used_cpu_user + used_cpu_sys)
	// Usec and Calls are each command's time and calls (commands a script
	// runs included), by name ("evalsha", "zadd", "script|load"...).
	Usec, Calls map[string]int64
}

// scriptCmds are the commands that run a script.
var scriptCmds = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// IsScriptCmd reports whether the command name runs a script.
func IsScriptCmd(name string) bool {
	for _, c := range scriptCmds {
		if c == name {
			return true
		}
	}
	return false
}

// Scripts is the time and the calls of the commands that run a script.
func (s RedisStats) Scripts() (usec, calls int64) {
	for _, c := range scriptCmds {
		usec, calls = usec+s.Usec[c], calls+s.Calls[c]
	}
	return usec, calls
}

// ReadRedisStats reads rdb's INFO cpu and commandstats (tb fails on an error).
func ReadRedisStats(tb testing.TB, rdb redis.UniversalClient) RedisStats {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	s := RedisStats{Usec: map[string]int64{}, Calls: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_user_main_thread", "used_cpu_sys_main_thread":
			f, _ := strconv.ParseFloat(v, 64)
			s.MainCPU += f
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.CPU += f
		}
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(fv, 10, 64)
			switch fk {
			case "calls":
				s.Calls[name] = n
			case "usec":
				s.Usec[name] = n
			}
		}
	}
	return s
}

// ProcCPU is this process's CPU time so far (user + system, every thread).
func ProcCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
