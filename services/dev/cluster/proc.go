package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is one OS process of the cluster, started from its own binary with its
// own environment. It is only ever signalled by the PID it was started with.
type Proc struct {
	Name string
	Kind string // kafka, redis, api, consumer, scheduler, notifier, front
	Bin  string
	Args []string
	Env  []string
	// Addr is the HTTP listener of a service (empty for Kafka, Redis, Caddy).
	Addr string
	// PprofAddr is the service's net/http/pprof listener (Options.Pprof;
	// inside its namespace when isolated, so reached with Net.NS.Dial).
	PprofAddr string
	// Health is the URL that answers 200 once the process serves (a
	// service's /readyz; empty: Ready waits for the port in ReadyAddr).
	Health    string
	ReadyAddr string
	LogFile   string
	// Net is the service's own network namespace and links (Options.Isolate).
	Net *ProcNet

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts the process; its output is appended to LogFile.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("start %s: already running as pid %d", p.Name, p.cmd.Process.Pid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(p.LogFile), 0o755); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	out, err := os.OpenFile(p.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: open log: %w", p.Name, err)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C in the terminal reaches the supervisor,
	// which stops every process in order, not all of them at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s (%s): %w", p.Name, p.Bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

// PID is the process's id (0 when it never started).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the current run of the process ends.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.exited
}

func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("signal %s: never started", p.Name)
	}
	select {
	case <-exited:
		return fmt.Errorf("signal %s: not running", p.Name)
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s (pid %d) %v: %w", p.Name, cmd.Process.Pid, sig, err)
	}
	return nil
}

// Kill sends SIGKILL (kill -9) and waits until the process is gone.
func (p *Proc) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Exited()
	return nil
}

// Pause freezes the process (SIGSTOP); Resume thaws it (SIGCONT).
func (p *Proc) Pause() error  { return p.signal(syscall.SIGSTOP) }
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

// Stop asks the process to stop (SIGTERM) and kills it after timeout.
func (p *Proc) Stop(timeout time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
	if err := p.signal(syscall.SIGTERM); err != nil {
		return nil // it ended meanwhile
	}
	select {
	case <-p.Exited():
		return nil
	case <-time.After(timeout):
		_ = p.Kill()
		return fmt.Errorf("stop %s: did not stop within %s, killed", p.Name, timeout)
	}
}

// Ready waits until the process answers its health URL with 200 (or accepts
// connections on ReadyAddr), or ctx ends, or the process exits.
func (p *Proc) Ready(ctx context.Context) error {
	cl := &http.Client{Timeout: time.Second}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if p.Health != "" {
			if resp, err := cl.Get(p.Health); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		} else if p.ReadyAddr != "" && dialOK(p.ReadyAddr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to be ready (log: %s): %w", p.Name, p.LogFile, ctx.Err())
		case <-p.Exited():
			return errors.New(p.Name + " exited while starting (log: " + p.LogFile + ")")
		case <-t.C:
		}
	}
}
